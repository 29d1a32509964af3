#!/usr/bin/env bash
# The Python users' way: from a fresh clone of the source tree's HEAD, into a
# fresh virtual environment, `pip wheel .` builds the library with the
# extension (scikit-build-core, pinned in pyproject.toml) and `pip install`
# of that wheel gives a package that imports from any directory, runs, and
# prints what ciuic-info prints (python -m ciuic.info).
# With torch importable by PYTHON, also the torch.distributed backend's way:
# `pip wheel . --no-build-isolation` in a virtual environment that sees
# PYTHON's torch builds ciuic.torch against it (an isolated build cannot see
# torch), and the installed wheel runs a one-rank process group on "ciuic".
# With BUILD_DIR (a built plain build of the same tree, as ctest passes),
# both wheels link its SIMD kernels (CIUIC_SIMD_FROM) instead of compiling
# them a third and fourth time: over 5 of CI's minutes on two cores. Every
# other step is the user's; CIUIC_PIP_TEST_FULL=1 compiles the kernels too.
# Usage: check_pip.sh SOURCE_DIR PYTHON [BUILD_DIR]
set -euo pipefail
src=$1
python=$2
config=()
if [ -n "${3:-}" ] && [ "${CIUIC_PIP_TEST_FULL:-0}" != 1 ]; then
  config=(-C "cmake.define.CIUIC_SIMD_FROM=$(cd "$3" && pwd)")
fi
work=$(mktemp -d /tmp/ciuic-pip-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
git clone -q --no-local "$src" "$work/clone"
"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check -q)
# numpy for the test below, at the pin the rest of the project uses.
"${pip[@]}" install "$(grep '^numpy==' "$work/clone/python/requirements.txt")"
(cd "$work/clone" && CMAKE_BUILD_PARALLEL_LEVEL=${CIUIC_JOBS:-2} "${pip[@]}" wheel . -w "$work/dist" --no-deps ${config[@]+"${config[@]}"})
"${pip[@]}" install "$work"/dist/ciuic-*.whl
cd "$work"
mv "$work/clone" "$work/clone.away"  # the installed package must not need the source tree
"$work/venv/bin/python" - <<'PY'
import numpy, ciuic, sys
assert "site-packages" in ciuic.__file__, ciuic.__file__
with ciuic.CiuicContext() as ctx:
    x = numpy.arange(6, dtype=numpy.float32)
    ciuic.all_reduce(x, context=ctx)
    assert x.tolist() == [0, 1, 2, 3, 4, 5]
print("pip package ok:", ciuic.__file__)
PY
info=$("$work/venv/bin/python" -m ciuic.info)  # captured: grep -q must not SIGPIPE it
grep -q "CIUIC_SIMD_TARGET" <<<"$info"
echo "python -m ciuic.info ok"
mv "$work/clone.away" "$work/clone"

if ! "$python" -c "import torch" 2>/dev/null; then
  echo "pip torch backend: skipped (torch is not importable by $python)"
  exit 0
fi
"$python" -m venv --system-site-packages "$work/venv-torch"
tpip=("$work/venv-torch/bin/python" -m pip --disable-pip-version-check -q)
# The build requirements of pyproject.toml, at its pins (no isolation: pip
# does not install them itself).
"${tpip[@]}" install $(sed -n 's/^requires = \[\(.*\)\]/\1/p' "$work/clone/pyproject.toml" | tr -d '",')
(cd "$work/clone" && CMAKE_BUILD_PARALLEL_LEVEL=${CIUIC_JOBS:-2} \
  "${tpip[@]}" wheel . -w "$work/dist-torch" --no-deps --no-build-isolation ${config[@]+"${config[@]}"})
"${tpip[@]}" install --force-reinstall --no-deps "$work"/dist-torch/ciuic-*.whl
rm -rf "$work/clone"  # the installed package must not need the source tree
"$work/venv-torch/bin/python" - "$work" <<'PY'
import datetime, sys
import torch, torch.distributed as dist
import ciuic, ciuic.torch
assert "venv-torch" in ciuic.__file__, ciuic.__file__
dist.init_process_group("ciuic", init_method=f"file://{sys.argv[1]}/store", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
x = torch.arange(5, dtype=torch.float32)
dist.all_reduce(x)
assert x.tolist() == [0, 1, 2, 3, 4] and dist.get_backend() == "ciuic", (x, dist.get_backend())
dist.destroy_process_group()
print("pip torch backend ok:", ciuic.torch.__file__)
PY
