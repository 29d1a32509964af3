#!/usr/bin/env bash
# ciuic programs under Slurm's srun, for real: a one-node Slurm cluster
# (munged, slurmctld and slurmd of Debian's slurm-wlm, in a scratch
# directory, on ports of their own) is started here, then `srun -n N`
# launches the programs with no CIUIC_* variables. Through srun's PMIx
# server (--mpi=pmix, the flavour Debian's Slurm builds) each rank finds its
# rank, size and the store rank 0 serves. Checks, with N ranks:
#   - tests/integration/c_api_ranks (every C entry point, results checked;
#     its split without rank 0 outlives rank 0, which serves the store);
#   - allreduce_perf's results check, and that every rank met through PMIx;
#   - srun without PMIx (--mpi=none): a clear error naming what to set.
# Usage: srun_local.sh <pmix-built:ON|OFF> <nranks> <c_api_ranks> <allreduce_perf>
# Exit 0 pass, 1 fail, 77 (CTest's skip) with the reason when Slurm cannot
# run here (not root, packages missing, daemons do not start).
set -uo pipefail
built=$1 n=$2 capi=$3 perf=$4
skip() { echo "SKIP: $*"; exit 77; }
[[ $built == ON ]] || skip "ciuic built without PMIx (CIUIC_WITH_PMIX; apt-get install libpmix-dev)"
[[ $(id -u) -eq 0 ]] || skip "starting slurmd and slurmctld needs root"
for p in munged slurmctld slurmd srun sinfo; do
  command -v "$p" >/dev/null || skip "$p not found (apt-get install slurmd slurmctld slurm-client munge)"
done
[[ -n $(find /usr/lib /usr/lib64 /usr/local/lib -name 'mpi_pmix*.so' 2>/dev/null | head -1) ]] ||
  skip "Slurm's PMIx plugin (mpi_pmix.so) not found"
unset CIUIC_RANK CIUIC_WORLD_SIZE CIUIC_LOCAL_RANK CIUIC_STORE_ADDR CIUIC_STORE_EXTERNAL CIUIC_SECRET \
  CIUIC_SECRET_FILE CIUIC_ALGO CIUIC_TRANSPORT SLURM_JOB_ID SLURM_JOBID

dir=$(mktemp -d /tmp/ciuic-slurm.XXXXXX)
chmod 755 "$dir"
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  for d in slurmd slurmctld munged; do
    [[ -s $dir/$d.pid ]] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
  done
  sleep 0.2
  for d in slurmd slurmctld munged; do
    [[ -s $dir/$d.pid ]] && kill -9 "$(cat "$dir/$d.pid")" 2>/dev/null
  done
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/state" "$dir/spool" "$dir/log"

# Two free ports (not listened on now) for slurmctld and slurmd.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 20000))
    ss -Hltn "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
  done
  echo 0
}
ctld_port=$(free_port) d_port=$(free_port)
[[ $ctld_port != "$d_port" && $ctld_port != 0 ]] || skip "no free ports found"

head -c 128 /dev/urandom >"$dir/munge.key"
chmod 600 "$dir/munge.key"
munged -f --socket="$dir/munge.sock" --key-file="$dir/munge.key" --log-file="$dir/log/munged.log" \
  --pid-file="$dir/munged.pid" --seed-file="$dir/munged.seed" ||
  skip "munged did not start: $(tail -3 "$dir/log/munged.log" 2>/dev/null)"

host=$(hostname -s)
cat >"$dir/slurm.conf" <<EOF
ClusterName=ciuic
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
NodeName=$host NodeAddr=127.0.0.1 CPUs=$((n > 8 ? n : 8)) State=UNKNOWN
PartitionName=ciuic Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld || skip "slurmctld did not start: $(tail -3 "$dir/log/slurmctld.log" 2>/dev/null)"
slurmd || skip "slurmd did not start: $(tail -3 "$dir/log/slurmd.log" 2>/dev/null)"
for _ in $(seq 150); do
  [[ $(sinfo -h -o %T 2>/dev/null) == idle ]] && break
  sleep 0.2
done
state=$(sinfo -h -o %T 2>&1)
[[ $state == idle ]] || skip "the Slurm node did not come up (state '$state'): $(tail -3 "$dir/log/slurmd.log")"
echo "slurm: $(sinfo -V) on $host, ports $ctld_port/$d_port"

fail=0
log=$dir/out.log
check() {  # <what> <expected count> <pattern>
  local got
  got=$(grep -c -- "$3" "$log")
  if [[ $got -ne $2 ]]; then
    tail -30 "$log"
    echo "FAIL: $1: $got of $2 lines '$3'"
    fail=1
  fi
}

CIUIC_DEBUG=INFO timeout 180 srun -n "$n" --mpi=pmix "$capi" >"$log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { tail -30 "$log"; echo "FAIL: srun c_api_ranks exited $rc"; fail=1; }
check "c_api_ranks" "$n" "c api: ok"
check "c_api_ranks: PMIx" "$n" "PMIx rendezvous: rank"
echo "srun -n $n --mpi=pmix c_api_ranks: rc $rc, $(grep -c 'c api: ok' "$log") ranks ok"

CIUIC_DEBUG=INFO timeout 180 srun -n "$n" --mpi=pmix "$perf" -b 8 -e 4M -f 8 -n 3 -w 1 >"$log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { tail -30 "$log"; echo "FAIL: srun allreduce_perf exited $rc"; fail=1; }
check "allreduce_perf" 1 "Out of bounds values : 0 OK"
check "allreduce_perf: PMIx" "$n" "PMIx rendezvous: rank"
grep -v ' INFO ' "$log" | grep '^#' | head -3

# Without PMIx the ranks know who they are (SLURM_PROCID) but not where the
# store is: every rank fails at once, saying what to set or how to launch.
timeout 60 srun -n 2 --mpi=none "$capi" >"$log" 2>&1
rc=$?
[[ $rc -ne 0 ]] || { echo "FAIL: srun --mpi=none ran without a rendezvous"; fail=1; }
check "srun --mpi=none: the error" 2 "CIUIC_STORE_ADDR is not set.*srun --mpi=pmix"

[[ $fail -eq 0 ]] && echo "PASS: srun -n $n launched ciuic programs through PMIx"
exit $fail
