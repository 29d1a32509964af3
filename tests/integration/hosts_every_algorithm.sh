#!/usr/bin/env bash
# Every collective x every network algorithm, exact, on simulated hosts
# (ciuic-run --hosts: network namespaces, shm inside a host, tcp between).
#
# Usage: hosts_every_algorithm.sh <nranks> <hosts> <ciuic-run> <ciuic-info>
#          <c_api_ranks> <perf dir> [dtypes]
#   <hosts>: K or A+B+... as ciuic-run takes it; <perf dir> holds
#   allreduce_perf and reduce_scatter_perf.
#
# The algorithms come from `ciuic-info --algorithms` (schedules only: the
# shm-only kinds need one host), so one added to the registry is run here
# with no change. Each round forces one algorithm of every collective at
# once (CIUIC_ALGO=coll:name,...; round i takes each collective's i-th, or
# its last), runs tests/integration/c_api_ranks (every C entry point,
# results checked element by element) and reads CIUIC_DEBUG=INFO's per-call
# lines to prove that each forced algorithm is the one that ran.
# With "dtypes", every dtype of allreduce_perf and reduce_scatter_perf
# goes through the hierarchical and the ring forms, results checked.
# Exit 0 pass, 1 fail, 77 (CTest's skip) when namespaces need root.
set -uo pipefail
n=$1 hosts=$2 run=$3 info=$4 capi=$5 perf=$6 extra=${7:-}
unset CIUIC_ALGO CIUIC_TRANSPORT CIUIC_RANK CIUIC_WORLD_SIZE CIUIC_STORE_ADDR
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail=0

# collective -> its schedule algorithms, in registry order.
declare -A algos
order=()
while read -r coll name kind _; do
  [[ $kind == schedule ]] || continue
  [[ -n ${algos[$coll]:-} ]] || order+=("$coll")
  algos[$coll]="${algos[$coll]:-} $name"
done < <("$info" --algorithms | tail -n +2)
if [[ ${#order[@]} -lt 10 ]]; then
  echo "FAIL: ciuic-info --algorithms listed ${#order[@]} collectives with schedules"
  exit 1
fi
rounds=1
for c in "${order[@]}"; do
  read -ra a <<<"${algos[$c]}"
  ((${#a[@]} > rounds)) && rounds=${#a[@]}
done

# The library's own deadline (bootstrap and every collective) well inside
# the script's, so a stall ends with the ranks naming the peer and step
# instead of timeout's SIGTERM.
export CIUIC_TIMEOUT_MS=${CIUIC_TIMEOUT_MS:-60000}

# ciuic-run under a time limit, its output in $log; 77 when it needs root.
launch() {
  # --keep-going: a rank that fails leaves the others running to their own
  # deadline, so each names where it stalled (the last lines below).
  timeout 240 "$run" --keep-going -n "$n" --hosts "$hosts" -- "$@" >"$log" 2>&1
  local rc=$?
  if grep -q 'needs root' "$log"; then
    echo "SKIP: simulated hosts need root: $(grep -m1 'needs root' "$log")"
    exit 77
  fi
  return $rc
}

for ((i = 0; i < rounds; ++i)); do
  knob=""
  declare -A want=()
  for c in "${order[@]}"; do
    read -ra a <<<"${algos[$c]}"
    pick=${a[$((i < ${#a[@]} ? i : ${#a[@]} - 1))]}
    want[$c]=$pick
    knob+="${knob:+,}$c:$pick"
  done
  CIUIC_DEBUG=INFO CIUIC_ALGO=$knob launch "$capi"
  rc=$?
  ok=$(grep -c 'c api: ok' "$log")
  if [[ $rc -ne 0 || $ok -ne $n ]]; then
    # Every rank's last lines: which one stalled, and where.
    grep -v ' INFO ' "$log" | tail -60
    grep ' INFO ' "$log" | tail -30
    echo "FAIL: round $i ($knob): exit $rc, $ok of $n ranks said ok"
    fail=1
    continue
  fi
  # "comm_impl.cc:N <collective> count=C: <algorithm> (<why>)": every call
  # of a forced collective ran the forced algorithm, and every collective
  # but send/recv (p2p, not logged per call) was called.
  declare -A seen=()
  while read -r coll algo why; do
    seen[$coll]=1
    if [[ -n ${want[$coll]:-} && ( $algo != "${want[$coll]}" || $why != "(forced" ) ]]; then
      echo "FAIL: round $i: $coll ran $algo $why, forced ${want[$coll]}"
      fail=1
    fi
  done < <(sed -n 's/.* INFO comm_impl\.cc:[0-9]* \([a-z]*\) count=[0-9]*: \([a-z-]*\) \((forced\|[a-z]*\).*/\1 \2 \3/p' "$log")
  missing=""
  for c in "${order[@]}"; do
    [[ $c == send || $c == recv || -n ${seen[$c]:-} ]] || missing+=" $c"
  done
  if [[ -n $missing ]]; then
    echo "FAIL: round $i: no call of$missing logged"
    fail=1
  fi
  echo "round $i: $knob: $n ranks exact"
done

if [[ $extra == dtypes ]]; then
  dts=$("$perf/allreduce_perf" -h | sed -n 's/.*\[-d \([a-z0-9|]*\)\].*/\1/p' | tr '|' ' ')
  [[ -n $dts ]] || { echo "FAIL: no dtypes in allreduce_perf -h"; exit 1; }
  for tool in allreduce reduce_scatter; do
    for algo in hier ring; do
      before=$fail
      for dt in $dts; do
        # fp8 sums of small integers stay exact only to 16 (e4m3): max.
        op=sum
        [[ $dt == f8* ]] && op=max
        launch "$perf/${tool}_perf" -a "$algo" -d "$dt" -o "$op" -b 8 -e 192K -f 24 -n 1 -w 0 -c 1
        rc=$?
        if [[ $rc -ne 0 ]] || ! grep -q 'Out of bounds values : 0 OK' "$log" ||
          ! grep -q "(forced by CIUIC_ALGO" "$log"; then
          tail -20 "$log"
          echo "FAIL: ${tool}_perf -a $algo -d $dt: exit $rc"
          fail=1
        fi
      done
      [[ $fail -eq "$before" ]] && echo "${tool} $algo: every dtype exact ($dts)"
    done
  done
fi
[[ $fail -eq 0 ]] && echo "PASS: every collective x algorithm on $n ranks, hosts $hosts"
exit $fail
