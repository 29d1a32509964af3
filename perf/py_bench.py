#!/usr/bin/env python3
"""The Python package against the C library and mpi4py, side by side.

    python3 perf/py_bench.py [--build build] [--rounds 3] [--sizes 8,64K,1M,16M,64M] [-n 2] [-t shm]

Per round, interleaved: allreduce_perf (C, in place) under ciuic-run,
ciuic.all_reduce(x, op=SUM, context=ctx) on a numpy float32 array under
ciuic-run, and mpi4py's COMM_WORLD.Allreduce(IN_PLACE, x) under Open MPI's
mpirun, each at every size. Prints the median and range of the per-call
time (the slowest rank's mean over the iterations), the bus bandwidth and
the two goals of issue #18: the Python call within 2 us of the C call at
8 B, and within 5% of allreduce_perf's busbw from 1 MiB. Every result is
checked (#wrong: the C tool's own check; here the reduced values).
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from benchutil import size_bytes  # noqa: E402


def iters_for(size):
    # About 0.2 s of traffic per size at 5 GB/s, between 20 and 20000 calls.
    return int(max(20, min(20000, 1e9 / max(size, 1) / 5)))


def warm_for(size):
    return max(5, iters_for(size) // 10)


# -- workers (run by the launchers) ------------------------------------------
def worker(kind, sizes):
    import numpy as np

    if kind == "ciuic":
        import ciuic

        ctx = ciuic.CiuicContext()
        rank, n = ctx.rank, ctx.world_size

        def allreduce(x):
            ciuic.all_reduce(x, op=ciuic.SUM, context=ctx)

        def slowest(t):
            v = np.array([t])
            ctx.all_reduce(v, op=ciuic.MAX)
            return float(v[0])

        barrier = ctx.barrier
    else:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, n = comm.Get_rank(), comm.Get_size()

        def allreduce(x):
            comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)

        def slowest(t):
            return comm.allreduce(t, op=MPI.MAX)

        barrier = comm.Barrier
    rows = []
    for size in sizes:
        count = max(1, size // 4)
        x = np.full(count, rank + 1, dtype=np.float32)
        allreduce(x)
        wrong = int(np.count_nonzero(x != n * (n + 1) / 2))
        x[:] = 0  # sums of zeros stay zero: checked again after the timing
        for _ in range(warm_for(size)):
            allreduce(x)
        iters = iters_for(size)
        barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            allreduce(x)
        t = (time.perf_counter() - t0) / iters
        wrong += int(np.count_nonzero(x))
        rows.append({"size": size, "us": slowest(t) * 1e6, "wrong": wrong})
    if rank == 0:
        print("PYBENCH " + json.dumps(rows), flush=True)
    if kind == "ciuic":
        ctx.close()


# -- the driver ----------------------------------------------------------------
def run_c(args, size):
    cmd = [args.run, "-n", str(args.n), "--", os.path.join(args.build, "perf", "allreduce_perf"), "-t", args.t,
           "-b", str(size), "-e", str(size), "-n", str(iters_for(size)), "-w", str(warm_for(size)),
           "--format", "csv"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        f = line.split("] ", 1)[-1].split(",")
        # size,count,type,redop,root,time,algbw,busbw,#wrong,time,algbw,busbw,#wrong: the in-place half
        if len(f) >= 13 and f[0] == str(size):
            return {"size": size, "us": float(f[9]), "wrong": int(float(f[12])) + int(float(f[8]))}
    sys.exit(f"allreduce_perf gave no result for {size} B:\n{out.stdout}\n{out.stderr}")


def run_py(args, kind, sizes):
    me = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--sizes", ",".join(map(str, sizes))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(args.build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    if kind == "ciuic":
        env["CIUIC_TRANSPORT"] = args.t
        cmd = [args.run, "-n", str(args.n), "--"] + me
    else:
        env = {k: v for k, v in env.items() if not k.startswith("CIUIC_")}
        cmd = [args.mpirun, "-n", str(args.n)] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + me
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    for line in out.stdout.splitlines():
        line = line.split("] ", 1)[-1]
        if line.startswith("PYBENCH "):
            return json.loads(line[8:])
    sys.exit(f"{kind} worker gave no result:\n{out.stdout}\n{out.stderr}")


def describe(args):
    lines = []
    try:
        model = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor()
    lines.append(f"machine: {model}, {os.cpu_count()} CPUs, Linux {platform.release()}")
    info = subprocess.run([os.path.join(args.build, "tools", "ciuic-info")], capture_output=True, text=True).stdout
    lines.append("ciuic: " + (info.splitlines()[0] if info else "?"))
    import numpy

    lines.append(f"python {platform.python_version()}, numpy {numpy.__version__}")
    if args.mpirun:
        try:
            import mpi4py
            from mpi4py import MPI  # noqa: F401 (the library version below)

            lines.append(f"mpi4py {mpi4py.__version__} over {MPI.Get_library_version().splitlines()[0].strip()}")
        except ImportError:
            pass
    lines.append(f"{args.n} ranks, ciuic transport {args.t}; {args.rounds} rounds, interleaved; float32 sum in place")
    return lines


def busbw(size, us, n):
    return 2 * (n - 1) / n * size / (us * 1e-6) / 1e9 if us > 0 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="8,64K,1M,16M,64M")
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("-t", default="shm")
    ap.add_argument("--no-mpi4py", action="store_true")
    ap.add_argument("--worker", choices=["ciuic", "mpi4py"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [size_bytes(s) for s in args.sizes.split(",")]
    if args.worker:
        return worker(args.worker, sizes)
    args.build = os.path.abspath(args.build)
    args.run = os.path.join(args.build, "tools", "ciuic-run")
    args.mpirun = None
    if not args.no_mpi4py:
        import importlib.util

        if shutil.which("mpirun") and importlib.util.find_spec("mpi4py"):
            args.mpirun = shutil.which("mpirun")
        else:
            print("# mpi4py or mpirun missing: that column is left out (tools/install-deps.sh installs them)")
    for line in describe(args):
        print("# " + line)
    kinds = ["C", "python"] + (["mpi4py"] if args.mpirun else [])
    times = {k: {s: [] for s in sizes} for k in kinds}
    wrong = 0
    for r in range(args.rounds):
        for kind in kinds:
            if kind == "C":
                rows = [run_c(args, s) for s in sizes]
            else:
                rows = run_py(args, "ciuic" if kind == "python" else "mpi4py", sizes)
            for row in rows:
                times[kind][row["size"]].append(row["us"])
                wrong += row["wrong"]
        print(f"# round {r + 1} of {args.rounds} done", flush=True)
    med = {k: {s: statistics.median(v) for s, v in t.items()} for k, t in times.items()}
    head = f"{'size':>9s}" + "".join(f" {k + ' us':>22s} {'busbw':>6s}" for k in kinds) + f" {'py-C us':>8s} {'py/C bw':>8s}"
    if args.mpirun:
        head += f" {'py/mpi4py':>9s}"
    print(head)
    for s in sizes:
        line = f"{s:9d}"
        for k in kinds:
            v = times[k][s]
            line += f" {med[k][s]:9.2f} [{min(v):5.2f}-{max(v):5.2f}] {busbw(s, med[k][s], args.n):6.2f}"
        line += f" {med['python'][s] - med['C'][s]:8.2f} {med['C'][s] / med['python'][s]:8.3f}"
        if args.mpirun:
            line += f" {med['mpi4py'][s] / med['python'][s]:8.2f}x"
        print(line)
    small = min(sizes)
    over = med["python"][small] - med["C"][small]
    print(f"# goal: ciuic.all_reduce of {small} B within 2 us of C: {over:+.2f} us -> {'met' if over <= 2 else 'MISSED'}")
    big = [s for s in sizes if s >= 1 << 20]
    if big:
        worst = min(med["C"][s] / med["python"][s] for s in big)
        print(f"# goal: busbw from 1 MiB within 5% of allreduce_perf: worst {100 * (worst - 1):+.1f}% -> "
              f"{'met' if worst >= 0.95 else 'MISSED'}")
    print(f"# #wrong {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
