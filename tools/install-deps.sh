#!/usr/bin/env bash
# Installs the Debian packages ciuic builds and tests with, then the pinned
# Python packages (python/requirements.txt) for the python3 on PATH
# (CIUIC_PYTHON to name another). Idempotent and non-interactive: packages
# already present are not touched; apt-get and pip run only when something
# is missing. Needs root (or sudo) for apt-get.
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config git
  libhwy-dev libgtest-dev libssl-dev
  libhwloc-dev hwloc
  libibverbs-dev librdmacm-dev ibverbs-providers rdma-core libpmix-dev
  openmpi-bin libopenmpi-dev
  slurmd slurmctld slurm-client munge
  clang libclang-rt-dev clang-tidy cppcheck
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python=${CIUIC_PYTHON:-python3}
requirements="$(dirname "$0")/../python/requirements.txt"
if ! command -v "$python" >/dev/null; then
  echo "install-deps: no $python on PATH (the Python package needs one; CIUIC_PYTHON names another)" >&2
  exit 1
fi
# pip check of the pins: quiet and quick when everything is there.
if "$python" - "$requirements" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
missing = []
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    try:
        if version(name) != want:
            missing.append(line)
    except PackageNotFoundError:
        missing.append(line)
sys.exit(1 if missing else 0)
PY
then
  echo "install-deps: the Python packages of python/requirements.txt are present ($python)"
else
  echo "install-deps: pip installing python/requirements.txt for $("$python" -c 'import sys; print(sys.executable)')"
  "$python" -m pip install -q --disable-pip-version-check -r "$requirements"
fi
