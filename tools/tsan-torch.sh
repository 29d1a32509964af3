#!/usr/bin/env bash
# tools/tsan-torch.sh [NRANKS]: the torch.distributed backend's threads
# (callers' waits, the completer, comm-hook callbacks, two groups from two
# threads, destroy with work in flight) under ThreadSanitizer.
# Builds the extension and libciuic with -fsanitize=thread in build-tsan-py/
# and runs python/tests/tsan_torch_backend.py with libtsan preloaded into
# an uninstrumented Python and torch. TSan sees their locks (intercepted)
# but not their atomics, so reports whose top frame is inside Python or
# torch are left out (python/tests/tsan_torch.supp); any other report,
# a wrong result or a hang fails. Reports go to build-tsan-py/tsan.*.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2}
dir=${CIUIC_TSAN_PY_DIR:-build-tsan-py}
python=${PYTHON:-python3}
"$python" -c "import torch" 2>/dev/null || { echo "tsan-torch.sh: skipped: torch is not importable by $python"; exit 0; }
# The interpreter itself: libtsan preloaded into a wrapper script (pyenv's
# shims are bash) crashes the wrapper.
python=$("$python" -c "import sys; print(sys.executable)")
if [[ ! -f "$dir/build.ninja" ]]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCIUIC_SANITIZE=thread -DCIUIC_WITH_CUDA=OFF \
    -DCIUIC_WITH_NCCL=OFF -DCIUIC_BUILD_PERF=OFF -DCIUIC_BUILD_TESTS=OFF -DCIUIC_WITH_TORCH=ON \
    -DPython3_EXECUTABLE="$python" > /dev/null
fi
cmake --build "$dir" -j "${CIUIC_JOBS:-2}" --target _ciuic _ciuic_torch
tsan=$(gcc -print-file-name=libtsan.so)
[[ -f $tsan ]] || { echo "tsan-torch.sh: no libtsan.so ($tsan)" >&2; exit 1; }
rm -f "$dir"/tsan.* && store=$(mktemp -d /tmp/ciuic-tsan-torch.XXXXXX)
trap 'rm -rf "$store"' EXIT
rc=0
LD_PRELOAD=$tsan PYTHONPATH=$PWD/$dir/python \
  TSAN_OPTIONS="suppressions=$PWD/python/tests/tsan_torch.supp:report_signal_unsafe=0:halt_on_error=0:log_path=$PWD/$dir/tsan:history_size=4" \
  timeout 1200 "$python" python/tests/tsan_torch_backend.py "$n" "$store" || rc=$?
reports=$(cat "$dir"/tsan.* 2>/dev/null | grep -c "^WARNING: ThreadSanitizer" || true)
echo "tsan-torch.sh: $n ranks, driver exit $rc, ThreadSanitizer reports outside Python and torch: $reports"
if [[ $reports -gt 0 ]]; then
  head -80 "$dir"/tsan.*
  exit 1
fi
exit "$rc"
