"""What the `infer serve` tests share: finding the shared model, starting a
server on a free port, waiting for it, talking to it, stopping it.

    from serve_util import Server, shared_model_or_skip

Standard library only. The server's stderr is read by a thread into
Server.log (a list of lines); the port comes from its "listening on" line and
readiness from its "ready:" line.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("INFER_SHARED_DIR") or os.path.join(HERE, "..", "..", "shared")


def shared_model_or_skip(name="stories260K.gguf"):
    """The path of a model in ../shared/models (INFER_SHARED_DIR overrides the
    folder); without it prints SKIPPED: and exits 77 (CTest: skipped)."""
    path = os.path.join(SHARED, "models", name)
    if not os.path.isfile(path):
        print(f"SKIPPED: {path} not found (set INFER_SHARED_DIR)")
        sys.exit(77)
    return path


class Server:
    """`INFER serve -m MODEL --port 0 ARGS...`.

    wait: "ready" (the default) waits for the model to be loaded, "listening"
    only for the port, None for nothing. With expect_start (the default) a
    server that exits or never gets there raises RuntimeError with its log.
    """

    def __init__(self, infer, model, *args, wait="ready", expect_start=True, timeout=120, env=None):
        self.proc = subprocess.Popen([infer, "serve", "-m", model, "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.log = []
        self.port = None
        self.listening = threading.Event()
        self.ready = threading.Event()
        self.exited = threading.Event()  # stderr closed: the process is gone
        threading.Thread(target=self._read, daemon=True).start()
        if wait is None:
            return
        event = self.ready if wait == "ready" else self.listening
        event.wait(timeout)
        if expect_start and (not event.is_set() or self.port is None or self.proc.poll() is not None
                             or (wait == "ready" and self.exited.is_set())):
            self.kill()
            raise RuntimeError("server did not start: " + "".join(self.log))

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self.listening.set()
            if "ready:" in line:
                self.ready.set()
        self.exited.set()
        self.listening.set()
        self.ready.set()

    def alive(self):
        return self.proc.poll() is None

    def log_text(self):
        return "".join(self.log)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """One request on a new connection: (status, body bytes, response)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, r

    def post(self, path, body, **kw):
        """POST a JSON body: (status, the parsed JSON answer, or its bytes when it is not JSON)."""
        st, data, _ = self.request("POST", path, body, **kw)
        try:
            return st, json.loads(data)
        except ValueError:
            return st, data

    def stream(self, path, body, headers=None, timeout=120):
        """POST a streaming request: (status, [parsed events], saw [DONE], response).
        An event that is not a "data: " line is kept as {"_bad": text}."""
        st, data, r = self.request("POST", path, body, headers=headers, timeout=timeout)
        events, done = [], False
        for block in data.decode("utf-8", "replace").split("\n\n"):
            block = block.strip()
            if not block:
                continue
            if not block.startswith("data: "):
                events.append({"_bad": block})
                continue
            payload = block[6:]
            if payload == "[DONE]":
                done = True
            else:
                events.append(json.loads(payload))
        return st, events, done, r

    def rss_kb(self, key="VmRSS"):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return 0

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Sends sig (when still running) and waits: the exit status, or None
        when it had to be killed after timeout seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
