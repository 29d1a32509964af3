#!/usr/bin/env bash
# CIUIC_DEBUG_FILE with %r: each rank of a ciuic-run job writes its own file,
# every line prefixed with its rank (the process's first communicator names
# it), and none for rank "-" (lines before the rank is known go to stderr).
#
# Usage: log_per_rank.sh <ciuic-run> <c_api_ranks> <nranks>
set -uo pipefail
run=$1 capi=$2 n=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
CIUIC_DEBUG=INFO CIUIC_DEBUG_FILE="$dir/log.%r" timeout 120 "$run" -n "$n" -- "$capi" >"$dir/out" 2>&1
rc=$?
fail=0
if [[ $rc -ne 0 ]]; then tail -20 "$dir/out"; echo "FAIL: the job exited $rc"; exit 1; fi
for ((r = 0; r < n; ++r)); do
  f=$dir/log.$r
  if [[ ! -s $f ]]; then echo "FAIL: no log file for rank $r: $(ls "$dir")"; fail=1; continue; fi
  # "host:pid:rank LEVEL file:line ...": every line carries this rank.
  other=$(awk '{ n = split($1, p, ":"); print p[n] }' "$f" | grep -vcx "$r")
  plan=$(grep -c ' INFO comm_impl\.cc:[0-9]* allreduce count=' "$f")
  if [[ $other -ne 0 || $plan -eq 0 ]]; then
    head -5 "$f"
    echo "FAIL: rank $r's file: $other lines with another rank, $plan all-reduce lines"
    fail=1
  fi
done
[[ -e $dir/log.- ]] && { echo "FAIL: a file for rank '-'"; fail=1; }
[[ $fail -eq 0 ]] && echo "PASS: $n per-rank log files, each line naming its rank"
exit $fail
