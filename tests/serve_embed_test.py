"""`infer embed` and infer serve's embedding endpoints (issue #30) on models
that `infer synth` writes (tiny-bert, tiny-bert-rerank, tiny-qwen3-embed):

- the CLI: rows, --json, --out (raw float32), -f, --tokens, --pooling none,
  --dimensions, and its refusals (exit 1 with a message);
- POST /v1/embeddings: the OpenAI shape, float rows equal to the CLI's, base64
  that decodes to the same floats, dimensions, token-id inputs, usage;
- POST /v1/rerank and /rerank: results sorted by score, the scores those of
  `infer embed --rerank`, top_n, return_documents, documents as {text};
- Ollama's POST /api/embed;
- hostile input (empty string, [], 100k inputs, over-long text, token ids out
  of range, wrong types, huge dimensions): a 4xx with an OpenAI-shaped error,
  and the server stays up;
- a generation request to an encoder-only model: 400; /metrics counts;
- embeddings while a generation runs on a decoder: both finish (not a timing
  assertion).

    serve_embed_test.py PATH_TO_INFER WORK_DIR

Standard library only; needs no shared data.
"""
import base64
import json
import os
import struct
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server  # noqa: E402

INFER = sys.argv[1]
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/infer-serve-embed"
os.makedirs(WORK, exist_ok=True)
PASSED = 0
FAILED = 0


def check(name, ok, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print("ok   - " + name)
    else:
        FAILED += 1
        print("FAIL - " + name)
        if detail:
            print("       " + str(detail)[:1500])


def run(args, **kw):
    return subprocess.run([INFER] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def synth(preset):
    path = os.path.join(WORK, preset + ".gguf")
    if not os.path.isfile(path):
        r = run(["synth", "--preset", preset, "--type", "f32", "-o", path])
        if r.returncode != 0:
            print("FAIL - infer synth --preset %s: %s" % (preset, r.stderr[-500:]))
            sys.exit(1)
    return path


def rows_of(text):
    return [[float(v) for v in line.split()] for line in text.split("\n") if line.strip()]


def close(a, b, tol=1e-5):
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        if len(ra) != len(rb) or any(abs(x - y) > tol for x, y in zip(ra, rb)):
            return False
    return True


def is_error(body, status=None):
    return isinstance(body, dict) and isinstance(body.get("error"), dict) and isinstance(body["error"].get("message"), str)


TEXTS = ["the cat sat on the mat", "a dog ran in the park", "hello world"]
BERT = synth("tiny-bert")
RERANK = synth("tiny-bert-rerank")
QWEN = synth("tiny-qwen3-embed")

# ---- the CLI ----
r = run(["embed", "-m", BERT, "-t", "2"] + sum([["-p", t] for t in TEXTS], []))
cli_rows = rows_of(r.stdout)
check("infer embed: one row per text, of the model's 64 values",
      r.returncode == 0 and len(cli_rows) == 3 and all(len(x) == 64 for x in cli_rows), r.stderr[-400:])
check("infer embed: rows are L2-normalized by default",
      cli_rows and all(abs(sum(v * v for v in x) - 1) < 1e-4 for x in cli_rows), cli_rows[:1])
fpath = os.path.join(WORK, "texts.txt")
with open(fpath, "w") as f:
    f.write("\n".join(TEXTS) + "\n\n")
r = run(["embed", "-m", BERT, "-t", "2", "-f", fpath])
check("infer embed -f FILE: one row per non-empty line, the same rows", r.returncode == 0 and close(rows_of(r.stdout), cli_rows),
      r.stderr[-400:])
out = os.path.join(WORK, "rows.f32")
r = run(["embed", "-m", BERT, "-t", "2", "--out", out] + sum([["-p", t] for t in TEXTS], []))
raw = open(out, "rb").read() if os.path.exists(out) else b""
vals = list(struct.unpack("<%df" % (len(raw) // 4), raw))
check("infer embed --out: raw little-endian float32 rows, nothing on stdout",
      r.returncode == 0 and r.stdout == "" and len(vals) == 3 * 64 and close([vals[i * 64:(i + 1) * 64] for i in range(3)], cli_rows),
      (r.returncode, len(raw), r.stderr[-300:]))
r = run(["embed", "-m", BERT, "-t", "2", "--json"] + sum([["-p", t] for t in TEXTS], []))
try:
    j = json.loads(r.stdout)
except ValueError:
    j = {}
check("infer embed --json: the OpenAI embeddings shape",
      j.get("object") == "list" and [d.get("index") for d in j.get("data", [])] == [0, 1, 2] and
      all(d.get("object") == "embedding" for d in j["data"]) and close([d["embedding"] for d in j["data"]], cli_rows) and
      j.get("usage", {}).get("prompt_tokens", 0) > 0 and j["usage"]["total_tokens"] == j["usage"]["prompt_tokens"],
      r.stdout[:400] + r.stderr[-300:])
r = run(["embed", "-m", BERT, "-t", "2", "--dimensions", "16", "-p", TEXTS[0]])
d16 = rows_of(r.stdout)
check("infer embed --dimensions 16: 16 values, normalized again",
      r.returncode == 0 and len(d16) == 1 and len(d16[0]) == 16 and abs(sum(v * v for v in d16[0]) - 1) < 1e-4, r.stderr[-300:])
r = run(["embed", "-m", BERT, "-t", "2", "--pooling", "none", "-p", "hello world", "-p", "the cat"])
tok_rows = rows_of(r.stdout)
check("infer embed --pooling none: a row per token ([CLS] ... [SEP] of each input)",
      r.returncode == 0 and len(tok_rows) >= 8 and all(len(x) == 64 for x in tok_rows), (len(tok_rows), r.stderr[-300:]))
r = run(["embed", "-m", BERT, "-t", "2", "--tokens", "2,10,11,3", "--tokens", "2,12,3"])
check("infer embed --tokens: one row per list", r.returncode == 0 and len(rows_of(r.stdout)) == 2, r.stderr[-300:])
tokens_rows = rows_of(r.stdout)
for name, args, want in [
        ("no input", [], "nothing to embed"),
        ("a bad pooling name", ["-p", "x", "--pooling", "max"], "--pooling"),
        ("--dimensions above the model's size", ["-p", "x", "--dimensions", "65"], "--dimensions"),
        ("an unreadable file", ["-f", os.path.join(WORK, "no-such-file.txt")], "cannot read"),
        ("a bad token list", ["--tokens", "1,x"], "--tokens"),
        ("a token id out of range", ["--tokens", "1,99999999"], ""),
        ("--rerank on a model without a classifier head", ["--rerank", "q", "-p", "d"], "")]:
    r = run(["embed", "-m", BERT, "-t", "2"] + args)
    check("infer embed refuses %s: exit 1 with a message" % name,
          r.returncode == 1 and r.stderr.strip() != "" and want in r.stderr and "Traceback" not in r.stderr,
          (r.returncode, r.stderr[-300:]))
r = run(["embed", "-m", RERANK, "-t", "2", "--rerank", "where does the cat sit", "-p", TEXTS[0], "-p", TEXTS[1], "-p", TEXTS[2]])
cli_scores = [x[0] for x in rows_of(r.stdout)]
check("infer embed --rerank: one score per document", r.returncode == 0 and len(cli_scores) == 3, r.stderr[-300:])

# ---- the server on tiny-bert ----
srv = Server(INFER, BERT, "-t", "2", "--embed-max-inputs", "64", "--embed-max-tokens", "4096", "--served-model-name", "bert")
try:
    st, b = srv.post("/v1/embeddings", {"model": "bert", "input": TEXTS})
    ok = st == 200 and isinstance(b, dict)
    check("/v1/embeddings: the OpenAI shape",
          ok and b.get("object") == "list" and b.get("model") == "bert" and len(b.get("data", [])) == 3 and
          all(d["object"] == "embedding" and d["index"] == i and len(d["embedding"]) == 64 for i, d in enumerate(b["data"])) and
          b["usage"]["prompt_tokens"] > 0 and b["usage"]["total_tokens"] == b["usage"]["prompt_tokens"], (st, str(b)[:500]))
    float_rows = [d["embedding"] for d in b["data"]] if ok else []
    check("/v1/embeddings: the rows of infer embed", close(float_rows, cli_rows), "")
    st, b1 = srv.post("/v1/embeddings", {"input": TEXTS[0]})
    check("/v1/embeddings: one string, no model", st == 200 and len(b1["data"]) == 1 and close([b1["data"][0]["embedding"]], cli_rows[:1]),
          (st, str(b1)[:300]))
    st, b64 = srv.post("/v1/embeddings", {"model": "bert", "input": TEXTS, "encoding_format": "base64"})
    dec = []
    if st == 200:
        for d in b64["data"]:
            raw = base64.b64decode(d["embedding"])
            dec.append(list(struct.unpack("<%df" % (len(raw) // 4), raw)))
    check("/v1/embeddings base64: little-endian float32 bytes that decode to the float rows",
          st == 200 and all(isinstance(d["embedding"], str) for d in b64["data"]) and close(dec, float_rows, 1e-6), (st, str(b64)[:300]))
    st, bd = srv.post("/v1/embeddings", {"input": TEXTS, "dimensions": 16})
    check("/v1/embeddings dimensions 16: 16 values, normalized again",
          st == 200 and all(len(d["embedding"]) == 16 and abs(sum(v * v for v in d["embedding"]) - 1) < 1e-4 for d in bd["data"]),
          (st, str(bd)[:300]))
    st, bt = srv.post("/v1/embeddings", {"input": [[2, 10, 11, 3], [2, 12, 3]]})
    check("/v1/embeddings [[ids]]: the rows of infer embed --tokens",
          st == 200 and close([d["embedding"] for d in bt["data"]], tokens_rows) and bt["usage"]["prompt_tokens"] == 7, (st, str(bt)[:300]))
    st, bt1 = srv.post("/v1/embeddings", {"input": [2, 10, 11, 3]})
    check("/v1/embeddings [ids]: one input", st == 200 and len(bt1["data"]) == 1 and close([bt1["data"][0]["embedding"]], tokens_rows[:1]),
          (st, str(bt1)[:300]))
    st, bo = srv.post("/api/embed", {"model": "bert", "input": TEXTS})
    check("/api/embed (Ollama): {model, embeddings}", st == 200 and bo.get("model") == "bert" and close(bo.get("embeddings", []), cli_rows),
          (st, str(bo)[:300]))
    st, bg = srv.post("/v1/completions", {"prompt": "hello", "max_tokens": 4})
    check("a generation request to an encoder-only model: 400 with a clear error",
          st == 400 and is_error(bg) and "cannot generate" in bg["error"]["message"], (st, bg))
    st, bg = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    check("chat completions on an encoder-only model: 400", st == 400 and is_error(bg), (st, bg))
    st, br = srv.post("/v1/rerank", {"query": "q", "documents": ["a", "b"]})
    check("/v1/rerank on a model without a classifier head: 400", st == 400 and is_error(br), (st, br))

    long_text = " ".join(["word"] * 400)
    hostile = [
        ("an empty string", {"input": ""}, 400),
        ("an empty array", {"input": []}, 400),
        ("an empty string among others", {"input": ["a", ""]}, 400),
        ("100k inputs (over --embed-max-inputs)", {"input": ["a"] * 100000}, 400),
        ("a text over the context (no truncate)", {"input": long_text}, 400),
        ("over --embed-max-tokens", {"input": [" ".join(["cat"] * 100)] * 60}, 400),
        ("a token id out of range", {"input": [[2, 10**9, 3]]}, 400),
        ("a negative token id", {"input": [-1]}, 400),
        ("input a number", {"input": 5}, 400),
        ("input an object", {"input": {"a": 1}}, 400),
        ("input null", {"input": None}, 400),
        ("no input", {"model": "bert"}, 400),
        ("mixed strings and ids", {"input": ["a", 5]}, 400),
        ("mixed id lists and strings", {"input": [[1, 2], "x"]}, 400),
        ("a float token id", {"input": [1.5]}, 400),
        ("an empty id list", {"input": [[]]}, 400),
        ("huge dimensions", {"input": "a", "dimensions": 10**12}, 400),
        ("dimensions 0", {"input": "a", "dimensions": 0}, 400),
        ("dimensions over the model's size", {"input": "a", "dimensions": 65}, 400),
        ("dimensions a string", {"input": "a", "dimensions": "8"}, 400),
        ("a bad encoding_format", {"input": "a", "encoding_format": "int8"}, 400),
        ("a model it does not serve", {"model": "gpt-4", "input": "a"}, 404),
        ("a body that is an array", [1, 2], 400),
        ("model a number", {"model": 5, "input": "a"}, 400),
    ]
    for name, body, want in hostile:
        st, b = srv.post("/v1/embeddings", body)
        check("/v1/embeddings refuses %s: %d with an OpenAI error" % (name, want), st == want and is_error(b), (st, str(b)[:300]))
    st, b = srv.post("/v1/embeddings", "{not json")
    check("/v1/embeddings refuses text that is not JSON: 400", st == 400 and is_error(b), (st, str(b)[:300]))
    st, b = srv.post("/v1/embeddings", {"input": long_text, "truncate": True})
    check("/v1/embeddings truncate: a long text is cut to the context", st == 200 and len(b["data"]) == 1, (st, str(b)[:300]))
    st, b = srv.post("/api/embed", {"input": [5]})
    check("/api/embed refuses token ids: 400", st == 400 and is_error(b), (st, str(b)[:300]))
    st, _, _ = srv.request("GET", "/health")
    check("the server stays up after the hostile requests (health 200)", st == 200 and srv.alive(), srv.log_text()[-500:])
    st, m, _ = srv.request("GET", "/metrics")
    m = m.decode()
    count = sum(float(l.split()[-1]) for l in m.split("\n") if l.startswith("infer_embedding_requests_total{endpoint=\"embeddings\"}"))
    tokens = [float(l.split()[-1]) for l in m.split("\n") if l.startswith("infer_embedding_tokens_total ")]
    check("/metrics counts embedding requests and tokens", count >= 10 and tokens and tokens[0] > 0,
          [l for l in m.split("\n") if "embedding" in l])
finally:
    rc = srv.stop()
check("the tiny-bert server exits 0 on SIGTERM", rc == 0, srv.log_text()[-500:])

# ---- rerank on tiny-bert-rerank ----
srv = Server(INFER, RERANK, "-t", "2")
try:
    query = "where does the cat sit"
    st, b = srv.post("/v1/rerank", {"query": query, "documents": TEXTS})
    res = b.get("results", []) if isinstance(b, dict) else []
    scores = [x["relevance_score"] for x in res]
    want = sorted(range(3), key=lambda i: -cli_scores[i]) if len(cli_scores) == 3 else []
    check("/v1/rerank: results sorted by score, best first", st == 200 and len(res) == 3 and scores == sorted(scores, reverse=True),
          (st, str(b)[:400]))
    check("/v1/rerank: the order and scores of infer embed --rerank",
          [x["index"] for x in res] == want and all(abs(x["relevance_score"] - cli_scores[x["index"]]) < 1e-4 for x in res),
          (res, cli_scores))
    check("/v1/rerank: documents returned, usage counted",
          all(x.get("document", {}).get("text") == TEXTS[x["index"]] for x in res) and b["usage"]["prompt_tokens"] > 0, str(b)[:300])
    st, b2 = srv.post("/rerank", {"query": query, "documents": [{"text": t} for t in TEXTS],
                                  "top_n": 2, "return_documents": False})
    check("/rerank: {text} documents, top_n 2, return_documents false",
          st == 200 and [x["index"] for x in b2["results"]] == want[:2] and all("document" not in x for x in b2["results"]),
          (st, str(b2)[:300]))
    for name, body in [("no query", {"documents": ["a"]}), ("an empty documents array", {"query": "q", "documents": []}),
                       ("a document that is a number", {"query": "q", "documents": [1]}),
                       ("an empty document", {"query": "q", "documents": [""]}),
                       ("top_n 0", {"query": "q", "documents": ["a"], "top_n": 0}),
                       ("documents a string", {"query": "q", "documents": "a"}),
                       ("10k documents over the limit", {"query": "q", "documents": ["a"] * 10000})]:
        st, b = srv.post("/v1/rerank", body)
        check("/v1/rerank refuses %s: 400" % name, st == 400 and is_error(b), (st, str(b)[:300]))
    st, _, _ = srv.request("GET", "/health")
    check("the rerank server stays up (health 200)", st == 200 and srv.alive())
finally:
    rc = srv.stop()
check("the rerank server exits 0 on SIGTERM", rc == 0, srv.log_text()[-500:])

# ---- embeddings while a decoder generates ----
srv = Server(INFER, QWEN, "-t", "2")
try:
    gen = {}

    def generate():
        gen["r"] = srv.post("/v1/completions", {"prompt": "hello", "max_tokens": 48, "temperature": 0, "ignore_eos": True},
                            timeout=300)

    t = threading.Thread(target=generate)
    t.start()
    emb_ok = 0
    for i in range(6):
        st, b = srv.post("/v1/embeddings", {"input": ["text %d" % i, "another text %d" % i]}, timeout=300)
        emb_ok += st == 200 and len(b["data"]) == 2
    t.join(300)
    st, b = gen.get("r", (0, {}))
    check("embeddings while a decoder generates: every embedding answered", emb_ok == 6, emb_ok)
    check("embeddings while a decoder generates: the generation finishes with its tokens",
          st == 200 and b.get("usage", {}).get("completion_tokens", 0) > 0, (st, str(b)[:300]))
finally:
    srv.stop()

print("%d passed, %d failed" % (PASSED, FAILED))
sys.exit(1 if FAILED else 0)
