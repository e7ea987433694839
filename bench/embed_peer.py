#!/usr/bin/env python3
"""Helpers of bench/embed_peer.sh (standard library only).

  embed_peer.py texts GGUF N SEED MIN MAX > FILE
      N texts, one a line, of whole words drawn from the model's WordPiece
      vocabulary (lowercase ASCII words that are one token, no ## pieces, no
      specials), each MIN-2 .. MAX-2 words long, so that with [CLS] and [SEP]
      each text is MIN .. MAX tokens for any WordPiece tokenizer.
  embed_peer.py compare OURS.f32 PEER.txt DIM MIN_COS [LABEL...]
      OURS.f32: rows of DIM little-endian float32 (infer embed --out);
      PEER.txt: rows of whitespace-separated numbers (llama-embedding
      --embd-output-format raw). Prints the cosine and max |diff| per row,
      exits 1 when a row count differs or a cosine is below MIN_COS.
  embed_peer.py dim GGUF
      The model's embedding length.
  embed_peer.py vocabtest INP OUT TOKENIZE MODEL
      Runs TOKENIZE (llama-tokenize) on each test of the vocabulary test
      pair INP/OUT (texts separated by __ggml_vocab_test__ lines, expected
      ids one line each, without specials) and counts the agreements.
"""
import math, random, struct, subprocess, sys, tempfile, os


def gguf_kv(path):
    """The metadata of a GGUF file as a dict (arrays as lists)."""
    fmt = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}
    with open(path, 'rb') as f:
        if f.read(4) != b'GGUF':
            raise SystemExit(f'{path}: not a GGUF file')
        _version, _n_tensors, n_kv = struct.unpack('<IQQ', f.read(20))

        def val(t):
            if t in fmt:
                s = struct.calcsize('<' + fmt[t])
                return struct.unpack('<' + fmt[t], f.read(s))[0]
            if t == 8:
                n, = struct.unpack('<Q', f.read(8))
                return f.read(n).decode('utf-8', 'replace')
            if t == 9:
                et, n = struct.unpack('<IQ', f.read(12))
                return [val(et) for _ in range(n)]
            raise SystemExit(f'{path}: unknown GGUF value type {t}')

        kv = {}
        for _ in range(n_kv):
            n, = struct.unpack('<Q', f.read(8))
            key = f.read(n).decode()
            t, = struct.unpack('<I', f.read(4))
            kv[key] = val(t)
        return kv


def texts(path, n, seed, lo, hi):
    kv = gguf_kv(path)
    toks = kv['tokenizer.ggml.tokens']
    types = kv.get('tokenizer.ggml.token_type', [1] * len(toks))
    # the GGUF ecosystem's form marks word starts with U+2581 and stores ## pieces bare; HF's form is bare words
    # and ## pieces
    phantom = any(w.startswith('\u2581') for w in toks)
    if phantom:
        toks = [w[1:] if w.startswith('\u2581') else '#' for w in toks]
    words = [w for w, t in zip(toks, types) if t == 1 and w.isascii() and w.isalpha() and w.islower()]
    if len(words) < 100:
        raise SystemExit(f'{path}: only {len(words)} plain words in the vocabulary')
    rng = random.Random(seed)
    for _ in range(n):
        k = rng.randint(lo - 2, hi - 2)
        print(' '.join(rng.choice(words) for _ in range(k)))


def compare(ours, peer, dim, min_cos, labels):
    with open(ours, 'rb') as f:
        raw = f.read()
    if len(raw) % (4 * dim):
        raise SystemExit(f'{ours}: {len(raw)} bytes is not rows of {dim} float32')
    a = struct.unpack(f'<{len(raw) // 4}f', raw)
    ra = [a[i:i + dim] for i in range(0, len(a), dim)]
    rb = []
    with open(peer) as f:
        for line in f:
            v = line.split()
            if not v:
                continue
            try:
                row = [float(x) for x in v]
            except ValueError:
                continue  # a log line
            if len(row) == dim:
                rb.append(row)
    if len(ra) != len(rb):
        print(f'FAIL: ours has {len(ra)} rows, the peer {len(rb)}')
        return 1
    worst, bad = 1.0, 0
    for i, (x, y) in enumerate(zip(ra, rb)):
        dot = sum(p * q for p, q in zip(x, y))
        nx, ny = math.sqrt(sum(p * p for p in x)), math.sqrt(sum(q * q for q in y))
        cos = dot / (nx * ny) if nx > 0 and ny > 0 else (1.0 if nx == ny else 0.0)
        md = max(abs(p - q) for p, q in zip(x, y))
        label = labels[i] if i < len(labels) else f'row {i}'
        flag = '' if cos >= min_cos else '  < %g' % min_cos
        print(f'  {label:<40.40} cos {cos:.7f}  max|diff| {md:.2e}  |ours| {nx:.4g} |peer| {ny:.4g}{flag}')
        worst = min(worst, cos)
        bad += cos < min_cos
    print(f'  min cosine {worst:.7f} over {len(ra)} rows' + (f': FAIL ({bad} below {min_cos})' if bad else ''))
    return 1 if bad else 0


def vocabtest(inp, out, tokenize, model):
    tests = open(inp, encoding='utf-8').read().split('\n__ggml_vocab_test__\n')
    want = open(out, encoding='utf-8').read().split('\n')
    if tests and tests[-1].endswith('\n__ggml_vocab_test__'):
        tests[-1] = tests[-1][:-len('\n__ggml_vocab_test__')]
    ok = 0
    with tempfile.TemporaryDirectory() as d:
        for i, t in enumerate(tests):
            p = os.path.join(d, 't.txt')
            with open(p, 'w', encoding='utf-8') as f:
                f.write(t)
            r = subprocess.run([tokenize, '-m', model, '-f', p, '--ids', '--no-bos', '--no-escape', '--log-disable'],
                               capture_output=True, text=True)
            got = r.stdout.strip().strip('[]').replace(',', ' ').split()
            exp = want[i].split() if i < len(want) else None
            if got == exp:
                ok += 1
            else:
                print(f'  test {i} {t!r}: peer {got} expected {exp}')
    print(f'  {ok}/{len(tests)} vocabulary tests tokenize as the .out file says')
    return 0 if ok == len(tests) else 1


if __name__ == '__main__':
    cmd = sys.argv[1] if len(sys.argv) > 1 else ''
    if cmd == 'texts':
        texts(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    elif cmd == 'compare':
        sys.exit(compare(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6:]))
    elif cmd == 'dim':
        kv = gguf_kv(sys.argv[2])
        print(kv[kv['general.architecture'] + '.embedding_length'])
    elif cmd == 'vocabtest':
        sys.exit(vocabtest(*sys.argv[2:6]))
    else:
        print(__doc__)
        sys.exit(2)
