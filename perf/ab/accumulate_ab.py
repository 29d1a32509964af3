#!/usr/bin/env python3
"""What CIUIC_ACCUMULATE=f32 costs against =wire: allreduce_perf on bf16 (and
the other narrow types with --dtypes), the two modes alternating run by run
for --rounds rounds in one invocation, over tcp (network schedules: f32
sends f32 partials, twice the bytes) and shm (the direct path, which rounds
once in either mode, and a forced ring). Prints per configuration and size
the median out-of-place time of each mode and the ratio f32 / wire. Every
result is checked by allreduce_perf itself (#wrong must be 0: the inputs are
small integers, exact in either mode).

  python3 perf/ab/accumulate_ab.py --build build --rounds 3
"""
import argparse
import statistics
import subprocess
import sys

CONFIGS = [
    # (transport, ranks, algorithm)
    ("tcp", 2, "auto"),
    ("tcp", 4, "auto"),
    ("shm", 4, "auto"),
    ("shm", 4, "ring"),
]
SIZES = "8,4K,256K,2M,16M"


def run(build, transport, ranks, algo, dtype, mode, sizes):
    cmd = [f"{build}/tools/ciuic-run", "-n", str(ranks), "--transport", transport, "--",
           f"{build}/perf/allreduce_perf", "-d", dtype, "-a", algo, "--format", "csv", "-b", "8", "-e", "16M",
           "-f", "8"]
    env_cmd = ["env", f"CIUIC_ACCUMULATE={mode}"] + cmd
    out = subprocess.run(env_cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(env_cmd)}\n{out.stdout}\n{out.stderr}")
    times = {}
    for line in out.stdout.splitlines():
        line = line.split("] ", 1)[-1]
        f = line.split(",")
        if len(f) < 13 or not f[0].isdigit():
            continue
        if int(f[8]) != 0 or int(f[12]) != 0:
            sys.exit(f"#wrong != 0: {line}")
        if int(f[0]) in sizes:
            times[int(f[0])] = float(f[5])
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="bfloat16")
    args = ap.parse_args()
    mult = {"K": 1 << 10, "M": 1 << 20}
    sizes = [int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s) for s in SIZES.split(",")]
    print(f"# accumulate A/B: {args.rounds} rounds, modes alternating, out-of-place time (us), median [min-max]")
    print(f"{'dtype':9} {'transport':9} {'n':>2} {'algo':5} {'bytes':>9} | {'f32':>22} | {'wire':>22} | f32/wire")
    for dtype in args.dtypes.split(","):
        for transport, ranks, algo in CONFIGS:
            res = {"f32": {}, "wire": {}}
            for _ in range(args.rounds):
                for mode in ("f32", "wire"):
                    for s, t in run(args.build, transport, ranks, algo, dtype, mode, sizes).items():
                        res[mode].setdefault(s, []).append(t)
            for s in sizes:
                a, b = res["f32"].get(s, []), res["wire"].get(s, [])
                if not a or not b:
                    continue
                ma, mb = statistics.median(a), statistics.median(b)
                print(f"{dtype:9} {transport:9} {ranks:2} {algo:5} {s:9} | {ma:9.1f} [{min(a):.1f}-{max(a):.1f}]"
                      f" | {mb:9.1f} [{min(b):.1f}-{max(b):.1f}] | {ma / mb:.2f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
