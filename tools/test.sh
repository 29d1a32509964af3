#!/usr/bin/env bash
# The README's test command: installs what is missing, builds ./build and
# runs every test (ctest; labels unit, install, cuda, verbs...). Tests that
# need hardware this machine lacks (a GPU, an RDMA NIC) skip with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh build
rc=0
ctest --test-dir build --output-on-failure -j "${CIUIC_JOBS:-2}" "$@" || rc=$?
if [ "$rc" -ne 0 ]; then
  # A CI log is read from its end: repeat what each failed test printed
  # there, then run it once more alone to tell a flaky test from a broken
  # one. Either way the run fails.
  bash tools/ctest-failures.sh build || true
fi
exit "$rc"
