#!/usr/bin/env python3
"""Embedding models against tests/ref/embed_ref.py (a numpy reference written
from the published model definitions). For each tiny embedding preset of
`infer synth` (random F32 weights, random LayerNorm weights and biases),
`infer embed` computes several inputs of different lengths in ONE call (so
they are batched across sequences) with every pooling (none, mean, cls,
last), L2 normalization on and off, a Matryoshka truncation and the file's
own pooling, and texts (-p: [CLS] text [SEP] through the WordPiece
tokenizer); the reference computes each input alone. Every value must agree
within 1e-4 (max abs). The reranker's scores are checked for token inputs
(token types all 0) and for (query, document) texts, whose pair
[CLS] q [SEP] d [SEP] carries token types 0 then 1. Last, a Q8_0 copy of
each model (`infer quantize`) must give vectors with cosine > 0.99 to the
F32 ones, and rank scores close to them. The decoder is also checked with
<arch>.attention.causal = false (bidirectional, as some decoder embedding
models are converted). Presets may be named on the command line (bge-small,
the benchmark shape, is not in the default list: its F32 file is 127 MiB).

    embed_ref_test.py PATH_TO_INFER WORK_DIR [PRESET...]

Exits 77 (skipped) when numpy is missing, or when this infer has no embed
command."""
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
import embed_ref  # noqa: E402

PRESETS = ['tiny-bert', 'tiny-bert-rerank', 'tiny-nomic-bert', 'tiny-qwen3-embed']
LENGTHS = [7, 1, 33, 2, 120, 12]  # one call, different lengths (120 of the encoders' 128 positions)
TOL = 1e-4
Q8_COSINE = 0.99
# Texts of whole words of the synthetic WordPiece vocabulary (synth.cpp), so
# each word is one token and the ids follow from the vocabulary alone.
QUERY = 'what is the capital of france'
DOCS = ['paris is the capital of france', 'the cat sat on the mat', 'music', 'the river and the ocean']


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


class Checker:
    def __init__(self, infer, work):
        self.infer, self.work = infer, work
        self.failed = []
        self.n_checks = 0

    def embed(self, model, inputs, args, tag):
        """`infer embed` of token inputs in one call; the rows as float64."""
        out = os.path.join(self.work, tag + '.f32')
        cmd = [self.infer, 'embed', '-m', model, '--out', out, '-t', '2']
        for toks in inputs:
            cmd += ['--tokens', ','.join(map(str, toks))]
        r = subprocess.run(cmd + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            self.failed.append('%s: infer embed %s failed (%d): %s' % (tag, ' '.join(args), r.returncode,
                                                                      r.stderr.strip()[-300:]))
            return None
        return np.fromfile(out, dtype='<f4').astype(np.float64)

    def compare(self, tag, ours, theirs, tol=TOL):
        self.n_checks += 1
        if ours is None:
            return None
        if ours.size != theirs.size:
            self.failed.append('%s: %d values, the reference has %d (%s)' % (tag, ours.size, theirs.size,
                                                                              'x'.join(map(str, theirs.shape))))
            return None
        ours = ours.reshape(theirs.shape)
        err = float(np.abs(ours - theirs).max())
        if not err <= tol:  # NaN fails too
            row = int(np.abs(ours - theirs).max(axis=-1).argmax())
            self.failed.append('%s: max |ours - ref| %.3e > %g (row %d)' % (tag, err, tol, row))
        return err


def inputs_for(ref, n_vocab, encoder, seed):
    rng = np.random.default_rng(seed)
    out = []
    for n in LENGTHS:
        if encoder and n >= 2:  # [CLS] ... [SEP] as a text would be
            out.append([2] + [int(t) for t in rng.integers(5, n_vocab, n - 2)] + [3])
        else:
            out.append([int(t) for t in rng.integers(5 if encoder else 3, n_vocab, n)])
    return out


def word_ids(g, text):
    # Whole words of the vocabulary: "\u2581word" in the GGUF spelling the
    # presets write, "word" in the Hugging Face one.
    vocab = {t: i for i, t in enumerate(g.meta['tokenizer.ggml.tokens'])}
    return [vocab['\u2581' + w] if '\u2581' + w in vocab else vocab[w] for w in text.split()]


def check_preset(c, name):
    model = os.path.join(c.work, name + '.gguf')
    run([c.infer, 'synth', '--preset', name, '--type', 'f32', '-o', model])
    ref = embed_ref.load(model)
    encoder = isinstance(ref, embed_ref.Encoder)
    n_vocab = ref.g.tensors['token_embd.weight'].shape[0]
    inputs = inputs_for(ref, n_vocab, encoder, len(name))
    errs = []
    cases = [('none', 0, 0), ('mean', 2, 0), ('mean', 0, 0), ('cls', 2, 0), ('cls', 0, 0), ('last', 2, 0),
             ('last', 0, 0), ('mean', 2, 16)]
    for pooling, norm, dims in cases:
        args = ['--pooling', pooling, '--normalize', str(norm)] + (['--dimensions', str(dims)] if dims else [])
        tag = '%s-%s-n%d-d%d' % (name, pooling, norm, dims)
        theirs = embed_ref.embed(ref, inputs, pooling, norm, dims)
        errs.append(c.compare(tag, c.embed(model, inputs, args, tag), theirs))
        if pooling == 'mean' and norm == 0 and dims == 0:
            # The inputs must give clearly different vectors, or the check is weak.
            u = theirs / np.linalg.norm(theirs, axis=-1, keepdims=True)
            cos = u @ u.T
            top = float((cos - 2 * np.eye(len(u))).max())
            if top > 0.99:
                c.failed.append('%s: two inputs give vectors of cosine %.4f: the check would be weak' % (name, top))
    # The file's own pooling, L2 by default.
    theirs = embed_ref.embed(ref, inputs, None, 2, 0)
    errs.append(c.compare(name + '-default', c.embed(model, inputs, [], name + '-default'), theirs))
    if encoder:
        # Texts (-p, printed rows): [CLS] text [SEP], token types 0.
        theirs = embed_ref.embed(ref, [[2] + word_ids(ref.g, d) + [3] for d in DOCS], 'mean', 2)
        cmd = [c.infer, 'embed', '-m', model, '--pooling', 'mean', '-t', '2']
        for d in DOCS:
            cmd += ['-p', d]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        c.n_checks += 1
        if r.returncode != 0:
            c.failed.append('%s: infer embed -p failed (%d): %s' % (name, r.returncode, r.stderr.strip()[-300:]))
        else:
            ours = np.array([[float(v) for v in line.split()] for line in r.stdout.split('\n') if line.strip()])
            errs.append(c.compare(name + '-texts', ours, theirs))
    rank = {}
    if 'cls.output.weight' in ref.g.tensors:
        theirs = embed_ref.embed(ref, inputs, 'rank')
        errs.append(c.compare(name + '-rank-tokens', c.embed(model, inputs, ['--pooling', 'rank'], name + '-rank-tokens'),
                              theirs))
        rank['tokens'] = theirs
        spread = float(theirs.std())
        if spread < 0.05:
            c.failed.append('%s: rank scores barely spread (std %.3f): the check would be weak' % (name, spread))
        # Texts: [CLS] query [SEP] document [SEP], types 0 up to the first [SEP], then 1.
        q = word_ids(ref.g, QUERY)
        pairs, types = [], []
        for d in DOCS:
            dd = word_ids(ref.g, d)
            pairs.append([2] + q + [3] + dd + [3])
            types.append([0] * (len(q) + 2) + [1] * (len(dd) + 1))
        theirs = embed_ref.embed(ref, pairs, 'rank', types=types)
        untyped = embed_ref.embed(ref, pairs, 'rank')
        if float(np.abs(theirs - untyped).max()) < 10 * TOL:
            c.failed.append('%s: token types do not change the scores: the check would be weak' % name)
        cmd = [c.infer, 'embed', '-m', model, '--rerank', QUERY, '-t', '2']
        for d in DOCS:
            cmd += ['-p', d]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        c.n_checks += 1
        if r.returncode != 0:
            c.failed.append('%s: infer embed --rerank failed (%d): %s' % (name, r.returncode, r.stderr.strip()[-300:]))
        else:
            ours = np.array([[float(v) for v in line.split()] for line in r.stdout.split('\n') if line.strip()])
            errs.append(c.compare(name + '-rerank-text', ours, theirs))
            rank['text'] = theirs
    worst = max([e for e in errs if e is not None], default=float('nan'))
    print('%-17s %-10s %d inputs of %s tokens, %d calls, max |ours - ref| %.2e' %
          (name, ref.g.meta['general.architecture'], len(inputs), '/'.join(map(str, LENGTHS)), len(errs), worst))
    return model, inputs, rank


def with_bool_key(src, dst, key, value):
    """src with one more metadata key (a bool), tensors untouched."""
    r = embed_ref.arch_ref.Gguf.__new__(embed_ref.arch_ref.Gguf)
    with open(src, 'rb') as f:
        r.buf = f.read()
    r.pos = 24
    n_tensors, n_kv = struct.unpack_from('<QQ', r.buf, 8)
    meta = {}
    for _ in range(n_kv):
        k = r.string()
        meta[k] = r.value(r.take('<I'))
    kv_end = r.pos
    for _ in range(n_tensors):
        r.string()
        [r.take('<Q') for _ in range(r.take('<I'))]
        r.take('<I'), r.take('<Q')
    align = int(meta.get('general.alignment', 32))
    data = (r.pos + align - 1) // align * align
    kb = key.encode()
    head = struct.pack('<IIQQ', 0x46554747, 3, n_tensors, n_kv + 1) + r.buf[24:kv_end]
    head += struct.pack('<Q', len(kb)) + kb + struct.pack('<IB', 7, 1 if value else 0) + r.buf[kv_end:r.pos]
    with open(dst, 'wb') as f:
        f.write(head + b'\0' * (-len(head) % align) + r.buf[data:])


def check_bidirectional(c, name, model, inputs):
    """The decoder with <arch>.attention.causal = false: every token sees the whole input."""
    a = embed_ref.load(model).g.meta['general.architecture']
    bidir = model.replace('.gguf', '-bidirectional.gguf')
    with_bool_key(model, bidir, a + '.attention.causal', False)
    ref, causal = embed_ref.load(bidir), embed_ref.load(model)
    errs = []
    for pooling, norm in (('none', 0), ('mean', 2), ('last', 0)):
        tag = '%s-bidirectional-%s-n%d' % (name, pooling, norm)
        theirs = embed_ref.embed(ref, inputs, pooling, norm)
        if pooling == 'none' and float(np.abs(theirs - embed_ref.embed(causal, inputs, pooling, norm)).max()) < 0.01:
            c.failed.append('%s: the causal flag does not change the reference: the check would be weak' % name)
        errs.append(c.compare(tag, c.embed(bidir, inputs, ['--pooling', pooling, '--normalize', str(norm)], tag), theirs))
    worst = max([e for e in errs if e is not None], default=float('nan'))
    print('%-17s %-10s attention.causal = false: max |ours - ref| %.2e' % (name, a, worst))


def check_q8(c, name, model, inputs, rank):
    q8 = model.replace('.gguf', '-q8_0.gguf')
    run([c.infer, 'quantize', model, q8, 'q8_0'])
    f32 = c.embed(model, inputs, ['--pooling', 'mean', '--normalize', '2'], name + '-f32-mean')
    q = c.embed(q8, inputs, ['--pooling', 'mean', '--normalize', '2'], name + '-q8-mean')
    c.n_checks += 1
    if f32 is None or q is None or f32.size != q.size:
        c.failed.append('%s: Q8_0 and F32 embeddings could not be compared' % name)
        return
    f32, q = f32.reshape(len(inputs), -1), q.reshape(len(inputs), -1)
    cos = (f32 * q).sum(axis=-1) / np.linalg.norm(f32, axis=-1) / np.linalg.norm(q, axis=-1)
    line = '%-17s Q8_0 vs F32: min cosine %.5f' % (name, cos.min())
    if not cos.min() > Q8_COSINE:
        c.failed.append('%s: Q8_0 vectors have cosine %.4f to the F32 ones (want > %g)' % (name, cos.min(), Q8_COSINE))
    if 'tokens' in rank:
        fs = c.embed(model, inputs, ['--pooling', 'rank'], name + '-f32-rank')
        qs = c.embed(q8, inputs, ['--pooling', 'rank'], name + '-q8-rank')
        if fs is not None and qs is not None and fs.size == qs.size:
            err = float(np.abs(fs - qs).max())
            bound = 0.1 * max(1.0, float(np.abs(fs).max()))
            line += ', rank scores max |diff| %.4f (bound %.3f)' % (err, bound)
            if not err <= bound:
                c.failed.append('%s: Q8_0 rank scores differ from F32 by %.4f (> %.3f)' % (name, err, bound))
        else:
            c.failed.append('%s: Q8_0 and F32 rank scores could not be compared' % name)
    print(line)


def main():
    infer, work = sys.argv[1], sys.argv[2]
    presets = sys.argv[3:] or PRESETS
    os.makedirs(work, exist_ok=True)
    h = subprocess.run([infer, 'embed', '--help'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if '--pooling' not in h.stdout:
        print('SKIPPED: this infer has no embed command')
        return 77
    c = Checker(infer, work)
    for name in presets:
        model, inputs, rank = check_preset(c, name)
        if not isinstance(embed_ref.load(model), embed_ref.Encoder):
            check_bidirectional(c, name, model, inputs)
        check_q8(c, name, model, inputs, rank)
    for f in c.failed:
        print('FAIL', f)
    print('%d checks, %d failed' % (c.n_checks, len(c.failed)))
    return 1 if c.failed else 0


if __name__ == '__main__':
    sys.exit(main())
