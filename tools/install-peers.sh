#!/usr/bin/env bash
# Installs the peers ciuic's benchmarks compare against (Open MPI, MPICH,
# Gloo). Optional: the build and tests do not need them; perf/ builds the
# peer drivers only when they are present. Idempotent, non-interactive.
set -euo pipefail
packages=(openmpi-bin libopenmpi-dev mpich libmpich-dev libgloo-dev python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-peers: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "install-peers: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
