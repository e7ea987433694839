#!/usr/bin/env python3
"""An independent numpy reference for the state-space architectures libinfer
runs (GGUF `mamba`, `mamba2` and `jamba` files, e.g. `infer synth --preset
tiny-mamba --type f32`), written from the published model definitions (the
Mamba and Mamba-2 papers' selective scan, the mamba_ssm reference modules and
the Hugging Face MambaForCausalLM, Mamba2ForCausalLM and JambaForCausalLM
modeling files), not from libinfer's C++. The GGUF reader (F32 only) is
tests/ref/arch_ref.py's. Everything runs in float64, the recurrence one
position at a time from a zero state over the whole token list.

    ssm_ref.py MODEL.gguf --tokens 1,5,9,... [--out LOGITS.f32] [--variant V]

writes len(tokens) rows of n_vocab little-endian float32 (the layout of
`infer run --dump-logits`), or prints each position's argmax without --out.

The models (x: the residual stream, rows = positions):
  every layer   x += mixer(rmsnorm(x) * attn_norm)
  Mamba-1 mixer [xs | z] = W_in h; xs = silu(causal depthwise conv(xs) + b)
                [r | B | C] = W_x xs  (Jamba: each RMS-normalized with its weight)
                dt = softplus(W_dt r + dt_bias); A = ssm_a (already -exp(A_log))
                s_t = exp(dt A) * s_{t-1} + dt * xs B^T  (per channel, d_state wide)
                y = s_t C + D xs;  y *= silu(z);  out = W_out y
  Mamba-2 mixer [z | xBC | dt] = W_in h; xBC = silu(conv(xBC) + b) = [xs | B | C]
                per head k (group g = k // (heads / groups)), dt_k = softplus(dt_k + dt_bias_k):
                s_k = exp(dt_k A_k) s_k + dt_k xs_k B_g^T; y_k = s_k C_g + D_k xs_k
                y *= silu(z); y = RMSNorm over each of the groups' d_inner / groups values
                (mamba_ssm's RMSNormGated with group_size) * ssm_norm; out = W_out y
  Jamba         layers with head_count_kv[l] == 0 are Mamba-1 layers, the others causal
                attention without rotary embedding (scale 1/sqrt(head_dim), grouped KV heads);
                then x += ffn(rmsnorm(x) * ffn_norm): SwiGLU, or experts: p = softmax(router h),
                the top k by p, out = sum p_e * down_e(silu(gate_e h) * up_e h) (no renormalization)
  logits = W_out (rmsnorm(x) * output_norm), W_out = token_embd when output.weight is absent.

--variant computes a deliberately wrong model, so a test can show its
tolerance tells it apart: noconv (the conv ignores earlier positions: taps of
the current input only), renorm (Jamba experts renormalized), fullnorm
(Mamba-2's norm over the whole d_inner instead of per group), nod (no D skip)."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch_ref  # noqa: E402  (the GGUF reader)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    # torch.nn.functional.softplus with threshold 20
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def causal_conv(x, w, b, variant):
    """Depthwise causal conv over time: x [T, ch], w [ch, K] (tap K-1 multiplies
    the current input, tap 0 the one K-1 positions back), zero history."""
    T, ch = x.shape
    K = w.shape[1]
    if variant == 'noconv':
        return x * w[:, K - 1] + b
    pad = np.concatenate([np.zeros((K - 1, ch)), x], axis=0)
    out = np.tile(b, (T, 1)).astype(np.float64)
    for k in range(K):
        out += pad[k:k + T] * w[:, k]
    return out


class Model:
    def __init__(self, path, variant=None):
        g = arch_ref.Gguf(path)
        self.t, self.meta, self.variant = g.tensors, g.meta, variant
        a = self.arch = g.meta['general.architecture']
        if a not in ('mamba', 'mamba2', 'jamba'):
            raise ValueError('%s is a %s model, not a state-space one' % (path, a))
        m = lambda k, d=None: g.meta.get(a + '.' + k, d)
        self.n_layer = m('block_count')
        self.eps = m('attention.layer_norm_rms_epsilon', 1e-5)
        self.d_inner, self.d_state = m('ssm.inner_size'), m('ssm.state_size')
        self.dt_rank, self.n_group = m('ssm.time_step_rank'), m('ssm.group_count', 1)
        if a == 'jamba':
            self.n_head = m('attention.head_count')
            self.kv = list(m('attention.head_count_kv'))
            self.n_used = m('expert_used_count', 0)
        else:
            self.kv = [0] * self.n_layer

    def w(self, name):
        return self.t[name]

    # ---- mixers: h [T, d] -> [T, d]

    def mamba1(self, b, h):
        di, N, R = self.d_inner, self.d_state, self.dt_rank
        xz = h @ self.w(b + 'ssm_in.weight').T
        xs, z = xz[:, :di], xz[:, di:]
        xs = silu(causal_conv(xs, self.w(b + 'ssm_conv1d.weight'), self.w(b + 'ssm_conv1d.bias'), self.variant))
        xdb = xs @ self.w(b + 'ssm_x.weight').T
        r, B, C = xdb[:, :R], xdb[:, R:R + N], xdb[:, R + N:]
        if b + 'ssm_dt_norm.weight' in self.t:  # Jamba
            r = rmsnorm(r, self.w(b + 'ssm_dt_norm.weight'), self.eps)
            B = rmsnorm(B, self.w(b + 'ssm_b_norm.weight'), self.eps)
            C = rmsnorm(C, self.w(b + 'ssm_c_norm.weight'), self.eps)
        dt = softplus(r @ self.w(b + 'ssm_dt.weight').T + self.w(b + 'ssm_dt.bias'))  # [T, di]
        A = self.w(b + 'ssm_a')  # [di, N]
        D = self.w(b + 'ssm_d') if self.variant != 'nod' else np.zeros(di)
        s = np.zeros((di, N))
        y = np.zeros((h.shape[0], di))
        for t in range(h.shape[0]):
            s = np.exp(dt[t][:, None] * A) * s + (dt[t] * xs[t])[:, None] * B[t][None, :]
            y[t] = s @ C[t] + D * xs[t]
        y = y * silu(z)
        return y @ self.w(b + 'ssm_out.weight').T

    def mamba2(self, b, h):
        di, N, H, G = self.d_inner, self.d_state, self.dt_rank, self.n_group
        P = di // H
        ch = di + 2 * G * N
        p = h @ self.w(b + 'ssm_in.weight').T
        z, xbc, dt = p[:, :di], p[:, di:di + ch], p[:, di + ch:]
        xbc = silu(causal_conv(xbc, self.w(b + 'ssm_conv1d.weight'), self.w(b + 'ssm_conv1d.bias'), self.variant))
        xs, B, C = xbc[:, :di], xbc[:, di:di + G * N], xbc[:, di + G * N:]
        dt = softplus(dt + self.w(b + 'ssm_dt.bias'))  # [T, H]
        A = self.w(b + 'ssm_a').reshape(H)
        D = self.w(b + 'ssm_d').reshape(H) if self.variant != 'nod' else np.zeros(H)
        T = h.shape[0]
        s = np.zeros((H, P, N))
        y = np.zeros((T, H, P))
        grp = np.arange(H) // (H // G)
        for t in range(T):
            x_t = xs[t].reshape(H, P)
            Bt, Ct = B[t].reshape(G, N)[grp], C[t].reshape(G, N)[grp]  # [H, N]
            s = np.exp(dt[t] * A)[:, None, None] * s + (dt[t][:, None] * x_t)[:, :, None] * Bt[:, None, :]
            y[t] = np.einsum('hpn,hn->hp', s, Ct) + D[:, None] * x_t
        y = y.reshape(T, di) * silu(z)
        wn = self.w(b + 'ssm_norm.weight').reshape(di)
        if self.variant == 'fullnorm':
            y = rmsnorm(y, wn, self.eps)
        else:
            yg = y.reshape(T, G, di // G)
            yg = yg / np.sqrt(np.mean(yg * yg, axis=-1, keepdims=True) + self.eps)
            y = yg.reshape(T, di) * wn
        return y @ self.w(b + 'ssm_out.weight').T

    def attention(self, b, h, n_kv):
        T, d = h.shape
        H = self.n_head
        hd = d // H
        q = (h @ self.w(b + 'attn_q.weight').T).reshape(T, H, hd)
        k = (h @ self.w(b + 'attn_k.weight').T).reshape(T, n_kv, hd)
        v = (h @ self.w(b + 'attn_v.weight').T).reshape(T, n_kv, hd)
        rep = H // n_kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        sc = np.einsum('thd,shd->hts', q, k) / np.sqrt(hd)
        sc = sc + np.triu(np.full((T, T), -np.inf), 1)[None]
        sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
        sc /= sc.sum(axis=-1, keepdims=True)
        o = np.einsum('hts,shd->thd', sc, v).reshape(T, H * hd)
        return o @ self.w(b + 'attn_output.weight').T

    def ffn(self, b, h):
        if b + 'ffn_gate_inp.weight' not in self.t:
            g = h @ self.w(b + 'ffn_gate.weight').T
            u = h @ self.w(b + 'ffn_up.weight').T
            return (silu(g) * u) @ self.w(b + 'ffn_down.weight').T
        logits = h @ self.w(b + 'ffn_gate_inp.weight').T
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        gate, up, down = (self.w(b + n) for n in ('ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight'))
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = sorted(range(p.shape[1]), key=lambda e: (-p[t, e], e))[:self.n_used]
            wts = p[t, top]
            if self.variant == 'renorm':
                wts = wts / wts.sum()
            for e, we in zip(top, wts):
                out[t] += we * ((silu(gate[e] @ h[t]) * (up[e] @ h[t])) @ down[e].T)
        return out

    def forward(self, tokens):
        x = self.w('token_embd.weight')[np.asarray(tokens)]
        for l in range(self.n_layer):
            b = 'blk.%d.' % l
            h = rmsnorm(x, self.w(b + 'attn_norm.weight'), self.eps)
            if self.kv[l] > 0:
                x = x + self.attention(b, h, self.kv[l])
            elif self.arch == 'mamba2':
                x = x + self.mamba2(b, h)
            else:
                x = x + self.mamba1(b, h)
            if self.arch == 'jamba':
                x = x + self.ffn(b, rmsnorm(x, self.w(b + 'ffn_norm.weight'), self.eps))
        x = rmsnorm(x, self.w('output_norm.weight'), self.eps)
        out = self.t.get('output.weight', self.w('token_embd.weight'))
        return x @ out.T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('model')
    ap.add_argument('--tokens', required=True)
    ap.add_argument('--out')
    ap.add_argument('--variant')
    a = ap.parse_args()
    tokens = [int(t) for t in a.tokens.split(',') if t]
    logits = Model(a.model, a.variant).forward(tokens)
    if a.out:
        logits.astype('<f4').tofile(a.out)
    else:
        print(' '.join(str(int(i)) for i in logits.argmax(axis=-1)))


if __name__ == '__main__':
    main()
