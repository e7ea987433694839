#!/bin/sh
# Runs an MPI test program the way CTest needs it:
#   run_mpi.sh NP PROGRAM [MPIRUN OPTIONS...] [-- PROGRAM ARGS...]
# NP 0 runs PROGRAM alone (an MPI singleton, no launcher). Exits 77 (CTest: skipped)
# when PROGRAM is "none" (a build without MPI) or mpirun is not installed.
set -eu
np=$1
prog=$2
shift 2
if [ "$prog" = none ]; then
  echo "SKIPPED: this build has no MPI (configure with -DINFER_MPI=ON and libopenmpi-dev)"
  exit 77
fi
opts=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  opts="$opts $1"
  shift
done
[ $# -gt 0 ] && shift
if [ "$np" = 0 ]; then
  exec "$prog" "$@"
fi
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIPPED: mpirun not found (Debian: openmpi-bin)"
  exit 77
fi
# Open MPI refuses root without --allow-run-as-root; 3 ranks on 2 cores need --oversubscribe.
# shellcheck disable=SC2086
exec mpirun --allow-run-as-root --oversubscribe -np "$np" $opts "$prog" "$@"
