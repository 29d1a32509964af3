#!/usr/bin/env bash
# Runs tests/integration/mpi_interop.c's program under Open MPI's mpirun
# with no CIUIC_* rendezvous variables: ciuic_mpi.h alone must bring the
# ranks together. Usage: mpi_interop.sh <nranks> <program> [mpirun]. Exit 0
# when mpirun succeeds and every rank printed its "ok"; 77 (CTest
# SKIP_RETURN_CODE) with the reason when Open MPI's mpirun is not installed;
# 1 otherwise (a launch that fails is a failure).
set -uo pipefail
nranks=$1 program=$2 mpirun=${3:-}
[[ -n $mpirun && -x $mpirun ]] || mpirun=$(command -v mpirun.openmpi || true)
if [[ -z $mpirun ]]; then
  echo "SKIP: Open MPI's mpirun not found (apt-get install openmpi-bin)"
  exit 77
fi
unset CIUIC_RANK CIUIC_WORLD_SIZE CIUIC_LOCAL_RANK CIUIC_STORE_ADDR CIUIC_STORE_EXTERNAL CIUIC_SECRET CIUIC_SECRET_FILE
log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -np "$nranks" "$program" >"$log" 2>&1
rc=$?
cat "$log"
if [[ $rc -ne 0 ]]; then
  echo "FAIL: mpirun exited with $rc"
  exit 1
fi
ok=$(grep -c 'ciuic beside mpi: ok' "$log")
if [[ $ok -ne $nranks ]]; then
  echo "FAIL: $ok of $nranks ranks said ok"
  exit 1
fi
echo "PASS: $nranks ranks"
