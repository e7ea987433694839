#!/bin/sh
# Runs an MPI test program under mpirun for CTest:
#   tp_run.sh NP PROGRAM [ARGS...]
# Extra mpirun options (a transport) come in $INFER_MPIRUN_ARGS, e.g.
# "--mca btl tcp,self --mca btl_tcp_if_include lo". Exit 77 (CTest: skipped)
# without mpirun or when the build has no MPI (PROGRAM --mpi-built says so).
np=$1
prog=$2
shift 2
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIPPED: no mpirun (apt-get install openmpi-bin)"
  exit 77
fi
"$prog" --mpi-built
rc=$?
if [ "$rc" = 77 ]; then
  echo "SKIPPED: this build has no MPI (configure with -DINFER_MPI=ON and the MPI development files)"
  exit 77
fi
[ "$rc" = 0 ] || exit "$rc"
# As root (CI containers) mpirun needs to be told it may run.
# shellcheck disable=SC2086
exec mpirun --allow-run-as-root --oversubscribe --timeout "${INFER_MPIRUN_TIMEOUT:-900}" -np "$np" \
  $INFER_MPIRUN_ARGS "$prog" "$@"
