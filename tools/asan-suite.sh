#!/usr/bin/env bash
# tools/asan-suite.sh [CTEST ARGS...]: the whole C++ suite (every CTest test
# of a build without Python, the benchmarks or CUDA) under AddressSanitizer
# and UndefinedBehaviorSanitizer, in build-asan/ (CIUIC_ASAN_DIR), configured
# as CI's ASan stage. Extra arguments go to ctest (e.g. -L unit -LE install,
# which is what CI runs on every submission; this script without them is the
# whole suite, ~7 min of tests here after a ~14 min build).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${CIUIC_ASAN_DIR:-build-asan}
bash tools/build.sh "$dir" -DCIUIC_SANITIZE=address,undefined -DCIUIC_WITH_CUDA=OFF -DCIUIC_WITH_PYTHON=OFF \
  -DCIUIC_BUILD_PERF=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
# hwloc's plugins leak in their own init and are unloaded before the report
# (.ci/run says more); libpmix's own leaks are in tests/lsan.supp.
HWLOC_COMPONENTS=-pci,-opencl,-gl \
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0 \
  ctest --test-dir "$dir" --output-on-failure -j "${CIUIC_JOBS:-2}" "$@"
