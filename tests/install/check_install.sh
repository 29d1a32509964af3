#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds two consumers
# against it: a CMake project (find_package(ciuic), ciuic::ciuic, C++ API)
# and a C program built with pkg-config's flags. Both must run.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ciuic-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
# Only the public API is installed: internals (the backend SPI, links,
# pools, stores' wire formats) stay in the source tree.
for h in "$work/prefix"/include/ciuic/*; do
  case $(basename "$h") in
    ciuic.h | ciuic.hpp | ciuic_mpi.h | collectives.h | config.h | kernels.h | status.h | store.h | topology.h) ;;
    *) echo "check_install: an internal header is installed: $h" >&2; exit 1 ;;
  esac
done
libdir=$(dirname "$(find "$work/prefix" -name 'libciuic.so' | head -n 1)")
# CIUIC_CONSUMER_FLAGS: compiler and linker flags for both consumers (the
# sanitizer of a sanitized build).
flags=${CIUIC_CONSUMER_FLAGS:-}
cmake -S "$src_dir/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$libdir" "$work/consumer/consumer_cpp"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
cc $flags -o "$work/consumer_c" "$src_dir/consumer/consumer.c" $(pkg-config --cflags --libs ciuic)
LD_LIBRARY_PATH="$libdir" "$work/consumer_c"
# The Python package (when built): under P's site-packages, importable from
# any directory with that folder on PYTHONPATH, finding P's libciuic by its
# RPATH (no LD_LIBRARY_PATH), and running a one-rank all-reduce.
python=${2:-}
site=${3:-}
if [[ -n "$python" ]]; then
  pkg="$work/prefix/$site/ciuic"
  [[ -f "$pkg/__init__.py" ]] || { echo "check_install: no package at $pkg" >&2; exit 1; }
  # ldd's output captured first: grep -q quitting early would SIGPIPE ldd,
  # which pipefail reports as a failure.
  for ext in "$pkg"/_ciuic.*.so "$pkg"/_ciuic_torch.*.so; do
    [[ -f "$ext" ]] || continue
    deps=$(ldd "$ext")
    grep -q "$work/prefix/.*libciuic.so" <<<"$deps" ||
      { echo "check_install: $(basename "$ext") does not load the prefix's libciuic:" >&2; echo "$deps" >&2; exit 1; }
  done
  (cd "$work" && env -u LD_LIBRARY_PATH PYTHONPATH="$work/prefix/$site" "$python" -c "
import numpy, ciuic
assert ciuic.__file__.startswith('$pkg'), ciuic.__file__
with ciuic.CiuicContext() as ctx:
    x = numpy.arange(4, dtype=numpy.float32)
    ciuic.all_reduce(x, context=ctx)
    assert x.tolist() == [0, 1, 2, 3]
print('python package ok:', ciuic.__file__)
")
fi
