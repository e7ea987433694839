#!/usr/bin/env python3
"""A reference forward pass for each architecture libinfer runs, written from
the published model definitions (the Hugging Face `transformers` modeling
files of Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma and Gemma 2, and their
configs), not from libinfer's C++. It reads a GGUF file (a reader of its own
below, F32 tensors only) and computes, in float64 over the whole sequence at
once (no KV cache), the logits after every position of a token list.

    arch_ref.py MODEL.gguf --tokens 1,5,9,... [--out LOGITS.f32]

writes len(tokens) rows of n_vocab little-endian float32 (the layout of
`infer run --dump-logits`), or prints each position's argmax without --out.

GGUF files differ from Hugging Face checkpoints in a few documented ways,
undone here so that the math is Hugging Face's:
  - `llama` files store the Q and K rows of each head with the rotary pairs
    interleaved (the GGUF converter permutes them); they are permuted back to
    Hugging Face's rotate-half order, and RoPE is then rotate-half for every
    architecture (unless the file says infer.rope.neox, i.e. rows already in
    HF order).
  - Gemma and Gemma 2 files store 1 + w in their RMSNorm weights; w = stored
    - 1 is recovered and Gemma's x * (1 + w) applied.
  - Llama 3.x rope scaling is computed from the metadata parameters
    (rope.scaling.factor, low/high_freq_factor, original_context_length) by
    the published formula, not read from rope_freqs.weight.
  - Phi-3 long-rope: the factors come from rope_factors_long/short.weight;
    the long ones are used when the model's context is longer than its
    original one (the choice llama.cpp makes at the trained context;
    Hugging Face chooses by the current sequence length), and cos and sin are
    multiplied by sqrt(1 + ln(ctx / orig) / ln(orig)).
  - Gemma 2's query_pre_attn_scalar is not in GGUF: head_dim (2B and 9B),
    n_embd / n_head for the 46-layer 27B, or
    gemma2.attention.query_pre_attn_scalar when present.
Standard library and numpy only."""
import argparse
import math
import struct
import sys

import numpy as np

# ---------------------------------------------------------------- GGUF reader


class Gguf:
    SCALAR = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?', 10: '<Q', 11: '<q', 12: '<d'}

    def __init__(self, path):
        with open(path, 'rb') as f:
            self.buf = f.read()
        self.pos = 0
        magic, version = self.take('<I'), self.take('<I')
        if magic != 0x46554747 or version not in (2, 3):
            raise ValueError('%s is not a GGUF v2/v3 file' % path)
        n_tensors, n_kv = self.take('<Q'), self.take('<Q')
        self.meta = {}
        for _ in range(n_kv):
            key = self.string()
            self.meta[key] = self.value(self.take('<I'))
        infos = []
        for _ in range(n_tensors):
            name = self.string()
            n_dims = self.take('<I')
            dims = [self.take('<Q') for _ in range(n_dims)]
            ttype, offset = self.take('<I'), self.take('<Q')
            infos.append((name, dims, ttype, offset))
        align = int(self.meta.get('general.alignment', 32))
        data = (self.pos + align - 1) // align * align
        self.tensors = {}
        for name, dims, ttype, offset in infos:
            if ttype != 0:
                raise ValueError('tensor %s is not F32 (type %d): this reader reads F32 only' % (name, ttype))
            n = int(np.prod(dims))
            a = np.frombuffer(self.buf, dtype='<f4', count=n, offset=data + offset)
            # GGUF dims are innermost first: [n_in, n_out] is a (n_out, n_in) matrix.
            self.tensors[name] = a.reshape(list(reversed(dims))).astype(np.float64)

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take('<Q')
        s = self.buf[self.pos:self.pos + n].decode('utf-8')
        self.pos += n
        return s

    def value(self, t):
        if t in self.SCALAR:
            return self.take(self.SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take('<I'), self.take('<Q')
            return [self.value(et) for _ in range(n)]
        raise ValueError('unknown metadata type %d' % t)


# ---------------------------------------------------------------- the blocks


def rms_norm(x, w, eps):
    # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def gemma_rms_norm(x, w_hf, eps):
    # GemmaRMSNorm: norm(x) * (1 + weight)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + w_hf)


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    # gelu_pytorch_tanh
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rope(x, pos, inv_freq, mscale=1.0):
    # apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, cos = cat(freqs, freqs)
    # x: (T, H, hd); the first 2 * len(inv_freq) dims rotate.
    n_rot = 2 * len(inv_freq)
    freqs = np.outer(pos, inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :] * mscale, np.sin(emb)[:, None, :] * mscale
    xr, xp = x[..., :n_rot], x[..., n_rot:]
    return np.concatenate([xr * cos + rotate_half(xr) * sin, xp], axis=-1)


def unpermute_qk(w, n_head):
    # The GGUF llama converter's permute, inverted: rows (head, pair i, j) -> (head, j, i).
    out, inp = w.shape
    return w.reshape(n_head, out // n_head // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def attention(q, k, v, scale, window, softcap, causal=True):
    # q: (T, H, hd), k/v: (T, Hkv, hd); causal, sliding window (key j seen by
    # query i when i - window < j <= i), GQA (repeat_kv), optional soft-cap.
    # causal False (embedding models' *.attention.causal): every key seen.
    T, H, hd = q.shape
    group = H // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    s = np.einsum('ihd,jhd->hij', q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    mask = (j <= i) | (not causal)
    if window:
        mask = mask & (i - j < window)
    s = np.where(mask[None], s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum('hij,jhd->ihd', p, v)


# ---------------------------------------------------------------- the model


class Ref:
    def __init__(self, g):
        self.g = g
        m = g.meta
        a = self.arch = m['general.architecture']
        self.d = m[a + '.embedding_length']
        self.L = m[a + '.block_count']
        self.H = m[a + '.attention.head_count']
        self.Hkv = m.get(a + '.attention.head_count_kv', self.H)
        self.hd = m.get(a + '.attention.key_length', self.d // self.H)
        self.n_rot = m.get(a + '.rope.dimension_count', self.hd)
        self.eps = m.get(a + '.attention.layer_norm_rms_epsilon', 1e-5)
        self.base = m.get(a + '.rope.freq_base', 10000.0)
        self.ctx = m.get(a + '.context_length', 2048)
        self.window = m.get(a + '.attention.sliding_window', 0)
        self.causal = bool(m.get(a + '.attention.causal', True))
        self.neox_rows = a != 'llama' or bool(m.get('infer.rope.neox', False))
        self.gemma = a in ('gemma', 'gemma2')
        self.inv_freq, self.mscale = self.rope_freqs()
        self.scale = self.hd ** -0.5
        self.attn_softcap = self.final_softcap = 0.0
        if a == 'gemma2':
            q = m.get(a + '.attention.query_pre_attn_scalar', self.d / self.H if self.L == 46 else self.hd)
            self.scale = q ** -0.5
            self.attn_softcap = m.get(a + '.attn_logit_softcapping', 50.0)
            self.final_softcap = m.get(a + '.final_logit_softcapping', 30.0)

    def t(self, name):
        return self.g.tensors[name]

    def rope_freqs(self):
        m, a = self.g.meta, self.arch
        dim = self.n_rot
        inv_freq = 1.0 / (self.base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
        mscale = 1.0
        kind = m.get(a + '.rope.scaling.type', 'none')
        if kind == 'linear':
            inv_freq = inv_freq / m[a + '.rope.scaling.factor']
        elif kind == 'llama3':  # _compute_llama3_parameters
            factor = m[a + '.rope.scaling.factor']
            low = m.get(a + '.rope.scaling.low_freq_factor', 1.0)
            high = m.get(a + '.rope.scaling.high_freq_factor', 4.0)
            old = m.get(a + '.rope.scaling.original_context_length', 8192)
            low_wavelen, high_wavelen = old / low, old / high
            wavelen = 2 * math.pi / inv_freq
            llama = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
            smooth = (old / wavelen - low) / (high - low)
            smoothed = (1 - smooth) * llama / factor + smooth * llama
            medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
            inv_freq = np.where(medium, smoothed, llama)
        if 'rope_factors_long.weight' in self.g.tensors:  # _compute_longrope_parameters
            orig = m.get(a + '.rope.scaling.original_context_length', self.ctx)
            factor = self.ctx / orig
            ext = self.t('rope_factors_long.weight' if self.ctx > orig else 'rope_factors_short.weight')
            inv_freq = 1.0 / (ext * self.base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
            mscale = math.sqrt(1 + math.log(factor) / math.log(orig)) if factor > 1 else 1.0
            mscale = m.get(a + '.rope.scaling.attn_factor', mscale)
        return inv_freq, mscale

    def norm(self, x, name):
        w = self.t(name)
        return gemma_rms_norm(x, w - 1.0, self.eps) if self.gemma else rms_norm(x, w, self.eps)

    def layer_window(self, l):
        if self.arch == 'gemma2':  # Gemma2Attention: sliding_window on even layers
            return (self.window or 4096) if l % 2 == 0 else 0
        return self.window

    def attn(self, l, h, pos):
        b = 'blk.%d.' % l
        T = h.shape[0]
        qd, kvd = self.H * self.hd, self.Hkv * self.hd
        if self.arch == 'phi3':  # qkv_proj, split q | k | v
            qkv = h @ self.t(b + 'attn_qkv.weight').T
            q, k, v = qkv[:, :qd], qkv[:, qd:qd + kvd], qkv[:, qd + kvd:]
        else:
            wq, wk = self.t(b + 'attn_q.weight'), self.t(b + 'attn_k.weight')
            if not self.neox_rows:
                wq, wk = unpermute_qk(wq, self.H), unpermute_qk(wk, self.Hkv)
            q, k, v = h @ wq.T, h @ wk.T, h @ self.t(b + 'attn_v.weight').T
            if self.arch == 'qwen2':  # bias=True on q_proj, k_proj, v_proj
                q, k, v = q + self.t(b + 'attn_q.bias'), k + self.t(b + 'attn_k.bias'), v + self.t(b + 'attn_v.bias')
        q, k, v = q.reshape(T, self.H, self.hd), k.reshape(T, self.Hkv, self.hd), v.reshape(T, self.Hkv, self.hd)
        if self.arch == 'qwen3':  # q_norm, k_norm over head_dim before RoPE
            q = rms_norm(q, self.t(b + 'attn_q_norm.weight'), self.eps)
            k = rms_norm(k, self.t(b + 'attn_k_norm.weight'), self.eps)
        q, k = rope(q, pos, self.inv_freq, self.mscale), rope(k, pos, self.inv_freq, self.mscale)
        o = attention(q, k, v, self.scale, self.layer_window(l), self.attn_softcap, self.causal)
        return o.reshape(T, qd) @ self.t(b + 'attn_output.weight').T

    def mlp(self, l, h):
        b = 'blk.%d.' % l
        if self.arch == 'phi3':  # gate_up_proj, chunk(2): gate first
            gu = h @ self.t(b + 'ffn_up.weight').T
            n = gu.shape[1] // 2
            gate, up = gu[:, :n], gu[:, n:]
        else:
            gate, up = h @ self.t(b + 'ffn_gate.weight').T, h @ self.t(b + 'ffn_up.weight').T
        act = gelu_tanh if self.gemma else silu
        return (act(gate) * up) @ self.t(b + 'ffn_down.weight').T

    def forward(self, tokens):
        x = self.hidden(tokens)
        w = self.g.tensors.get('output.weight', self.t('token_embd.weight'))  # tie_word_embeddings
        logits = x @ w.T
        if self.final_softcap:
            logits = self.final_softcap * np.tanh(logits / self.final_softcap)
        return logits

    def hidden(self, tokens):
        # The last hidden state after the final norm (what the LM head reads;
        # embedding models pool it: tests/ref/embed_ref.py).
        pos = np.arange(len(tokens), dtype=np.float64)
        x = self.t('token_embd.weight')[tokens]
        if self.gemma:  # hidden_states * hidden_size ** 0.5
            x = x * np.float64(np.float32(self.d ** 0.5))
        for l in range(self.L):
            b = 'blk.%d.' % l
            h = self.attn(l, self.norm(x, b + 'attn_norm.weight'), pos)
            if self.arch == 'gemma2':
                h = self.norm(h, b + 'post_attention_norm.weight')
            x = x + h
            h = self.mlp(l, self.norm(x, b + 'ffn_norm.weight'))
            if self.arch == 'gemma2':
                h = self.norm(h, b + 'post_ffw_norm.weight')
            x = x + h
        return self.norm(x, 'output_norm.weight')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('model')
    ap.add_argument('--tokens', required=True, help='comma or space separated token ids')
    ap.add_argument('--out', help='write float32 logits rows here')
    a = ap.parse_args()
    tokens = [int(t) for t in a.tokens.replace(',', ' ').split()]
    logits = Ref(Gguf(a.model)).forward(np.array(tokens))
    if a.out:
        logits.astype('<f4').tofile(a.out)
    else:
        print(' '.join(str(int(i)) for i in logits.argmax(axis=-1)))


if __name__ == '__main__':
    main()
