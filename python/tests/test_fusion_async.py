"""Fusion of iterables (parameters' grads), buckets, async overlap,
asyncio, and the GIL released during calls."""

import asyncio
import threading
import time

import numpy as np
import pytest

import ciuic
import ranks
from helpers import HAVE_TORCH

if HAVE_TORCH:
    import torch


def fuse_numpy(rank, n):
    ctx = ciuic.CiuicContext(buffer_size=8192)  # 8 KiB buckets: several packs
    arrays = [np.full(100 + i, rank + i, dtype=np.float32) for i in range(20)]
    ints = [np.full(7, rank, dtype=np.int64) for _ in range(3)]
    big = np.full(5000, rank, dtype=np.float32)  # 20 KB  # larger than a bucket: on its own
    got = ciuic.all_reduce(iter(arrays + ints + [big]), context=ctx)
    ok = all((a == sum(r + i for r in range(n))).all() for i, a in enumerate(arrays))
    ok = ok and all((a == sum(range(n))).all() for a in ints) and (big == sum(range(n))).all()
    b = ctx.bucket(np.float32, capacity=1000)
    xs = [np.full(50, float(rank), np.float32) for _ in range(10)]
    for x in xs:
        b.add(x)
    b.wait()
    ok = ok and all((x == sum(range(n))).all() for x in xs)
    issued = b.allreduces_issued
    ctx.close()
    return bool(ok), len(got), issued


def test_iterables_are_fused_and_written_back():
    for ok, count, issued in ranks.run(3, fuse_numpy):
        assert ok and count == 24
        assert issued == 2  # 10 x 200 B in 1000 B packs


def fuse_grads(rank, n):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    frozen = torch.nn.Linear(2, 2)
    for p in frozen.parameters():
        p.requires_grad_(False)
    x = torch.full((3, 8), float(rank + 1))
    model(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    ctx = ciuic.CiuicContext()
    ciuic.all_reduce(list(model.parameters()) + list(frozen.parameters()), op=ciuic.CiuicContext.SUM, context=ctx)
    everyone = ctx.all_gather_object([g.numpy() for g in grads])
    ctx.close()
    want = [sum(e[i] for e in everyone) for i in range(len(grads))]
    return all(np.allclose(p.grad.numpy(), w, rtol=1e-6) for p, w in zip(model.parameters(), want))


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_parameters_grads_are_reduced():
    assert all(ranks.run(2, fuse_grads))


def overlap(rank, n):
    ctx = ciuic.CiuicContext()
    x = np.ones(4 << 20, dtype=np.float32)  # 16 MiB
    t0 = time.perf_counter()
    ctx.all_reduce(x)
    alone = time.perf_counter() - t0
    x[:] = 1
    h = ciuic.all_reduce_async(x, context=ctx)
    busy = 0
    while not h.test():  # compute while it runs
        busy += int(np.sum(np.arange(1000)))
    y = h.wait()
    ok = y is x and bool((x == n).all())
    # asyncio: awaiting does not block the event loop.
    x[:] = 1

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        await asyncio.sleep(0)  # the ticker runs
        h = ctx.all_reduce_async(x)
        at_start = ticks
        finished_early = h.test()
        res = await h
        t.cancel()
        # Ticks while awaiting: the loop was not blocked (unless it was done
        # before the await, which 16 MiB on 2 ranks practically never is).
        return res, None if finished_early else ticks - at_start

    res, ticks = asyncio.run(main())
    ok = ok and res is x and bool((x == n).all())
    # Objects too, over the second document's Communicator.
    from ciuic.communication import Communicator

    c = Communicator(context=ctx, nodes=[f"node{r}" for r in range(n)])

    async def exchange():
        if rank == 0:
            await c.send_async({"data": [1, 2, 3]}, dest="node1")
            return None
        return await c.recv_async(source="node0")

    msg = asyncio.run(exchange())
    ctx.close()
    return ok, busy > 0, ticks, msg, alone


def test_async_overlaps_and_awaits():
    res = ranks.run(2, overlap)
    for r, (ok, busy, ticks, msg, _) in enumerate(res):
        assert ok
        assert ticks is None or ticks > 0  # the event loop ran while the all-reduce did
    assert res[1][3] == {"data": [1, 2, 3]}


def gil(rank, n):
    ctx = ciuic.CiuicContext(backend="tcp")
    x = np.ones(8 << 20, dtype=np.float32)  # 32 MiB over tcp: tens of ms
    ctx.barrier()
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.01)
    before = counter[0]
    t0 = time.perf_counter()
    ctx.all_reduce(x)
    took = time.perf_counter() - t0
    during = counter[0] - before
    stop.set()
    t.join()
    ok = bool((x == n).all())
    ctx.close()
    return ok, during, took


def test_gil_is_released_during_a_long_all_reduce():
    for ok, during, took in ranks.run(2, gil):
        assert ok
        # With the GIL held the thread would not advance at all during the call.
        assert during > 1000, (during, took)


def wait_timeout(rank, n):
    ctx = ciuic.CiuicContext(timeout=30)
    x = np.ones(4, np.float32)
    if rank == 1:
        time.sleep(1.0)  # rank 0's all-reduce cannot finish before this
    h = ctx.all_reduce_async(x)
    raised = None
    if rank == 0:
        try:
            h.wait(timeout=0.2)
        except ciuic.DeadlineExceededError as e:
            raised = str(e)
    h.wait()
    ctx.close()
    return raised, x.tolist()


def test_wait_with_a_timeout_raises_and_the_operation_goes_on():
    res = ranks.run(2, wait_timeout)
    assert res[0][0] is not None and "not done" in res[0][0]
    assert res[0][1] == res[1][1] == [2.0] * 4
