"""Tip 2: overlap an async all-reduce with computation.

ciuic-run -n 2 python3 examples/python/tip2_async.py

Measures the all-reduce alone, the computation alone, and both overlapped
(all_reduce_async, compute, all_reduce_wait): the time hidden is what the
overlapped run saves over running them one after the other.
"""

import time

import numpy as np

from ciuic import CiuicContext, all_reduce_async, all_reduce_wait

ctx = CiuicContext()
gradient = np.ones(8 << 20, dtype=np.float32)  # 32 MiB
a = np.random.default_rng(0).standard_normal((300, 300))


def compute():
    x = a
    for _ in range(6):
        x = np.tanh(x @ a)
    return x


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


def overlapped():
    gradient[:] = 1
    handle = all_reduce_async(gradient, op=CiuicContext.SUM, context=ctx)
    compute()  # runs while the progress thread moves the data
    all_reduce_wait(handle)


t_comm, t_comp, t_both = best(comm_only), best(compute), best(overlapped)
wrong = int((gradient != ctx.world_size).sum())
if ctx.rank == 0:
    hidden = max(0.0, t_comm + t_comp - t_both)
    print(f"tip 2: 32 MiB all-reduce on {ctx.world_size} ranks over {ctx.backend}")
    print(f"  all-reduce alone {t_comm * 1e3:8.2f} ms")
    print(f"  compute alone    {t_comp * 1e3:8.2f} ms")
    print(f"  overlapped       {t_both * 1e3:8.2f} ms  (serial would be {(t_comm + t_comp) * 1e3:.2f} ms)")
    print(f"  time hidden      {hidden * 1e3:8.2f} ms ({100 * hidden / min(t_comm, t_comp):.0f}% of the shorter)"
          f"  #wrong {wrong}")
ctx.close()
raise SystemExit(1 if wrong else 0)
