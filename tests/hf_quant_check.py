#!/usr/bin/env python3
"""Writes tiny Hugging Face llama checkpoints in the GPTQ and AWQ layouts from
known 4-bit codes, zero points and f16 scales, plus the same weights
dequantized by numpy as plain F32 checkpoints (the reference), for
tests/test_hf.cpp. Packings follow the published formats:
  GPTQ: qweight int32 [in/8, out], input i in bits 4*(i%8) of row i//8;
        qzeros int32 [groups, out/8], output o in bits 4*(o%8), stored zero - 1;
        scales f16 [groups, out]; g_idx int32 [in].
  AWQ (gemm): qweight int32 [in, out/8] and qzeros int32 [groups, out/8], the 8
        outputs 8c..8c+7 packed in the order 0 2 4 6 1 3 5 7; zeros stored as is.
Act-order (desc_act): g_idx assigns the groups to the inputs out of order, each
group with group_size members (a random permutation of i // G).
Usage: hf_quant_check.py OUT_DIR  (writes OUT_DIR/{gptq,gptq-f32,actorder,actorder-f32,
  uneven,awq,awq-f32} on a 64-wide model with groups of 32, and on a 512-wide one
  {g256,g256-f32} (act-order, groups of 256) and {perchannel,perchannel-f32}
  (group_size -1: one group per output channel)). "uneven" is act-order whose
  g_idx gives group 0 one input more and group 1 one input less.
       hf_quant_check.py --bench OUT_DIR  (a larger act-order checkpoint for bench/RESULTS.md:
  OUT_DIR/bench-actorder, hidden 1024, FFN 2816, 6 layers, groups of 128, which loads as
  INT4 blocks; OUT_DIR/bench-uneven, the same with one input moved between two groups of
  every layer, which loads as the exact-f32 expansion; OUT_DIR/bench-inorder, the same
  codes with groups in input order: INT4 blocks without a permutation)
Exit 77 when numpy is missing (the test then skips)."""
import json, os, struct, sys
try:
    import numpy as np
except ImportError:
    sys.exit(77)

D, FF, L, H, HKV, V = 64, 128, 2, 4, 2, 262
HD = D // H
rng = np.random.default_rng(7)


def write_safetensors(path, tensors):
    hdr, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        dt = {np.float32: "F32", np.float16: "F16", np.int32: "I32"}[arr.dtype.type]
        b = np.ascontiguousarray(arr).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def byte_vocab():
    # GPT-2's printable mapping of the 256 bytes (ids 0-255); 4 added tokens (256-259), 2 merges.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    vocab = {chr(c): i for i, c in enumerate(sorted(cs, key=lambda c: bs[cs.index(c)]))}
    return vocab


def write_common(d, quant_cfg, D=D, FF=FF):
    os.makedirs(d, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
           "intermediate_size": FF, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": HKV, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "vocab_size": V, "tie_word_embeddings": False, "torch_dtype": "float16"}
    if quant_cfg:
        cfg["quantization_config"] = quant_cfg
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    vocab = byte_vocab()
    vocab["he"], vocab["\u0120t"] = 260, 261
    added = [{"id": 256 + k, "content": t, "special": True} for k, t in
             enumerate(["<|begin|>", "<|end|>", "<|pad|>", "<|x|>"])]
    tok = {"version": "1.0", "added_tokens": added, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "byte_fallback": False, "vocab": vocab, "merges": ["h e", "\u0120 t"]}}
    json.dump(tok, open(os.path.join(d, "tokenizer.json"), "w"), ensure_ascii=False)
    json.dump({"bos_token": "<|begin|>", "eos_token": "<|end|>", "add_bos_token": True},
              open(os.path.join(d, "tokenizer_config.json"), "w"))


def layers(D, FF):
    HD = D // H
    return [("self_attn.q_proj", H * HD, D), ("self_attn.k_proj", HKV * HD, D), ("self_attn.v_proj", HKV * HD, D),
            ("self_attn.o_proj", D, H * HD), ("mlp.gate_proj", FF, D), ("mlp.up_proj", FF, D), ("mlp.down_proj", D, FF)]


def plain_tensors(D):
    p = {"model.embed_tokens.weight": (rng.standard_normal((V, D)) * 0.5).astype(np.float16),
         "model.norm.weight": (1 + 0.1 * rng.standard_normal(D)).astype(np.float16),
         "lm_head.weight": (rng.standard_normal((V, D)) * 0.2).astype(np.float16)}
    for l in range(L):
        p[f"model.layers.{l}.input_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float16)
        p[f"model.layers.{l}.post_attention_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float16)
    return p


def layer_codes(D, FF, G, zlo=0, zhi=16, smax=0.03):
    # Known codes, zeros and scales per layer: q[in, out] 0..15, z[groups, out] in [zlo, zhi),
    # s[groups, out] (f16).
    codes = {}
    for l in range(L):
        for name, out, inn in layers(D, FF):
            g = inn if G == -1 else G
            q = rng.integers(0, 16, size=(inn, out), dtype=np.int64)
            z = rng.integers(zlo, zhi, size=(inn // g, out), dtype=np.int64)
            s = (rng.uniform(0.002 * smax / 0.03, smax, size=(inn // g, out))).astype(np.float16)
            codes[f"model.layers.{l}.{name}"] = (q, z, s, inn, out)
    return codes


G = 32
plain = plain_tensors(D)
codes = layer_codes(D, FF, G)


def dequant(q, z, s, g_idx):
    # w[o, i] = s[g, o] * (q[i, o] - z[g, o]), g = g_idx[i]; float32 like the library.
    sf = s.astype(np.float32)
    return (sf[g_idx, :] * (q - z[g_idx, :]).astype(np.float32)).T.astype(np.float32)


def pack_gptq(q, z, s, g_idx):
    inn, out = q.shape
    qw = np.zeros((inn // 8, out), dtype=np.uint32)
    for k in range(8):
        qw |= (q[k::8, :].astype(np.uint32) << (4 * k))
    zs = (z - 1) & 15
    qz = np.zeros((z.shape[0], out // 8), dtype=np.uint32)
    for k in range(8):
        qz |= (zs[:, k::8].astype(np.uint32) << (4 * k))
    return {"qweight": qw.view(np.int32), "qzeros": qz.view(np.int32), "scales": s,
            "g_idx": g_idx.astype(np.int32)}


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def pack_awq(q, z, s):
    inn, out = q.shape
    qw = np.zeros((inn, out // 8), dtype=np.uint32)
    qz = np.zeros((z.shape[0], out // 8), dtype=np.uint32)
    for k in range(8):
        qw |= (q[:, AWQ_ORDER[k]::8].astype(np.uint32) << (4 * k))
        qz |= (z[:, AWQ_ORDER[k]::8].astype(np.uint32) << (4 * k))
    return {"qweight": qw.view(np.int32), "qzeros": qz.view(np.int32), "scales": s}


def act_order(inn, g):
    # Each group keeps g members, assigned to the inputs in a random order.
    return rng.permutation(np.arange(inn) // g)


# The act-order assignments (one per layer), shared by a checkpoint and its f32 twin.
ACT = {pfx: act_order(inn, G) for pfx, (q, z, s, inn, out) in codes.items()}
UNEVEN = {}
for pfx, g_idx in ACT.items():
    u = g_idx.copy()
    u[np.flatnonzero(u == 1)[0]] = 0  # group 0: G + 1 inputs, group 1: G - 1
    UNEVEN[pfx] = u
# The wider model: zero points near the middle, as GPTQ's are (symmetric checkpoints store 8),
# and smaller scales (weights of about 1 / sqrt(width)), so that it is not chaotic: small
# roundings (the INT4 kernels' int8 activations) give small logit differences.
D2, FF2 = 512, 1024
plain2 = plain_tensors(D2)
codes256 = layer_codes(D2, FF2, 256, 7, 10, 0.01)
ACT256 = {pfx: act_order(inn, 256) for pfx, (q, z, s, inn, out) in codes256.items()}
codes_pc = layer_codes(D2, FF2, -1, 7, 10, 0.01)


def write(kind, root):
    d = os.path.join(root, kind)
    base = kind[:-4] if kind.endswith("-f32") else kind
    f32 = kind.endswith("-f32")
    group = {"g256": 256, "perchannel": -1}.get(base, G)
    qcfg = None
    if not f32 and kind in ("gptq", "actorder", "uneven", "g256", "perchannel"):
        qcfg = {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": kind in ("actorder", "uneven", "g256"),
                "sym": False, "checkpoint_format": "gptq"}
    elif kind == "awq":
        qcfg = {"quant_method": "awq", "bits": 4, "group_size": G, "version": "gemm", "zero_point": True}
    wide = base in ("g256", "perchannel")
    write_common(d, qcfg, D2 if wide else D, FF2 if wide else FF)
    ts = dict(plain2 if wide else plain)
    ref = {}
    cs = codes256 if base == "g256" else codes_pc if base == "perchannel" else codes
    for pfx, (q, z, s, inn, out) in cs.items():
        if base == "actorder":
            g_idx = ACT[pfx]
        elif base == "uneven":
            g_idx = UNEVEN[pfx]
        elif base == "g256":
            g_idx = ACT256[pfx]
        elif base == "perchannel":
            g_idx = np.zeros(inn, dtype=np.int64)
        else:
            g_idx = np.arange(inn) // G
        w = dequant(q, z, s, g_idx)
        ref[pfx] = w
        if f32 or kind == "gptq-f32" or kind == "awq-f32":
            ts[f"{pfx}.weight"] = w
        elif kind == "awq":
            for k, v in pack_awq(q, z, s).items():
                ts[f"{pfx}.{k}"] = v
        else:
            for k, v in pack_gptq(q, z, s, g_idx).items():
                ts[f"{pfx}.{k}"] = v
    write_safetensors(os.path.join(d, "model.safetensors"), ts)
    # The reference weights ([out, in] f32, numpy's s * (q - z)), one file per layer.
    for pfx, w in ref.items():
        w.astype(np.float32).tofile(os.path.join(d, "ref." + pfx + ".f32"))


def write_bench(root):
    Db, FFb, Gb = 1024, 2816, 128
    for kind in ("bench-actorder", "bench-uneven", "bench-inorder"):
        d = os.path.join(root, kind)
        write_common(d, {"quant_method": "gptq", "bits": 4, "group_size": Gb, "desc_act": True, "sym": False,
                         "checkpoint_format": "gptq"}, Db, FFb)
        r = np.random.default_rng(11)
        ts = plain_tensors(Db)
        for l in range(L):
            for name, out, inn in layers(Db, FFb):
                q = r.integers(0, 16, size=(inn, out), dtype=np.uint8)
                z = r.integers(0, 16, size=(inn // Gb, out), dtype=np.uint8)
                sc = (r.uniform(0.002, 0.03, size=(inn // Gb, out))).astype(np.float16)
                g_idx = r.permutation(np.arange(inn) // Gb)
                if kind == "bench-uneven":
                    g_idx[np.flatnonzero(g_idx == 1)[0]] = 0
                elif kind == "bench-inorder":
                    g_idx = np.arange(inn) // Gb
                for k, v in pack_gptq(q, z, sc, g_idx).items():
                    ts[f"model.layers.{l}.{name}.{k}"] = v
        write_safetensors(os.path.join(d, "model.safetensors"), ts)


if sys.argv[1] == "--bench":
    L = 6
    write_bench(sys.argv[2])
    sys.exit(0)
root = sys.argv[1]
for kind in ("gptq", "gptq-f32", "actorder", "actorder-f32", "uneven", "awq", "awq-f32", "g256", "g256-f32",
             "perchannel", "perchannel-f32"):
    write(kind, root)
