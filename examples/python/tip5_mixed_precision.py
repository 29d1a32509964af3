"""Tip 5: mixed precision: bf16 gradients on the wire.

ciuic-run -n 2 python3 examples/python/tip5_mixed_precision.py

Trains a small model for a few steps, all-reducing the gradients
(all_reduce(model.parameters()): each .grad, fused) once in float32 and once
cast to bfloat16 (half the bytes), and compares time and the result.
Needs torch; with numpy only it compares float32 and bfloat16 arrays.
"""

import time

import numpy as np

from ciuic import CiuicContext, all_reduce

ctx = CiuicContext()
n = ctx.world_size
try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512))
    inputs = torch.randn(64, 512) + ctx.rank
    targets = torch.randn(64, 512)

    def step(wire_dtype):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(inputs).float(), targets)
        loss.backward()
        if wire_dtype == torch.float32:
            t0 = time.perf_counter()
            all_reduce(model.parameters(), op=CiuicContext.SUM, context=ctx)
            took = time.perf_counter() - t0
            return [p.grad.clone() for p in model.parameters()], took
        low = [p.grad.to(wire_dtype) for p in model.parameters()]  # half the bytes
        t0 = time.perf_counter()
        all_reduce(low, op=CiuicContext.SUM, context=ctx)
        took = time.perf_counter() - t0
        return [g.float() for g in low], took

    best = {torch.float32: float("inf"), torch.bfloat16: float("inf")}
    for _ in range(5):
        for dt in best:
            ctx.barrier()
            grads, took = step(dt)
            best[dt] = min(best[dt], took)
            if dt == torch.float32:
                full = grads
            else:
                low = grads
    nbytes = sum(p.numel() for p in model.parameters()) * 4
    err = max(float((a - b).abs().max() / (a.abs().max() + 1e-12)) for a, b in zip(full, low))
    wrong = int(err > 0.02)
    label = "torch model gradients"
else:
    import ml_dtypes

    g = np.random.default_rng(ctx.rank).standard_normal(1 << 20).astype(np.float32)
    best = {}
    for dt in (np.float32, ml_dtypes.bfloat16):
        t = float("inf")
        for _ in range(5):
            x = g.astype(dt)
            ctx.barrier()
            t0 = time.perf_counter()
            all_reduce(x, context=ctx)
            t = min(t, time.perf_counter() - t0)
        best[dt] = t
        if dt == np.float32:
            full = x.astype(np.float32)
        else:
            low = x.astype(np.float32)
    nbytes = g.nbytes
    err = float(np.abs(full - low).max() / np.abs(full).max())
    wrong = int(err > 0.02)
    label = "numpy gradients"
if ctx.rank == 0:
    (f32, t32), (b16, t16) = list(best.items())
    print(f"tip 5: {label}, {nbytes / 1e6:.1f} MB in float32, {n} ranks over {ctx.backend}")
    print(f"  all-reduce float32  {t32 * 1e3:8.2f} ms")
    print(f"  all-reduce bfloat16 {t16 * 1e3:8.2f} ms  ({t32 / t16:.2f}x; half the bytes on the wire)")
    print(f"  largest relative difference {err:.4f} (bf16 has 8 bits of mantissa)  #wrong {wrong}")
ctx.close()
raise SystemExit(1 if wrong else 0)
