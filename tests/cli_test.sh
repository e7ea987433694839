#!/usr/bin/env bash
# End-to-end checks of the `infer` command-line tool against ../shared.
#
#   cli_test.sh PATH_TO_INFER_BINARY
#
# The shared directory is $INFER_SHARED_DIR, else ../../shared from this
# script (tests/ -> checkout -> its parent). Exits 77 (skipped) when the
# shared model is absent, 1 when a check fails, 0 otherwise. Needs python3
# (standard library only) to compare logits and parse JSON.
set -u

INFER=${1:-}
if [ -z "$INFER" ] || [ ! -x "$INFER" ]; then
  echo "usage: $0 PATH_TO_INFER_BINARY (got '${INFER}')" >&2
  exit 1
fi

SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)
SHARED=${INFER_SHARED_DIR:-$SCRIPT_DIR/../../shared}
MODEL=$SHARED/models/stories260K.gguf
REF=$SHARED/reference
if [ ! -f "$MODEL" ]; then
  echo "SKIPPED: $MODEL not found (set INFER_SHARED_DIR to the shared directory)"
  exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIPPED: python3 not found"
  exit 77
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/infer-cli-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

PASSED=0
FAILED=0
pass() {
  PASSED=$((PASSED + 1))
  echo "ok   - $1"
}
fail() {
  FAILED=$((FAILED + 1))
  echo "FAIL - $1"
  if [ -n "${2:-}" ]; then printf '%s\n' "$2" | head -n 20 | sed 's/^/       /'; fi
}

# run_cli ARGS...: stdout -> $OUT, stderr -> $ERR, exit status -> $RC.
OUT=$TMP/stdout
ERR=$TMP/stderr
RC=0
run_cli() {
  timeout 300 "$INFER" "$@" >"$OUT" 2>"$ERR"
  RC=$?
}
# What the last command said, for failure messages.
said() {
  echo "exit status $RC; stderr:"
  head -c 1500 "$ERR"
}

# expect_ok NAME: the last command succeeded.
expect_ok() {
  if [ "$RC" -eq 0 ]; then pass "$1"; else fail "$1" "$(said)"; fi
}

# expect_error NAME: the last command failed cleanly: non-zero exit (not a
# signal or a timeout), a message on stderr, no abort or exception trace.
expect_error() {
  local why=""
  if [ "$RC" -eq 0 ]; then
    why="exit status 0, expected an error"
  elif [ "$RC" -ge 124 ]; then
    why="exit status $RC: killed by a signal or timed out"
  elif [ ! -s "$ERR" ]; then
    why="no message on stderr"
  elif grep -qiE 'Aborted|terminate called|core dumped|Segmentation fault|what\(\)|stack trace|AddressSanitizer|runtime error' "$ERR"; then
    why="a crash or an uncaught exception"
  fi
  if [ -z "$why" ]; then pass "$1"; else fail "$1" "$why
$(said)"; fi
}

# starts_with NAME FILE REFERENCE N: FILE begins with the first N bytes of
# REFERENCE (byte for byte: the reference text has no leading space).
starts_with() {
  local name=$1 file=$2 ref=$3 n=$4
  if [ "$(head -c "$n" "$file" | od -An -c)" = "$(head -c "$n" "$ref" | od -An -c)" ]; then
    pass "$name"
  else
    fail "$name" "got:      $(head -c "$n" "$file")
expected: $(head -c "$n" "$ref")"
  fi
}

# Python helpers: logits comparison and JSON checks.
cat >"$TMP/check.py" <<'PY'
import json, math, struct, sys

def logits(args):
    # logits OUT REF ROWS TOL [TOKENS]: OUT holds exactly ROWS rows of 512
    # little-endian float32 values, each within TOL of REF's first ROWS rows;
    # with TOKENS, row i's argmax is TOKENS[i + 1].
    out, ref, rows, tol = args[0], args[1], int(args[2]), float(args[3])
    nv = 512
    a = open(out, "rb").read()
    b = open(ref, "rb").read()
    if len(a) != rows * nv * 4:
        print(f"{out}: {len(a)} bytes = {len(a) / (nv * 4):g} rows, expected {rows} rows ({rows * nv * 4} bytes)")
        return 1
    if len(b) < len(a):
        print(f"{ref}: only {len(b)} bytes")
        return 1
    fa = struct.unpack(f"<{rows * nv}f", a)
    fb = struct.unpack(f"<{rows * nv}f", b[: len(a)])
    worst, where = 0.0, None
    for i, (x, y) in enumerate(zip(fa, fb)):
        d = abs(x - y)
        if not d <= worst:  # NaN counts as the worst
            worst, where = d, i
    if not worst <= tol:
        r, v = divmod(where, nv)
        print(f"max |diff| {worst} > {tol} at row {r}, token {v}: {fa[where]} vs {fb[where]}")
        return 1
    if len(args) > 4:
        toks = [int(t) for t in open(args[4]).read().split()]
        for r in range(min(rows - 1, len(toks) - 1)):
            row = fa[r * nv:(r + 1) * nv]
            best = max(range(nv), key=lambda v: row[v])
            if best != toks[r + 1]:
                print(f"row {r}: argmax {best}, reference token {toks[r + 1]}")
                return 1
    return 0

def load_json(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    try:
        return json.loads(text)
    except ValueError:
        pass
    lines = [l for l in text.splitlines() if l.strip()]
    if not lines:
        raise ValueError("no output")
    return json.loads(lines[-1])  # the last line, after streamed text

def keys(args):
    # keys FILE K...: FILE (whole, or its last line) is a JSON object with
    # keys K; numbers among them are finite.
    try:
        d = load_json(args[0])
    except ValueError as e:
        print(f"not JSON: {e}")
        return 1
    if not isinstance(d, dict):
        print(f"not a JSON object: {d!r}"[:300])
        return 1
    for k in args[1:]:
        if k not in d:
            print(f"key {k!r} missing in {sorted(d)}")
            return 1
        v = d[k]
        if isinstance(v, (int, float)) and not math.isfinite(v):
            print(f"{k} = {v} is not finite")
            return 1
    return 0

def perplexity(args):
    d = load_json(args[0])
    p = d.get("perplexity")
    if not isinstance(p, (int, float)) or not math.isfinite(p) or not p > 1:
        print(f"perplexity {p!r} is not a finite number > 1")
        return 1
    return 0

def ge(args):
    # ge FILE KEY MIN: numeric FILE[KEY] >= MIN
    d = load_json(args[0])
    v = d.get(args[1])
    if not isinstance(v, (int, float)) or not v >= float(args[2]):
        print(f"{args[1]} = {v!r}, expected >= {args[2]}")
        return 1
    return 0

def eq(args):
    # eq FILE KEY VALUE: FILE[KEY] == VALUE (compared as numbers)
    d = load_json(args[0])
    v = d.get(args[1])
    if not isinstance(v, (int, float)) or v != float(args[2]):
        print(f"{args[1]} = {v!r}, expected {args[2]}")
        return 1
    return 0

sys.exit({"logits": logits, "keys": keys, "perplexity": perplexity, "ge": ge, "eq": eq}[sys.argv[1]](sys.argv[2:]))
PY
# verify NAME CHECK ARGS...: runs a check.py check as a test.
verify() {
  local name=$1 msg
  shift
  if msg=$(python3 "$TMP/check.py" "$@" 2>&1); then pass "$name"; else fail "$name" "$msg"; fi
}

# ---- run: greedy text against the reference implementation ---------------------------

run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 64
expect_ok "run greedy from a text prompt"
starts_with "run greedy text matches stories260K-once.txt" "$OUT" "$REF/stories260K-once.txt" 100

run_cli run -m "$MODEL" -p "" --temp 0 -n 40
expect_ok "run greedy from BOS alone (-p \"\")"
starts_with "run from BOS matches stories260K-bos.txt" "$OUT" "$REF/stories260K-bos.txt" 80

run_cli run -m "$MODEL" -p "Once upon a time" --temp 0.8 --top-k 40 --top-p 0.9 --min-p 0.05 \
  --repeat-penalty 1.1 --seed 7 -t 2 -n 16
expect_ok "run with every sampling flag"
cp "$OUT" "$TMP/seeded1"
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0.8 --top-k 40 --top-p 0.9 --min-p 0.05 \
  --repeat-penalty 1.1 --seed 7 -t 2 -n 16
if cmp -s "$OUT" "$TMP/seeded1"; then pass "same seed, same text"; else fail "same seed, same text"; fi

# --seed -1 (the default) draws a seed, reported by --json; giving it back repeats the text.
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2" 2>/dev/null; }
run_cli run -m "$MODEL" -p "Once upon a time" --temp 1 -t 1 -n 24 --json
cp "$OUT" "$TMP/rand1"
run_cli run -m "$MODEL" -p "Once upon a time" --temp 1 -t 1 -n 24 --seed -1 --json
cp "$OUT" "$TMP/rand2"
s1=$(json_field "$TMP/rand1" seed); s2=$(json_field "$TMP/rand2" seed)
if [ -n "$s1" ] && [ -n "$s2" ] && [ "$s1" != "$s2" ]; then pass "the default seed is drawn per run (--json reports it)"
else fail "the default seed is drawn per run (--json reports it)" "seeds '$s1' and '$s2'; $(said)"; fi
run_cli run -m "$MODEL" -p "Once upon a time" --temp 1 -t 1 -n 24 --seed "${s1:-0}" --json
if [ "$(json_field "$OUT" text)" = "$(json_field "$TMP/rand1" text)" ] && [ -n "$(json_field "$OUT" text)" ]; then
  pass "the reported seed repeats the run"
else fail "the reported seed repeats the run" "$(said)"; fi
run_cli run -m "$MODEL" -p "x" -n 1 --seed -2
if [ "$RC" = 2 ] || grep -q -- "--seed" "$ERR"; then pass "--seed below -1 is refused"; else fail "--seed below -1 is refused" "$(said)"; fi

# A llama2.c checkpoint given to run: the error names the converter.
printf 'not a gguf file, a llama2.c checkpoint would start with its config' >"$TMP/model.bin"
run_cli run -m "$TMP/model.bin" -p x -n 1
if [ "$RC" != 0 ] && grep -q "infer convert llama2c" "$ERR"; then pass "a .bin model points to infer convert llama2c"
else fail "a .bin model points to infer convert llama2c" "$(said)"; fi
# An unknown flag: its hint once.
run_cli run -m "$MODEL" --no-such-flag
if [ "$RC" = 2 ] && [ "$(grep -o -- "--help" "$ERR" | wc -l)" = 1 ]; then pass "an unknown flag's hint is printed once"
else fail "an unknown flag's hint is printed once" "$(said)"; fi

# quantize --help lists every format its own error message names.
run_cli quantize "$MODEL" "$TMP/q.gguf" no_such_type
err_types=$(grep -o "unknown weight format.*" "$ERR" | sed "s/.*'no_such_type' (//" | tr -c 'a-z0-9_\n' ' ')
help_text=$("$INFER" quantize --help 2>&1)
missing=""
for t in $err_types; do case "$t" in as|infer|quantize|help|lists|them|int4_g*|int4|w4a16) ;; *) echo "$help_text" | grep -qw "$t" || missing+=" $t" ;; esac; done
if [ -n "$err_types" ] && [ -z "$missing" ]; then pass "quantize --help lists every format of its error message"
else fail "quantize --help lists every format of its error message" "missing:$missing; error: $(head -c 400 "$ERR")"; fi

printf 'Once upon a time' >"$TMP/prompt.txt"
run_cli run -m "$MODEL" -f "$TMP/prompt.txt" --temp 0 -n 32
expect_ok "run with the prompt from a file (-f)"
starts_with "run -f gives the same greedy text" "$OUT" "$REF/stories260K-once.txt" 80

# ---- run --json ------------------------------------------------------------------------

run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 16 --json
expect_ok "run --json"
verify "run --json: the last line is an object with the statistics" keys "$OUT" prompt_tokens generated_tokens ttft_ms tpot_ms prefill_tokens_per_s decode_tokens_per_s
verify "run --json: prompt_tokens is 5" eq "$OUT" prompt_tokens 5
verify "run --json: generated_tokens is 16" eq "$OUT" generated_tokens 16

# ---- speculative decoding: same greedy text, counters in --json ---------------------------

for spec in ngram ngram:2 layerskip:4 layerskip:1-2; do
  run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 64 --spec "$spec" --spec-k 5
  expect_ok "run --spec $spec"
  starts_with "run --spec $spec: the plain greedy text" "$OUT" "$REF/stories260K-once.txt" 100
done
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 64 --draft "$MODEL"
expect_ok "run --draft (the model as its own draft)"
starts_with "run --draft: the plain greedy text" "$OUT" "$REF/stories260K-once.txt" 100
if [ -e "$SHARED/models/llama-2-tiny-random.gguf" ]; then
  run_cli run -m "$MODEL" -p "Once" -n 4 --draft "$SHARED/models/llama-2-tiny-random.gguf"
  expect_error "run --draft with another vocabulary is refused"
fi
run_cli run -m "$MODEL" -p "Once" -n 4 --draft "$MODEL" --spec ngram
expect_error "run --draft with --spec is refused"
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 64 --spec ngram --json
expect_ok "run --spec ngram --json"
verify "run --spec --json: the speculative counters" keys "$OUT" draft_tokens accepted_tokens acceptance_rate mean_accepted_length
verify "run --spec --json: tokens were drafted" ge "$OUT" draft_tokens 1
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 8 --json
verify "run --json without --spec: nothing drafted" eq "$OUT" draft_tokens 0
for bad in "--spec" "--spec bogus" "--spec ngram:0" "--spec layerskip:" "--spec layerskip:99" "--spec-k 0" "--spec-k 33"; do
  # shellcheck disable=SC2086
  run_cli run -m "$MODEL" -p "Once" -n 4 $bad
  expect_error "run $bad is refused"
done

# ---- run --tokens / --dump-logits against the reference logits --------------------------
# One row per position fed to the model: the prompt's, then the generated
# tokens' except the last (never fed), so -n N after P prompt tokens gives
# P + N - 1 rows (P when N is 0), rows i of the reference's positions.

head -n 5 "$REF/stories260K-once.tokens" >"$TMP/once5.tokens"
run_cli run -m "$MODEL" --tokens "$TMP/once5.tokens" -n 0 --temp 0 --dump-logits "$TMP/once5.f32"
expect_ok "run --tokens --dump-logits -n 0"
verify "prompt logits match the reference (5 rows, 1e-4)" logits "$TMP/once5.f32" "$REF/stories260K-once.logits.f32" 5 1e-4

run_cli run -m "$MODEL" --tokens "$TMP/once5.tokens" -n 12 --temp 0 --dump-logits "$TMP/once16.f32"
expect_ok "run --tokens --dump-logits -n 12"
verify "prompt + generated logits match the reference (16 rows)" logits "$TMP/once16.f32" "$REF/stories260K-once.logits.f32" 16 1e-4 "$REF/stories260K-once.tokens"

# ---- convert llama2c, then the second model against its reference ------------------------

XS=$TMP/stories-xs.gguf
run_cli convert llama2c "$SHARED/models/stories-xs.bin" "$SHARED/models/tok512.bin" -o "$XS"
expect_ok "convert llama2c stories-xs.bin tok512.bin"
if [ -s "$XS" ]; then
  pass "convert wrote a file"
  run_cli info -m "$XS" --json
  expect_ok "info on the converted model"
  verify "info --json on the converted model parses" keys "$OUT"

  echo 1 >"$TMP/bos.tokens"
  run_cli run -m "$XS" --tokens "$TMP/bos.tokens" --temp 0 -n 200 --dump-logits "$TMP/xs.f32"
  expect_ok "run the converted model for 200 tokens"
  starts_with "converted model's text matches stories-xs-bos.txt" "$OUT" "$REF/stories-xs-bos.txt" 100
  verify "all 200 rows of logits and argmax tokens match the reference" logits "$TMP/xs.f32" "$REF/stories-xs-bos.logits.f32" 200 1e-4 "$REF/stories-xs-bos.tokens"
else
  fail "convert wrote a file" "$(said)"
fi

run_cli convert llama2c "$TMP/no-such.bin" "$SHARED/models/tok512.bin" -o "$TMP/never.gguf"
expect_error "convert with a missing checkpoint fails cleanly"

# ---- info, tokenize, perplexity, bench ---------------------------------------------------

run_cli info -m "$MODEL"
expect_ok "info"
run_cli info -m "$MODEL" --json
expect_ok "info --json"
verify "info --json parses" keys "$OUT"

run_cli tokenize -m "$MODEL" -p "Once upon a time"
expect_ok "tokenize"
got=$(tr -s ' \t\n' ' ' <"$OUT" | sed 's/^ //; s/ $//')
if [ "$got" = "1 403 407 261 378" ]; then pass "tokenize \"Once upon a time\""; else fail "tokenize" "got '$got'"; fi
run_cli tokenize -m "$MODEL" -p "Once upon a time" --no-bos
got=$(tr -s ' \t\n' ' ' <"$OUT" | sed 's/^ //; s/ $//')
if [ "$RC" -eq 0 ] && [ "$got" = "403 407 261 378" ]; then pass "tokenize --no-bos"; else fail "tokenize --no-bos" "got '$got'; $(said)"; fi
run_cli tokenize -m "$MODEL" -f "$TMP/prompt.txt"
got=$(tr -s ' \t\n' ' ' <"$OUT" | sed 's/^ //; s/ $//')
if [ "$RC" -eq 0 ] && [ "$got" = "1 403 407 261 378" ]; then pass "tokenize -f"; else fail "tokenize -f" "got '$got'; $(said)"; fi

run_cli perplexity -m "$MODEL" -f "$SHARED/text/stories-eval.txt" --json
expect_ok "perplexity --json"
verify "perplexity is a finite number > 1" perplexity "$OUT"
run_cli perplexity -m "$MODEL" -f "$SHARED/text/stories-eval.txt" --ctx 128 --json
expect_ok "perplexity --ctx 128"

run_cli bench -m "$MODEL" -p 16 -n 8 -t 2 --json
expect_ok "bench --json"
verify "bench --json parses" keys "$OUT"

# ---- KV cache flags, batched bench, serving bench ------------------------------------------

for kv in f32 f16 int8; do
  run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 24 --kv-type $kv --kv-block 8 --kv-budget-mb 4 --json
  expect_ok "run --kv-type $kv"
  verify "run --kv-type $kv --json has KV accounting" keys "$OUT" kv_type kv_blocks_total kv_blocks_used \
    kv_bytes_total cached_prompt_tokens prefix_hit_tokens
done
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 8 --no-prefix-cache --host-kv-mb 1 --json
expect_ok "run --no-prefix-cache --host-kv-mb"
run_cli run -m "$MODEL" -p "hi" --kv-type q3
expect_error "an unknown --kv-type"

# --backend on every command that loads a model.
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 8 --backend cpu
expect_ok "run --backend cpu"
cp "$OUT" "$TMP/backend_cpu.txt"
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 8 --backend auto
if [ "$RC" -eq 0 ] && cmp -s "$OUT" "$TMP/backend_cpu.txt"; then pass "run --backend auto = cpu"; else fail "run --backend auto" "$(said)"; fi
run_cli run -m "$MODEL" -p "hi" -n 4 --backend cuda
expect_error "run --backend cuda fails cleanly (no CUDA backend yet)"
if grep -q "CUDA" "$ERR"; then pass "the --backend cuda error names CUDA"; else fail "--backend cuda message" "$(said)"; fi
run_cli info -m "$MODEL" --backend gpu
if [ "$RC" -eq 2 ]; then pass "an unknown --backend is a usage error"; else fail "--backend gpu" "$(said)"; fi
for c in "info" "tokenize -p hi" "perplexity -f $SHARED/text/$(ls "$SHARED/text" 2>/dev/null | head -1) --ctx 32" "bench -p 4 -n 2 -r 1"; do
  # shellcheck disable=SC2086
  run_cli $c -m "$MODEL" --backend cpu
  expect_ok "${c%% *} --backend cpu"
done

run_cli bench -m "$MODEL" -p 16 -n 8 -t 1 -r 1 --batch 1,4 --kv-type int8 --json
expect_ok "bench --batch 1,4"
if [ "$(grep -c '"batch"' "$OUT")" -eq 2 ]; then pass "bench --batch prints one line per size"; else fail "bench --batch" "$(cat "$OUT")"; fi
head -1 "$OUT" >"$TMP/b1.json"
verify "bench --batch --json keys" keys "$TMP/b1.json" batch prefill_tokens_per_s decode_tokens_per_s
run_cli bench -m "$MODEL" --batch 0
expect_error "bench --batch 0"

for policy in static dynamic continuous; do
  run_cli bench-serve -m "$MODEL" --requests 12 --rate 200 --policy $policy --prompt-len uniform:4:24 \
    --output-len lognormal:8:0.8 --max-seqs 4 --seed 3 -t 1 --json
  expect_ok "bench-serve --policy $policy"
  verify "bench-serve --policy $policy --json keys" keys "$OUT" generated_tokens_per_s requests_per_s \
    ttft_ms_p50 ttft_ms_p90 ttft_ms_p99 tpot_ms_p50 tpot_ms_p90 tpot_ms_p99
done
# --step-log: one line per engine step, its rows adding up to every token processed
run_cli bench-serve -m "$MODEL" --requests 6 --rate 0 --prompt-len 5 --output-len 7 --max-seqs 4 -t 1 \
  --step-log "$TMP/steps.log"
expect_ok "bench-serve --step-log"
rows=$(awk '/^engine step [0-9]+: [0-9]+ rows, [0-9]+ sequences, [0-9]+ attended positions, forward [0-9.]+ ms$/ {n += $4} END {print n + 0}' "$TMP/steps.log" 2>/dev/null)
# 6 requests x (5 prompt tokens + 6 fed-back generated tokens; the last one is never fed)
if [ "$rows" = 66 ]; then pass "bench-serve --step-log rows"; else fail "bench-serve --step-log rows" "rows $rows, expected 66"; fi
run_cli bench-serve -m "$MODEL" --requests 2 --step-log "$TMP/no-such-dir/steps.log"
expect_error "bench-serve --step-log to an unwritable path"
run_cli bench-serve -m "$MODEL" --requests 4 --policy fastest
expect_error "bench-serve with an unknown policy"
run_cli bench-serve -m "$MODEL" --requests 4 --prompt-len lognormal:abc:1
expect_error "bench-serve with a bad distribution"

# ---- errors: clean messages, non-zero exits, no aborts -----------------------------------

run_cli run -m "$TMP/no-such-model.gguf" -p "hi" -n 4
expect_error "missing model file"
printf 'this is not a gguf file' >"$TMP/junk.gguf"
run_cli run -m "$TMP/junk.gguf" -p "hi" -n 4
expect_error "a file that is not GGUF"
run_cli info -m "$TMP/no-such-model.gguf"
expect_error "info on a missing model file"
run_cli run -m "$MODEL" -p "hi" --no-such-flag
expect_error "unknown flag"
run_cli run -m "$MODEL" -p "hi" -n -5
expect_error "-n -5"
run_cli run -m "$MODEL" -p "hi" -n abc
expect_error "-n abc"
run_cli run -m "$MODEL" -p "hi" --temp nan-ish
expect_error "--temp with a non-number"
run_cli run -m "$MODEL" -p "hi" -n
expect_error "a flag missing its value"
printf '1 99999 403\n' >"$TMP/bad.tokens"
run_cli run -m "$MODEL" --tokens "$TMP/bad.tokens" -n 4
expect_error "a token id out of range in --tokens"
printf '1 four 403\n' >"$TMP/bad2.tokens"
run_cli run -m "$MODEL" --tokens "$TMP/bad2.tokens" -n 4
expect_error "a non-number in --tokens"
run_cli run -m "$MODEL" -f "$TMP/no-such-prompt.txt" -n 4
expect_error "a missing prompt file"
run_cli no-such-command
expect_error "an unknown subcommand"
run_cli
expect_error "no subcommand"
run_cli tokenize -m "$MODEL"
expect_error "tokenize without text"

# Files that are not regular files (../shared/repro #13, #20): a FIFO must not
# block open() (a 20 s watchdog instead of run_cli's 300), a directory is no
# prompt. A failed --dump-logits must not leak the request (LeakSanitizer in
# the sanitizer build).
mkfifo "$TMP/fifo"
for args in "run -m $TMP/fifo -p hi -n 1" "run -m $MODEL -f $TMP/fifo -n 1" "tokenize -m $MODEL -f $TMP/fifo" \
            "tokenize -m $MODEL -f $TMP" "run -m $MODEL -f $TMP -n 1"; do
  # shellcheck disable=SC2086
  timeout 20 "$INFER" $args >"$OUT" 2>"$ERR"
  RC=$?
  expect_error "not a regular file: infer $args"
done
run_cli run -m "$MODEL" -p "hi" -n 2 --dump-logits "$TMP/no-such-dir/logits.bin"
expect_error "--dump-logits to a path that cannot be written"
if grep -q LeakSanitizer "$ERR"; then fail "--dump-logits failure leaks nothing" "$(said)"; else pass "--dump-logits failure leaks nothing"; fi

# ---- the CLI explains itself (issue 17) --------------------------------------------------

run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 16 --json
verify "run --json: stdout is one JSON object with the text" keys "$OUT" text finish_reason
if [ "$(wc -l <"$OUT")" -eq 1 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if len(d["text"]) > 0 else 1)' "$OUT"; then
  pass "run --json: the whole stdout parses as one object, text not empty"
else
  fail "run --json: stdout is not exactly one JSON object" "$(head -c 500 "$OUT")"
fi
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 16 --quiet
if [ "$RC" -eq 0 ] && [ -s "$OUT" ] && ! grep -q "Once upon a time" "$OUT" && [ ! -s "$ERR" ]; then
  pass "run --quiet: the generated text alone on stdout, nothing on stderr"
else
  fail "run --quiet" "$(said; head -c 300 "$OUT")"
fi
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n -1 -c 24 --json
verify "run -n -1 -c 24: generates until the context is full" eq "$OUT" generated_tokens 19
verify "run -n -1 -c 24: says the context is full" eq "$OUT" context_full 1
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n -1 --ctx-size 12
if [ "$RC" -eq 0 ] && grep -q "context is full" "$ERR"; then pass "run: running out of context says so"; else fail "run: context full message" "$(said)"; fi
run_cli run -m "$TMP/no-such-model.gguf" -p "hi" --top-p 2
if [ "$RC" -eq 2 ] && grep -q -- "--top-p" "$ERR" && ! grep -q "no-such-model" "$ERR"; then
  pass "run --top-p 2 is refused before the model loads"
else
  fail "run --top-p 2 checked before loading" "$(said)"
fi
run_cli run -m "$MODEL" -p "Once upon a time" --temp 0 -n 8 --stop "xyz" --stop "girl"
if [ "$RC" -eq 0 ] && ! grep -q "girl" "$OUT"; then pass "run --stop may be repeated"; else fail "run --stop twice" "$(said; cat "$OUT")"; fi
# Ctrl-C: generation stops and the statistics still print (exit 130). A
# context far longer than 0.5 s of generation (the model's own 2048 tokens
# take under half a second on a quiet machine, and the run ended first).
timeout 300 "$INFER" run -m "$MODEL" -p "Once upon a time" -n -1 -c 200000 --ignore-eos --temp 0 >"$OUT" 2>"$ERR" &
pid=$!
# The signal goes once text is streaming, or after 120 s (a loaded CI
# machine once took over 30 s to get there). A signal that comes earlier,
# while the model loads, must give the same result: run catches Ctrl-C
# before it loads anything and stops at the first token.
for _ in $(seq 1 2400); do
  [ "$(wc -c <"$OUT")" -gt 40 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.05
done
kill -INT $pid
wait $pid
RC=$?
if [ "$RC" -eq 130 ] && grep -q "interrupted" "$ERR" && grep -q "generated" "$ERR"; then
  pass "run: Ctrl-C stops generation and prints the statistics"
else
  fail "run: Ctrl-C (exit $RC)" "$(said)"
fi
# Ctrl-C as early as run can take it (its SIGINT handler shows in
# /proc/PID/status as SigCgt bit 2, before the model loads): the same exit
# and statistics, not a death by the signal.
"$INFER" run -m "$MODEL" -p "Once upon a time" -n -1 -c 200000 --ignore-eos --temp 0 >"$OUT" 2>"$ERR" &
pid=$!
for _ in $(seq 1 2400); do
  cgt=$(awk '/^SigCgt:/ {print $2}' /proc/$pid/status 2>/dev/null || true)
  [ -n "$cgt" ] && [ $(( 0x$cgt & 2 )) -ne 0 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.01
done
kill -INT $pid
wait $pid
RC=$?
if [ "$RC" -eq 130 ] && grep -q "interrupted" "$ERR" && grep -q "generated" "$ERR"; then
  pass "run: an early Ctrl-C (before any text) still stops with the statistics"
else
  fail "run: early Ctrl-C (exit $RC)" "$(said)"
fi
# The default model is found from the executable, whatever the current directory.
(cd / && INFER_SHARED_DIR= timeout 300 "$INFER" run -p "Once" -n 4 --temp 0 >"$OUT" 2>"$ERR")
RC=$?
if [ -z "${INFER_SHARED_DIR:-}" ]; then
  if [ "$RC" -eq 0 ]; then pass "run from / finds the default model"; else fail "run from / finds the default model" "$(said)"; fi
fi
run_cli tokenize -m "$MODEL" -p "Once upon a time" --show-text
if [ "$RC" -eq 0 ] && grep -q "' upon'" "$OUT"; then pass "tokenize --show-text"; else fail "tokenize --show-text" "$(said; cat "$OUT")"; fi
run_cli tokenize -m "$MODEL" -p "Once upon a time"
ids=$(cat "$OUT")
# shellcheck disable=SC2086
run_cli detokenize -m "$MODEL" $ids
if [ "$RC" -eq 0 ] && [ "$(cat "$OUT")" = "Once upon a time" ]; then pass "detokenize inverts tokenize"; else fail "detokenize" "$(said; cat "$OUT")"; fi
run_cli detokenize -m "$MODEL" 1 99999
expect_error "detokenize with an id out of range"
printf 'hello\n' | timeout 300 "$INFER" chat -m "$MODEL" -n 4 --temp 0 >"$OUT" 2>"$ERR"
RC=$?
if [ "$RC" -eq 0 ] && grep -q "has no chat template; using the chatml template" "$ERR"; then
  pass "chat falls back to chatml with a notice when the model has no template"
else
  fail "chat fallback" "$(said)"
fi
printf 'hello\n' | timeout 300 "$INFER" chat -m "$MODEL" --template foo >"$OUT" 2>"$ERR"
RC=$?
if [ "$RC" -eq 2 ] && grep -q "chatml" "$ERR" && ! grep -q "chat template: foo" "$ERR"; then
  pass "chat --template foo lists the templates, announces nothing"
else
  fail "chat --template foo" "$(said)"
fi

# chat --chat-template-file: the file's template renders each turn; one that
# cannot render a plain exchange (a namespace stored in itself) is refused
# before the first turn, and the process ends with a usage error, not a signal.
cat >"$TMP/tmpl.jinja" <<'TMPL'
{% for m in messages %}<<{{ m.role }}>>{{ m.content }}<</{{ m.role }}>>{% endfor %}{% if add_generation_prompt %}<<assistant>>{% endif %}
TMPL
printf 'hello\n' | timeout 300 "$INFER" chat -m "$MODEL" -n 2 --temp 0 --chat-template-file "$TMP/tmpl.jinja" --show-prompt >"$OUT" 2>"$ERR"
RC=$?
if [ "$RC" -eq 0 ] && grep -q "<<user>>hello<</user>><<assistant>>" "$ERR"; then
  pass "chat --chat-template-file renders the file's template"
else
  fail "chat --chat-template-file" "$(said)"
fi
printf '{%% set ns = namespace(a=1) %%}{%% set ns.a = ns %%}{{ ns }}{{ messages[0].content }}\n' >"$TMP/selfref.jinja"
printf 'hello\n' | timeout 300 "$INFER" chat -m "$MODEL" -n 2 --chat-template-file "$TMP/selfref.jinja" >"$OUT" 2>"$ERR"
RC=$?
if [ "$RC" -eq 2 ] && grep -q "does not render" "$ERR"; then
  pass "chat --chat-template-file refuses a self-referencing template with a usage error"
else
  fail "chat --chat-template-file with a self-referencing template" "$(said)"
fi

run_cli info -m "$MODEL" --all --json
verify "info --all --json lists every metadata key" keys "$OUT" metadata
if [ "$RC" -eq 0 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); m=d["metadata"]; sys.exit(0 if "general.architecture" in m and "tokenizer.ggml.model" in m and len(m) > 10 else 1)' "$OUT"; then
  pass "info --all: general.architecture, tokenizer.ggml.model and more"
else
  fail "info --all" "$(head -c 500 "$OUT")"
fi
printf '{"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["n", "ok"]}' >"$TMP/schema.json"
run_cli run -m "$MODEL" -p "Once upon a time" --json-schema "$TMP/schema.json" --temp 1 --seed 5 -n 100 --json
if [ "$RC" -eq 0 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=json.loads(d["text"]); sys.exit(0 if isinstance(v["n"], int) and isinstance(v["ok"], bool) and d["finish_reason"] == "stop" else 1)' "$OUT"; then
  pass "run --json-schema: the text is JSON of the schema"
else
  fail "run --json-schema" "$(said; head -c 500 "$OUT")"
fi
printf 'root ::= undefined-rule\n' >"$TMP/bad.gbnf"
run_cli run -m "$TMP/no-such-model.gguf" --grammar "$TMP/bad.gbnf"
if [ "$RC" -eq 2 ] && grep -q "undefined-rule" "$ERR"; then pass "run --grammar: a bad grammar is refused before the model loads"; else fail "run --grammar bad" "$(said)"; fi

# -c above the trained context (2048 in stories260K's metadata) is allowed,
# with a warning on stderr that names both numbers; -c within it says nothing.
ctx_warned() { grep -q "warning: -c $1 is above the model's trained context of 2048 tokens" "$ERR"; }
run_cli run -m "$MODEL" -p "Once" -n 2 --temp 0 -c 4096
if [ "$RC" -eq 0 ] && ctx_warned 4096; then pass "run -c 4096 > trained 2048: runs, with a warning"; else fail "run -c 4096" "$(said)"; fi
for c in 2048 256; do
  run_cli run -m "$MODEL" -p "Once" -n 2 --temp 0 -c $c
  if [ "$RC" -eq 0 ] && ! grep -q "trained context" "$ERR"; then pass "run -c $c <= trained: no warning"; else fail "run -c $c" "$(said)"; fi
done
for c in 3000 1024; do
  printf 'hello\n' | timeout 300 "$INFER" chat -m "$MODEL" -n 2 --temp 0 -c $c >"$OUT" 2>"$ERR"
  RC=$?
  if [ $c -gt 2048 ]; then
    if [ "$RC" -eq 0 ] && ctx_warned $c; then pass "chat -c $c > trained: a warning"; else fail "chat -c $c" "$(said)"; fi
  elif [ "$RC" -eq 0 ] && ! grep -q "trained context" "$ERR"; then
    pass "chat -c $c <= trained: no warning"
  else
    fail "chat -c $c" "$(said)"
  fi
done
SERVE_CTX=""
if "$INFER" serve --help >/dev/null 2>&1; then SERVE_CTX="8192 2048"; else echo "skip - serve -c: this build has no infer serve"; fi
for c in $SERVE_CTX; do
  "$INFER" serve -m "$MODEL" --port 0 -c $c >"$OUT" 2>"$ERR" &
  SPID=$!
  for _ in $(seq 1 300); do
    grep -q "ready:" "$ERR" && break
    kill -0 $SPID 2>/dev/null || break
    sleep 0.1
  done
  kill -TERM $SPID 2>/dev/null
  wait $SPID
  RC=$?
  if ! grep -q "ready:" "$ERR"; then
    fail "serve -c $c did not start" "$(said)"
  elif [ $c -gt 2048 ]; then
    if ctx_warned $c; then pass "serve -c $c > trained: a warning"; else fail "serve -c $c: no warning" "$(said)"; fi
  elif ! grep -q "trained context" "$ERR"; then
    pass "serve -c $c <= trained: no warning"
  else
    fail "serve -c $c: a warning" "$(said)"
  fi
done

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
