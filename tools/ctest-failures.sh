#!/usr/bin/env bash
# After a failed ctest run in build dir $1: print each failed test's output
# (its last 80 lines, from Testing/Temporary/LastTest.log), then rerun the
# failed tests once, alone, and say whether each passed the second time.
set -uo pipefail
dir=${1:-build}
log=$dir/Testing/Temporary/LastTest.log
failed=$dir/Testing/Temporary/LastTestsFailed.log
[ -s "$failed" ] || { echo "ctest-failures: no $failed"; exit 0; }
echo
echo "== output of the failed tests (from $log)"
while IFS=: read -r _num name; do
  echo "---- $name"
  awk -v n="$name" '
    $0 ~ ("^[0-9]+/[0-9]+ Testing: " n "$") { on = 1; next }
    on && $0 ~ ("^\"" n "\" end time:") { exit }
    on { print }' "$log" | tail -n 80
done < "$failed"
echo
echo "== the failed tests once more, alone (a pass here means flaky: still a failure)"
names=$(cut -d: -f2 "$failed" | paste -sd'|')
ctest --test-dir "$dir" --output-on-failure -j 1 -R "^(${names})\$" 2>&1 | tail -n 40
