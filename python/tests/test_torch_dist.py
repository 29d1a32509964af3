"""Inside a torch.distributed job the context takes torch's rank, size and
store: no second rendezvous address."""

import os

import numpy as np
import pytest

import ciuic
import ranks
from helpers import HAVE_TORCH

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")

if HAVE_TORCH:
    import torch
    import torch.distributed as dist


def in_torch_job(rank, n, port):
    for k in ("CIUIC_RANK", "CIUIC_WORLD_SIZE", "CIUIC_STORE_ADDR", "CIUIC_STORE_EXTERNAL"):
        os.environ.pop(k, None)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    ctx = ciuic.CiuicContext(world_size=n, rank=dist.get_rank())
    t = torch.full((1000,), float(rank))
    ciuic.all_reduce(t, op=ciuic.CiuicContext.SUM, context=ctx)
    second = ciuic.CiuicContext()  # a second context over the same store: its own keys
    y = second.all_gather(torch.tensor([rank]))
    try:
        ciuic.CiuicContext(world_size=n + 1)
        mismatch = None
    except ValueError as e:
        mismatch = str(e)
    ctx.close()
    second.close()
    dist.destroy_process_group()
    return t[0].item(), [int(v) for v in y], (ctx.rank, ctx.world_size), mismatch


def test_context_uses_torch_distributed_rank_size_and_store():
    n = 3
    res = ranks.run(n, in_torch_job, ranks.free_port(), timeout=180)
    for r, (value, gathered, rs, mismatch) in enumerate(res):
        assert value == sum(range(n))
        assert gathered == list(range(n))
        assert rs == (r, n)
        assert mismatch is not None and "world_size=4" in mismatch
