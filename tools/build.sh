#!/usr/bin/env bash
# tools/build.sh [BUILD_DIR] [cmake args...]: configures (once) and builds
# ciuic with Ninja, two jobs by default (CIUIC_JOBS to change).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [[ ! -f "$dir/build.ninja" ]]; then
  cmake -S . -B "$dir" -G Ninja "$@"
fi
cmake --build "$dir" -j "${CIUIC_JOBS:-2}"
