#!/usr/bin/env bash
# The CLI's --tp under mpirun (README "Running one model on several
# processes"): rank 0 prints exactly what one process prints (greedy), the
# other ranks print nothing; the same over the TCP transport; infer bench --tp
# reports the communication time; launching wrong is a clear error. Skipped
# (77) without mpirun or in a build without MPI.
#
#   cli_tp_test.sh PATH_TO_INFER_BINARY
set -u
INFER=${1:?usage: cli_tp_test.sh INFER}
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (Debian: openmpi-bin)"; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/infer-tp-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun --oversubscribe -np 2)
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   - $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | head -n 20 | sed 's/^/       /'; }

M="$TMP/tiny.gguf"
"$INFER" synth --preset tiny --type f32 -o "$M" >/dev/null 2>&1 || { echo "FAIL: infer synth"; exit 1; }
"$INFER" run -m "$M" --tp 2 -p hi -n 1 >/dev/null 2>"$TMP/probe"
if grep -q "no MPI" "$TMP/probe"; then echo "SKIP: this build has no MPI"; exit 77; fi

RUN=(run -m "$M" -p "Once upon a time" -n 48 --temp 0 -t 1 --ignore-eos)
"$INFER" "${RUN[@]}" >"$TMP/one.out" 2>"$TMP/one.err" || fail "one process runs" "$(cat "$TMP/one.err")"

for transport in default tcp; do
  extra=()
  [ $transport = tcp ] && extra=(--mca btl tcp,self --mca btl_tcp_if_include lo)
  timeout 120 "${MPI[@]}" "${extra[@]}" "$INFER" "${RUN[@]}" --tp 2 >"$TMP/tp.out" 2>"$TMP/tp.err"; rc=$?
  if [ $rc -eq 0 ] && cmp -s "$TMP/one.out" "$TMP/tp.out"; then
    pass "$transport: mpirun -np 2 infer run --tp 2 prints one process's greedy text"
  else
    fail "$transport: --tp 2 text (exit $rc)" "$(diff "$TMP/one.out" "$TMP/tp.out" | head -5; tail -5 "$TMP/tp.err")"
  fi
  # One statistics line: rank 1 printed nothing.
  n=$(grep -c "prompt tokens" "$TMP/tp.err")
  [ "$n" = 1 ] && pass "$transport: only rank 0 prints" || fail "$transport: $n statistics lines" "$(cat "$TMP/tp.err")"
done

timeout 120 "${MPI[@]}" "$INFER" bench -m "$M" --tp 2 -t 1 -p 16 -n 8 -r 1 --json >"$TMP/bench.out" 2>"$TMP/bench.err"; rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l <"$TMP/bench.out")" = 1 ] &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["tp"]==2 and d["decode_steps"]==7 and d["decode_comm_ms"]>0 and d["comm_ms_per_token"]>0, d' "$TMP/bench.out" 2>"$TMP/py.err"; then
  pass "bench --tp 2 --json: one line, with the communication time per step and token"
else
  fail "bench --tp 2 (exit $rc)" "$(cat "$TMP/bench.out" "$TMP/bench.err" "$TMP/py.err")"
fi

timeout 60 "$INFER" "${RUN[@]}" --tp 2 >/dev/null 2>"$TMP/e"; rc=$?
[ $rc = 1 ] && grep -q "not started by an MPI launcher: launch with mpirun -np 2" "$TMP/e" &&
  pass "--tp 2 without mpirun: exit 1, says how to launch" || fail "--tp 2 without mpirun (exit $rc)" "$(cat "$TMP/e")"

timeout 120 mpirun --oversubscribe -np 3 "$INFER" "${RUN[@]}" --tp 2 >/dev/null 2>"$TMP/e"; rc=$?
[ $rc != 0 ] && [ $rc != 124 ] && grep -q "^infer: rank [12]: .*the MPI job has 3 rank(s): launch with mpirun -np 2" "$TMP/e" &&
  pass "--tp 2 under mpirun -np 3: fails, each rank names itself" || fail "--tp 2 under -np 3 (exit $rc)" "$(cat "$TMP/e")"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
