#!/usr/bin/env python3
"""`infer perplexity`'s progress line (issue #29): on a terminal, stderr gets
one line updated in place (carriage returns) with the windows done, their
total and the perplexity so far, erased at the end; when stderr is not a
terminal nothing is written there. stdout is the same either way.

    perplexity_progress_test.py PATH_TO_INFER WORK_DIR

The terminal is a pseudo-terminal (Python's pty module). Needs ../shared's
stories260K (INFER_SHARED_DIR overrides; without it SKIPPED: and exit 77).
"""
import os
import pty
import re
import subprocess
import sys

INFER, WORK = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("INFER_SHARED_DIR") or os.path.join(HERE, "..", "..", "shared")
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
if not os.path.isfile(MODEL):
    print(f"SKIPPED: {MODEL} not found (set INFER_SHARED_DIR)")
    sys.exit(77)

failed = 0


def check(name, ok, detail=""):
    global failed
    print(("ok   - " if ok else "FAIL - ") + name + ("" if ok else "\n       " + repr(detail)[:1500]), flush=True)
    failed += 0 if ok else 1


os.makedirs(WORK, exist_ok=True)
text = os.path.join(WORK, "story.txt")
with open(text, "w", encoding="utf-8") as f:
    f.write(" ".join(["Once upon a time, there was a little girl named Lily. She loved to play outside in the park."] * 30))
# 32-token windows and four windows a group: several progress updates.
cmd = [INFER, "perplexity", "-m", MODEL, "-f", text, "-c", "32", "-t", "1"]

# ---- not a terminal: nothing on stderr ----
plain = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
check("not a terminal: exits 0", plain.returncode == 0, plain.stderr)
check("not a terminal: nothing on stderr", plain.stderr == "", plain.stderr)
m = re.match(r"perplexity ([0-9.]+) over (\d+) tokens \((\d+) windows\)\n", plain.stdout)
check("not a terminal: the result on stdout", m is not None, plain.stdout)
total = int(m.group(3)) if m else 0
check("the text makes more than 4 windows (more than one update)", total > 4, plain.stdout)

# ---- a terminal on stderr (stdout stays a pipe) ----
master, slave = pty.openpty()
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, text=True)
os.close(slave)
err = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:  # EIO: the child closed the terminal
        break
    if not chunk:
        break
    err += chunk
os.close(master)
out = proc.stdout.read()
proc.wait(300)
err = err.decode("utf-8", "replace")
check("terminal: exits 0", proc.returncode == 0, err)
check("terminal: stdout is the same as without a terminal", out == plain.stdout, (out, plain.stdout))
updates = re.findall(r"\rperplexity: (\d+)/(\d+) windows, perplexity so far ([0-9.]+)", err)
check("terminal: several carriage-return updates on stderr", len(updates) >= 2, err)
check("terminal: every update counts the same total", updates and all(int(t) == total for _, t, _ in updates), (updates, total))
done = [int(d) for d, _, _ in updates]
check("terminal: the windows done grow to the total", done == sorted(done) and done and done[-1] == total, done)
final = float(m.group(1)) if m else None
check("terminal: the last running perplexity is the result",
      updates and final is not None and abs(float(updates[-1][2]) - final) < 1e-3 * final, (updates[-1:], final))
check("terminal: the line is erased at the end (no newline left behind)", err.endswith("\r\x1b[K") and "\n" not in err, err[-80:])

print(f"{failed} failed")
sys.exit(1 if failed else 0)
