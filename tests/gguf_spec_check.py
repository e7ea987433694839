#!/usr/bin/env python3
"""Reads the output of `infer quantize` with a GGUF reader of its own, written
from the GGUF specification (ggml's docs/gguf.md and the block layouts of
ggml-common.h), sharing no code with libinfer: the header, metadata, tensor
infos, alignment and offsets are validated, every quantized tensor is
dequantized here and compared with the F32 tensor it came from.

    gguf_spec_check.py PATH_TO_INFER WORK_DIR

The source model is a random-weight F32 model made by `infer synth --preset
tiny` (rows of 64 and 160 values: every 32-value block type fits them), so
the check needs nothing from ../shared. Standard library only."""
import math
import os
import struct
import subprocess
import sys

GGUF_MAGIC = 0x46554747  # "GGUF", little-endian
# GGML type id -> (values per block, bytes per block), from the specification.
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}
TYPE_IDS = {'f16': 1, 'bf16': 30, 'q8_0': 8, 'q4_0': 2, 'q4_1': 3, 'q5_0': 6, 'q5_1': 7}
# Largest acceptable RMS error relative to the tensor's RMS (a wrong layout
# gives errors of order 1 and more).
MAX_REL_RMS = {'f16': 1e-3, 'bf16': 1e-2, 'q8_0': 0.01, 'q5_0': 0.06, 'q5_1': 0.05, 'q4_0': 0.12, 'q4_1': 0.1}


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


class Reader:
    def __init__(self, path):
        with open(path, 'rb') as f:
            self.buf = f.read()
        self.pos = 0

    def take(self, fmt):
        size = struct.calcsize('<' + fmt)
        check(self.pos + size <= len(self.buf), 'truncated at byte %d' % self.pos)
        v = struct.unpack_from('<' + fmt, self.buf, self.pos)
        self.pos += size
        return v if len(v) > 1 else v[0]

    def string(self):
        n = self.take('Q')
        check(self.pos + n <= len(self.buf), 'string runs past the end')
        s = self.buf[self.pos:self.pos + n].decode('utf-8')
        self.pos += n
        return s

    def value(self, t):
        scalar = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: 'B', 10: 'Q', 11: 'q', 12: 'd'}
        if t in scalar:
            return self.take(scalar[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take('I'), self.take('Q')
            return [self.value(et) for _ in range(n)]
        raise Fail('unknown metadata value type %d' % t)


def parse(path):
    r = Reader(path)
    magic, version, n_tensors, n_kv = r.take('I'), r.take('I'), r.take('Q'), r.take('Q')
    check(magic == GGUF_MAGIC, 'bad magic %#x' % magic)
    check(version == 3, 'version %d, expected 3' % version)
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        check(key not in meta, 'duplicate key ' + key)
        meta[key] = r.value(r.take('I'))
    align = meta.get('general.alignment', 32)
    check(align > 0 and align & (align - 1) == 0, 'alignment %d is not a power of two' % align)
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take('I')
        dims = [r.take('Q') for _ in range(nd)]
        t, off = r.take('I'), r.take('Q')
        check(t in TYPES, '%s: type id %d is not a standard GGML type' % (name, t))
        infos.append((name, dims, t, off))
    data = (r.pos + align - 1) // align * align
    tensors = {}
    spans = []
    for name, dims, t, off in infos:
        blk, nbytes = TYPES[t]
        count = math.prod(dims)
        check(dims[0] % blk == 0, '%s: row of %d values is not whole blocks of %d' % (name, dims[0], blk))
        size = count // blk * nbytes
        check(off % align == 0, '%s: offset %d not aligned to %d' % (name, off, align))
        check(data + off + size <= len(r.buf), '%s: data runs past the end of the file' % name)
        spans.append((off, off + size, name))
        tensors[name] = (dims, t, r.buf[data + off:data + off + size])
    spans.sort()
    for a, b in zip(spans, spans[1:]):
        check(a[1] <= b[0], 'tensors %s and %s overlap' % (a[2], b[2]))
    return meta, tensors


def f16(b, i):
    return struct.unpack_from('<e', b, i)[0]


def dequant(t, raw, count):
    out = []
    if t == 0:
        return list(struct.unpack('<%df' % count, raw))
    if t == 1:
        return list(struct.unpack('<%de' % count, raw))
    if t == 30:
        return [struct.unpack('<f', struct.pack('<I', h << 16))[0] for h in struct.unpack('<%dH' % count, raw)]
    blk, nbytes = TYPES[t]
    for o in range(0, len(raw), nbytes):
        if t == 8:  # Q8_0: d, int8 q[32]
            d = f16(raw, o)
            out += [d * q for q in struct.unpack_from('<32b', raw, o + 2)]
        elif t in (2, 3):  # Q4_0: d, nibbles; Q4_1: d, m, nibbles. Low nibbles are values 0..15.
            d = f16(raw, o)
            m = f16(raw, o + 2) if t == 3 else 0.0
            qs = raw[o + (4 if t == 3 else 2):o + nbytes]
            lo = [q & 15 for q in qs]
            hi = [q >> 4 for q in qs]
            out += [(v - 8) * d if t == 2 else v * d + m for v in lo + hi]
        elif t in (6, 7):  # Q5_0: d, qh, nibbles; Q5_1: d, m, qh, nibbles. Bit j of qh: 5th bit of value j.
            d = f16(raw, o)
            m = f16(raw, o + 2) if t == 7 else 0.0
            p = o + (4 if t == 7 else 2)
            qh = struct.unpack_from('<I', raw, p)[0]
            qs = raw[p + 4:p + 20]
            vals = [(qs[j] & 15) | (((qh >> j) & 1) << 4) for j in range(16)]
            vals += [(qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) for j in range(16)]
            out += [(v - 16) * d if t == 6 else v * d + m for v in vals]
        else:
            raise Fail('no dequantizer here for type %d' % t)
    return out


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    infer, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, 'tiny-f32.gguf')
    subprocess.run([infer, 'synth', '--preset', 'tiny', '--type', 'f32', '-o', src, '--quiet'], check=True)
    _, base = parse(src)
    failures = 0
    for name, tid in TYPE_IDS.items():
        dst = os.path.join(work, 'tiny-%s.gguf' % name)
        subprocess.run([infer, 'quantize', src, dst, name, '--quiet'], check=True)
        try:
            meta, ts = parse(dst)
            check(set(ts) == set(base), 'tensor names differ from the source')
            n_typed = 0
            worst = 0.0
            for tname, (dims, t, raw) in ts.items():
                check(dims == base[tname][0], '%s: dims %s, source %s' % (tname, dims, base[tname][0]))
                count = math.prod(dims)
                if len(dims) >= 2:
                    check(t == tid, '%s: type %d, asked for %s (%d)' % (tname, t, name, tid))
                    n_typed += 1
                got = dequant(t, raw, count)
                want = dequant(0, base[tname][2], count)
                rms = math.sqrt(sum(w * w for w in want) / count) or 1.0
                err = math.sqrt(sum((g - w) ** 2 for g, w in zip(got, want)) / count) / rms
                worst = max(worst, err)
                check(err <= MAX_REL_RMS[name] if t == tid else err == 0.0,
                      '%s: relative RMS error %.4g against the F32 source' % (tname, err))
            check(n_typed > 0, 'no tensor of type ' + name)
            print('ok   %-5s %2d tensors in %s, worst relative RMS error %.4g' % (name, n_typed, name, worst))
        except Fail as e:
            failures += 1
            print('FAIL %-5s %s' % (name, e))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
