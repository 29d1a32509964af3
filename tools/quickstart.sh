#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the
# main job: allreduce_perf over 4 local ranks on the default transport (shm
# on one host), a size sweep from 8 B to 64 MiB with every result checked,
# ending with a summary (peak busbw, small-message latency, the algorithm
# chosen per size). Extra arguments go to allreduce_perf (e.g. -e 1G, -t tcp).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh build
# sed reads to the end: head would leave ciuic-info writing into a closed
# pipe, and its SIGPIPE (exit 141) stops the script under pipefail.
build/tools/ciuic-info | sed -n 1,5p
echo "allreduce_perf: 4 ranks, 8 B .. 64 MiB (about a minute on 2 cores)"
build/tools/ciuic-run -n 4 -- build/perf/allreduce_perf -b 8 -e 64M -f 4 "$@"
