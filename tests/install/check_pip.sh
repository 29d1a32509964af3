#!/usr/bin/env bash
# The Python users' way: from a fresh clone of the source tree's HEAD, into a
# fresh virtual environment, `pip wheel .` builds the library with the
# extension (scikit-build-core, pinned in pyproject.toml) and `pip install`
# of that wheel gives a package that imports from any directory, runs, and
# prints what ciuic-info prints (python -m ciuic.info).
# Usage: check_pip.sh SOURCE_DIR PYTHON
set -euo pipefail
src=$1
python=$2
work=$(mktemp -d /tmp/ciuic-pip-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
git clone -q --no-local "$src" "$work/clone"
"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check -q)
# numpy for the test below, at the pin the rest of the project uses.
"${pip[@]}" install "$(grep '^numpy==' "$work/clone/python/requirements.txt")"
(cd "$work/clone" && CMAKE_BUILD_PARALLEL_LEVEL=${CIUIC_JOBS:-2} "${pip[@]}" wheel . -w "$work/dist" --no-deps)
"${pip[@]}" install "$work"/dist/ciuic-*.whl
cd "$work"
rm -rf "$work/clone"  # the installed package must not need the source tree
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
