#!/usr/bin/env python3
"""Generation and embeddings on one `infer serve` (issue #30): does embedding
traffic slow generation beyond its share of the machine?

    bench/embed_share.py PATH_TO_INFER [--model M] [--seconds 20] [--gen-clients 4]
                         [--embed-clients 2] [--texts 32] [--rounds 2]

Three phases of --seconds each, against one server (loopback), repeated
--rounds times in the order gen, both, embed:
  gen:    --gen-clients closed-loop clients of /v1/completions (max_tokens 64)
  both:   the same, plus --embed-clients closed-loop clients of /v1/embeddings,
          each request --texts texts of 8-40 words
  embed:  the embedding clients alone
Prints generated tokens/s and embedded texts/s per phase, and the two shares of
the mixed phase: gen_share = gen tok/s (both) / gen tok/s (gen alone), and
embed_share = texts/s (both) / texts/s (embed alone). Their sum is about 1
when the two kinds of work share the machine without loss; gen_share alone
says how much of generation's speed it keeps under the embedding load.
Default model: ../shared/models/stories260K.gguf (a llama: its embeddings are
its last token's final hidden state).
"""
import argparse
import http.client
import json
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import serve_util  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("infer")
ap.add_argument("--model")
ap.add_argument("--seconds", type=float, default=20)
ap.add_argument("--gen-clients", type=int, default=4)
ap.add_argument("--embed-clients", type=int, default=2)
ap.add_argument("--texts", type=int, default=32)
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()
model = args.model or serve_util.shared_model_or_skip()

WORDS = ("the cat sat on a mat while little tim ran to the park with his red ball and the sun was warm "
         "so they played all day until mom called them home for dinner").split()


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:200]!r}")
    return json.loads(data)


def gen_client(port, stop, counts, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        prompt = " ".join(rng.choice(WORDS) for _ in range(12))
        j = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 64, "temperature": 0})
        counts["gen_tokens"] += j["usage"]["completion_tokens"]


def embed_client(port, stop, counts, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))) for _ in range(args.texts)]
        j = post(port, "/v1/embeddings", {"input": texts})
        counts["texts"] += len(j["data"])


def phase(port, gen, emb):
    stop = threading.Event()
    counts = {"gen_tokens": 0, "texts": 0}
    threads = [threading.Thread(target=gen_client, args=(port, stop, counts, i)) for i in range(gen)]
    threads += [threading.Thread(target=embed_client, args=(port, stop, counts, 100 + i)) for i in range(emb)]
    t0 = time.time()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    dt = time.time() - t0
    return counts["gen_tokens"] / dt, counts["texts"] / dt


srv = serve_util.Server(args.infer, model, "-t", str(args.threads))
try:
    rows = []
    for r in range(args.rounds):
        g_alone, _ = phase(srv.port, args.gen_clients, 0)
        g_both, e_both = phase(srv.port, args.gen_clients, args.embed_clients)
        _, e_alone = phase(srv.port, 0, args.embed_clients)
        gs, es = g_both / g_alone, e_both / e_alone
        rows.append((g_alone, g_both, e_both, e_alone, gs, es))
        print(f"round {r + 1}: gen alone {g_alone:.1f} tok/s, both {g_both:.1f} tok/s + {e_both:.1f} texts/s, "
              f"embed alone {e_alone:.1f} texts/s: gen_share {gs:.2f}, embed_share {es:.2f}, sum {gs + es:.2f}",
              flush=True)
    gs = sum(r[4] for r in rows) / len(rows)
    es = sum(r[5] for r in rows) / len(rows)
    print(f"mean: gen_share {gs:.2f}, embed_share {es:.2f}, sum {gs + es:.2f}")
finally:
    srv.stop()
