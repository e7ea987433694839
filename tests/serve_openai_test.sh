#!/usr/bin/env bash
# The npm `openai` client library against `infer serve` on loopback:
# completions, chat, streaming with usage, n > 1, stop, logprobs, json_schema
# output that parses and validates, a cancelled stream, an API-key failure,
# function calling (tools) against a second server with a Qwen2.5 template,
# and runTools (a forced call within 64 tokens) against a third server on a
# model that `infer synth --preset tiny-chat` writes (its own template);
# embeddings.create (float, base64 decoded by the client, dimensions) on the
# first server (the decoder's last-token embedding).
#
#   serve_openai_test.sh PATH_TO_INFER WORK_DIR
#
# The package (openai@6, whose transport is Node's own fetch) is installed
# with npm into WORK_DIR/openai6/node_modules once (npm needs the registry).
# Not openai@4: with Debian 12's node (18.20.4+dfsg-1~deb12u3) its node-fetch@2
# transport failed every streamed response with "Premature close", against
# Node's own http server as much as ours (a client defect that the 2026 Node
# security releases exposed; Node 20.20 here did not show it). Prints "SKIPPED: ..." (CTest reports the test skipped) when
# the shared model, node/npm or the package cannot be had. The servers are
# named stories260K.gguf and m (--served-model-name), the names the client sends.
set -u
INFER=${1:?usage: serve_openai_test.sh INFER WORK_DIR}
WORK=${2:?usage: serve_openai_test.sh INFER WORK_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${INFER_SHARED_DIR:-$HERE/../../shared}
MODEL=$SHARED/models/stories260K.gguf
if [ ! -f "$MODEL" ]; then echo "SKIPPED: $MODEL not found (set INFER_SHARED_DIR)"; exit 77; fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "SKIPPED: node and npm are not installed (scripts/deps.sh --test installs them)"; exit 77
fi
WORK=$WORK/openai6
mkdir -p "$WORK"
if [ ! -f "$WORK/node_modules/openai/package.json" ]; then
  if ! timeout 300 npm install --no-audit --no-fund --loglevel=error --prefix "$WORK" openai@6 >"$WORK/npm.log" 2>&1; then
    echo "SKIPPED: cannot install the npm openai package (no network?):"
    tail -n 5 "$WORK/npm.log"
    exit 77
  fi
fi
cp "$HERE/serve_openai_client.cjs" "$WORK/client.cjs"

LOG=$(mktemp "${TMPDIR:-/tmp}/infer-serve-openai.XXXXXX")
KEY="test-key-$$"
"$INFER" serve -m "$MODEL" --port 0 --api-key "$KEY" -c 1024 --served-model-name stories260K.gguf,m 2>"$LOG" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 1 600); do
  grep -q "ready:" "$LOG" && break
  kill -0 $PID 2>/dev/null || break
  sleep 0.1
done
PORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$LOG" | head -n 1)
if [ -z "$PORT" ] || ! grep -q "ready:" "$LOG"; then
  echo "FAIL - the server did not start"; cat "$LOG"; exit 1
fi
# A second server with a Qwen2.5 chat template, for function calling (tools).
TLOG=$(mktemp "${TMPDIR:-/tmp}/infer-serve-openai-tools.XXXXXX")
"$INFER" serve -m "$MODEL" --port 0 --api-key "$KEY" -c 1024 --served-model-name stories260K.gguf,m \
  --chat-template-file "$HERE/data/chat_templates/qwen2.5-7b-instruct.jinja" 2>"$TLOG" &
TPID=$!
trap 'kill $PID $TPID 2>/dev/null; wait $PID $TPID 2>/dev/null; rm -f "$LOG" "$TLOG"' EXIT
for _ in $(seq 1 600); do
  grep -q "ready:" "$TLOG" && break
  kill -0 $TPID 2>/dev/null || break
  sleep 0.1
done
TPORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$TLOG" | head -n 1)
if [ -z "$TPORT" ] || ! grep -q "ready:" "$TLOG"; then
  echo "FAIL - the server with a chat template did not start"; cat "$TLOG"; exit 1
fi
# A third server on a model made here: `infer synth --preset tiny-chat`
# (random weights with a byte-level BPE vocabulary and a ChatML template with
# tools in its metadata), for runTools with its own template.
CHAT_MODEL=$WORK/tiny-chat.gguf
if ! "$INFER" synth --preset tiny-chat --type f32 -o "$CHAT_MODEL" >"$WORK/synth.log" 2>&1; then
  echo "FAIL - infer synth --preset tiny-chat"; cat "$WORK/synth.log"; exit 1
fi
CLOG=$(mktemp "${TMPDIR:-/tmp}/infer-serve-openai-chat.XXXXXX")
"$INFER" serve -m "$CHAT_MODEL" --port 0 --api-key "$KEY" 2>"$CLOG" &
CPID=$!
trap 'kill $PID $TPID $CPID 2>/dev/null; wait $PID $TPID $CPID 2>/dev/null; rm -f "$LOG" "$TLOG" "$CLOG"' EXIT
for _ in $(seq 1 600); do
  grep -q "ready:" "$CLOG" && break
  kill -0 $CPID 2>/dev/null || break
  sleep 0.1
done
CPORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$CLOG" | head -n 1)
if [ -z "$CPORT" ] || ! grep -q "ready:.*tool calls: hermes" "$CLOG"; then
  echo "FAIL - the server on the tiny-chat model did not start with its template's tool calls"; cat "$CLOG"; exit 1
fi
BASE_URL="http://127.0.0.1:$PORT/v1" TOOLS_BASE_URL="http://127.0.0.1:$TPORT/v1" CHAT_BASE_URL="http://127.0.0.1:$CPORT/v1" \
  API_KEY="$KEY" timeout 300 node "$WORK/client.cjs"
rc=$?
kill -TERM $PID $TPID $CPID
wait $PID
src=$?
wait $TPID
tsrc=$?
wait $CPID
csrc=$?
if [ $src -ne 0 ]; then echo "FAIL - the server exited $src after SIGTERM"; tail -n 20 "$LOG"; rc=1; fi
if [ $tsrc -ne 0 ]; then echo "FAIL - the tools server exited $tsrc after SIGTERM"; tail -n 20 "$TLOG"; rc=1; fi
if [ $csrc -ne 0 ]; then echo "FAIL - the tiny-chat server exited $csrc after SIGTERM"; tail -n 20 "$CLOG"; rc=1; fi
exit $rc
