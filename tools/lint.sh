#!/usr/bin/env bash
# tools/lint.sh [BUILD_DIR] [PATH_REGEX]: clang-tidy (the checks in
# .clang-tidy) and cppcheck (warning, performance, portability; inline
# suppressions carry their reason) over ciuic's own C++ sources, as BUILD_DIR
# (default build) compiles them: its compile_commands.json. Exits non-zero on
# any finding, so new warnings fail CI. PATH_REGEX narrows the files, e.g.
#   tools/lint.sh build 'transport/tcp/'     # one directory while working
# CIUIC_JOBS sets the parallel jobs (default 2). The CUDA kernels (.cu) are
# compiled by nvcc and left out: clang cannot read nvcc's flags.
# CIUIC_LINT_SINCE=REV (CI: the commit in .ci/lint-clean, the last one a
# whole run found clean) gives clang-tidy only the translation units that
# changed since REV or include a file that did (ninja's header deps of
# BUILD_DIR); a change to a .clang-tidy, or an unknown REV, lints
# everything. cppcheck (seconds) always reads the whole tree. After a whole
# run found the tree clean (no CIUIC_LINT_SINCE), its commit may go into
# .ci/lint-clean; so must it after a change to how this script calls
# clang-tidy.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
filter=${2:-}
jobs=${CIUIC_JOBS:-2}
db="$dir/compile_commands.json"
[[ -f $db ]] || { echo "lint.sh: no $db (build first: tools/build.sh $dir)" >&2; exit 2; }
for t in clang-tidy cppcheck; do
  command -v "$t" >/dev/null || { echo "lint.sh: needs $t (tools/install-deps.sh installs it)" >&2; exit 2; }
done

# Every translation unit of the tree, tests and benchmarks included.
dirs='collectives|transport|kernels|topology|common|tools|python/src|tests|perf|examples'
root=$(pwd)
mapfile -t files < <(python3 - "$db" "$root" "$dirs" "$filter" <<'PY'
import json, re, sys
db, root, dirs, filt = sys.argv[1:]
seen = set()
for e in json.load(open(db)):
    f = e["file"]
    rel = f[len(root) + 1:] if f.startswith(root + "/") else None
    if rel is None or not re.match(r"(%s)/" % dirs, rel) or not rel.endswith((".cc", ".cpp")):
        continue
    if filt and not re.search(filt, rel):
        continue
    if rel not in seen:
        seen.add(rel)
        print(rel)
PY
)
[[ ${#files[@]} -gt 0 ]] || { echo "lint.sh: no source matches '$filter'" >&2; exit 2; }
tidy_files=("${files[@]}")
since=${CIUIC_LINT_SINCE:-}
if [[ -n $since ]]; then
  if ! git rev-parse -q --verify "$since^{commit}" >/dev/null; then
    echo "lint.sh: CIUIC_LINT_SINCE=$since is no commit here: linting everything"
  else
    changed=$(mktemp)
    { git diff --name-only "$since" --; git ls-files --others --exclude-standard; } > "$changed"
    mapfile -t tidy_files < <(python3 - "$dir" "$root" "$changed" "${files[@]}" <<'PY'
import subprocess, sys
build, root, changed_list, *files = sys.argv[1:]
changed = {l.strip() for l in open(changed_list) if l.strip()}
if changed & {".clang-tidy", "tests/.clang-tidy"}:
    print("\n".join(files))
    sys.exit(0)
deps = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True, check=True).stdout
hit, src = set(), None
for line in deps.splitlines():
    if line and not line.startswith(" "):
        src = ""  # an object; its first dep is its source
        continue
    path = line.strip()
    rel = path[len(root) + 1:] if path.startswith(root + "/") else None
    if src == "":
        src = rel
    elif src and rel in changed:
        hit.add(src)
for f in files:
    if f in changed or f in hit:
        print(f)
PY
    )
    rm -f "$changed"
    echo "lint.sh: clang-tidy on the ${#tidy_files[@]} of ${#files[@]} units touched since $(git rev-parse --short "$since")"
  fi
fi
echo "lint.sh: $(clang-tidy --version | grep -o 'version [0-9.]*'), cppcheck $(cppcheck --version | cut -d' ' -f2), ${#files[@]} files"

status=0
echo "== cppcheck"
filters=()
for f in "${files[@]}"; do filters+=("--file-filter=$f"); done
# --project: each file with its own defines and include paths.
if ! cppcheck --project="$db" "${filters[@]}" --enable=warning,performance,portability --inline-suppr --library=googletest \
    --std=c++17 --quiet -j "$jobs" --suppress=missingIncludeSystem --error-exitcode=1; then
  status=1
fi

echo "== clang-tidy"
# Largest first: comm_test.cc alone takes minutes and must not start last.
if [[ ${#tidy_files[@]} -gt 0 ]]; then
  mapfile -t tidy_files < <(for f in "${tidy_files[@]}"; do echo "$(stat -c %s "$f") $f"; done | sort -rn | cut -d' ' -f2-)
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Quiet per file; the findings (with their notes) are printed once at the end.
if [[ ${#tidy_files[@]} -gt 0 ]] &&
   ! printf '%s\n' "${tidy_files[@]}" | xargs -P "$jobs" -n 2 clang-tidy -p "$dir" --quiet > "$log" 2>&1; then
  status=1
fi
grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter|^Error while processing' "$log" || true
n=$(grep -c -E ': (warning|error): .*\[[a-zA-Z0-9.,-]+\]$' "$log" || true)
if [[ $status -ne 0 || $n -ne 0 ]]; then
  echo "lint.sh: FAILED ($n clang-tidy findings; cppcheck's above)" >&2
  exit 1
fi
echo "lint.sh: clean"
