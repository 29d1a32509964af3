#!/usr/bin/env bash
# perf/gpu_check.sh [PREBUILT_DIR]
#
# The GPU checks, in one go (a few minutes on one GPU):
#   1. the CUDA kernel tests (every dtype x op x arity x size x alignment,
#      bit-exact against the CPU reference) with CIUIC_TEST_REQUIRE_CUDA=1, so
#      a machine without a usable GPU fails instead of skipping;
#   2. collectives on GPU buffers (gpu_comm_test): ranks sharing the GPU run
#      on host copies, CIUIC_GPU=nccl names them, a rank with a GPU of its
#      own runs on NCCL (CIUIC_TEST_REQUIRE_NCCL=1 when NCCL was found);
#   3. cuda_kernel_perf: GB/s of the reduction kernels next to a
#      device-to-device cudaMemcpy, results checked (#wrong);
#   4. allreduce_perf on GPU buffers (--mem cuda): 2 ranks on one GPU (host
#      copies), 1 rank on NCCL and on host copies, and the same 2 ranks on
#      host buffers for comparison; each with its #wrong column.
#
# Without an argument it configures and builds ./build-gpu with
# CIUIC_WITH_CUDA=ON (needs the Debian packages of .ci/install-deps and nvcc).
# With PREBUILT_DIR it runs the binaries found there (built elsewhere and
# copied to a GPU machine that lacks the build dependencies; put any shared
# library they need, e.g. libhwy.so.1, in the same folder).
# NCCL: CIUIC_NCCL_LIB if set, else libnccl.so.2 from the loader's path or
# from the Python package nvidia-nccl-cu* when one is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
stage() { echo; echo "== $* ($(( $(date +%s) - start )) s)"; }
# Every stage runs; the script fails at the end if any did.
rc=0
run() { "$@" || { echo "gpu_check: FAILED (exit $?): $*"; rc=1; }; }

if [[ $# -ge 1 ]]; then
  dir=$(cd "$1" && pwd)
  export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  find_bin() { find "$dir" -name "$1" -type f | head -n 1; }
  test_bin=$(find_bin kernels_cuda_test)
  comm_bin=$(find_bin gpu_comm_test)
  perf_bin=$(find_bin cuda_kernel_perf)
  ar_bin=$(find_bin allreduce_perf)
else
  jobs=$(nproc)
  cmake -S . -B build-gpu -G Ninja -DCIUIC_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-gpu -j "$jobs" --target kernels_cuda_test gpu_comm_test cuda_kernel_perf allreduce_perf
  test_bin=build-gpu/tests/unit/kernels/kernels_cuda_test
  comm_bin=build-gpu/tests/integration/gpu_comm_test
  perf_bin=build-gpu/perf/cuda_kernel_perf
  ar_bin=build-gpu/perf/allreduce_perf
fi
for b in "$test_bin" "$comm_bin" "$perf_bin" "$ar_bin"; do
  [[ -n "$b" && -x "$b" ]] || { echo "gpu_check: a binary is missing (kernels_cuda_test gpu_comm_test cuda_kernel_perf allreduce_perf)" >&2; exit 2; }
done

if [[ -z "${CIUIC_NCCL_LIB:-}" ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  for py in python3 /opt/torch/.venv/bin/python3; do
    d=$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null) || continue
    [[ -f "$d/lib/libnccl.so.2" ]] && { export CIUIC_NCCL_LIB="$d/lib/libnccl.so.2"; break; }
  done
fi
nccl_required=0
[[ -n "${CIUIC_NCCL_LIB:-}" ]] || ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 ' && nccl_required=1
echo "NCCL: ${CIUIC_NCCL_LIB:-libnccl.so.2 from the loader path} (required: $nccl_required)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

stage "CUDA kernel tests"
run env CIUIC_TEST_REQUIRE_CUDA=1 timeout 180 "$test_bin"
stage "collectives on GPU buffers"
run env CIUIC_TEST_REQUIRE_CUDA=1 CIUIC_TEST_REQUIRE_NCCL=$nccl_required timeout 300 "$comm_bin"
stage "CUDA kernel benchmark"
run timeout 180 "$perf_bin" "${CIUIC_GPU_CHECK_MAX_MIB:-256}"
max=${CIUIC_GPU_CHECK_AR_MAX:-256M}
stage "allreduce_perf: 2 ranks sharing the GPU, GPU buffers (host copies)"
run timeout 120 "$ar_bin" -N 2 --mem cuda -t shm -b 8 -e "$max" -f 8
stage "allreduce_perf: 2 ranks, host buffers (the same path without the copies)"
run timeout 120 "$ar_bin" -N 2 --mem host -t shm -b 8 -e "$max" -f 8
stage "allreduce_perf: 1 rank, GPU buffers on NCCL"
run timeout 120 "$ar_bin" -N 1 --mem cuda -b 8 -e "$max" -f 8
stage "allreduce_perf: 1 rank, GPU buffers through host copies (CIUIC_GPU=host)"
CIUIC_GPU=host run timeout 120 "$ar_bin" -N 1 --mem cuda -b 8 -e "$max" -f 8
stage "done"
exit $rc
