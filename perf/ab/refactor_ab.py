#!/usr/bin/env python3
"""Alternating A/B of two builds' *_perf tools (before/after a change).

Runs every configuration on build A, then build B, then A again..., for
--rounds rounds, each run a fresh `ciuic-run -n N -- <tool>` with csv output,
and prints per (collective, transport, ranks, size) the median and range of
the out-of-place time of each build and the ratio of the medians (B / A).
Every result is checked by the tools themselves (#wrong must be 0).

  perf/ab/refactor_ab.py --a /work/base/build --b build-perf --rounds 5

With --algo NAME every tool runs that algorithm forced (`-a NAME`); --tools
and --sizes narrow the configurations; --reference ALGO also runs build B
with ALGO forced in each round and prints B / reference (a schedule change
against an unchanged neighbour):

  perf/ab/refactor_ab.py --a /tmp/old/build --b build --algo swing --tools allreduce \
      --sizes 64K,256K,1M,4M,16M --reference rabenseifner --rounds 3
"""
import argparse
import statistics
import subprocess
import sys

CONFIGS = [
    # (tool, transport, ranks, sizes)
    ("allreduce", "shm", 2, "8,4K,64K,1M,16M"),
    ("allreduce", "shm", 4, "8,4K,64K,1M,16M"),
    ("allreduce", "tcp", 2, "8,4K,64K,1M,16M"),
    ("allreduce", "tcp", 4, "8,4K,64K,1M,16M"),
    ("broadcast", "shm", 4, "64,64K,4M"),
    ("broadcast", "tcp", 4, "64,64K,4M"),
    ("reduce", "shm", 4, "64,64K,4M"),
    ("reduce", "tcp", 4, "64,64K,4M"),
    ("allgather", "shm", 4, "64,64K,4M"),
    ("allgather", "tcp", 4, "64,64K,4M"),
    ("reduce_scatter", "shm", 4, "64,64K,4M"),
    ("reduce_scatter", "tcp", 4, "64,64K,4M"),
    ("alltoall", "shm", 4, "64,64K,4M"),
    ("alltoall", "tcp", 4, "64,64K,4M"),
]


def size_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def run(build, tool, transport, ranks, size, algo=None):
    cmd = [f"{build}/tools/ciuic-run", "-n", str(ranks), "--", f"{build}/perf/{tool}_perf",
           "-t", transport, "-b", str(size), "-e", str(size), "--format", "csv", "--no-inplace"]
    if algo:
        cmd += ["-a", algo]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        line = line.split("] ", 1)[-1]
        f = line.split(",")
        if len(f) > 8 and f[0] == str(size):
            if float(f[8]) != 0:
                sys.exit(f"{build} {tool} {transport} {ranks} {size}: {f[8]} wrong")
            return float(f[5])
    sys.exit(f"{build}: no result for {tool} {transport} {ranks} {size}:\n{out.stdout}\n{out.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="build dir before")
    ap.add_argument("--b", required=True, help="build dir after")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--algo", help="force this algorithm in every run (-a)")
    ap.add_argument("--tools", help="comma-separated collectives to keep (e.g. allreduce)")
    ap.add_argument("--sizes", help="comma-separated sizes replacing each configuration's")
    ap.add_argument("--reference", help="also run build B with this algorithm forced")
    ap.add_argument("--ranks", help="comma-separated rank counts replacing each configuration's")
    args = ap.parse_args()
    configs = [c for c in CONFIGS if not args.tools or c[0] in args.tools.split(",")]
    if args.sizes:
        configs = [(tool, tr, n, args.sizes) for tool, tr, n, _ in configs]
    if args.ranks:
        pairs = list(dict.fromkeys((tool, tr, sz) for tool, tr, _, sz in configs))
        configs = [(tool, tr, int(n), sz) for tool, tr, sz in pairs for n in args.ranks.split(",")]
    ref = "reference"
    times = {}
    for rnd in range(args.rounds):
        for tool, transport, ranks, sizes in configs:
            for s in sizes.split(","):
                order = [(args.a, args.algo), (args.b, args.algo)]
                if rnd % 2:
                    order.reverse()
                if args.reference:
                    order.append((ref, args.reference))
                for build, algo in order:
                    t = run(args.b if build == ref else build, tool, transport, ranks, size_bytes(s), algo)
                    times.setdefault((tool, transport, ranks, s), {}).setdefault(build, []).append(t)
        print(f"# round {rnd + 1} of {args.rounds} done", file=sys.stderr)
    forced = f", algorithm {args.algo}" if args.algo else ""
    print(f"# A = {args.a}, B = {args.b}{forced}, {args.rounds} alternating rounds, median (min-max) us, out of place")
    if args.reference:
        print(f"# R = B with {args.reference} forced, run after A and B in each round")
    print(f"{'collective':<15}{'tr':<4}{'n':>2}{'size':>6}  {'A':>22}  {'B':>22}  B/A" +
          (f"  {'R':>22}  B/R" if args.reference else ""))

    def cell(v):
        return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"

    for (tool, transport, ranks, s), by in times.items():
        a, b = by[args.a], by[args.b]
        ma, mb = statistics.median(a), statistics.median(b)
        line = f"{tool:<15}{transport:<4}{ranks:>2}{s:>6}  {cell(a):>22}  {cell(b):>22}  {mb / ma:.2f}"
        if args.reference:
            r = by[ref]
            line += f"  {cell(r):>22}  {mb / statistics.median(r):.2f}"
        print(line)


if __name__ == "__main__":
    main()
