#!/bin/sh
# A CUDA build of libinfer must load on machines without the CUDA libraries:
# no CUDA library may be among the shared library's NEEDED entries (cudart is
# linked statically, the driver, cuBLAS and NCCL are opened at run time).
# usage: cuda_needed_test.sh LIBRARY
set -eu
lib="$1"
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED of $lib:"
echo "$needed" | sed 's/^/  /'
bad=$(echo "$needed" | grep -E '^lib(cublas|cublasLt|cudart|cuda|nvrtc|nvJitLink|nccl)\.so' || true)
if [ -n "$bad" ]; then
  echo "FAIL: load-time CUDA dependencies: $bad"
  exit 1
fi
echo "OK: no CUDA library is needed at load time"
