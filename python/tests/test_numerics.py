"""The numerics additions from Python: int16, uint16, bool and fp8 arrays
(ml_dtypes' and torch's), the bitwise ops, premul_sum, and the accumulate
choice, on 3 ranks, against references computed here."""

import numpy as np
import pytest

import ciuic
import ranks
from helpers import HAVE_TORCH, ml_dtypes

if HAVE_TORCH:
    import torch

N = 3


def ints(rank, count, dtype):
    i = np.arange(count, dtype=np.int64)
    return ((i * 2654435761 + rank * 40503 + 7) % (1 << 16)).astype(np.uint16).view(np.int16).astype(dtype)


def integer_ops(rank, n):
    fails = []
    with ciuic.CiuicContext() as ctx:
        for dtype in (np.int16, np.uint16):
            ins = [ints(r, 37, dtype) for r in range(n)]
            for op, fold in ((ciuic.SUM, np.add), (ciuic.PROD, np.multiply), (ciuic.MIN, np.minimum),
                             (ciuic.MAX, np.maximum), (ciuic.BAND, np.bitwise_and), (ciuic.BOR, np.bitwise_or),
                             (ciuic.BXOR, np.bitwise_xor)):
                want = ins[0].copy()
                for r in range(1, n):
                    want = fold(want, ins[r])  # wraps like the library
                x = ins[rank].copy()
                ctx.all_reduce(x, op)
                if not np.array_equal(x, want):
                    fails.append(f"{np.dtype(dtype).name} {op.name}: {x[:4]} want {want[:4]}")
        b = np.array([rank == 0, rank > 0, True, False])
        for op, want in ((ciuic.SUM, [True, True, True, False]), (ciuic.PROD, [False, False, True, False]),
                         (ciuic.BXOR, [True, (n - 1) % 2 == 1, n % 2 == 1, False])):
            x = b.copy()
            ctx.all_reduce(x, op)
            if x.tolist() != want:
                fails.append(f"bool {op.name}: {x.tolist()} want {want}")
        with pytest.raises(ciuic.InvalidArgumentError, match="bxor on dtype f32"):
            ctx.all_reduce(np.ones(4, np.float32), ciuic.BXOR)
        with pytest.raises(ciuic.InvalidArgumentError, match="avg on dtype bool"):
            ctx.all_reduce(b.copy(), ciuic.AVG)
        if HAVE_TORCH:
            for tdt in (torch.int16, torch.uint16, torch.bool):
                t = torch.ones(5, dtype=tdt)
                ctx.all_reduce(t, ciuic.BOR if tdt != torch.bool else ciuic.SUM)
                if t.tolist() != torch.ones(5, dtype=tdt).tolist():
                    fails.append(f"torch {tdt}: {t.tolist()}")
    return fails


def test_sixteen_bit_integers_bool_and_bitwise_ops():
    for fails in ranks.run(N, integer_ops):
        assert not fails, fails


def fp8_and_premul(rank, n):
    fails = []
    with ciuic.CiuicContext() as ctx:
        # Small integers: exact in both fp8 formats, so the sum is exact.
        vals = np.array([1, 2, 0.25, -4, 0.5, 8], dtype=np.float32) * (rank + 1)
        want = np.array([1, 2, 0.25, -4, 0.5, 8], dtype=np.float64) * sum(range(1, n + 1))
        for name in ("float8_e4m3fn", "float8_e5m2"):
            if ml_dtypes is not None:
                x = vals.astype(getattr(ml_dtypes, name))
                ctx.all_reduce(x)
                if not np.array_equal(x.astype(np.float64), want):
                    fails.append(f"ml_dtypes {name}: {x.astype(np.float64)} want {want}")
            if HAVE_TORCH:
                t = torch.from_numpy(vals).to(getattr(torch, name))
                ctx.all_reduce(t)
                if t.double().tolist() != want.tolist():
                    fails.append(f"torch {name}: {t.double().tolist()} want {want.tolist()}")
            # A uint8 array read as fp8 by name.
            raw = vals.astype(ml_dtypes.float8_e4m3fn).view(np.uint8) if ml_dtypes is not None else None
            if raw is not None and name == "float8_e4m3fn":
                ctx.all_reduce(raw, dtype="float8_e4m3fn")
                if not np.array_equal(raw.view(ml_dtypes.float8_e4m3fn).astype(np.float64), want):
                    fails.append("uint8 read as float8_e4m3fn")
        # premul_sum: each input times the factor, then the sum.
        op = ctx.premul_sum(0.5)
        assert op >= 256
        x = np.full(7, 2.0 * (rank + 1), dtype=np.float32)
        ctx.all_reduce(x, op)
        if not np.all(x == sum(r + 1 for r in range(n))):
            fails.append(f"premul_sum f32: {x}")
        h = np.full(3, 60000.0, dtype=np.float16)  # the plain sum would overflow f16
        ctx.all_reduce(h, ctx.premul_sum(1.0 / n))
        if not np.all(h == np.float16(60000.0)):
            fails.append(f"premul_sum f16: {h}")
        if HAVE_TORCH:
            t = torch.full((4,), float(rank), dtype=torch.bfloat16)
            ctx.all_reduce(t, op)
            if t.float().tolist() != [0.5 * sum(range(n))] * 4:
                fails.append(f"premul_sum torch bf16: {t.tolist()}")
        ctx.destroy_op(op)
        with pytest.raises(ciuic.InvalidArgumentError):
            ctx.destroy_op(op)
        with pytest.raises(ciuic.InvalidArgumentError, match="premul_sum on dtype i32"):
            ctx.all_reduce(np.ones(2, np.int32), ctx.premul_sum(2))
        with pytest.raises(TypeError):
            ctx.premul_sum("2")
    return fails


def test_fp8_arrays_and_premul_sum():
    for fails in ranks.run(N, fp8_and_premul):
        assert not fails, fails


def accumulation(rank, n, mode):
    # bf16 values whose sum over the ranks needs more than bf16's 8 bits:
    # f32 accumulation rounds once, so every rank's result is the exact sum
    # rounded once; the ring over tcp rounds at every hop.
    rng = np.random.default_rng(5)
    allv = rng.normal(size=(n, 4096)).astype(np.float32)
    allv = allv.astype(ml_dtypes.bfloat16).astype(np.float64)
    exact = allv.sum(axis=0)
    with ciuic.CiuicContext(backend="tcp", accumulate=mode, knobs={"CIUIC_ALGO": "ring"}) as ctx:
        x = allv[rank].astype(ml_dtypes.bfloat16)
        ctx.all_reduce(x)
        once = exact.astype(np.float32).astype(ml_dtypes.bfloat16)
        return int(np.count_nonzero(x.astype(np.float64) != once.astype(np.float64)))


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed")
def test_accumulate_f32_rounds_once_and_wire_per_hop():
    f32 = ranks.run(4, accumulation, "f32")
    wire = ranks.run(4, accumulation, "wire")
    # f32: at most the few elements where the f32 sum itself sits on a
    # bf16 rounding boundary differ from the exact sum rounded once.
    assert max(f32) <= 4, f32
    assert min(wire) > 100, wire
    with pytest.raises(ValueError, match="accumulate"):
        ciuic.CiuicContext(world_size=1, rank=0, accumulate="f16")
