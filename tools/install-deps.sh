#!/usr/bin/env bash
# Installs the Debian packages ciuic builds and tests with. Idempotent and
# non-interactive: packages already present are not touched, and apt-get runs
# only when something is missing. Needs root (or sudo).
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config git
  libhwy-dev libgtest-dev
  libhwloc-dev hwloc
  libibverbs-dev librdmacm-dev ibverbs-providers rdma-core libpmix-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
