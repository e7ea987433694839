#!/usr/bin/env python3
"""Tensor parallelism on paper: decode tokens/s across 1-8 nodes (issue #31).

    bench/tp_scaling.py [--quant q4_0|q8_0|f16] [--cpu-mem-bw GB/s] [--cpu-flops TFLOP/s]
                        [--mpi-overhead-us US] [--markdown]

For each model shape (TinyLlama-1.1B, Llama-2-7B/13B, Llama-3-70B) and link (10/25/100 GbE
between CPU nodes, NVLink 4 between the GPUs of one node), N = 1, 2, 4, 8 ranks:

  compute per step  = max(weight bytes / (N * memory bandwidth),      decode reads every weight
                          2 * params * batch / (N * flop/s))          once per step; large
                                                                      batches become compute-bound
  TP traffic / step = 2 all-reduces per layer of n_embd * 4 bytes * batch (after attention and
                      after the FFN) + the logits' all-gather (n_vocab * 4 bytes * batch)
  ring all-reduce   = 2(N-1) steps of latency alpha + 2(N-1)/N * bytes / link bandwidth
  ring all-gather   = (N-1) steps of alpha + (N-1)/N * bytes / link bandwidth
  alpha             = the link's wire latency + MPI's cost per message step over TCP (measured
                      here on loopback: the kernel's TCP path on both ends and Open MPI)
  TP step time      = compute + communication (no overlap: the engine waits for each
                      all-reduce before the next matmul)
  PP (pipeline)     = N stages of L/N layers; one activation transfer (n_embd * 4 * batch bytes)
                      per stage boundary, N-1 per token instead of 2L all-reduces. With N batches
                      in flight each stage is busy: throughput = batch / (stage compute +
                      transfer); one sequence's latency stays a whole model's compute.

TP "stops paying" where communication >= compute (the extra node then buys less than half its
share), or where N ranks are slower than N/2. Pipeline parallelism should take over there: per
token it sends N-1 activations between neighbours instead of 2L all-reduces of 2(N-1) steps each
(for a 32-layer model on 4 nodes: 3 messages instead of 384), at the price of no latency gain
for one sequence.

Standard library only. Figures it assumes are printed with the table (--help lists the knobs).
"""
import argparse
import math

# name, n_embd, n_layer, n_ff, n_head, n_head_kv, n_vocab (the published configs)
MODELS = [
    ("TinyLlama-1.1B", 2048, 22, 5632, 32, 4, 32000),
    ("Llama-2-7B", 4096, 32, 11008, 32, 32, 32000),
    ("Llama-2-13B", 5120, 40, 13824, 40, 40, 32000),
    ("Llama-3-70B", 8192, 80, 28672, 64, 8, 128256),
]

BITS = {"q4_0": 4.5, "q8_0": 8.5, "f16": 16.0}  # bits per weight (GGUF block sizes: 18/32, 34/32 bytes)

# Links: name, bandwidth (bytes/s per direction), wire latency (s), node kind.
#  - Ethernet line rates: 10GBASE-*, 25GBASE-*, 100GBASE-* (IEEE 802.3): 1.25, 3.125, 12.5 GB/s.
#    Wire latency (NICs + one switch hop, beyond the TCP stacks that the measured MPI step
#    cost already holds): 5 / 3 / 2 us, typical figures, assumed.
#  - NVLink 4 (NVIDIA H100 SXM datasheet): 900 GB/s per GPU in both directions together,
#    450 GB/s each way; per-step latency 1 us (so that an 8-GPU all-reduce of a few KB takes
#    ~15 us, the order NCCL reaches within an HGX node), assumed.
LINKS = [
    ("10GbE", 1.25e9, 5e-6, "cpu"),
    ("25GbE", 3.125e9, 3e-6, "cpu"),
    ("100GbE", 12.5e9, 2e-6, "cpu"),
    ("NVLink4", 450e9, 1e-6, "gpu"),
]


def model_params(n_embd, n_layer, n_ff, n_head, n_head_kv, n_vocab):
    kv = n_embd * n_head_kv // n_head
    per_layer = n_embd * n_embd * 2 + n_embd * kv * 2 + 3 * n_embd * n_ff
    return n_layer * per_layer + 2 * n_vocab * n_embd


def allreduce_s(nbytes, n, bw, alpha):
    if n == 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bw


def allgather_s(nbytes_total, n, bw, alpha):
    if n == 1:
        return 0.0
    return (n - 1) * alpha + (n - 1) / n * nbytes_total / bw


def step(model, link, n, batch, args):
    name, d, L, ff, nh, nkv, vocab = model
    lname, bw, wire, kind = link
    params = model_params(d, L, ff, nh, nkv, vocab)
    wbytes = params * BITS[args.quant] / 8
    if kind == "cpu":
        mem_bw, flops, sw = args.cpu_mem_bw * 1e9, args.cpu_flops * 1e12, args.mpi_overhead_us * 1e-6
    else:
        mem_bw, flops, sw = args.gpu_mem_bw * 1e9, args.gpu_flops * 1e12, 0.0
    alpha = wire + sw
    compute = max(wbytes / (n * mem_bw), 2 * params * batch / (n * flops))
    act = d * 4 * batch
    comm = 2 * L * allreduce_s(act, n, bw, alpha) + allgather_s(vocab * 4 * batch, n, bw, alpha)
    tp_tps = batch / (compute + comm)
    # Pipeline: stage = L/N layers; one transfer of the activation to the next stage.
    xfer = 0.0 if n == 1 else alpha + act / bw
    stage = compute + xfer  # compute is already 1/N of the model
    pp_tps = batch / stage  # N batches in flight
    pp_latency = n * stage
    return dict(params=params, wbytes=wbytes, compute=compute, comm=comm, tp_tps=tp_tps, pp_tps=pp_tps,
                pp_latency=pp_latency, tp_latency=compute + comm)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quant", default="q4_0", choices=sorted(BITS))
    ap.add_argument("--cpu-mem-bw", type=float, default=100.0,
                    help="GB/s a CPU node's decode achieves reading weights (assumed: about half the "
                         "204.8 GB/s peak of 8 DDR4-3200 channels); default 100")
    ap.add_argument("--cpu-flops", type=float, default=2.0,
                    help="TFLOP/s of a CPU node on quantized matmuls (assumed); default 2")
    ap.add_argument("--gpu-mem-bw", type=float, default=2700.0,
                    help="GB/s per GPU (H100 SXM: 3350 peak, 80%% assumed achieved); default 2700")
    ap.add_argument("--gpu-flops", type=float, default=400.0,
                    help="TFLOP/s per GPU (H100 SXM: 989 dense BF16 peak, 40%% assumed); default 400")
    ap.add_argument("--mpi-overhead-us", type=float, default=15.0,
                    help="MPI's cost per message step over TCP, wire excluded (measured: a 4 KB "
                         "all-reduce between 2 ranks over TCP loopback took ~30 us = 2 ring steps; "
                         "bench/RESULTS); default 15")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    print(f"Decode tokens/s on paper, {args.quant} weights. TP = tensor parallel (one batch). PP = pipeline, "
          f"aggregate of N batches in flight (one sequence gains nothing: its latency stays one model's "
          f"compute). CPU node: {args.cpu_mem_bw:g} GB/s, {args.cpu_flops:g} TFLOP/s; "
          f"GPU: {args.gpu_mem_bw:g} GB/s, {args.gpu_flops:g} TFLOP/s; MPI overhead "
          f"{args.mpi_overhead_us:g} us per message step.")
    hdr = ["model", "link", "N"]
    for b in batches:
        hdr += [f"TP b={b} tok/s", f"comm/comp b={b}", f"PP b={b} tok/s"]
    hdr += ["verdict"]
    rows = []
    for model in MODELS:
        for link in LINKS:
            prev = {}
            for n in (1, 2, 4, 8):
                row = [model[0], link[0], str(n)]
                verdict = []
                for b in batches:
                    r = step(model, link, n, b, args)
                    ratio = r["comm"] / r["compute"]
                    row += [f"{r['tp_tps']:.1f}", f"{ratio:.2f}", f"{r['pp_tps']:.1f}" if n > 1 else "-"]
                    if b > 1 and n > 1 and r["pp_tps"] > r["tp_tps"] * 1.2:
                        verdict.append(f"b={b}: PP +{(r['pp_tps'] / r['tp_tps'] - 1) * 100:.0f}%")
                    if n > 1 and ratio >= 1:
                        verdict.append(f"b={b}: comm>=compute")
                    if n > 1 and b in prev and r["tp_tps"] < prev[b]:
                        verdict.append(f"b={b}: slower than N={n // 2}")
                    prev[b] = r["tp_tps"]
                row.append("; ".join(verdict) if verdict else ("TP pays" if n > 1 else "one node"))
                rows.append(row)
    if args.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(hdr)]
        print("  ".join(h.ljust(w) for h, w in zip(hdr, widths)))
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print()
    for model in MODELS:
        p = model_params(*model[1:])
        print(f"{model[0]}: {p / 1e9:.2f} B parameters, {p * BITS[args.quant] / 8 / 1e9:.1f} GB at {args.quant}; "
              f"per token per layer 2 x {model[1] * 4} bytes all-reduced (batch 1)")


if __name__ == "__main__":
    main()
