#!/usr/bin/env python3
"""An independent numpy reference for Mixtral-style mixture-of-experts models
stored as GGUF `llama` files (random-weight test models of `infer synth
--preset mixtral-tiny --type f32`), written from the published model
definitions; it shares no code with libinfer (the GGUF reader, F32 only, is
tests/ref/arch_ref.py's).

    moe_ref.py MODEL.gguf OUT_PREFIX N_GEN TOKEN [TOKEN ...] [--variant V]

Writes OUT_PREFIX.logits.f32: the logits (float32, n_vocab per row) of every
position of the prompt TOKEN..., and OUT_PREFIX.greedy: the N_GEN greedy
tokens after it, one per line. Computes in float64.

The model (Llama with Mixtral's FFN):
    x = embedding[token]
    per layer:  h = rmsnorm(x) * attn_norm
                q, k, v = Wq h, Wk h, Wv h; rotary embedding on q and k, rotary
                pairs adjacent (2i, 2i+1), angle pos * base^(-2i / n_rot)
                x += Wo causal_attention(q, k, v)   (grouped-query heads)
                h = rmsnorm(x) * ffn_norm
                p = softmax(W_router h) over all experts
                S = the k most probable experts, weights p_e / sum_{j in S} p_j
                x += sum_{e in S} w_e * down_e(silu(gate_e h) * up_e h)
    logits = W_out (rmsnorm(x) * output_norm)
Layers without experts use the dense FFN (ffn_gate/ffn_up/ffn_down).

--variant norenorm (top-k weights not renormalized) and --variant top1 (k = 1)
compute deliberately wrong models, so a test can show that its tolerance
tells them apart."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch_ref  # noqa: E402  (the architecture references' GGUF reader)


class Gguf:
    """The file's metadata and F32 tensors through arch_ref.py's reader (numpy
    shape: GGUF dims reversed, so rows are the last axis)."""

    def __init__(self, path):
        g = arch_ref.Gguf(path)
        self.meta, self.tensors = g.meta, g.tensors

    def has(self, name):
        return name in self.tensors

    def tensor(self, name):
        return self.tensors[name]


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, pos, n_rot, base):
    # x: [T, heads, head_dim]; adjacent pairs (2i, 2i+1) of the first n_rot dims
    out = x.copy()
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv = base ** (-2.0 * i / n_rot)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # [T, n_rot/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[:, :, 0:n_rot:2], x[:, :, 1:n_rot:2]
    out[:, :, 0:n_rot:2] = a * c - b * s
    out[:, :, 1:n_rot:2] = a * s + b * c
    return out


class Model:
    def __init__(self, path, variant=None):
        g = Gguf(path)
        arch = g.meta['general.architecture']
        m = lambda k, d=None: g.meta.get(arch + '.' + k, d)
        self.g, self.variant = g, variant
        self.d = m('embedding_length')
        self.n_layer = m('block_count')
        self.n_head = m('attention.head_count')
        self.n_kv = m('attention.head_count_kv', self.n_head)
        self.hd = self.d // self.n_head
        self.n_rot = m('rope.dimension_count', self.hd)
        self.eps = m('attention.layer_norm_rms_epsilon', 1e-5)
        self.base = m('rope.freq_base', 10000.0)
        self.n_expert = m('expert_count', 0)
        self.k = m('expert_used_count', 0)
        if variant == 'top1':
            self.k = 1
        self.embd = g.tensor('token_embd.weight')
        self.out = g.tensor('output.weight') if g.has('output.weight') else self.embd
        self.out_norm = g.tensor('output_norm.weight')

    def layer(self, l, name):
        return self.g.tensor('blk.%d.%s.weight' % (l, name))

    def moe(self, l, h):
        router = self.layer(l, 'ffn_gate_inp')  # [E, d]
        gate, up, down = (self.layer(l, n) for n in ('ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps'))
        # gate, up: [E, n_ff, d]; down: [E, d, n_ff]
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            z = router @ h[t]
            p = np.exp(z - z.max())
            p /= p.sum()
            top = sorted(range(self.n_expert), key=lambda e: (-p[e], e))[:self.k]
            w = p[top] if self.variant == 'norenorm' else p[top] / p[top].sum()
            for e, we in zip(top, w):
                out[t] += we * (down[e] @ (silu(gate[e] @ h[t]) * (up[e] @ h[t])))
        return out

    def forward(self, tokens):
        T = len(tokens)
        pos = np.arange(T)
        x = self.embd[np.asarray(tokens)]
        group = self.n_head // self.n_kv
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for l in range(self.n_layer):
            h = rmsnorm(x, self.layer(l, 'attn_norm'), self.eps)
            q = (h @ self.layer(l, 'attn_q').T).reshape(T, self.n_head, self.hd)
            k = (h @ self.layer(l, 'attn_k').T).reshape(T, self.n_kv, self.hd)
            v = (h @ self.layer(l, 'attn_v').T).reshape(T, self.n_kv, self.hd)
            q, k = rope(q, pos, self.n_rot, self.base), rope(k, pos, self.n_rot, self.base)
            att = np.zeros((T, self.n_head, self.hd))
            for hh in range(self.n_head):
                kv = hh // group
                s = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(self.hd) + mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, hh, :] = s @ v[:, kv, :]
            x = x + att.reshape(T, -1) @ self.layer(l, 'attn_output').T
            h = rmsnorm(x, self.layer(l, 'ffn_norm'), self.eps)
            if self.g.has('blk.%d.ffn_gate_inp.weight' % l):
                x = x + self.moe(l, h)
            else:
                x = x + (silu(h @ self.layer(l, 'ffn_gate').T) * (h @ self.layer(l, 'ffn_up').T)) @ self.layer(
                    l, 'ffn_down').T
        return rmsnorm(x, self.out_norm, self.eps) @ self.out.T


def main(argv):
    variant = None
    if '--variant' in argv:
        i = argv.index('--variant')
        variant = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if len(argv) < 5:
        raise SystemExit(__doc__)
    model = Model(argv[1], variant)
    prefix, n_gen = argv[2], int(argv[3])
    tokens = [int(t) for t in argv[4:]]
    model.forward(tokens).astype('<f4').tofile(prefix + '.logits.f32')
    seq = list(tokens)
    for _ in range(n_gen):
        seq.append(int(np.argmax(model.forward(seq)[-1])))
    with open(prefix + '.greedy', 'w') as f:
        f.write(''.join('%d\n' % t for t in seq[len(tokens):]))


if __name__ == '__main__':
    main(sys.argv)
