#!/usr/bin/env bash
# Faults of a tensor-parallel job (issue #31) through the infer CLI:
#
#   tp_faults_test.sh PATH_TO_INFER_BINARY [SCRATCH_DIR]
#
#   - a rank killed (kill -9) mid-generation: mpirun ends the job, non-zero,
#     within 30 s, and its stderr names the rank that died (follower, then
#     leader);
#   - rank 1 stopped (kill -STOP) with --tp-timeout 3000: rank 0 fails with
#     "timed out" and the job ends within ~10 s (no hang);
#   - different model files on the two ranks (an MPMD launch), and different
#     engine parameters: a clear "disagree" error, non-zero, no hang;
#   - --tp 2 under `mpirun -np 3`, and --tp 2 without mpirun: clear errors.
# Every launch runs under a hard timeout, so a hang fails the test instead of
# hanging CI; leftovers (a stopped rank) are continued and killed on exit.
# Exits 77 (skipped) without mpirun, or when the binary has no --tp or was
# built without MPI; 1 when a check fails.
set -u

INFER=${1:-}
if [ -z "$INFER" ] || [ ! -x "$INFER" ]; then
  echo "usage: $0 PATH_TO_INFER_BINARY [SCRATCH_DIR] (got '${INFER}')" >&2
  exit 1
fi
INFER=$(cd "$(dirname "$INFER")" && pwd)/$(basename "$INFER")
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIPPED: no mpirun (apt-get install openmpi-bin)"
  exit 77
fi
if ! "$INFER" run --help 2>&1 | grep -q -- '--tp'; then
  echo "SKIPPED: $INFER run has no --tp"
  exit 77
fi

KEEP=${2:-}
if [ -n "$KEEP" ]; then
  TMP=$KEEP
  rm -rf "$TMP"
  mkdir -p "$TMP"
else
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/infer-tp-faults.XXXXXX")
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe ${INFER_MPIRUN_ARGS:-})

# Every process this script started: continued (a stopped rank) and killed
# on exit, so nothing leaks whatever happened.
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do
    pkill -CONT -P "$p" 2>/dev/null
    pkill -KILL -P "$p" 2>/dev/null
    kill -CONT "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
  if [ -z "$KEEP" ]; then rm -rf "$TMP"; fi
}
trap cleanup EXIT

PASSED=0
FAILED=0
pass() {
  PASSED=$((PASSED + 1))
  echo "ok   - $1"
}
fail() {
  FAILED=$((FAILED + 1))
  echo "FAIL - $1"
  if [ -n "${2:-}" ]; then printf '%s\n' "$2" | head -n 25 | sed 's/^/       /'; fi
}

OUT=$TMP/stdout
ERR=$TMP/stderr
RC=0
SECS=0
# launch LIMIT CMD...: runs CMD under a hard timeout; RC, SECS, $OUT, $ERR.
launch() {
  local limit=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$OUT" 2>"$ERR"
  RC=$?
  t1=$(date +%s.%N)
  SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
}
said() {
  echo "exit status $RC after ${SECS}s; stderr:"
  head -c 2500 "$ERR"
}

# A model that generates for a while: tiny with a context of 8192.
A=$TMP/a.gguf
B=$TMP/b.gguf
"$INFER" synth --preset tiny --type f32 -o "$A" >/dev/null 2>&1 || { echo "FAIL - infer synth"; exit 1; }
# The same shapes and tensors with other weights (only the bytes differ).
"$INFER" synth --preset tiny --type f32 --seed 2 -o "$B" >/dev/null 2>&1 || { echo "FAIL - infer synth"; exit 1; }
LONG=(run -m "$A" --tp 2 -t 1 -p "once upon a time" -n 8000 --ctx-size 8192 --ignore-eos --temp 0)

# The build has MPI and --tp works at all (else skipped / failed).
launch 120 "${MPIRUN[@]}" -np 2 "$INFER" run -m "$A" --tp 2 -t 1 -p "once upon a time" -n 8 --temp 0
if [ "$RC" != 0 ]; then
  if grep -qi "without MPI\|not built with MPI\|no MPI\|INFER_MPI" "$ERR"; then
    echo "SKIPPED: this build has no MPI"
    exit 77
  fi
  fail "mpirun -np 2 infer run --tp 2 works" "$(said)"
  echo "$PASSED passed, $FAILED failed"
  exit 1
fi
pass "mpirun -np 2 infer run --tp 2 works (${SECS}s)"

# rank_pid MPIRUN_PID RANK: the pid of that rank (a child of mpirun).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# start_long: the long run in the background; MP (mpirun's pid), after rank
# 0 printed generated text (so the kill lands mid-generation).
start_long() {
  "${MPIRUN[@]}" -np 2 "$INFER" "${LONG[@]}" "$@" >"$OUT" 2>"$ERR" &
  MP=$!
  PIDS+=("$MP")
  local i
  for i in $(seq 1 600); do
    if [ "$(wc -c <"$OUT")" -gt 200 ]; then return 0; fi
    if ! kill -0 "$MP" 2>/dev/null; then return 1; fi
    sleep 0.1
  done
  return 1
}
# wait_end LIMIT: waits for mpirun at most LIMIT s; RC (124 on timeout), SECS.
wait_end() {
  local limit=$1 t0 i
  t0=$(date +%s.%N)
  RC=124
  for i in $(seq 1 $((limit * 10))); do
    if ! kill -0 "$MP" 2>/dev/null; then
      wait "$MP"
      RC=$?
      break
    fi
    sleep 0.1
  done
  SECS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}

# 1. kill -9 a rank mid-generation: the job ends, non-zero, within 30 s,
#    and stderr names the rank.
for victim in 1 0; do
  what="kill -9 rank $victim mid-generation ends the job within 30 s"
  if ! start_long; then
    fail "$what" "the long run did not start generating: $(said)"
    continue
  fi
  pid=$(rank_pid "$MP" "$victim")
  if [ -z "$pid" ]; then
    fail "$what" "rank $victim's process not found under mpirun $MP"
    continue
  fi
  kill -9 "$pid"
  wait_end 30
  if [ "$RC" = 124 ]; then
    fail "$what" "mpirun still running after 30 s"
  elif [ "$RC" = 0 ]; then
    fail "$what" "mpirun exited 0 after a rank was killed: $(said)"
  elif ! grep -q "rank $victim" "$ERR"; then
    fail "$what" "stderr does not name rank $victim: $(said)"
  else
    pass "$what (exit $RC after ${SECS}s: $(grep -m1 "rank $victim" "$ERR" | head -c 160))"
  fi
done

# 2. kill -STOP rank 1 with --tp-timeout 3000: rank 0 times out, the job ends.
what="a stopped rank 1 (--tp-timeout 3000): rank 0 says \"timed out\", the job ends within 10 s"
if ! start_long --tp-timeout 3000; then
  fail "$what" "the long run did not start generating: $(said)"
else
  pid=$(rank_pid "$MP" 1)
  if [ -z "$pid" ]; then
    fail "$what" "rank 1's process not found"
  else
    kill -STOP "$pid"
    wait_end 20
    kill -CONT "$pid" 2>/dev/null
    if [ "$RC" = 124 ]; then
      fail "$what" "mpirun still running after 20 s: $(said)"
    elif [ "$RC" = 0 ]; then
      fail "$what" "mpirun exited 0: $(said)"
    elif ! grep -q "timed out" "$ERR"; then
      fail "$what" "no \"timed out\" on stderr: $(said)"
    elif awk -v s="$SECS" 'BEGIN { exit !(s > 10) }'; then
      fail "$what" "the job took ${SECS}s to end: $(said)"
    else
      pass "$what (exit $RC after ${SECS}s: $(grep -m1 "timed out" "$ERR" | head -c 200))"
    fi
  fi
fi

# 3. Different model files on the two ranks (MPMD; same shapes, other weights):
#    "disagree", non-zero.
what="different models on the two ranks: a \"disagree\" error, no hang"
launch 60 "${MPIRUN[@]}" -np 1 "$INFER" run -m "$A" --tp 2 -t 1 -p "hello" -n 4 \
  : -np 1 "$INFER" run -m "$B" --tp 2 -t 1 -p "hello" -n 4
if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then
  fail "$what" "hung (killed after 60 s): $(said)"
elif [ "$RC" = 0 ]; then
  fail "$what" "exit 0: $(said)"
elif ! grep -q "disagree" "$ERR"; then
  fail "$what" "no \"disagree\" on stderr: $(said)"
else
  pass "$what (exit $RC after ${SECS}s: $(grep -m1 "disagree" "$ERR" | head -c 200))"
fi

# 3b. The same model, different engine parameters (the context size).
what="different engine parameters on the two ranks: a \"disagree\" error, no hang"
launch 60 "${MPIRUN[@]}" -np 1 "$INFER" run -m "$A" --tp 2 -t 1 -p "hello" -n 4 --ctx-size 128 \
  : -np 1 "$INFER" run -m "$A" --tp 2 -t 1 -p "hello" -n 4 --ctx-size 256
if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then
  fail "$what" "hung (killed after 60 s): $(said)"
elif [ "$RC" = 0 ]; then
  fail "$what" "exit 0: $(said)"
elif ! grep -q "disagree" "$ERR"; then
  fail "$what" "no \"disagree\" on stderr: $(said)"
else
  pass "$what (exit $RC after ${SECS}s: $(grep -m1 "disagree" "$ERR" | head -c 200))"
fi

# 4. --tp 2 in a job of 3 ranks, and --tp 2 without mpirun: clear errors.
what="--tp 2 under mpirun -np 3: a clear error, non-zero"
launch 60 "${MPIRUN[@]}" -np 3 "$INFER" run -m "$A" --tp 2 -t 1 -p "hello" -n 4
if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then
  fail "$what" "hung: $(said)"
elif [ "$RC" = 0 ]; then
  fail "$what" "exit 0: $(said)"
elif ! grep -q "3 rank\|rank(s)\|-np 2\|job" "$ERR"; then
  fail "$what" "the error does not say what is wrong: $(said)"
else
  pass "$what (exit $RC: $(grep -m1 "infer" "$ERR" | head -c 200))"
fi

what="--tp 2 without mpirun: a clear error, exit 1"
launch 60 env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK "$INFER" run -m "$A" \
  --tp 2 -t 1 -p "hello" -n 4
if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then
  fail "$what" "hung: $(said)"
elif [ "$RC" != 1 ]; then
  fail "$what" "exit $RC, not 1: $(said)"
elif ! grep -qi "mpirun\|MPI launcher" "$ERR"; then
  fail "$what" "the error does not say to launch with mpirun: $(said)"
else
  pass "$what ($(head -c 200 "$ERR"))"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
