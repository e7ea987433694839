#!/usr/bin/env python3
"""`infer serve` under a mixed attack beside normal traffic (issue #27), loopback only.

    serve_attack_bench.py PATH_TO_INFER [--seconds 30] [--clients 4] [--max-tokens 32] [--rounds 1]

Two phases of --seconds each against one server on ../shared's stories260K:
  quiet:  --clients normal clients, each a closed loop of streamed /v1/completions;
  attack: the same clients, plus attackers: 60 slow clients trickling header lines
          (reconnecting when dropped), clients that leave mid-stream, oversized
          bodies (Content-Length and chunked), JSON nested 100000 deep.
Prints, per phase, the normal requests' latency p50/p99 (whole streamed request),
time to first byte p50, requests/s and tokens/s, errors, and /health's worst latency
(polled every 0.2 s). Bounded in time and count; the server is stopped at the end.
"""
import argparse
import json
import multiprocessing
import os
import re
import socket
import sys
import threading
import time

import serve_util

ap = argparse.ArgumentParser()
ap.add_argument("infer")
ap.add_argument("--seconds", type=float, default=30)
ap.add_argument("--clients", type=int, default=4)
ap.add_argument("--max-tokens", type=int, default=32)
ap.add_argument("--rounds", type=int, default=1, help="quiet/attack phase pairs, alternating")
ap.add_argument("--without", default="", help="attackers left out, comma-separated: slow,leavers,oversized,deep")
args = ap.parse_args()
MODEL = serve_util.shared_model_or_skip()

try:
    srv = serve_util.Server(args.infer, MODEL, "-t", "1", "-c", "256", "--max-connections", "16", "--max-body-mb", "1",
                            "--header-timeout", "5")
except RuntimeError as e:
    print(e)
    sys.exit(1)
port = srv.port


def recv_response(s):
    """Reads one response on s; returns (status, ttfb seconds from now-ish, body bytes)."""
    f = s.makefile("rb")
    line = f.readline()
    t_first = time.time()
    if not line:
        return None, t_first, b""
    status = int(line.split()[1])
    headers = {}
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        k, _, v = h.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    body = b""
    if headers.get("transfer-encoding") == "chunked":
        while True:
            n = int(f.readline().split(b";")[0], 16)
            if n == 0:
                f.readline()
                break
            body += f.read(n)
            f.readline()
    else:
        body = f.read(int(headers.get("content-length", "0")))
    return status, t_first, body


def post(path, obj_bytes, timeout=60):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % (path.encode(), len(obj_bytes)) + obj_bytes)
    return s


def normal_client(stop, out):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": args.max_tokens, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}}).encode()
    while not stop.is_set():
        t0 = time.time()
        try:
            s = post("/v1/completions", body)
            st, t_first, data = recv_response(s)
            s.close()
        except Exception:
            out["errors"] += 1
            stop.wait(0.05)
            continue
        t1 = time.time()
        if st != 200 or b"[DONE]" not in data:
            out["errors"] += 1
            continue
        m = re.search(rb'"completion_tokens":\s*(\d+)', data)
        out["lat"].append(t1 - t0)
        out["ttfb"].append(t_first - t0)
        out["tokens"] += int(m.group(1)) if m else 0


def health_poller(stop, out):
    while not stop.is_set():
        t0 = time.time()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            st, _, _ = recv_response(s)
            s.close()
            if st != 200:
                out["health_fail"] += 1
        except Exception:
            out["health_fail"] += 1
        out["health_max"] = max(out["health_max"], time.time() - t0)
        stop.wait(0.2)


def slow_clients(stop, n=60):
    conns = []
    while not stop.is_set():
        while len(conns) < n:
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=2)
                c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                conns.append(c)
            except OSError:
                break
        alive = []
        for c in conns:
            try:
                c.sendall(b"X-Slow: 1\r\n")
                alive.append(c)
            except OSError:
                c.close()
        conns = alive
        stop.wait(0.5)
    for c in conns:
        c.close()


def leavers(stop):
    body = json.dumps({"prompt": "Once", "max_tokens": 200, "stream": True, "ignore_eos": True}).encode()
    while not stop.is_set():
        try:
            s = post("/v1/completions", body, timeout=5)
            s.recv(200)
            s.close()
        except OSError:
            pass
        stop.wait(0.1)


def oversized(stop):
    chunk = b"x" * 65536
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n")
            recv_response(s)
            s.close()
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(32):
                s.sendall(b"10000\r\n" + chunk + b"\r\n")
            s.close()
        except OSError:
            pass
        stop.wait(0.2)


def deep_json(stop):
    deep = "[" * 100000 + "]" * 100000
    body = ('{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"tools":[{"type":"function","function":'
            '{"name":"f","parameters":{"x":' + deep + '}}}]}').encode()
    while not stop.is_set():
        try:
            s = post("/v1/chat/completions", body, timeout=10)
            recv_response(s)
            s.close()
        except OSError:
            pass
        stop.wait(0.2)


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def cpu_seconds(pid):
    """User + system CPU seconds of a process and all its threads so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def attacker_process(skip, seconds, result):
    """The attackers run in a process of their own: as threads of the measuring process they
    would take its interpreter lock from the normal clients, and the normal clients' loss
    would be the client's, not the server's. Reports its own CPU seconds."""
    stop = threading.Event()
    attackers = {"slow": slow_clients, "leavers": leavers, "oversized": oversized, "deep": deep_json}
    threads = [threading.Thread(target=f, args=(stop,)) for k, f in attackers.items() if k not in skip]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    t = os.times()
    result.put(t.user + t.system)


def phase(name, attack):
    stop = threading.Event()
    out = {"lat": [], "ttfb": [], "tokens": 0, "errors": 0, "health_max": 0.0, "health_fail": 0}
    threads = [threading.Thread(target=normal_client, args=(stop, out)) for _ in range(args.clients)]
    threads.append(threading.Thread(target=health_poller, args=(stop, out)))
    attacker = None
    result = multiprocessing.get_context("fork").Queue()
    if attack:
        skip = set(args.without.split(","))
        attacker = multiprocessing.get_context("fork").Process(target=attacker_process,
                                                               args=(skip, args.seconds, result))
    server_cpu0 = cpu_seconds(srv.proc.pid)
    client_cpu0 = sum(os.times()[:2])
    t0 = time.time()
    if attacker:
        attacker.start()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join(60)
    attack_cpu = 0.0
    if attacker:
        attack_cpu = result.get(timeout=90)
        attacker.join(30)
    dt = time.time() - t0
    server_cpu = cpu_seconds(srv.proc.pid) - server_cpu0
    client_cpu = sum(os.times()[:2]) - client_cpu0
    n = len(out["lat"])
    print(f"{name:7s} requests {n:5d}  p50 {pct(out['lat'], 50) * 1000:7.1f} ms  p99 {pct(out['lat'], 99) * 1000:7.1f} ms  "
          f"ttfb p50 {pct(out['ttfb'], 50) * 1000:6.1f} ms  {n / dt:6.1f} req/s  {out['tokens'] / dt:7.0f} tok/s  "
          f"errors {out['errors']}  /health max {out['health_max'] * 1000:6.1f} ms (failed {out['health_fail']})  "
          f"CPU cores: server {server_cpu / dt:.2f} clients {client_cpu / dt:.2f} attackers {attack_cpu / dt:.2f}",
          flush=True)
    out["tok_s"] = out["tokens"] / dt
    return out


print(f"infer serve, stories260K, {args.clients} normal streaming clients, max_tokens {args.max_tokens}, "
      f"{args.seconds:.0f} s per phase", flush=True)
try:
    ratios = []
    for r in range(args.rounds):
        quiet = phase("quiet", False)
        attacked = phase("attack", True)
        if quiet["tok_s"] > 0:
            ratios.append(attacked["tok_s"] / quiet["tok_s"])
            print(f"round {r + 1}: normal throughput under attack {ratios[-1]:.2f} of quiet", flush=True)
    if ratios:
        print("ratios:", " ".join(f"{x:.2f}" for x in ratios), f" mean {sum(ratios) / len(ratios):.2f}")
    alive = srv.alive()
    print("server alive after the attack:", alive, "" if alive else f"(exit {srv.proc.returncode}) " + "".join(srv.log[-5:]))
finally:
    srv.stop()
sys.exit(0 if alive else 1)
