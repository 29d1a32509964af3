"""Tip 4: the buffer size's effect.

ciuic-run -n 2 python3 examples/python/tip4_buffer_size.py

One context per buffer size (each link's receive ring, and the fusion
bucket's capacity), timing a reduce of 8 MiB to rank 0 and a fused
all-reduce of 200 small tensors.
"""

import time

import numpy as np

from ciuic import CiuicContext

rows = []
wrong = 0
for buffer_size in (64 << 10, 1 << 20, 4 << 20, 1 << 26):
    ctx = CiuicContext(buffer_size=buffer_size, backend="tcp")
    data = np.full(2 << 20, 1.0, dtype=np.float32)  # 8 MiB
    small = [np.full(256, 1.0, np.float32) for _ in range(200)]
    t_reduce = t_fused = float("inf")
    for _ in range(5):
        ctx.barrier()
        t0 = time.perf_counter()
        reduced = ctx.reduce(data, dst=0, op=CiuicContext.SUM)
        t_reduce = min(t_reduce, time.perf_counter() - t0)
        for s in small:
            s[:] = 1
        ctx.barrier()
        t0 = time.perf_counter()
        ctx.all_reduce(small)
        t_fused = min(t_fused, time.perf_counter() - t0)
    if ctx.rank == 0:
        wrong += int((reduced != ctx.world_size).sum())
    wrong += sum(int((s != ctx.world_size).sum()) for s in small)
    calls = -(-200 * 256 * 4 // buffer_size)
    rows.append((buffer_size, t_reduce, t_fused, calls))
    rank, size = ctx.rank, ctx.world_size
    ctx.close()
if rank == 0:
    print(f"tip 4: buffer size vs time (tcp, {size} ranks)")
    print(f"  {'buffer':>8s} {'reduce 8 MiB':>14s} {'fused 200x1 KiB':>16s} {'all-reduces':>12s}")
    for b, tr, tf, calls in rows:
        print(f"  {b >> 10:6d}Ki {tr * 1e3:11.2f} ms {tf * 1e6:13.0f} us {calls:12d}")
    print(f"  #wrong {wrong}")
raise SystemExit(1 if wrong else 0)
