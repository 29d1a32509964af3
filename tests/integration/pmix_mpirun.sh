#!/usr/bin/env bash
# Runs a ciuic program under Open MPI's mpirun with no CIUIC_* rendezvous
# variables, so rank, size and the store address come through mpirun's PMIx
# server. Usage: pmix_mpirun.sh <pmix-built:ON|OFF> <nranks> <expected output
# (grep -F)> <program> [args]. Exit 0 when mpirun succeeds, the output holds
# the expected text and every rank met through PMIx; 77 (CTest
# SKIP_RETURN_CODE) with the reason when it cannot run here; 1 otherwise.
set -uo pipefail
built=$1 nranks=$2 expect=$3
shift 3
if [[ $built != ON ]]; then
  echo "SKIP: ciuic built without PMIx (CIUIC_WITH_PMIX; apt-get install libpmix-dev)"
  exit 77
fi
mpirun=$(command -v mpirun.openmpi || true)
if [[ -z $mpirun ]]; then
  echo "SKIP: mpirun.openmpi not found (apt-get install openmpi-bin)"
  exit 77
fi
unset CIUIC_RANK CIUIC_WORLD_SIZE CIUIC_LOCAL_RANK CIUIC_STORE_ADDR CIUIC_STORE_EXTERNAL CIUIC_SECRET CIUIC_SECRET_FILE
# Does this mpirun give its processes a PMIx server?
if ! "$mpirun" --allow-run-as-root --oversubscribe -np 1 env 2>/dev/null | grep -q '^PMIX_NAMESPACE='; then
  echo "SKIP: $mpirun does not start a PMIx server (no PMIX_NAMESPACE in its processes)"
  exit 77
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# INFO logging shows each rank's rendezvous line; the program prints the result.
CIUIC_DEBUG=INFO timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -np "$nranks" "$@" >"$log" 2>&1
rc=$?
cat "$log"
if [[ $rc -ne 0 ]]; then
  echo "FAIL: mpirun exited with $rc"
  exit 1
fi
if ! grep -qF -- "$expect" "$log"; then
  echo "FAIL: no '$expect' in the output"
  exit 1
fi
seen=$(grep -c 'PMIx rendezvous: rank' "$log")
if [[ $seen -ne $nranks ]]; then
  echo "FAIL: $seen of $nranks ranks logged a PMIx rendezvous"
  exit 1
fi
echo "PASS: $nranks ranks met through PMIx"
