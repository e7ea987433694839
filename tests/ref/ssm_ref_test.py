#!/usr/bin/env python3
"""The state-space architectures against tests/ref/ssm_ref.py (a numpy
reference written from the published model definitions): for each tiny
state-space preset of `infer synth` (random F32 weights shaped like a trained
model's), `infer run` greedily continues a prompt that spans several KV
blocks and dumps its logits; the reference computes the logits of the same
tokens from a zero state. Every row must agree within 1e-4 (absolute), each
generated token must be the reference's argmax, and deliberately wrong
references (ssm_ref.py --variant) must miss by far more than the tolerance.

    ssm_ref_test.py PATH_TO_INFER WORK_DIR [PRESET...]

Exits 77 (skipped) when numpy is missing."""
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    # A python3 of its own (pyenv, venv) first on PATH may lack Debian's numpy.
    if os.path.exists('/usr/bin/python3') and os.path.realpath(sys.executable) != os.path.realpath('/usr/bin/python3'):
        os.execv('/usr/bin/python3', ['/usr/bin/python3'] + sys.argv)
    print('SKIPPED: numpy is not installed (python3-numpy)')
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ssm_ref  # noqa: E402

PRESETS = ['tiny-mamba', 'tiny-mamba2', 'tiny-jamba']
PROMPT = 40  # over two KV blocks of 16: the state crosses block boundaries
GENERATE = 24
TOL = 1e-4
# Wrong models each preset's check must tell apart.
VARIANTS = {'tiny-mamba': ['noconv', 'nod'], 'tiny-mamba2': ['noconv', 'fullnorm', 'nod'],
            'tiny-jamba': ['noconv', 'renorm']}


def main():
    infer, work = sys.argv[1], sys.argv[2]
    presets = sys.argv[3:] or PRESETS
    os.makedirs(work, exist_ok=True)
    failed = []
    for name in presets:
        model = os.path.join(work, name + '.gguf')
        subprocess.run([infer, 'synth', '--preset', name, '--type', 'f32', '-o', model], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ref = ssm_ref.Model(model)
        n_vocab = ref.t['token_embd.weight'].shape[0]
        rng = np.random.default_rng(len(name))
        prompt = [1] + [int(t) for t in rng.integers(3, n_vocab, PROMPT - 1)]
        ids = os.path.join(work, name + '.ids')
        with open(ids, 'w') as f:
            f.write(' '.join(map(str, prompt)))
        dump = os.path.join(work, name + '.f32')
        subprocess.run([infer, 'run', '-m', model, '--tokens', ids, '-n', str(GENERATE), '--temp', '0', '--ignore-eos',
                        '--threads', '2', '--dump-logits', dump, '--quiet'], check=True, stdout=subprocess.DEVNULL)
        ours = np.fromfile(dump, dtype='<f4').reshape(-1, n_vocab).astype(np.float64)
        # Rows: every prompt position, then every generated token fed back.
        generated = [int(i) for i in ours[PROMPT - 1:].argmax(axis=-1)]
        tokens = prompt + generated[:ours.shape[0] - PROMPT]
        theirs = ref.forward(np.array(tokens))
        err = np.abs(ours - theirs).max(axis=-1)
        bad = np.nonzero(err > TOL)[0]
        ref_next = theirs[PROMPT - 1:].argmax(axis=-1)
        mismatch = [i for i, (a, b) in enumerate(zip(generated, ref_next)) if a != b]
        spread = float(np.mean(theirs.std(axis=-1)))
        distinct = len(set(generated))
        print('%-12s %-7s rows %d, max |ours - ref| %.2e, logit std %.2f, greedy %s (%d distinct tokens)' %
              (name, ref.arch, len(tokens), err.max(), spread, 'identical' if not mismatch else 'DIFFERS', distinct))
        if len(generated) != GENERATE or ours.shape[0] != PROMPT + GENERATE - 1:
            failed.append('%s: %d rows, expected %d' % (name, ours.shape[0], PROMPT + GENERATE - 1))
        if len(bad):
            failed.append('%s: %d rows differ by more than %g (first: position %d, %.3e)' %
                          (name, len(bad), TOL, bad[0], err[bad[0]]))
        if mismatch:
            failed.append('%s: greedy token %d is %d, the reference says %d' %
                          (name, mismatch[0], generated[mismatch[0]], ref_next[mismatch[0]]))
        if spread < 0.3:
            failed.append('%s: logits barely spread (std %.3f): the check would be weak' % (name, spread))
        if distinct < 3:
            failed.append('%s: greedy text is degenerate (%d distinct tokens)' % (name, distinct))
        for v in VARIANTS.get(name, []):
            wrong = ssm_ref.Model(model, v).forward(np.array(tokens))
            miss = float(np.abs(ours - wrong).max())
            print('  variant %-8s max |ours - wrong| %.2e' % (v, miss))
            if miss < 100 * TOL:
                failed.append('%s: the wrong model "%s" is within %.2e of ours: the check cannot tell' % (name, v, miss))
    for f in failed:
        print('FAIL', f)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
