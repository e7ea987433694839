#!/usr/bin/env python3
"""Bytes of weights one decode step reads from a GGUF model: every tensor
except the token embedding (only one row of it is read per token), unless
the model has no output.weight (tied embeddings: the embedding is the output
matrix). Mixture-of-experts models (Mixtral's layout: 3-D *_exps tensors,
<arch>.expert_count E and <arch>.expert_used_count k) read k of the E experts
per token: their tensors count k / E of their bytes. Standard library only;
knows the tensor types libinfer writes."""
import struct, sys

BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2),
         1008: (1, 1), 1032: (32, 20), 1064: (64, 36), 1128: (128, 68)}

def read_value(f, t):
    fmt = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}
    if t in fmt:
        s = struct.calcsize('<' + fmt[t]); return struct.unpack('<' + fmt[t], f.read(s))[0]
    if t == 8:
        n, = struct.unpack('<Q', f.read(8)); return f.read(n)
    if t == 9:
        et, n = struct.unpack('<IQ', f.read(12))
        return [read_value(f, et) for _ in range(n)]
    raise ValueError('bad gguf value type %d' % t)

def tensors(path, meta=None):
    with open(path, 'rb') as f:
        magic, ver, nt, nkv = struct.unpack('<IIQQ', f.read(24))
        for _ in range(nkv):
            n, = struct.unpack('<Q', f.read(8)); key = f.read(n).decode()
            t, = struct.unpack('<I', f.read(4)); v = read_value(f, t)
            if meta is not None: meta[key] = v
        out = []
        for _ in range(nt):
            n, = struct.unpack('<Q', f.read(8)); name = f.read(n).decode()
            nd, = struct.unpack('<I', f.read(4))
            dims = struct.unpack('<%dQ' % nd, f.read(8 * nd))
            t, off = struct.unpack('<IQ', f.read(12))
            count = 1
            for d in dims: count *= d
            blk, by = BLOCK[t]
            out.append((name, dims, t, count // blk * by))
        return out

def decode_bytes(path):
    meta = {}
    ts = tensors(path, meta)
    names = {t[0] for t in ts}
    arch = meta.get('general.architecture', b'').decode()
    n_expert = meta.get(arch + '.expert_count', 0)
    n_used = meta.get(arch + '.expert_used_count', 0)
    total = 0
    for name, dims, t, nbytes in ts:
        if name == 'token_embd.weight' and 'output.weight' in names:
            total += nbytes // dims[1]  # one row
        elif n_expert and '_exps.' in name:
            total += nbytes * n_used // n_expert  # the routed experts only
        else:
            total += nbytes
    return total

if __name__ == '__main__':
    print(decode_bytes(sys.argv[1]))
