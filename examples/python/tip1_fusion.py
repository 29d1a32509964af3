"""Tip 1: fuse many small gradients into few all-reduces.

ciuic-run -n 2 python3 examples/python/tip1_fusion.py

Times 100 gradients of 1024 floats all-reduced one call per tensor, fused by
ciuic (all_reduce of the list: packed into buckets of buffer_size bytes),
and concatenated by hand (the first source document's torch.cat + split).
"""

import time

import numpy as np

from ciuic import CiuicContext, all_reduce

ctx = CiuicContext(buffer_size=1 << 20)
rng = np.random.default_rng(ctx.rank)
gradients = [rng.standard_normal(1024).astype(np.float32) for _ in range(100)]
everyone = ctx.all_gather_object(gradients)
want = [sum(e[i] for e in everyone) for i in range(len(gradients))]


def per_tensor(gs):
    for g in gs:
        all_reduce(g, op=CiuicContext.SUM, context=ctx)


def fused(gs):
    all_reduce(gs, op=CiuicContext.SUM, context=ctx)


def by_hand(gs):
    merged = np.concatenate(gs)
    all_reduce(merged, op=CiuicContext.SUM, context=ctx)
    for g, part in zip(gs, np.split(merged, len(gs))):
        g[:] = part


def measure(fn, reps=20):
    best = float("inf")
    for _ in range(reps):
        gs = [g.copy() for g in gradients]
        ctx.barrier()
        t0 = time.perf_counter()
        fn(gs)
        best = min(best, time.perf_counter() - t0)
    wrong = sum(not np.allclose(g, w, rtol=1e-5, atol=1e-5) for g, w in zip(gs, want))
    return best, wrong


results = {name: measure(fn) for name, fn in (("one call per tensor", per_tensor), ("fused (ciuic)", fused),
                                              ("torch.cat-style by hand", by_hand))}
if ctx.rank == 0:
    print(f"tip 1: 100 gradients x 1024 float32, {ctx.world_size} ranks over {ctx.backend}")
    for name, (t, wrong) in results.items():
        print(f"  {name:26s} {t * 1e6:9.1f} us  #wrong {wrong}")
    base = results["one call per tensor"][0]
    print(f"  fusion speed-up: {base / results['fused (ciuic)'][0]:.1f}x")
bad = sum(w for _, w in results.values())
ctx.close()
raise SystemExit(1 if bad else 0)
