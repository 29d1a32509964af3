#!/usr/bin/env bash
# The README's test command: installs what is missing, builds ./build and
# runs every test (ctest; labels unit, install, cuda, verbs...). Tests that
# need hardware this machine lacks (a GPU, an RDMA NIC) skip with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh build
ctest --test-dir build --output-on-failure -j "${CIUIC_JOBS:-2}" "$@"
