#!/usr/bin/env python3
"""`infer serve` answers while the model loads (issue 17): the server listens
before it loads, and until the model is ready /health and the generation
endpoints answer 503 with code "loading" and /v1/models lists no model; once
loaded they answer 200.

    serve_loading_test.py PATH_TO_INFER WORKDIR

The model is a random-weight TinyLlama-shaped Q4_0 file written by
`infer synth` into WORKDIR (kept between runs): loading it (mapping and
repacking 600 MB of weights) takes a second or more, which leaves the
poller, one request a few milliseconds, plenty of time to see the loading
state. If the load ever finished before the first answer the test says so
and fails, rather than passing without having seen the state.
"""
import json
import os
import subprocess
import sys

import serve_util

INFER, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
model = os.path.join(WORK, "tinyllama-q4_0.gguf")
if not os.path.isfile(model):
    subprocess.run([INFER, "synth", "--preset", "tinyllama-1.1b", "--type", "q4_0", "-o", model + ".tmp", "--quiet"],
                   check=True, timeout=900)
    os.replace(model + ".tmp", model)

failed = 0


def check(name, ok, detail=""):
    global failed
    print(("ok   - " if ok else "FAIL - ") + name + ("" if ok else f"  {str(detail)[:800]}"))
    failed += 0 if ok else 1


srv = serve_util.Server(INFER, model, "-c", "256", wait="listening", expect_start=False)
if srv.port is None:
    print("FAIL - the server did not start listening:", srv.log_text())
    srv.kill()
    sys.exit(1)
ready = srv.ready


def request(method, path, body=None):
    st, data, _ = srv.request(method, path, body, timeout=60)
    return st, data


def is_loading(st, data):
    try:
        e = json.loads(data)["error"]
        return st == 503 and e["code"] == "loading" and e["type"] == "server_error" and e["message"]
    except (ValueError, KeyError, TypeError):
        return False


# While loading: every endpoint that needs the model says so.
st, data = request("GET", "/health")
loaded_first = ready.is_set()
check("GET /health while loading is 503 'loading'", is_loading(st, data), (st, data, srv.log_text()))
st2, data2 = request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2})
st3, data3 = request("GET", "/v1/models")
if ready.is_set():
    print("note: the model finished loading during the checks; the last ones may see it ready")
else:
    check("POST /v1/completions while loading is 503 'loading'", is_loading(st2, data2), (st2, data2))
    check("GET /v1/models while loading lists no model yet", st3 == 200 and json.loads(data3)["data"] == [], (st3, data3))
check("the loading state was seen before the model was ready", not loaded_first)

# Then ready: the same endpoints work.
check("the model finishes loading", ready.wait(300) and srv.alive() and not srv.exited.is_set(), srv.log_text())
st, data = request("GET", "/health")
check("GET /health after loading is 200", st == 200 and json.loads(data).get("status") == "ok", (st, data))
st, data = request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2, "temperature": 0})
check("POST /v1/completions after loading is 200", st == 200 and json.loads(data)["usage"]["completion_tokens"] >= 1,
      (st, data))
rc = srv.stop(timeout=60)
check("the server exits 0 on SIGTERM", rc == 0, rc)
print(f"{failed} failed")
sys.exit(1 if failed else 0)
