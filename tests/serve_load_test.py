#!/usr/bin/env python3
"""A bounded load test of `infer serve` on loopback.

    serve_load_test.py PATH_TO_INFER [--clients C] [--seconds T] [--rounds R] [--prompt-len P]
                       [--output-len O] [--model GGUF] [--stream-interval MS] [--json]

C streaming clients (`infer bench-serve --url`, a C++ client that checks
every stream) send requests back to back (prompts of P random token ids after
BOS, O tokens each with ignore_eos), as many as the in-process engine makes in
about T seconds, in R rounds. Checks: every request completes with its usage
chunk, [DONE] and exactly O tokens, or fails cleanly with an error body (none
is lost); the server's resident memory stays flat between the first and the
last third of the run (the server's context is P + O tokens a sequence, so
its KV pool is all touched by the first wave); and the generated tokens per
second compare with `infer bench-serve` in process at the same concurrency (a
closed loop of C clients, --max-seqs C, same workload). The two alternate,
round by round (in process, HTTP, HTTP, in process, ...: this machine's speed
drifts by up to 2x within minutes, and a drift shifts both sides alike); the
ratio is total tokens per total second over HTTP against the same in process.
It must be at least $INFER_LOAD_MIN_RATIO (default 0.5: a floor that a
stalled or serialized server fails, and the server before TCP_NODELAY and
stream coalescing (0.36 on stories260K) too, far enough below the measured
~1.0 (0.90-0.96 before session 12) that a machine shared with other jobs
does not fail it; the issue's 10% is measured on a quiet machine and written
in bench/RESULTS.md).
Prints SKIPPED: without ../shared's stories260K.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

import serve_util

ap = argparse.ArgumentParser()
ap.add_argument("infer")
ap.add_argument("--clients", type=int, default=8)
ap.add_argument("--seconds", type=float, default=15)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--prompt-len", type=int, default=32)
ap.add_argument("--output-len", type=int, default=64)
ap.add_argument("--model", default=None)
ap.add_argument("--threads", type=int, default=0)
ap.add_argument("--stream-interval", default=None, help="passed to infer serve (default: the server's)")
ap.add_argument("--json", action="store_true")
args = ap.parse_args()

MODEL = args.model or serve_util.shared_model_or_skip()
min_ratio = float(os.environ.get("INFER_LOAD_MIN_RATIO", "0.5"))


def bench_serve(n_req):
    """`infer bench-serve` at the same concurrency and lengths: generated tokens per second."""
    bs = subprocess.run([args.infer, "bench-serve", "-m", MODEL, "--requests", str(n_req), "--rate", "0", "--max-seqs",
                         str(args.clients), "--concurrency", str(args.clients), "--prompt-len", str(args.prompt_len), "--output-len", str(args.output_len),
                         "-t", str(args.threads), "--json"], capture_output=True, text=True, timeout=600)
    bench = json.loads(bs.stdout.strip().splitlines()[-1]) if bs.returncode == 0 else {}
    return bench, bs.stderr[-500:]


# A short in-process run sizes the rounds: each side gets about T / R seconds
# a round (at least 8 waves of C requests).
calib, bench_err = bench_serve(args.clients * 16)
rounds = max(1, args.rounds)
n_round = max(args.clients * 8, int(calib.get("generated_tokens_per_s", 0.0) * args.seconds / rounds / args.output_len))
n_requests = n_round * rounds

# The server's context per sequence is the test's P + O tokens, so its KV pool
# (enough for C such sequences) is touched in full by the first wave of
# requests: RSS that still grows after that is a leak, not first-touched KV.
try:
    srv = serve_util.Server(args.infer, MODEL, "--max-seqs", str(args.clients), "-c", str(args.prompt_len + args.output_len),
                            "-t", str(args.threads), "--max-connections", str(args.clients + 8),
                            *(["--stream-interval", args.stream_interval] if args.stream_interval is not None else []))
except RuntimeError as e:
    print("FAIL - the server did not start:", e)
    sys.exit(1)
port = srv.port


# The load: `infer bench-serve --url`, C streaming clients on keep-alive
# connections sending the same workload over HTTP (a C++ client that checks
# every stream for its usage chunk and [DONE]; Python clients cost as much CPU
# per token as the server on a 2-core machine and measured themselves).
rss_samples = []


def load(n):
    r = subprocess.run([args.infer, "bench-serve", "-m", MODEL, "--url", f"http://127.0.0.1:{port}", "--requests", str(n),
                        "--rate", "0", "--concurrency", str(args.clients), "--prompt-len", str(args.prompt_len),
                        "--output-len", str(args.output_len), "--json"], capture_output=True, text=True, timeout=900)
    st = {"rc": r.returncode, "stderr": r.stderr[-800:]}
    try:
        st.update(json.loads(r.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        st["stdout"] = r.stdout[-800:]
    return st


def sample_rss():
    while not done.is_set():
        rss_samples.append((time.time() - t_start, srv.rss_kb()))
        time.sleep(0.25)


def tokens_and_seconds(st):
    return st.get("generated_tokens", 0), st.get("duration_s", 0.0)


done = threading.Event()
t_start = time.time()
sampler = threading.Thread(target=sample_rss)
sampler.start()
http_runs, local_runs = [], []
for r in range(rounds):
    order = ["local", "http"] if r % 2 == 0 else ["http", "local"]
    for side in order:
        if side == "http":
            http_runs.append(load(n_round))
        else:
            b, err = bench_serve(n_round)
            bench_err = bench_err or (err if not b else "")
            local_runs.append(b)
done.set()
sampler.join()
elapsed = time.time() - t_start
rc = srv.stop()

http_tok, http_s = map(sum, zip(*[tokens_and_seconds(st) for st in http_runs]))
local_tok, local_s = map(sum, zip(*[tokens_and_seconds(b) for b in local_runs]))
server_tok_s = http_tok / http_s if http_s else 0.0
bench_tok_s = local_tok / local_s if local_s else 0.0
ratio = server_tok_s / bench_tok_s if bench_tok_s else 0.0
# A round whose client failed (no JSON) counts all its requests as lost.
stats = {"rc": max(st.get("rc", 1) for st in http_runs), "requests_ok": sum(st.get("requests_ok", 0) for st in http_runs),
         "requests_short": sum(st.get("requests_short", 0) for st in http_runs),
         "requests_failed": sum(st.get("requests_failed", 0) for st in http_runs),
         "requests_lost": sum(st.get("requests_lost", n_round) for st in http_runs)}
for key in ("ttft_ms_p50", "tpot_ms_p50"):
    stats[key] = sorted(st.get(key, 0) for st in http_runs)[len(http_runs) // 2]
if stats["rc"] != 0:
    stats["output"] = " | ".join(st.get("stderr", "") + st.get("stdout", "") for st in http_runs if st.get("rc"))

third = [kb for t, kb in rss_samples if t < elapsed / 3 and t > 1]
last = [kb for t, kb in rss_samples if t > 2 * elapsed / 3]
growth_mb = ((max(last) if last else 0) - (max(third) if third else 0)) / 1024.0

ok = stats.get("requests_ok", 0)
result = {"clients": args.clients, "seconds": round(elapsed, 2), "requests": n_requests, "requests_ok": ok,
          "requests_short": stats.get("requests_short"), "requests_failed_clean": stats.get("requests_failed"),
          "requests_lost": stats.get("requests_lost"), "ttft_ms_p50": stats.get("ttft_ms_p50"),
          "tpot_ms_p50": stats.get("tpot_ms_p50"), "server_tokens_per_s": round(server_tok_s, 1), "bench_serve_tokens_per_s": round(bench_tok_s, 1),
          "rounds": rounds, "server_rounds": [round(st.get("generated_tokens_per_s", 0.0), 1) for st in http_runs],
          "bench_serve_rounds": [round(b.get("generated_tokens_per_s", 0.0), 1) for b in local_runs],
          "ratio": round(ratio, 3), "rss_first_third_mb": round((max(third) if third else 0) / 1024, 1),
          "rss_last_third_mb": round((max(last) if last else 0) / 1024, 1), "rss_growth_mb": round(growth_mb, 1)}
if args.json:
    print(json.dumps(result))
failed = 0


def check(name, ok, detail=""):
    global failed
    print(("ok   - " if ok else "FAIL - ") + name + ("" if ok else f"  {detail}"))
    failed += 0 if ok else 1


# Every request completes (usage chunk, [DONE], all O tokens) or fails with
# an error body; a lost one (no [DONE], a dropped connection) fails the test.
check(f"{ok} of {n_requests} requests completed with [DONE] and {args.output_len} tokens, none lost",
      stats.get("rc") is not None and ok > 0 and stats.get("requests_lost") == 0 and stats.get("requests_short") == 0
      and ok + stats.get("requests_failed", 0) == n_requests, stats)
check(f"memory flat: RSS {result['rss_first_third_mb']} MB -> {result['rss_last_third_mb']} MB", growth_mb < 16, result)
check(f"throughput {server_tok_s:.0f} tok/s vs bench-serve {bench_tok_s:.0f} tok/s (ratio {ratio:.2f} >= {min_ratio})",
      ratio >= min_ratio, bench_err)
check("the server exited 0 on SIGTERM", rc == 0, rc)
print(f"{4 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
