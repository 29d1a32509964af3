#!/usr/bin/env python3
"""torch.distributed on ciuic against gloo, side by side.

    python3 perf/torch_bench.py [--build build] [-n 2,4] [--rounds 3] [--sizes 8,64K,1M,16M,64M] [--steps 30]

Per round and rank count, interleaved: a job on the "ciuic" backend, then the
same job on "gloo". Each job times dist.all_reduce (float32 SUM, blocking)
at every size and a DDP training step of an MLP (1.18 M parameters, batch
32, torch.set_num_threads(1)); the parent trains the same model in one
process without DDP (the limit: communication fully hidden). Also
allreduce_perf (the C++ call) at 8 B, for the per-call cost of the torch
path. Prints medians and ranges over the rounds and the goals of issue #19.
Every all-reduce result is checked (#wrong).
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from benchutil import size_bytes  # noqa: E402


def iters_for(size):
    return int(max(10, min(5000, 4e8 / max(size, 1) / 5)))


def model():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512),
                               torch.nn.ReLU(), torch.nn.Linear(512, 256))


def step_time(net, steps, sync=None):
    import torch

    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 512, generator=g), torch.randn(32, 256, generator=g)
    times = []
    for i in range(steps + 5):
        if sync:
            sync()
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def worker(args):
    import torch
    import torch.distributed as dist

    import ciuic  # noqa: F401  (registers "ciuic")

    torch.set_num_threads(1)
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(args.backend, init_method=f"file://{args.store}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=120))
    out = {"allreduce": {}, "wrong": 0}
    for size in [size_bytes(s) for s in args.sizes.split(",")]:
        x = torch.ones(max(1, size // 4))
        it = iters_for(size)
        for _ in range(3):
            dist.all_reduce(x)
        x.fill_(1)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(it):
            dist.all_reduce(x)
        t = (time.perf_counter() - t0) / it
        # x = n**(it+3) after the loop from ones: check with a fresh call instead
        x.fill_(1)
        dist.all_reduce(x)
        out["wrong"] += int((x != n).sum())
        tt = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)  # the slowest rank's
        out["allreduce"][size] = tt.item()
    # async_op=True and wait(), the path DDP and overlapping code take, at 8 B.
    x = torch.ones(2)
    it = iters_for(8)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(it):
        dist.all_reduce(x, async_op=True).wait()
    tt = torch.tensor([(time.perf_counter() - t0) / it], dtype=torch.float64)
    x.fill_(1)
    dist.all_reduce(x, async_op=True).wait()
    out["wrong"] += int((x != n).sum())
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
    out["async_8"] = tt.item()
    for key, kw in (("ddp_step", {}), ("ddp_view", {"gradient_as_bucket_view": True})):
        torch.manual_seed(0)
        net = torch.nn.parallel.DistributedDataParallel(model(), **kw)
        t = step_time(net, args.steps, sync=dist.barrier)
        tt = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        out[key] = tt.item()
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def run_job(args, backend, n, retry=True):
    with tempfile.TemporaryDirectory() as d:
        procs = []
        for r in range(n):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n))
            env["PYTHONPATH"] = os.path.join(args.build, "python") + os.pathsep + env.get("PYTHONPATH", "")
            for k in ("CIUIC_RANK", "CIUIC_WORLD_SIZE", "CIUIC_STORE_ADDR"):
                env.pop(k, None)
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--backend", backend, "--store",
                   os.path.join(d, "store"), "--sizes", args.sizes, "--steps", str(args.steps)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=900) for p in procs]
    for p, (o, e) in zip(procs, outs):
        if p.returncode != 0:
            if retry:
                print(f"# {backend} job on {n} ranks failed (rank exit {p.returncode}: "
                      f"{(e.strip().splitlines() or ['?'])[-1][:120]}); run again", flush=True)
                return run_job(args, backend, n, retry=False)
            sys.exit(f"{backend} job on {n} ranks failed:\n{o}\n{e}")
    for line in outs[0][0].splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            res["allreduce"] = {int(k): v for k, v in res["allreduce"].items()}
            return res
    sys.exit(f"{backend}: no result\n{outs[0][0]}")


def c_call_8b(args, n):
    cmd = [os.path.join(args.build, "tools", "ciuic-run"), "-n", str(n), "--",
           os.path.join(args.build, "perf", "allreduce_perf"), "-b", "8", "-e", "8", "-n", "5000", "--format", "csv"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    for line in out.stdout.splitlines():
        f = line.split("] ", 1)[-1].split(",")
        if len(f) >= 13 and f[0] == "8":
            return float(f[9]) * 1e-6, int(float(f[8])) + int(float(f[12]))
    sys.exit(f"allreduce_perf gave no result:\n{out.stdout}\n{out.stderr}")


def med(xs):
    return statistics.median(xs), min(xs), max(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-n", default="2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="8,64K,1M,16M,64M")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--backend")
    ap.add_argument("--store")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    args.build = os.path.abspath(args.build)
    import torch

    torch.set_num_threads(1)
    info = subprocess.run([sys.executable, "-c", "import ciuic; print(ciuic._ciuic.version, ciuic._ciuic.git_revision)"],
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))).stdout.strip()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"# machine: {cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}")
    print(f"# ciuic {info}; torch {torch.__version__}; python {platform.python_version()}")
    print(f"# {args.rounds} rounds, ciuic and gloo alternating; all_reduce float32 SUM blocking; DDP MLP "
          f"1.18 M params, batch 32, 1 thread")
    sizes = [size_bytes(s) for s in args.sizes.split(",")]
    wrong = 0
    for n in [int(v) for v in args.n.split(",")]:
        res = {"ciuic": [], "gloo": []}
        cpp, singles = [], []
        for r in range(args.rounds):
            for b in ("ciuic", "gloo"):
                res[b].append(run_job(args, b, n))
                wrong += res[b][-1]["wrong"]
            t, w = c_call_8b(args, n)
            cpp.append(t)
            wrong += w
            torch.manual_seed(0)
            singles.append(step_time(model(), args.steps))
            print(f"# {n} ranks: round {r + 1} of {args.rounds} done", flush=True)
        single = statistics.median(singles)
        print(f"\n## {n} ranks")
        print(f"{'size':>10} {'ciuic us':>22} {'gloo us':>24} {'ciuic busbw':>12} {'gloo busbw':>11} {'x gloo':>7}")
        ratios = {}
        for s in sizes:
            c = med([x["allreduce"][s] for x in res["ciuic"]])
            g = med([x["allreduce"][s] for x in res["gloo"]])
            bus = lambda t: s * 2 * (n - 1) / n / t / 1e9  # noqa: E731
            ratios[s] = g[0] / c[0]
            print(f"{s:>10} {c[0] * 1e6:9.2f} [{c[1] * 1e6:.2f}-{c[2] * 1e6:.2f}] {g[0] * 1e6:10.2f} "
                  f"[{g[1] * 1e6:.2f}-{g[2] * 1e6:.2f}] {bus(c[0]):12.2f} {bus(g[0]):11.2f} {ratios[s]:7.2f}")
        ac = med([x["async_8"] for x in res["ciuic"]])
        ag = med([x["async_8"] for x in res["gloo"]])
        print(f"{'8 async':>10} {ac[0] * 1e6:9.2f} [{ac[1] * 1e6:.2f}-{ac[2] * 1e6:.2f}] {ag[0] * 1e6:10.2f} "
              f"[{ag[1] * 1e6:.2f}-{ag[2] * 1e6:.2f}] {'':>12} {'':>11} {ag[0] / ac[0]:7.2f}")
        sr = med(singles)
        for key, what in (("ddp_step", "DDP step"), ("ddp_view", "DDP step, gradient_as_bucket_view")):
            c = med([x[key] for x in res["ciuic"]])
            g = med([x[key] for x in res["gloo"]])
            print(f"{what}: ciuic {c[0] * 1e3:.2f} ms [{c[1] * 1e3:.2f}-{c[2] * 1e3:.2f}], gloo {g[0] * 1e3:.2f} ms "
                  f"[{g[1] * 1e3:.2f}-{g[2] * 1e3:.2f}] ({g[0] / c[0]:.2f}x)")
        print(f"one process (no DDP): {single * 1e3:.2f} ms [{sr[1] * 1e3:.2f}-{sr[2] * 1e3:.2f}]")
        dc = med([x["ddp_step"] for x in res["ciuic"]])
        dg = med([x["ddp_step"] for x in res["gloo"]])
        big = [s for s in sizes if s >= (1 << 20)]
        print(f"# goal: DDP step >= 2x faster than gloo: {dg[0] / dc[0]:.2f}x -> "
              f"{'met' if dg[0] / dc[0] >= 2 else 'missed'}")
        cpus = os.cpu_count() or 1
        share = max(1.0, n / cpus)  # ranks beyond the CPUs share them: compute alone takes this much longer
        print(f"# goal: DDP step within 1.3x of one process: {dc[0] / single:.2f}x -> "
              f"{'met' if dc[0] / single <= 1.3 else 'missed'}"
              + (f" ({n} ranks on {cpus} CPUs: computing alone takes >= {share:.1f}x; "
                 f"{dc[0] / (single * share):.2f}x of that)" if share > 1 else ""))
        if big:
            worst = min(ratios[s] for s in big)
            print(f"# goal: all_reduce >= 3x gloo's busbw at 1-64 MiB: worst {worst:.2f}x -> "
                  f"{'met' if worst >= 3 else 'missed'}")
        if 8 in ratios:
            print(f"# goal: all_reduce at 8 B no slower than gloo: {ratios[8]:.2f}x -> "
                  f"{'met' if ratios[8] >= 1 else 'missed'}")
            over = med([x["allreduce"][8] for x in res["ciuic"]])[0] - statistics.median(cpp)
            print(f"# goal: torch path <= 5 us over the C++ call at 8 B: {over * 1e6:+.2f} us "
                  f"(C++ {statistics.median(cpp) * 1e6:.2f} us) -> {'met' if over <= 5e-6 else 'missed'}")
    print(f"# #wrong {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
