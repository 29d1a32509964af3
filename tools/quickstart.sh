#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the
# main job. Until the collectives land (issue #5) the main job is the
# reduction-kernel benchmark: GB/s per working-set size next to a
# hand-written AVX-512 loop, a scalar loop and memcpy, results checked.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh build
build/tools/ciuic-info | head -n 5
build/perf/kernel_perf "$@"
