#!/usr/bin/env bash
# Point-to-point comparison, side by side on this machine:
#   ciuic shm  vs Open MPI vader (--mca btl self,vader)      [and MPICH, shared memory]
#   ciuic tcp  vs Open MPI tcp   (--mca btl self,tcp, lo)    [MPICH, UCX_TLS=tcp: MPICH_TCP=1]
# over the same sizes and iteration counts, printing per size the ratio
# ciuic/peer of bandwidth (BW_avg; > 1 = ciuic faster) and of the typical
# (median) one-way latency (< 1 = ciuic faster), then the issue's goals.
# With ROUNDS > 1 each figure is the best of the rounds; ciuic's ratio to
# memcpy is the best of the per-run ratios (memcpy timed in the same run).
#
# Builds nothing: pass the build directory that holds perf/transport_perf
# and perf/mpi_p2p_{openmpi,mpich} (a peer whose driver or mpirun is missing
# is skipped with a note).
#
#   perf/p2p_compare.sh BUILD_DIR [transport_perf/mpi_p2p size flags]
#   e.g. perf/p2p_compare.sh build-perf                 # -b 8 -e 64M -f 4
#        perf/p2p_compare.sh build-perf -b 1K -e 256M -f 2
#
# Environment: ROUNDS=N runs every tool N times, alternating, and keeps the
# best figure per size (default 1); OUT=DIR keeps the raw CSV there;
# MPICH_TCP=1 adds MPICH over UCX's tcp transport (off by default: over
# loopback here it takes 2+ minutes for the default sizes, half of this
# script's budget, and trails Open MPI's tcp BTL).
# ciuic's tcp uses loopback (CIUIC_SOCKET_IFNAME=lo) like the Open MPI run.
# Exit status: 0 when every run passed its data check, 1 otherwise.
set -uo pipefail

if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
build=$1
shift
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(-b 8 -e 64M -f 4)
rounds=${ROUNDS:-1}
tperf=$build/perf/transport_perf
if [[ ! -x $tperf ]]; then
  echo "p2p_compare: $tperf not found (build the transport_perf target first)" >&2
  exit 2
fi
out=${OUT:-$(mktemp -d /tmp/ciuic-p2p-XXXXXX)}
mkdir -p "$out"
status=0

# run NAME CMD...: CSV of one tool into $out/NAME.R.csv (stderr beside it).
run() {
  local name=$1 round=$2
  shift 2
  local t0=$SECONDS
  if ! timeout 600 "$@" --format csv >"$out/$name.$round.csv" 2>"$out/$name.$round.err"; then
    echo "# $name: FAILED (exit status non-zero; see $out/$name.$round.err):" >&2
    tail -3 "$out/$name.$round.err" >&2
    status=1
  fi
  echo "# ran $name (round $round, $((SECONDS - t0)) s): $*"
}

ompi_run=$(command -v mpirun.openmpi || true)
mpich_run=$(command -v mpirun.mpich || true)
ompi=$build/perf/mpi_p2p_openmpi
mpich=$build/perf/mpi_p2p_mpich
peers=()
if [[ -n $ompi_run && -x $ompi ]]; then peers+=(ompi); else
  echo "# Open MPI: skipped (mpirun.openmpi or $ompi missing; tools/install-peers.sh, then rebuild)"; fi
if [[ -n $mpich_run && -x $mpich ]]; then peers+=(mpich); else
  echo "# MPICH: skipped (mpirun.mpich or $mpich missing)"; fi

echo "# p2p_compare $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): $(nproc) CPUs," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# ciuic git $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?');" \
  "sizes: ${sizes[*]}; rounds: $rounds; raw CSV in $out"
ompi_flags=(--allow-run-as-root -np 2 --mca pml ob1)
for ((r = 1; r <= rounds; ++r)); do
  CIUIC_SOCKET_IFNAME=lo run ciuic "$r" "$tperf" -t shm,tcp "${sizes[@]}"
  for p in "${peers[@]}"; do
    case $p in
      ompi)
        run ompi-vader "$r" "$ompi_run" "${ompi_flags[@]}" --mca btl self,vader "$ompi" -l ompi-vader "${sizes[@]}"
        run ompi-tcp "$r" "$ompi_run" "${ompi_flags[@]}" --mca btl self,tcp --mca btl_tcp_if_include lo \
          "$ompi" -l ompi-tcp "${sizes[@]}"
        ;;
      mpich)
        run mpich-shm "$r" "$mpich_run" -np 2 -bind-to core "$mpich" -l mpich-shm "${sizes[@]}"
        if [[ ${MPICH_TCP:-0} == 1 ]]; then
          UCX_TLS=tcp,self run mpich-tcp "$r" "$mpich_run" -np 2 -bind-to core "$mpich" -l mpich-tcp "${sizes[@]}"
        fi
        ;;
    esac
  done
done

# Every CSV row: transport,test,bytes,iters,bw_peak,bw_avg,rate,memcpy,ratio,
# t_min,t_max,t_typical,t_avg,t99,t999,wrong. Best of the rounds per size.
cat "$out"/*.csv 2>/dev/null | awk -F, '
  /^#/ || $1 == "transport" || NF < 16 { next }
  {
    k = $1 SUBSEP $3
    present[$1] = 1
    if (!(($3) in seen)) { seen[$3] = 1; sizes[++ns] = $3 + 0 }
    if ($16 + 0 != 0) wrong += $16
    if ($2 == "bw") {
      if (!(k in bw) || $6 > bw[k]) bw[k] = $6 + 0
      # ciuic against memcpy: the ratio measured within one run (interleaved
      # per size), the best over the rounds, with the memcpy of that run.
      if ($1 == "shm" && (!(k in mratio) || $9 > mratio[k])) { mratio[k] = $9 + 0; mcpy[$3] = $8 + 0 }
    } else if (!(k in lat) || $12 < lat[k]) lat[k] = $12 + 0
  }
  function human(b) {
    if (b >= 1048576) return sprintf("%gM", b / 1048576)
    if (b >= 1024) return sprintf("%gK", b / 1024)
    return b
  }
  function cell(k, arr) { return (k in arr) ? sprintf("%.3f", arr[k]) : "-" }
  function ratio(k1, k2, arr) {
    return ((k1 in arr) && (k2 in arr) && arr[k2] > 0) ? sprintf("%.2f", arr[k1] / arr[k2]) : "-"
  }
  # One table: rows = sizes, ciuic then each peer with ciuic/peer.
  function table(mine, title, n, p, arr, with_memcpy,   i, s, k, line) {
    print ""
    print "## " title
    line = sprintf("%8s %10s", "bytes", "ciuic-" mine)
    for (i = 1; i <= n; ++i) line = line sprintf(" %11s %7s", p[i], "ratio")
    if (with_memcpy) line = line sprintf(" %9s %7s", "memcpy", "/memcpy")
    print line
    for (s = 1; s <= ns; ++s) {
      k = mine SUBSEP sizes[s]
      line = sprintf("%8s %10s", human(sizes[s]), cell(k, arr))
      for (i = 1; i <= n; ++i)
        line = line sprintf(" %11s %7s", cell(p[i] SUBSEP sizes[s], arr), ratio(k, p[i] SUBSEP sizes[s], arr))
      if (with_memcpy)
        line = line sprintf(" %9.2f %7s", mcpy[sizes[s]], (k in mratio) ? sprintf("%.2f", mratio[k]) : "-")
      print line
    }
  }
  function goal(text, ok, detail) { printf "%-70s %s (%s)\n", text, ok ? "MET" : "MISSED", detail }
  END {
    n = split("ompi-vader mpich-shm", cand_shm, " ")
    ns_p = 0
    for (i = 1; i <= n; ++i) if (cand_shm[i] in present) shm_p[++ns_p] = cand_shm[i]
    n = split("ompi-tcp mpich-tcp", cand_tcp, " ")
    nt_p = 0
    for (i = 1; i <= n; ++i) if (cand_tcp[i] in present) tcp_p[++nt_p] = cand_tcp[i]
    table("shm", "shared memory, bandwidth: BW_avg GB/s; ratio = ciuic/peer (> 1: ciuic faster)", ns_p, shm_p, bw, 1)
    table("shm", "shared memory, latency: typical (median) one-way us; ratio = ciuic/peer (< 1: ciuic faster)", ns_p, shm_p, lat, 0)
    table("tcp", "tcp over loopback, bandwidth: BW_avg GB/s; ratio = ciuic/peer (> 1: ciuic faster)", nt_p, tcp_p, bw, 0)
    table("tcp", "tcp over loopback, latency: typical one-way us; ratio = ciuic/peer (< 1: ciuic faster)", nt_p, tcp_p, lat, 0)
    print ""
    print "## Goals"
    # shm bandwidth >= 0.8 x memcpy at >= 1 MiB.
    worst = 1e9; cnt = 0
    for (s = 1; s <= ns; ++s) if (sizes[s] >= 1048576 && (("shm" SUBSEP sizes[s]) in mratio)) {
      r = mratio["shm" SUBSEP sizes[s]]; cnt++
      if (r < worst) { worst = r; at = sizes[s] }
    }
    if (cnt) goal("shm bandwidth >= 0.8 x memcpy at >= 1 MiB", worst >= 0.8, sprintf("lowest %.2f at %s", worst, human(at)))
    # Small-message latency (<= 256 B) <= Open MPI shared memory.
    worst = 0; cnt = 0
    for (s = 1; s <= ns; ++s) if (sizes[s] <= 256 && (("shm" SUBSEP sizes[s]) in lat) && (("ompi-vader" SUBSEP sizes[s]) in lat)) {
      r = lat["shm" SUBSEP sizes[s]] / lat["ompi-vader" SUBSEP sizes[s]]; cnt++
      if (r > worst) { worst = r; at = sizes[s] }
    }
    if (cnt) goal("shm latency <= Open MPI vader at <= 256 B", worst <= 1, sprintf("highest ratio %.2f at %s", worst, human(at)))
    # tcp bandwidth >= Open MPI tcp BTL (sizes >= 64 KiB, where bandwidth rules).
    worst = 1e9; cnt = 0
    for (s = 1; s <= ns; ++s) if (sizes[s] >= 65536 && (("tcp" SUBSEP sizes[s]) in bw) && (("ompi-tcp" SUBSEP sizes[s]) in bw)) {
      r = bw["tcp" SUBSEP sizes[s]] / bw["ompi-tcp" SUBSEP sizes[s]]; cnt++
      if (r < worst) { worst = r; at = sizes[s] }
    }
    if (cnt) goal("tcp bandwidth >= Open MPI tcp BTL at >= 64 KiB", worst >= 1, sprintf("lowest ratio %.2f at %s", worst, human(at)))
    printf "# wrong bytes over all runs: %d\n", wrong
    if (wrong > 0) exit 1
  }' || status=1
exit $status
