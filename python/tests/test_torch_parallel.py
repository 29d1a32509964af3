"""torch's own parallelism on the "ciuic" backend: FSDP2 (fully_shard)
trained against the same model trained on gloo and against one process
that sees every rank's batch; DTensor redistributions and ops; the
functional collectives (torch.distributed._functional_collectives), called
on temporaries the way torch.compile'd code and DTensor call them."""


import pytest

import ranks
from helpers import init_torch_group, torch_backend_skip_reason

SKIP = torch_backend_skip_reason()
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

if SKIP is None:
    import torch
    import torch.distributed as dist

    import ciuic
    import ciuic.torch  # noqa: F401


def init(rank, n, store_dir, backend="ciuic"):
    init_torch_group(rank, n, store_dir, backend, timeout=120)


def batches(rank, steps, per_rank=8):
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(per_rank, 16, generator=g), torch.randn(per_rank, 4, generator=g)) for _ in range(steps)]


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 33),
                               torch.nn.ReLU(), torch.nn.Linear(33, 4))


def fsdp_train(rank, n, store_dir, backend, steps=6):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    init(rank, n, store_dir, backend)
    mesh = init_device_mesh("cpu", (n,))
    model = make_model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)  # 33 rows: uneven shards, padded by FSDP
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches(rank, steps):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    full = [p.full_tensor().detach().clone() for p in model.parameters()]
    local = sum(p.to_local().numel() for p in model.parameters())
    dist.destroy_process_group()
    return full, local


def one_process(n, steps=6):
    """The same training in one process: the mean loss over every rank's
    batch has the mean of the ranks' gradients (equal batch sizes)."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    per = [batches(r, steps) for r in range(n)]
    for s in range(steps):
        x = torch.cat([per[r][s][0] for r in range(n)])
        y = torch.cat([per[r][s][1] for r in range(n)])
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return [p.detach() for p in model.parameters()]


@pytest.mark.parametrize("n", [2, 3])
def test_fsdp2_trains_as_on_gloo_and_as_one_process(n, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    on_ciuic = ranks.run(n, fsdp_train, str(tmp_path / "a"), "ciuic", timeout=600)
    on_gloo = ranks.run(n, fsdp_train, str(tmp_path / "b"), "gloo", timeout=600)
    want = one_process(n)
    total = sum(p.numel() for p in want)
    # Each rank holds about 1/n of the parameters, and all agree on the whole.
    assert sum(local for _, local in on_ciuic) >= total and on_ciuic[0][1] < total
    for r in range(n):
        for got, first, gloo, ref in zip(on_ciuic[r][0], on_ciuic[0][0], on_gloo[r][0], want):
            assert torch.equal(got, first), f"rank {r}'s parameters differ from rank 0's"
            assert torch.allclose(got, gloo, rtol=1e-5, atol=1e-6), (got - gloo).abs().max().item()
            assert torch.allclose(got, ref, rtol=1e-4, atol=1e-5), (got - ref).abs().max().item()


def dtensor_ops(rank, n, store_dir):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    init(rank, n, store_dir)
    mesh = init_device_mesh("cpu", (n,))
    bad = []
    torch.manual_seed(7)  # the same global tensors on every rank
    a = torch.randn(n * 4 + 1, 6)  # one row more: uneven shards
    b = torch.randn(6, n * 3)

    def check(name, got, want):
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
            bad.append(f"{name}: off by {(got - want).abs().max().item()}")

    da = distribute_tensor(a, mesh, [Shard(0)])
    check("Shard(0) -> Replicate", da.redistribute(mesh, [Replicate()]).to_local(), a)
    check("Shard(0) -> Shard(1)", da.redistribute(mesh, [Shard(1)]).full_tensor(), a)
    db = distribute_tensor(b, mesh, [Shard(1)])
    check("matmul", (da @ distribute_tensor(b, mesh, [Replicate()])).full_tensor(), a @ b)
    check("matmul sharded both ways", (distribute_tensor(a, mesh, [Shard(1)]) @
                                       distribute_tensor(b, mesh, [Shard(0)])).full_tensor(), a @ b)
    check("sum", da.sum().full_tensor(), a.sum())
    check("Shard(1) ops", (db * 2 + 1).full_tensor(), b * 2 + 1)
    # A partial sum (each rank holds a term) reduced and reduce-scattered.
    part = torch.full((n * 2, 3), float(rank + 1))
    dp = torch.distributed.tensor.DTensor.from_local(part, mesh, [Partial()])
    total = torch.full((n * 2, 3), float(n * (n + 1) // 2))
    check("Partial -> Replicate", dp.redistribute(mesh, [Replicate()]).to_local(), total)
    check("Partial -> Shard(0)", dp.redistribute(mesh, [Shard(0)]).full_tensor(), total)
    dist.destroy_process_group()
    return bad


@pytest.mark.parametrize("n", [2, 3])
def test_dtensor_redistributions_and_ops(n, tmp_path):
    for r, bad in enumerate(ranks.run(n, dtensor_ops, str(tmp_path), timeout=300)):
        assert not bad, f"rank {r}: " + "; ".join(bad)


def functional(rank, n, store_dir):
    import torch.distributed._functional_collectives as fc
    init(rank, n, store_dir)
    g = dist.group.WORLD
    bad = []

    def check(name, got, want):
        got = got.wait() if hasattr(got, "wait") and not isinstance(got, torch.Tensor) else got
        if not torch.equal(torch.as_tensor(got), want):
            bad.append(f"{name}: {got} != {want}")

    tri = float(n * (n - 1) // 2)
    for rep in range(3):  # temporaries freed at once: the backend must hold them
        check("all_reduce", fc.all_reduce(torch.full((5,), float(rank)), "sum", g), torch.full((5,), tri))
        check("all_reduce max", fc.all_reduce(torch.full((5,), float(rank)), "max", g), torch.full((5,), n - 1.0))
        check("all_gather_tensor", fc.all_gather_tensor(torch.full((3,), float(rank)), 0, g),
              torch.arange(n, dtype=torch.float32).repeat_interleave(3))
        check("all_gather_tensor dim 1", fc.all_gather_tensor(torch.full((2, 1), float(rank)), 1, g),
              torch.arange(n, dtype=torch.float32).repeat(2, 1))
        check("reduce_scatter_tensor", fc.reduce_scatter_tensor(torch.arange(4.0 * n) + rank, "sum", 0, g),
              torch.arange(4.0 * rank, 4.0 * rank + 4) * n + tri)
        check("all_to_all_single", fc.all_to_all_single(torch.arange(2.0 * n) + 10 * rank, None, None, g),
              torch.tensor([10.0 * r + 2 * rank + k for r in range(n) for k in range(2)]))
        splits_in = [r + 1 for r in range(n)]  # to rank r: r + 1 elements
        splits_out = [rank + 1] * n
        check("all_to_all_single uneven",
              fc.all_to_all_single(torch.cat([torch.full((r + 1,), float(rank)) for r in range(n)]),
                                   splits_out, splits_in, g),
              torch.cat([torch.full((rank + 1,), float(r)) for r in range(n)]))
        check("broadcast", fc.broadcast(torch.full((4,), float(rank)), n - 1, g), torch.full((4,), n - 1.0))
        outs = fc.all_reduce_coalesced([torch.ones(2), torch.full((3,), 2.0)], "sum", g)
        check("all_reduce_coalesced", torch.cat([o.wait() if hasattr(o, "wait") else o for o in outs]),
              torch.tensor([n, n, 2.0 * n, 2.0 * n, 2.0 * n]))
        outs = fc.reduce_scatter_tensor_coalesced([torch.ones(2 * n), torch.arange(1.0 * n)], "sum", [0, 0], g)
        check("reduce_scatter_tensor_coalesced", torch.cat([o.wait() if hasattr(o, "wait") else o for o in outs]),
              torch.tensor([n, n, float(rank * n)]))
        outs = fc.all_gather_into_tensor_coalesced([torch.full((2,), float(rank)), torch.full((1,), rank + 0.5)], g)
        check("all_gather_into_tensor_coalesced", torch.cat([o.wait() if hasattr(o, "wait") else o for o in outs]),
              torch.cat([torch.arange(n, dtype=torch.float32).repeat_interleave(2), torch.arange(n) + 0.5]))
        # The raw ops, waited for by hand, each output read once.
        gn = g.group_name
        r = torch.ops._c10d_functional.all_gather_into_tensor(torch.full((3,), float(rank)), n, gn)
        check("_c10d_functional.all_gather_into_tensor", torch.ops._c10d_functional.wait_tensor(r),
              torch.arange(n, dtype=torch.float32).repeat_interleave(3))
        x = torch.full((6,), 1.0 + rank)
        y = torch.ops._c10d_functional.all_reduce_(x, "avg", gn)
        torch.ops._c10d_functional.wait_tensor(y)
        check("_c10d_functional.all_reduce_ avg", x, torch.full((6,), (n + 1) / 2))
    dist.destroy_process_group()
    return bad


@pytest.mark.parametrize("n", [2, 3])
def test_functional_collectives_on_temporaries(n, tmp_path):
    for r, bad in enumerate(ranks.run(n, functional, str(tmp_path), timeout=300)):
        assert not bad, f"rank {r}: " + "\n".join(bad)
