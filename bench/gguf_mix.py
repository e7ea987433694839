#!/usr/bin/env python3
"""Writes a K-quant "_M" mix from two GGUF files of the same model (say two
`infer synth --preset P --type T` files with the same seed: same tensors,
same values, different types): every tensor from BASE, except those a
Q4_K_M / Q5_K_M file keeps at 6 bits, taken from MORE (a Q6_K file):

  - output.weight;
  - attn_v.weight and ffn_down.weight of the layers that get more bits: the
    first and last eighth of the layers and every third one in between
    (i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2).

With a Q4_K base this is the Q4_K_M layout of llama-style models (Q4_K, Q6_K
output, Q6_K attn_v/ffn_down on those layers); with a Q5_K base, Q5_K_M's.
Metadata is copied from BASE as it is. Standard library only.

  bench/gguf_mix.py OUT.gguf BASE.gguf MORE.gguf
"""
import struct, sys

BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}
SCALAR = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def value(f, t):
    if t in SCALAR:
        s = struct.calcsize('<' + SCALAR[t])
        return struct.unpack('<' + SCALAR[t], f.read(s))[0]
    if t == 8:
        n, = struct.unpack('<Q', f.read(8))
        return f.read(n)
    if t == 9:
        et, n = struct.unpack('<IQ', f.read(12))
        return [value(f, et) for _ in range(n)]
    raise ValueError('bad gguf value type %d' % t)


def read(path):
    """(header fields, raw metadata bytes, metadata dict, tensors, data start)."""
    with open(path, 'rb') as f:
        magic, ver, nt, nkv = struct.unpack('<IIQQ', f.read(24))
        if magic != 0x46554747:
            raise ValueError('%s: not a GGUF file' % path)
        start = f.tell()
        kv = {}
        for _ in range(nkv):
            n, = struct.unpack('<Q', f.read(8))
            key = f.read(n).decode()
            t, = struct.unpack('<I', f.read(4))
            kv[key] = value(f, t)
        end = f.tell()
        f.seek(start)
        raw_kv = f.read(end - start)
        ts = []
        for _ in range(nt):
            n, = struct.unpack('<Q', f.read(8))
            name = f.read(n).decode()
            nd, = struct.unpack('<I', f.read(4))
            dims = struct.unpack('<%dQ' % nd, f.read(8 * nd))
            t, off = struct.unpack('<IQ', f.read(12))
            count = 1
            for d in dims:
                count *= d
            blk, by = BLOCK[t]
            ts.append({'name': name, 'dims': dims, 'type': t, 'off': off, 'bytes': count // blk * by})
        align = kv.get('general.alignment', 32)
        data = (f.tell() + align - 1) // align * align
        return (ver, nkv), raw_kv, kv, ts, data


def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    out, base, more = sys.argv[1:]
    (ver, nkv), raw_kv, kv, bts, bdata = read(base)
    _, _, _, mts, mdata = read(more)
    if [t['name'] for t in bts] != [t['name'] for t in mts] or [t['dims'] for t in bts] != [t['dims'] for t in mts]:
        sys.exit('%s and %s do not hold the same tensors' % (base, more))
    arch = kv['general.architecture'].decode()
    n_layer = kv['%s.block_count' % arch]
    align = kv.get('general.alignment', 32)
    pick = []  # (source path, data start, tensor)
    for bt, mt in zip(bts, mts):
        name = bt['name']
        take = name == 'output.weight'
        parts = name.split('.')
        if len(parts) == 4 and parts[0] == 'blk' and parts[2] in ('attn_v', 'ffn_down'):
            take = more_bits(int(parts[1]), n_layer)
        pick.append((more, mdata, mt) if take else (base, bdata, bt))
    infos = b''
    off = 0
    for _, _, t in pick:
        nm = t['name'].encode()
        infos += struct.pack('<Q', len(nm)) + nm + struct.pack('<I', len(t['dims']))
        infos += struct.pack('<%dQ' % len(t['dims']), *t['dims']) + struct.pack('<IQ', t['type'], off)
        off = (off + t['bytes'] + align - 1) // align * align
    head = struct.pack('<IIQQ', 0x46554747, ver, len(pick), nkv) + raw_kv + infos
    head += b'\0' * ((-len(head)) % align)
    counts = {}
    with open(out, 'wb') as o:
        o.write(head)
        files = {}
        for path, data, t in pick:
            f = files.setdefault(path, open(path, 'rb'))
            f.seek(data + t['off'])
            left = t['bytes']
            while left:
                chunk = f.read(min(left, 1 << 24))
                o.write(chunk)
                left -= len(chunk)
            o.write(b'\0' * ((-t['bytes']) % align))
            counts[t['type']] = counts.get(t['type'], 0) + 1
        for f in files.values():
            f.close()
    print('%s: %s' % (out, ', '.join('%d tensors of type %d' % (n, t) for t, n in sorted(counts.items()))))


if __name__ == '__main__':
    main()
