"""Tip 2: overlap an async all-reduce with computation.

ciuic-run -n 2 python3 examples/python/tip2_async.py

Measures the all-reduce alone, the computation alone, and both overlapped
(all_reduce_async, compute, all_reduce_wait): the time hidden is what the
overlapped run saves over running them one after the other.

Two kinds of computation: CPU work (numpy matmuls) and work that leaves the
CPU idle (a sleep standing in for a GPU kernel or I/O the rank waits on).
The all-reduce moves data on a progress thread, so CPU work hides it only
when that thread has a core of its own: with as many ranks as cores, as on
a 2-core machine with 2 ranks, expect nothing hidden behind CPU work.
"""

import os

# One BLAS thread per rank: several ranks' BLAS pools would fight over the cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import time  # noqa: E402

import numpy as np  # noqa: E402

from ciuic import CiuicContext, all_reduce_async, all_reduce_wait  # noqa: E402

ctx = CiuicContext()
gradient = np.ones(8 << 20, dtype=np.float32)  # 32 MiB
a = np.random.default_rng(0).standard_normal((300, 300))


def compute_cpu():
    x = a
    for _ in range(6):
        x = np.tanh(x @ a)
    return x


def compute_offloaded():
    time.sleep(0.008)  # the CPU is free while a GPU kernel or I/O runs


def best(fn, reps=5):
    t = float("inf")
    for _ in range(reps):
        ctx.barrier()
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def comm_only():
    gradient[:] = 1
    all_reduce_wait(all_reduce_async(gradient, op=CiuicContext.SUM, context=ctx))


def overlapped(compute):
    def run():
        gradient[:] = 1
        handle = all_reduce_async(gradient, op=CiuicContext.SUM, context=ctx)
        compute()  # runs while the progress thread moves the data
        all_reduce_wait(handle)
    return run


t_comm = best(comm_only)
rows = []
wrong = 0
for name, compute in (("CPU work", compute_cpu), ("CPU-idle work", compute_offloaded)):
    t_comp, t_both = best(compute), best(overlapped(compute))
    wrong += int((gradient != ctx.world_size).sum())
    rows.append((name, t_comp, t_both))
if ctx.rank == 0:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"tip 2: 32 MiB all-reduce on {ctx.world_size} ranks over {ctx.backend}; "
          f"this rank may run on {cores} core(s), {os.cpu_count()} on the host")
    print(f"  all-reduce alone  {t_comm * 1e3:8.2f} ms")
    for name, t_comp, t_both in rows:
        hidden = max(0.0, t_comm + t_comp - t_both)
        print(f"  {name:<14}    alone {t_comp * 1e3:6.2f} ms, overlapped {t_both * 1e3:6.2f} ms"
              f" (serial {(t_comm + t_comp) * 1e3:.2f}): {hidden * 1e3:5.2f} ms hidden"
              f" ({100 * hidden / min(t_comm, t_comp):.0f}% of the shorter)")
    if os.cpu_count() <= ctx.world_size:
        print("  (no core is free for the progress threads here, so CPU work cannot hide the all-reduce)")
    print(f"  #wrong {wrong}")
ctx.close()
raise SystemExit(1 if wrong else 0)
