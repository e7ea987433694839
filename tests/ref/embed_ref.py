#!/usr/bin/env python3
"""A reference for embedding models, written from the published model
definitions (Hugging Face `transformers`' BertModel and
BertForSequenceClassification, Nomic's NomicBertModel, and Qwen3 used as a
decoder embedding model with last-token pooling), not from libinfer's C++.
It reads a GGUF file (F32 tensors; the reader of tests/ref/arch_ref.py) and
computes in float64, for each input (a list of token ids, each input alone
as a sequence of its own), the pooled and normalized embedding, or the
reranker's scores.

    embed_ref.py MODEL.gguf --tokens 2,17,3 [--tokens ...] [--types 0,0,1 ...]
                 [--pooling none|mean|cls|last|rank] [--normalize 2|0]
                 [--dimensions N] [--out FILE]

writes the rows as little-endian float32 (the layout of `infer embed --out`),
or prints them one per line without --out.

The math (GGUF names; matrices are (n_out, n_in) after reading):
  bert        x = LN_emb(word[tok] + position[p] + type[t]); per layer
              h = LN_attn_out(x + Wo·attn(x) + bo), q/k/v with biases, softmax(q·kᵀ/sqrt(hd))
              over the whole sequence (no mask: each input is its own sequence);
              x = LN_layer_out(h + Wdown·gelu(Wup·h + bup) + bdown), gelu with erf (BERT's "gelu").
              Rank (BertForSequenceClassification): score = Wout·tanh(Wcls·x[0] + bcls) + bout.
  nomic-bert  x = LN_emb(word[tok] + type[t]) (no position table); per layer
              q|k|v = Wqkv·x (no bias), rotary on q and k over the whole head, rotate-half
              (rotary_emb_interleaved false), base nomic-bert.rope.freq_base, position =
              index in the sequence; h = LN(x + Wo·attn); x = LN(h + Wdown·(Wup·h * silu(Wgate·h)))
              (NomicBertGatedMLP: fc11 = up, fc12 = gate, fc2 = down; post-LN as prenorm=False).
  decoders    the hidden state after the final norm (arch_ref.Ref.hidden: causal attention, or
              bidirectional when <arch>.attention.causal is false), e.g. Qwen3-Embedding:
              last-token pooling.
  pooling     none: every token's row; mean over the input's tokens; cls: the first token;
              last: the last token. Then the first `dimensions` values (Matryoshka), then L2
              normalization when normalize is 2. Rank scores are never normalized.
Standard library and numpy only."""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch_ref  # noqa: E402  (the GGUF reader, RoPE and the decoder forward)

POOLING = {'none': 0, 'mean': 1, 'cls': 2, 'last': 3, 'rank': 4}
POOLING_NAME = {v: k for k, v in POOLING.items()}

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf(x):
    # ACT2FN["gelu"]: x * 0.5 * (1 + erf(x / sqrt(2)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x, w, b, eps):
    # nn.LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias, biased variance
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return p / p.sum(axis=-1, keepdims=True)


class Encoder:
    """bert and nomic-bert."""

    def __init__(self, g):
        self.g = g
        m = g.meta
        a = self.arch = m['general.architecture']
        self.nomic = a == 'nomic-bert'
        self.d = m[a + '.embedding_length']
        self.L = m[a + '.block_count']
        self.H = m[a + '.attention.head_count']
        self.hd = self.d // self.H
        self.eps = m.get(a + '.attention.layer_norm_epsilon', 1e-12)
        if m.get(a + '.attention.causal', False):
            raise ValueError('a causal %s is not what this reference computes' % a)
        base = m.get(a + '.rope.freq_base', 10000.0)
        self.inv_freq = 1.0 / (base ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd))
        self.pooling = m.get(a + '.pooling_type', 1)

    def t(self, name):
        return self.g.tensors[name]

    def linear(self, x, name, bias=True):
        y = x @ self.t(name + '.weight').T
        if bias and (name + '.bias') in self.g.tensors:
            y = y + self.t(name + '.bias')
        return y

    def ln(self, x, name):
        return layer_norm(x, self.t(name + '.weight'), self.t(name + '.bias'), self.eps)

    def hidden(self, tokens, types=None):
        tokens = np.asarray(tokens)
        T = len(tokens)
        types = np.zeros(T, dtype=np.int64) if types is None else np.asarray(types)
        x = self.t('token_embd.weight')[tokens] + self.t('token_types.weight')[types]
        if not self.nomic:
            x = x + self.t('position_embd.weight')[np.arange(T)]
        x = self.ln(x, 'token_embd_norm')
        pos = np.arange(T, dtype=np.float64)
        for l in range(self.L):
            b = 'blk.%d.' % l
            if self.nomic:
                qkv = x @ self.t(b + 'attn_qkv.weight').T
                q, k, v = qkv[:, :self.d], qkv[:, self.d:2 * self.d], qkv[:, 2 * self.d:]
            else:
                q, k, v = self.linear(x, b + 'attn_q'), self.linear(x, b + 'attn_k'), self.linear(x, b + 'attn_v')
            q, k, v = (z.reshape(T, self.H, self.hd) for z in (q, k, v))
            if self.nomic:
                q, k = arch_ref.rope(q, pos, self.inv_freq), arch_ref.rope(k, pos, self.inv_freq)
            s = np.einsum('ihd,jhd->hij', q, k) / math.sqrt(self.hd)
            o = np.einsum('hij,jhd->ihd', softmax(s), v).reshape(T, self.d)
            h = self.ln(x + self.linear(o, b + 'attn_output'), b + 'attn_output_norm')
            if self.nomic:
                f = (h @ self.t(b + 'ffn_up.weight').T) * arch_ref.silu(h @ self.t(b + 'ffn_gate.weight').T)
                f = f @ self.t(b + 'ffn_down.weight').T
            else:
                f = self.linear(gelu_erf(self.linear(h, b + 'ffn_up')), b + 'ffn_down')
            x = self.ln(h + f, b + 'layer_output_norm')
        return x

    def rank(self, tokens, types=None):
        x0 = self.hidden(tokens, types)[0]
        if 'cls.output.weight' not in self.g.tensors:
            raise ValueError('this model has no classifier head')
        if 'cls.weight' in self.g.tensors:
            x0 = np.tanh(self.linear(x0, 'cls'))
        return self.linear(x0, 'cls.output')


class Decoder:
    def __init__(self, g):
        self.g = g
        self.ref = arch_ref.Ref(g)  # causal, or both ways when *.attention.causal is false
        a = g.meta['general.architecture']
        self.pooling = g.meta.get(a + '.pooling_type', 3)

    def hidden(self, tokens, types=None):
        return self.ref.hidden(np.asarray(tokens))

    def rank(self, tokens, types=None):
        raise ValueError('a decoder has no classifier head')


def load(path):
    g = arch_ref.Gguf(path)
    if g.meta['general.architecture'] in ('bert', 'nomic-bert'):
        return Encoder(g)
    return Decoder(g)


def embed(model, inputs, pooling=None, normalize=2, dimensions=0, types=None):
    """Rows for the inputs (lists of token ids), in order: one per input, or
    one per token with pooling 'none'. pooling None: the model's own."""
    p = model.pooling if pooling is None else POOLING[pooling]
    rows = []
    for i, toks in enumerate(inputs):
        ty = types[i] if types is not None else None
        if p == 4:
            rows.append(model.rank(toks, ty))
            continue
        x = model.hidden(toks, ty)
        pooled = {0: x, 1: x.mean(axis=0, keepdims=True), 2: x[:1], 3: x[-1:]}[p]
        if dimensions:
            pooled = pooled[:, :dimensions]
        if normalize == 2:
            pooled = pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)
        rows.extend(pooled)
    return np.array(rows, dtype=np.float64)


def ids(text):
    return [int(t) for t in text.replace(',', ' ').split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('model')
    ap.add_argument('--tokens', action='append', required=True, help='an input: comma separated ids')
    ap.add_argument('--types', action='append', help="an input's token types (as many as --tokens)")
    ap.add_argument('--pooling', choices=sorted(POOLING))
    ap.add_argument('--normalize', type=int, default=2, choices=(0, 2))
    ap.add_argument('--dimensions', type=int, default=0)
    ap.add_argument('--out', help='write float32 rows here')
    a = ap.parse_args()
    inputs = [ids(t) for t in a.tokens]
    types = [ids(t) for t in a.types] if a.types else None
    if types is not None and [len(t) for t in types] != [len(t) for t in inputs]:
        ap.error('--types must give a type for every token of every input')
    rows = embed(load(a.model), inputs, a.pooling, a.normalize, a.dimensions, types)
    if a.out:
        rows.astype('<f4').tofile(a.out)
    else:
        for r in rows:
            print(' '.join('%.9g' % v for v in r))


if __name__ == '__main__':
    main()
