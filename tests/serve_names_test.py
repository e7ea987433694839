#!/usr/bin/env python3
"""`infer serve`'s model names and its start-up errors, over loopback (issue #29).

    serve_names_test.py PATH_TO_INFER

- A request whose "model" is not one of the served names gets a 404 with an
  OpenAI error body (code model_not_found, naming the model); an absent or
  empty "model" means the loaded model; --served-model-name gives names
  (repeatable and comma separated; the first is the id in /v1/models), and
  without it the name is the model file's.
- A port in use: `infer serve` says "cannot listen on HOST:PORT: <reason>"
  and exits nonzero.
Needs ../shared's stories260K (INFER_SHARED_DIR overrides; without it
SKIPPED: and exit 77).
"""
import json
import socket
import subprocess
import sys

import serve_util

INFER = sys.argv[1]
MODEL = serve_util.shared_model_or_skip()

failed = 0


def check(name, ok, detail=""):
    global failed
    print(("ok   - " if ok else "FAIL - ") + name + ("" if ok else "\n       " + str(detail)[:1500]), flush=True)
    failed += 0 if ok else 1


def not_found(st, data, name):
    """A 404 with an OpenAI error body: code model_not_found, param model, the name in the message."""
    try:
        e = data["error"]
        return (st == 404 and e["code"] == "model_not_found" and e["type"] == "invalid_request_error"
                and e["param"] == "model" and f"'{name}'" in e["message"])
    except (TypeError, KeyError):
        return False


COMPLETION = {"prompt": "Once upon a time", "max_tokens": 2, "temperature": 0}
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}

# ---- the default name: the model file's ----
srv = serve_util.Server(INFER, MODEL, "-c", "256", "-t", "1")
try:
    st, d = srv.post("/v1/completions", dict(COMPLETION, model="gpt-4o"))
    check("completions: an unknown model is 404 model_not_found naming it", not_found(st, d, "gpt-4o"), (st, d))
    st, d = srv.post("/v1/chat/completions", dict(CHAT, model="gpt-4o"))
    check("chat: an unknown model is 404 model_not_found naming it", not_found(st, d, "gpt-4o"), (st, d))
    st, d = srv.stream("/v1/chat/completions", dict(CHAT, model="llama", stream=True))[:2]
    check("a streamed request for an unknown model is a plain 404 (no stream)", st == 404, (st, d))
    st, d = srv.post("/v1/completions", dict(COMPLETION, model="stories260K.gguf"))
    check("the model file's name is served by default", st == 200 and d["model"] == "stories260K.gguf", (st, d))
    st, d = srv.post("/v1/completions", COMPLETION)
    check("an absent model means the loaded model", st == 200 and d["choices"][0]["text"] != "", (st, d))
    st, d = srv.post("/v1/chat/completions", dict(CHAT, model=""))
    check("an empty model means the loaded model", st == 200 and d["choices"][0]["message"]["role"] == "assistant", (st, d))
    st, data, _ = srv.request("GET", "/v1/models/")
    check("GET /v1/models/ with no id is 404", st == 404, (st, data))
    check("the server is still up", srv.alive() and srv.request("GET", "/health")[0] == 200)
finally:
    check("the server exits 0 on SIGTERM", srv.stop() == 0, srv.log_text()[-500:])

# ---- --served-model-name: repeatable, comma separated ----
srv = serve_util.Server(INFER, MODEL, "-c", "256", "-t", "1", "--served-model-name", "gpt-4o, my-model",
                        "--served-model-name", "third")
try:
    st, data, _ = srv.request("GET", "/v1/models")
    ids = [m["id"] for m in json.loads(data)["data"]] if st == 200 else None
    check("/v1/models shows the first --served-model-name", ids == ["gpt-4o"], (st, data))
    for name in ("gpt-4o", "my-model", "third"):
        st, d = srv.post("/v1/completions", dict(COMPLETION, model=name))
        check(f"the alias '{name}' is served (and echoed)", st == 200 and d["model"] == name, (st, d))
        st, data, _ = srv.request("GET", "/v1/models/" + name)
        check(f"GET /v1/models/{name} answers the served model", st == 200 and json.loads(data)["id"] == "gpt-4o", (st, data))
    st, d = srv.post("/v1/chat/completions", dict(CHAT, model="stories260K.gguf"))
    check("with --served-model-name the file's name is no longer served", not_found(st, d, "stories260K.gguf"), (st, d))
    check("... and the message lists the served names", "'gpt-4o', 'my-model', 'third'" in str(d), d)
finally:
    srv.stop()

r = subprocess.run([INFER, "serve", "-m", MODEL, "--served-model-name", "a,,b"], capture_output=True, text=True, timeout=60)
check("an empty name in --served-model-name is a usage error", r.returncode == 2 and "empty name" in r.stderr, (r.returncode, r.stderr))
r = subprocess.run([INFER, "serve", "--help"], capture_output=True, text=True, timeout=60)
check("--help documents --served-model-name and the empty-model rule",
      r.returncode == 0 and "--served-model-name" in r.stdout and "absent or empty 'model'" in r.stdout, r.stdout[-800:])

# ---- a port in use ----
busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
busy.bind(("127.0.0.1", 0))
busy.listen(1)
port = busy.getsockname()[1]
try:
    r = subprocess.run([INFER, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", str(port)],
                       capture_output=True, text=True, timeout=60)
finally:
    busy.close()
check("a port in use: exits nonzero", r.returncode not in (0, None), (r.returncode, r.stderr))
check("a port in use: says 'cannot listen on HOST:PORT: Address already in use'",
      f"cannot listen on 127.0.0.1:{port}: Address already in use" in r.stderr, r.stderr)
r = subprocess.run([INFER, "serve", "-m", MODEL, "--host", "no-such-host.invalid", "--port", "0"],
                   capture_output=True, text=True, timeout=120)
check("an unknown host: exits nonzero with a reason after the address",
      r.returncode not in (0, None) and "cannot listen on no-such-host.invalid:0: " in r.stderr
      and len(r.stderr.split("cannot listen on no-such-host.invalid:0: ", 1)[1].strip()) > 0, (r.returncode, r.stderr))

print(f"{failed} failed")
sys.exit(1 if failed else 0)
