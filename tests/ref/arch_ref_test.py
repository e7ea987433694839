#!/usr/bin/env python3
"""Each architecture against tests/ref/arch_ref.py (a numpy reference written
from the published model definitions): for every tiny-ARCH preset of
`infer synth` (random F32 weights, every particular of the architecture
switched on), `infer run` greedily continues a prompt longer than the
sliding windows and dumps its logits; the reference computes the logits of
the same tokens. Every row must agree within 1e-4 (absolute, on logits of
order 1-10), and each generated token must be the reference's argmax
(identical greedy continuation).

    arch_ref_test.py PATH_TO_INFER WORK_DIR [PRESET...]

Exits 77 (skipped) when numpy is missing."""
import json
import os
import struct
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
import arch_ref  # noqa: E402

PRESETS = ['tiny-llama3', 'tiny-mistral', 'tiny-qwen2', 'tiny-qwen3', 'tiny-phi3', 'tiny-gemma', 'tiny-gemma2']
PROMPT = 40  # > the presets' sliding windows (20) and over two KV blocks of 16
GENERATE = 24
TOL = 1e-4
# What `infer info --json` must say of each preset (the architecture's particulars).
INFO = {
    'tiny-llama3': ['interleaved', 'llama3', 'tied embeddings'],
    'tiny-mistral': ['interleaved', '20 on every layer'],
    'tiny-qwen2': ['rotate-half', 'q/k/v biases'],
    'tiny-qwen3': ['rotate-half', 'q/k per-head rmsnorm'],
    'tiny-phi3': ['rotate-half', 'long-rope', 'fused qkv', 'fused gate+up'],
    'tiny-gemma': ['rotate-half', 'gelu-tanh', 'sqrt(n_embd)'],
    'tiny-gemma2': ['20 on even layers', 'attention 4, logits 6', 'post-attention and post-ffn norms'],
}


def write_hf_layout(src, dst):
    """src (a llama GGUF, F32) with each Q/K head's rows back in Hugging Face's
    rotate-half order and infer.rope.neox = true: what the HF-directory loader
    presents for a llama checkpoint. Must compute what src computes."""
    g = arch_ref.Gguf(src)
    buf = g.buf
    n_tensors, n_kv = struct.unpack_from('<QQ', buf, 8)
    # The metadata bytes as they are, then the new key.
    r = arch_ref.Gguf.__new__(arch_ref.Gguf)
    r.buf, r.pos = buf, 24
    for _ in range(n_kv):
        r.string()
        r.value(r.take('<I'))
    kv_bytes = buf[24:r.pos]
    key = b'infer.rope.neox'
    kv_bytes += struct.pack('<Q', len(key)) + key + struct.pack('<IB', 7, 1)
    names = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take('<Q') for _ in range(r.take('<I'))]
        r.take('<I'), r.take('<Q')
        names.append((name, dims))
    a = g.meta['general.architecture']
    heads = {'attn_q.weight': g.meta[a + '.attention.head_count'],
             'attn_k.weight': g.meta[a + '.attention.head_count_kv']}
    infos, data = b'', b''
    for name, dims in names:
        t = g.tensors[name]
        for suffix, h in heads.items():
            if name.endswith(suffix):
                t = arch_ref.unpermute_qk(t, h)
        infos += struct.pack('<Q', len(name)) + name.encode() + struct.pack('<I', len(dims))
        infos += b''.join(struct.pack('<Q', d) for d in dims) + struct.pack('<IQ', 0, len(data))
        data += t.astype('<f4').tobytes()
        data += b'\0' * (-len(data) % 32)
    head = struct.pack('<IIQQ', 0x46554747, 3, n_tensors, n_kv + 1) + kv_bytes + infos
    with open(dst, 'wb') as f:
        f.write(head + b'\0' * (-len(head) % 32) + data)


def main():
    infer, work = sys.argv[1], sys.argv[2]
    presets = sys.argv[3:] or PRESETS
    os.makedirs(work, exist_ok=True)
    failed = []
    for name in presets:
        model = os.path.join(work, name + '.gguf')
        subprocess.run([infer, 'synth', '--preset', name, '--type', 'f32', '-o', model], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        info = json.loads(subprocess.run([infer, 'info', '-m', model, '--json'], check=True, capture_output=True,
                                         text=True).stdout)
        said = ' | '.join(info[k] for k in ('rope', 'sliding_window', 'softcap', 'particulars'))
        for want in INFO.get(name, []):
            if want not in said:
                failed.append('%s: infer info does not say "%s" (%s)' % (name, want, said))
        ref = arch_ref.Ref(arch_ref.Gguf(model))
        n_vocab = ref.t('token_embd.weight').shape[0]
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
        print('%-13s %-7s rows %d, max |ours - ref| %.2e, logit std %.2f, greedy %s' %
              (name, ref.arch, len(tokens), err.max(), spread, 'identical' if not mismatch else 'DIFFERS'))
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
    # infer.rope.neox: the same llama model with HF-layout Q/K rows gives the same logits.
    if 'tiny-mistral' in presets:
        src, hf = os.path.join(work, 'tiny-mistral.gguf'), os.path.join(work, 'tiny-mistral-hf-rows.gguf')
        write_hf_layout(src, hf)
        rows = {}
        for m in (src, hf):
            dump = m + '.neox.f32'
            subprocess.run([infer, 'run', '-m', m, '--tokens', os.path.join(work, 'tiny-mistral.ids'), '-n', '4',
                            '--temp', '0', '--ignore-eos', '--threads', '2', '--dump-logits', dump, '--quiet'],
                           check=True, stdout=subprocess.DEVNULL)
            rows[m] = np.fromfile(dump, dtype='<f4').astype(np.float64)
        err = np.abs(rows[src] - rows[hf]).max()
        print('infer.rope.neox: HF-layout Q/K rows vs GGUF layout: max |diff| %.2e' % err)
        if err > TOL:
            failed.append('infer.rope.neox: HF-layout rows give logits %.3e away' % err)
    for f in failed:
        print('FAIL', f)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
