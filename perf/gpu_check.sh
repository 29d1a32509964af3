#!/usr/bin/env bash
# perf/gpu_check.sh [PREBUILT_DIR]
#
# The GPU checks of the kernels, in one go (well under 5 minutes on one GPU):
#   1. the CUDA kernel tests (every dtype x op x arity x size x alignment,
#      bit-exact against the CPU reference) with CIUIC_TEST_REQUIRE_CUDA=1, so
#      a machine without a usable GPU fails instead of skipping;
#   2. cuda_kernel_perf: GB/s of the reduction kernels next to a
#      device-to-device cudaMemcpy, results checked (#wrong).
#
# Without an argument it configures and builds ./build-gpu with
# CIUIC_WITH_CUDA=ON (needs the Debian packages of .ci/install-deps and nvcc).
# With PREBUILT_DIR it runs kernels_cuda_test and cuda_kernel_perf found
# there (binaries built elsewhere and copied to a GPU machine that lacks the
# build dependencies; put any shared library they need, e.g. libhwy.so.1,
# in the same folder).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -ge 1 ]]; then
  dir=$(cd "$1" && pwd)
  export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  find_bin() { find "$dir" -name "$1" -type f | head -n 1; }
  test_bin=$(find_bin kernels_cuda_test)
  perf_bin=$(find_bin cuda_kernel_perf)
else
  jobs=$(nproc)
  cmake -S . -B build-gpu -G Ninja -DCIUIC_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-gpu -j "$jobs" --target kernels_cuda_test cuda_kernel_perf
  test_bin=build-gpu/tests/unit/kernels/kernels_cuda_test
  perf_bin=build-gpu/perf/cuda_kernel_perf
fi
[[ -x "$test_bin" && -x "$perf_bin" ]] || { echo "gpu_check: kernels_cuda_test / cuda_kernel_perf not found" >&2; exit 2; }

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "== CUDA kernel tests"
CIUIC_TEST_REQUIRE_CUDA=1 "$test_bin"
echo "== CUDA kernel benchmark"
"$perf_bin" "${CIUIC_GPU_CHECK_MAX_MIB:-256}"
