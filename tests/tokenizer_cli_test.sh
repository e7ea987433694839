#!/usr/bin/env bash
# `infer tokenize` against llama.cpp's tokenizer test vectors, and `infer
# chat` end to end.
#
#   tokenizer_cli_test.sh PATH_TO_INFER_BINARY
#
# For every vocab/X.gguf in the shared directory that has X.gguf.inp and
# X.gguf.out, each test string is written to a file and tokenized with
# `infer tokenize -m X.gguf -f FILE --no-bos`; the ids (one line) must equal
# the expected line. Then a short multi-turn chat is piped into `infer chat`.
# The shared directory is $INFER_SHARED_DIR, else ../../shared from this
# script. Exits 77 (skipped) without it or without python3, 1 on a failure.
set -u

INFER=${1:-}
if [ -z "$INFER" ] || [ ! -x "$INFER" ]; then
  echo "usage: $0 PATH_TO_INFER_BINARY (got '${INFER}')" >&2
  exit 1
fi
SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)
SHARED=${INFER_SHARED_DIR:-$SCRIPT_DIR/../../shared}
if [ ! -d "$SHARED/vocab" ]; then
  echo "SKIPPED: $SHARED/vocab not found (set INFER_SHARED_DIR to the shared directory)"
  exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIPPED: python3 not found"
  exit 77
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/infer-tok-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

FAILED=0
PASSED=0

# ---- infer tokenize, every vocabulary with vectors ----
for vocab in "$SHARED"/vocab/*.gguf; do
  [ -f "$vocab.inp" ] && [ -f "$vocab.out" ] || continue
  name=$(basename "$vocab")
  # Split the .inp file into one file per test string (bytes as they are).
  python3 - "$vocab.inp" "$TMP/$name" <<'PY'
import sys, os
data = open(sys.argv[1], 'rb').read()
parts = data.split(b'\n__ggml_vocab_test__\n')
os.makedirs(sys.argv[2], exist_ok=True)
for i, p in enumerate(parts[:-1]):
    open(os.path.join(sys.argv[2], '%03d.txt' % i), 'wb').write(p)
PY
  i=0
  bad=0
  total=0
  while IFS= read -r expected || [ -n "$expected" ]; do
    f=$(printf '%s/%s/%03d.txt' "$TMP" "$name" "$i")
    i=$((i + 1))
    [ -f "$f" ] || { echo "FAIL - $name: fewer test strings than expected lines"; bad=$((bad + 1)); break; }
    total=$((total + 1))
    got=$("$INFER" tokenize -m "$vocab" -f "$f" --no-bos 2>"$TMP/err")
    rc=$?
    want=$(echo "$expected" | sed 's/^ *//; s/ *$//')
    if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
      bad=$((bad + 1))
      if [ $bad -le 5 ]; then
        echo "FAIL - $name test $((i - 1)): exit $rc"
        echo "       want: $want"
        echo "       got:  $got"
        head -c 300 "$TMP/err" | sed 's/^/       /'
      fi
    fi
  done < "$vocab.out"
  if [ $bad -eq 0 ]; then
    echo "ok   - infer tokenize $name ($total strings)"
    PASSED=$((PASSED + 1))
  else
    echo "FAIL - infer tokenize $name: $bad of $total strings differ"
    FAILED=$((FAILED + 1))
  fi
done

# ---- infer chat: a multi-turn conversation through a pipe ----
MODEL=$SHARED/models/stories260K.gguf
if [ -f "$MODEL" ]; then
  printf 'Once upon a time\n\nthere was a cat\n/exit\nnot read\n' |
    timeout 300 "$INFER" chat -m "$MODEL" --template chatml --system "Tell stories." -n 8 --temp 0 --stats \
      >"$TMP/chat.out" 2>"$TMP/chat.err"
  rc=$?
  turns=$(grep -c '^\[turn ' "$TMP/chat.err")
  if [ $rc -eq 0 ] && [ "$turns" = 2 ] && [ "$(wc -l <"$TMP/chat.out")" -ge 2 ]; then
    echo "ok   - infer chat: two turns through a pipe, /exit ends it"
    PASSED=$((PASSED + 1))
  else
    echo "FAIL - infer chat (exit $rc, $turns turns)"
    head -c 1500 "$TMP/chat.err" | sed 's/^/       /'
    FAILED=$((FAILED + 1))
  fi
  # The second turn resubmits the first: the prefix cache serves it.
  cached=$(sed -n 's/^\[turn 2: [0-9]* prompt tokens, \([0-9]*\) from the prefix cache.*/\1/p' "$TMP/chat.err")
  if [ -n "$cached" ] && [ "$cached" -gt 0 ]; then
    echo "ok   - infer chat: turn 2 reuses $cached cached prompt tokens"
    PASSED=$((PASSED + 1))
  else
    echo "FAIL - infer chat: turn 2 reused no cached tokens ('$cached')"
    grep '^\[turn' "$TMP/chat.err" | sed 's/^/       /'
    FAILED=$((FAILED + 1))
  fi
  # EOF ends the chat too; an unknown template is refused by name.
  printf 'hello\n' | timeout 300 "$INFER" chat -m "$MODEL" --template zephyr -n 4 --temp 0 >/dev/null 2>"$TMP/chat.err"
  rc1=$?
  printf 'hello\n' | timeout 300 "$INFER" chat -m "$MODEL" --template vicuna -n 4 >/dev/null 2>"$TMP/chat2.err"
  rc2=$?
  if [ $rc1 -eq 0 ] && [ $rc2 -ne 0 ] && grep -q "vicuna" "$TMP/chat2.err"; then
    echo "ok   - infer chat: EOF ends it; unknown template refused by name"
    PASSED=$((PASSED + 1))
  else
    echo "FAIL - infer chat: EOF exit $rc1, unknown template exit $rc2"
    head -c 500 "$TMP/chat2.err" | sed 's/^/       /'
    FAILED=$((FAILED + 1))
  fi
  # stories260K has no chat template: detection says so, and chat falls back
  # to chatml with a notice naming the templates.
  printf 'hello\n' | timeout 300 "$INFER" chat -m "$MODEL" -n 4 >/dev/null 2>"$TMP/chat3.err"
  if [ $? -eq 0 ] && grep -q "no chat template; using the chatml template" "$TMP/chat3.err" && grep -q "llama3" "$TMP/chat3.err"; then
    echo "ok   - infer chat: a model without a template falls back to chatml with a notice"
    PASSED=$((PASSED + 1))
  else
    echo "FAIL - infer chat without a template"
    head -c 500 "$TMP/chat3.err" | sed 's/^/       /'
    FAILED=$((FAILED + 1))
  fi
fi

echo "$PASSED passed, $FAILED failed"
[ $FAILED -eq 0 ]
