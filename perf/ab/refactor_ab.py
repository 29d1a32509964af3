#!/usr/bin/env python3
"""Alternating A/B of two builds' *_perf tools (before/after a change).

Runs every configuration on build A, then build B, then A again..., for
--rounds rounds, each run a fresh `ciuic-run -n N -- <tool>` with csv output,
and prints per (collective, transport, ranks, size) the median and range of
the out-of-place time of each build and the ratio of the medians (B / A).
Every result is checked by the tools themselves (#wrong must be 0).

  perf/ab/refactor_ab.py --a /work/base/build --b build-perf --rounds 5
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


def run(build, tool, transport, ranks, size):
    cmd = [f"{build}/tools/ciuic-run", "-n", str(ranks), "--", f"{build}/perf/{tool}_perf",
           "-t", transport, "-b", str(size), "-e", str(size), "--format", "csv", "--no-inplace"]
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
    args = ap.parse_args()
    times = {}
    for rnd in range(args.rounds):
        for tool, transport, ranks, sizes in CONFIGS:
            for s in sizes.split(","):
                for build in ((args.a, args.b) if rnd % 2 == 0 else (args.b, args.a)):
                    t = run(build, tool, transport, ranks, size_bytes(s))
                    times.setdefault((tool, transport, ranks, s), {}).setdefault(build, []).append(t)
        print(f"# round {rnd + 1} of {args.rounds} done", file=sys.stderr)
    print(f"# A = {args.a}, B = {args.b}, {args.rounds} alternating rounds, median (min-max) us, out of place")
    print(f"{'collective':<15}{'tr':<4}{'n':>2}{'size':>6}  {'A':>22}  {'B':>22}  B/A")
    for (tool, transport, ranks, s), by in times.items():
        a, b = by[args.a], by[args.b]
        ma, mb = statistics.median(a), statistics.median(b)
        fa = f"{ma:.2f} ({min(a):.2f}-{max(a):.2f})"
        fb = f"{mb:.2f} ({min(b):.2f}-{max(b):.2f})"
        print(f"{tool:<15}{transport:<4}{ranks:>2}{s:>6}  {fa:>22}  {fb:>22}  {mb / ma:.2f}")


if __name__ == "__main__":
    main()
