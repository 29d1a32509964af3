"""The torch.distributed backend "ciuic": every collective against gloo in
the same job (two process groups, the same inputs) and against a reference
computed here; DDP trained on ciuic and on gloo from the same seeds; groups;
a killed rank; destroy_process_group with work in flight."""

import datetime
import os
import signal
import time

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

FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int8", "uint8", "int16", "uint16", "int32", "int64"]


def init(rank, n, store_dir, timeout=60, backend="ciuic"):
    init_torch_group(rank, n, store_dir, backend, timeout)


def value(dtype, rank, count, salt=0):
    """Rank `rank`'s deterministic input (small values: exact in every dtype)."""
    t = (torch.arange(count, dtype=torch.int64) * 7 + rank * 3 + salt) % 5 + 1
    if dtype == "bool":
        return (t % 2 == rank % 2)
    return t.to(getattr(torch, dtype))


def reference(dtype, op, n, count, salt=0):
    rows = torch.stack([value(dtype, r, count, salt).to(torch.float64) if dtype != "bool"
                        else value(dtype, r, count, salt) for r in range(n)])
    if dtype == "bool":
        return {"SUM": rows.any(0), "MAX": rows.any(0), "MIN": rows.all(0), "PRODUCT": rows.all(0),
                "BAND": rows.all(0), "BOR": rows.any(0), "BXOR": rows.sum(0) % 2 == 1}[op]
    out = {"SUM": rows.sum(0), "PRODUCT": rows.prod(0), "MIN": rows.amin(0), "MAX": rows.amax(0),
           "AVG": rows.sum(0) / n}
    if op in ("BAND", "BOR", "BXOR"):
        acc = rows[0].to(torch.int64)
        for r in rows[1:]:
            acc = {"BAND": acc & r.to(torch.int64), "BOR": acc | r.to(torch.int64),
                   "BXOR": acc ^ r.to(torch.int64)}[op]
        return acc.to(getattr(torch, dtype))
    res = out[op]
    if dtype in INTS and op == "AVG":
        res = torch.div(rows.sum(0), n, rounding_mode="trunc")
    return res.to(getattr(torch, dtype))


def close(a, b, dtype):
    if dtype in ("float16", "bfloat16"):
        return torch.allclose(a.double(), b.double(), rtol=1e-2, atol=1e-2)
    if dtype in ("float32", "float64"):
        return torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-6)
    return torch.equal(a, b)


def every_collective(rank, n, store_dir):
    init(rank, n, store_dir)
    gloo = dist.new_group(backend="gloo")
    bad, checked, gloo_checked = [], 0, 0
    count = 1037

    def check(name, got, want, dtype, gloo_got=None):
        nonlocal checked, gloo_checked
        checked += 1
        if not close(got, want, dtype):
            bad.append(f"{name} {dtype}: got {got.flatten()[:6].tolist()} want {want.flatten()[:6].tolist()}")
        if gloo_got is not None:
            gloo_checked += 1
            if not close(got, gloo_got, dtype):
                bad.append(f"{name} {dtype}: ciuic {got.flatten()[:6].tolist()} gloo {gloo_got.flatten()[:6].tolist()}")

    def on_gloo(fn):
        try:
            return fn()
        except RuntimeError:
            return None  # gloo lacks it (bf16, some ops): checked against the reference only

    ops = {d: ["SUM", "PRODUCT", "MIN", "MAX", "AVG"] + (["BAND", "BOR", "BXOR"] if d in INTS else [])
           for d in FLOATS + INTS}
    ops["bool"] = ["SUM", "MIN", "MAX", "PRODUCT", "BAND", "BOR", "BXOR"]
    for dtype, names in ops.items():
        for op in names:
            rop = getattr(dist.ReduceOp, op)
            x = value(dtype, rank, count)
            y = x.clone()
            dist.all_reduce(x, op=rop)
            g = on_gloo(lambda: (dist.all_reduce(y, op=rop, group=gloo), y)[1])
            check(f"all_reduce {op}", x, reference(dtype, op, n, count), dtype, g)
        # in place and out of place forms of the others, SUM
        want = reference(dtype, "SUM" if dtype != "bool" else "MAX", n, count)
        if dtype != "bool":
            x = value(dtype, rank, count)
            dist.reduce(x, dst=n - 1)
            if rank == n - 1:
                check("reduce", x, want, dtype)
            # reduce_scatter_tensor: the input is n blocks; rank r keeps block r reduced
            inp = torch.cat([value(dtype, rank, count, salt=b) for b in range(n)])
            out = torch.empty(count, dtype=inp.dtype)
            dist.reduce_scatter_tensor(out, inp)
            check("reduce_scatter_tensor", out, reference(dtype, "SUM", n, count, salt=rank), dtype)
            out2 = torch.empty(count, dtype=inp.dtype)
            dist.reduce_scatter(out2, [value(dtype, rank, count, salt=b) for b in range(n)])
            check("reduce_scatter", out2, reference(dtype, "SUM", n, count, salt=rank), dtype)
            if dtype in FLOATS:
                out3 = torch.empty(count, dtype=inp.dtype)
                dist.reduce_scatter_tensor(out3, inp, op=dist.ReduceOp.AVG)
                check("reduce_scatter_tensor AVG", out3, reference(dtype, "AVG", n, count, salt=rank), dtype)
        b = value(dtype, rank, count)
        dist.broadcast(b, src=1 % n)
        check("broadcast", b, value(dtype, 1 % n, count), dtype)
        outs = [torch.empty(count, dtype=b.dtype) for _ in range(n)]
        dist.all_gather(outs, value(dtype, rank, count))
        for r in range(n):
            check("all_gather", outs[r], value(dtype, r, count), dtype)
        big = torch.empty(n * count, dtype=b.dtype)
        dist.all_gather_into_tensor(big, value(dtype, rank, count))
        check("all_gather_into_tensor", big, torch.cat([value(dtype, r, count) for r in range(n)]), dtype)
        # FSDP's form: the input is a view of this rank's slot in the output
        big2 = torch.zeros(n * count, dtype=b.dtype)
        slot = big2.narrow(0, rank * count, count)
        slot.copy_(value(dtype, rank, count))
        dist.all_gather_into_tensor(big2, slot)
        check("all_gather_into_tensor aliased", big2, torch.cat([value(dtype, r, count) for r in range(n)]), dtype)
    # all_to_all_single, even and uneven splits; all_to_all lists
    x = torch.arange(n * 4, dtype=torch.float32) + 100 * rank
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    check("all_to_all_single", out, torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) + 100 * p
                                               for p in range(n)]), "float32")
    # No splits: the elements split evenly even where dim 0 does not (n + 1
    # rows of n), as on gloo and nccl.
    x = (torch.arange(n * (n + 1), dtype=torch.float32) + 100 * rank).reshape(n + 1, n)
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    check("all_to_all_single elements", out.flatten(),
          torch.cat([torch.arange(rank * (n + 1), (rank + 1) * (n + 1), dtype=torch.float32) + 100 * p
                     for p in range(n)]), "float32")
    # rank p sends (p + q + 1) rows of width 3 to rank q
    ins = [(p_q := rank + q + 1) for q in range(n)]
    x = torch.cat([torch.full((rank + q + 1, 3), float(rank * 10 + q)) for q in range(n)])
    outs_split = [p + rank + 1 for p in range(n)]
    out = torch.empty(sum(outs_split), 3)
    dist.all_to_all_single(out, x, output_split_sizes=outs_split, input_split_sizes=ins)
    want = torch.cat([torch.full((p + rank + 1, 3), float(p * 10 + rank)) for p in range(n)])
    check("all_to_all_single uneven", out, want, "float32")
    outl = [torch.empty(2, dtype=torch.int64) for _ in range(n)]
    dist.all_to_all(outl, [torch.tensor([rank, q], dtype=torch.int64) for q in range(n)])
    for p in range(n):
        check("all_to_all", outl[p], torch.tensor([p, rank]), "int64")
    # gather / scatter
    g = [torch.empty(5) for _ in range(n)] if rank == 0 else None
    dist.gather(torch.full((5,), float(rank)), gather_list=g, dst=0)
    if rank == 0:
        for p in range(n):
            check("gather", g[p], torch.full((5,), float(p)), "float32")
    s = torch.empty(5)
    dist.scatter(s, scatter_list=[torch.full((5,), float(p * 2)) for p in range(n)] if rank == n - 1 else None,
                 src=n - 1)
    check("scatter", s, torch.full((5,), float(rank * 2)), "float32")
    # send/recv around the ring with two tags
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    reqs = [dist.isend(torch.full((7,), float(rank)), nxt, tag=3), dist.isend(torch.full((9,), float(rank + 50)), nxt, tag=4)]
    a, c = torch.empty(7), torch.empty(9)
    dist.recv(c, prv, tag=4)
    dist.recv(a, prv, tag=3)
    for q in reqs:
        q.wait()
    check("recv tag 3", a, torch.full((7,), float(prv)), "float32")
    check("recv tag 4", c, torch.full((9,), float(prv + 50)), "float32")
    # non-contiguous tensors are staged and written back
    m = torch.full((6, 4), float(rank + 1)).t()
    dist.all_reduce(m)
    check("all_reduce non-contiguous", m, torch.full((4, 6), float(n * (n + 1) // 2)), "float32")
    # The coalesced list forms: output_lists[r][k] is rank r's input k.
    for dtype in ("float32", "int64"):
        ins = [value(dtype, rank, 5 + k, salt=k) for k in range(3)]
        lists = [[torch.empty_like(t) for t in ins] for _ in range(n)]
        dist.all_gather_coalesced(lists, ins)
        glists = on_gloo(lambda: ([[torch.empty_like(t) for t in ins] for _ in range(n)]))
        if glists is not None:
            dist.all_gather_coalesced(glists, ins, group=gloo)
        for r in range(n):
            for k in range(3):
                check(f"all_gather_coalesced [{r}][{k}]", lists[r][k], value(dtype, r, 5 + k, salt=k), dtype,
                      glists[r][k] if glists is not None else None)
        ts = [value(dtype, rank, 7 + k, salt=k) for k in range(3)]
        gts = [t.clone() for t in ts]
        dist.all_reduce_coalesced(ts)
        dist.all_reduce_coalesced(gts, group=gloo)
        for k in range(3):
            check(f"all_reduce_coalesced [{k}]", ts[k], reference(dtype, "SUM", n, 7 + k, salt=k), dtype, gts[k])
    # fp8: small integers, their sums rounded once to the format (one host:
    # the shared-memory path reduces every rank's input in one pass), on
    # all-reduce and reduce-scatter; AVG's bounds are numerics_test's
    for name in ("float8_e4m3fn", "float8_e5m2"):
        fp8 = getattr(torch, name)
        for op in ("SUM", "MAX"):
            x = value("float32", rank, 33).to(fp8)
            dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
            want = reference("float64", op, n, 33).to(torch.float32).to(fp8)
            checked += 1
            if not torch.equal(x.view(torch.uint8), want.view(torch.uint8)):
                bad.append(f"all_reduce {op} {name}: got {x.float()[:6].tolist()} want {want.float()[:6].tolist()}")
        inp = torch.cat([value("float32", rank, 9, salt=b) for b in range(n)]).to(fp8)
        out = torch.empty(9, dtype=fp8)
        dist.reduce_scatter_tensor(out, inp)
        want = reference("float64", "SUM", n, 9, salt=rank).to(torch.float32).to(fp8)
        if not torch.equal(out.view(torch.uint8), want.view(torch.uint8)):
            bad.append(f"reduce_scatter_tensor {name}: got {out.float().tolist()} want {want.float().tolist()}")
    # object collectives, barrier, async + future
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank})
    if objs != [{"rank": r} for r in range(n)]:
        bad.append(f"all_gather_object: {objs}")
    lst = [f"from {rank}"]
    dist.broadcast_object_list(lst, src=n - 1)
    if lst != [f"from {n - 1}"]:
        bad.append(f"broadcast_object_list: {lst}")
    dist.barrier()
    w = dist.all_reduce(torch.ones(1 << 16), async_op=True)
    fut_val = w.get_future().wait()[0]
    w.wait()
    check("future value", fut_val, torch.full((1 << 16,), float(n)), "float32")
    assert w.is_completed()  # (torch 2.11 cannot return Work.exception() to Python)
    errors = []
    cx = torch.full((3,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(cx)  # torch hands the backend a real view for SUM
    check("all_reduce complex", torch.view_as_real(cx),
          torch.view_as_real(torch.full((3,), complex(n * (n - 1) / 2, n), dtype=torch.complex64)), "float32")
    for fn in (lambda: dist.all_reduce(torch.ones(3, dtype=torch.complex64), op=dist.ReduceOp.MAX),
               lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND),
               lambda: dist.recv(torch.ones(3)),
               lambda: dist.broadcast(torch.ones(3), src=n + 5)):
        try:
            fn()
            errors.append("no error")
        except (RuntimeError, ValueError) as e:
            errors.append(str(e).splitlines()[0][:120])
    dist.destroy_process_group()
    return bad, checked, gloo_checked, errors


@pytest.mark.parametrize("n", [2, 3, 4])
def test_every_collective_matches_gloo_and_the_reference(n, tmp_path):
    res = ranks.run(n, every_collective, str(tmp_path), timeout=600)
    for r, (bad, checked, gloo_checked, errors) in enumerate(res):
        assert not bad, f"rank {r}: " + "\n".join(bad[:20])
        assert checked > 140 and gloo_checked > 40, (checked, gloo_checked)
        assert "no error" not in errors, errors
        assert "BAND" in errors[1] and "any source" in errors[2] and "root" in errors[3], errors


if SKIP is None:
    class Net(torch.nn.Module):
        """An MLP with a BatchNorm buffer and a layer forward never uses."""

        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.BatchNorm1d(64),
                                            torch.nn.Linear(64, 4))
            self.unused = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.body(x)


def train(rank, n, store_dir, backend, hook, steps=50):
    init(rank, n, store_dir, backend=backend)
    torch.manual_seed(0)
    model = Net()
    net = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True, broadcast_buffers=True)
    if hook == "bf16":
        net.register_comm_hook(None, ciuic.torch.bf16_compress_hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 4, generator=g)
        if step % 5 == 3:
            with net.no_sync():  # accumulated locally, reduced with the next step's
                torch.nn.functional.mse_loss(net(x), y).backward()
            continue
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        opt.zero_grad()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    buffers = torch.cat([b.detach().flatten().double() for b in model.buffers()])
    dist.destroy_process_group()
    return params, buffers


@pytest.mark.parametrize("hook", [None, "bf16"])
def test_ddp_trains_as_on_gloo(hook, tmp_path):
    n = 2
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    on_ciuic = ranks.run(n, train, str(tmp_path / "a"), "ciuic", hook, timeout=600)
    on_gloo = ranks.run(n, train, str(tmp_path / "b"), "gloo", None, timeout=600)
    # Parameters agree across ranks; the BatchNorm buffers are each rank's own
    # after the last forward (broadcast from rank 0 before each one).
    assert torch.equal(on_ciuic[0][0], on_ciuic[1][0]), "the ranks' parameters differ"
    tol = 1e-4 if hook is None else 2e-2
    for r in range(n):
        for got, want in zip(on_ciuic[r], on_gloo[r]):
            assert torch.allclose(got, want.to(got.dtype), rtol=tol, atol=tol), (got - want).abs().max().item()


def groups(rank, n, store_dir):
    init(rank, n, store_dir)
    mine = [0, 1] if rank < 2 else [2, 3]
    a = dist.new_group([0, 1])
    b = dist.new_group([2, 3])
    g = a if rank < 2 else b
    t = torch.full((1 << 15,), float(rank + 1))
    works = [dist.all_reduce(t, group=g, async_op=True)]
    whole = torch.ones(8)
    works[0].wait()
    dist.all_reduce(whole)
    odd = dist.new_group([1, 3])
    got_odd = None
    if rank in (1, 3):
        o = torch.tensor([float(rank)])
        dist.all_reduce(o, group=odd)
        got_odd = o.item()
    # Subgroups of 2 ([0, 1], [2, 3]) and by enumeration ([0, 2], [1, 3]).
    sub, _ = dist.new_subgroups(group_size=2)
    s1 = torch.tensor([float(rank)])
    dist.all_reduce(s1, group=sub)
    enum, _ = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]])
    s2 = torch.tensor([float(rank)])
    dist.all_reduce(s2, group=enum)
    dist.destroy_process_group()
    return t[0].item(), sum(r + 1 for r in mine), whole[0].item(), got_odd, s1.item(), s2.item()


def test_groups_run_side_by_side(tmp_path):
    res = ranks.run(4, groups, str(tmp_path), timeout=300)
    for r, (got, want, whole, odd, s1, s2) in enumerate(res):
        assert got == want and whole == 4.0
        assert odd == (4.0 if r in (1, 3) else None)
        assert s1 == (1.0 if r < 2 else 5.0) and s2 == (2.0 if r % 2 == 0 else 4.0), (r, s1, s2)


def killed(rank, n, store_dir, victim, sync_dir):
    init(rank, n, store_dir, timeout=15)
    x = torch.ones(1 << 16)
    dist.all_reduce(x)
    if rank == victim:
        open(os.path.join(sync_dir, "go"), "w").close()
        while len(os.listdir(sync_dir)) < n:
            time.sleep(0.001)
        os.kill(os.getpid(), signal.SIGKILL)
    open(os.path.join(sync_dir, f"ready.{rank}"), "w").close()
    while not os.path.exists(os.path.join(sync_dir, "go")) or len(os.listdir(sync_dir)) < n:
        time.sleep(0.001)
    t0 = time.monotonic()
    try:
        for _ in range(100000):
            dist.all_reduce(x, async_op=True).wait()
        msg = "no error"
    except RuntimeError as e:
        msg = str(e)
    took = time.monotonic() - t0
    t1 = time.monotonic()
    dist.destroy_process_group()
    return msg, took, time.monotonic() - t1


def test_killed_rank_is_named_and_destroy_does_not_hang(tmp_path):
    n, victim = 3, 2
    (tmp_path / "sync").mkdir()
    res = ranks.run(n, killed, str(tmp_path), victim, str(tmp_path / "sync"), allow_signals=(signal.SIGKILL,),
                    timeout=120)
    assert res[victim] == ("signal", signal.SIGKILL)
    for r in range(n):
        if r == victim:
            continue
        msg, took, destroy = res[r]
        assert msg != "no error"
        assert f"rank {victim}" in msg, f"rank {r}: {msg}"
        assert took < 15 and destroy < 10, (took, destroy)


def stalled(rank, n, store_dir, sync_dir):
    init(rank, n, store_dir, timeout=5)
    x = torch.ones(1 << 16)
    dist.all_reduce(x)
    if rank == n - 1:  # alive, connected, and never calls again
        while len(os.listdir(sync_dir)) < n - 1:
            time.sleep(0.05)
        return None
    t0 = time.monotonic()
    w = dist.all_reduce(x, async_op=True)
    try:
        w.wait(timeout=datetime.timedelta(seconds=1))  # a wait shorter than the group's timeout
        short = "no error"
    except RuntimeError as e:
        short = str(e)
    short_took = time.monotonic() - t0
    try:
        w.wait()
        msg = "no error"
    except RuntimeError as e:
        msg = str(e)
    took = time.monotonic() - t0
    try:
        dist.all_reduce(torch.ones(8))  # blocking, on a group whose peer stalls
        blocking = "no error"
    except RuntimeError as e:
        blocking = str(e)
    open(os.path.join(sync_dir, f"done.{rank}"), "w").close()
    t1 = time.monotonic()
    dist.destroy_process_group()
    return short, short_took, msg, took, blocking, time.monotonic() - t1


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_stalled_rank_is_named_within_the_timeout(transport, tmp_path):
    n = 3
    (tmp_path / "sync").mkdir()
    res = ranks.run(n, stalled, str(tmp_path), str(tmp_path / "sync"), env={"CIUIC_TRANSPORT": transport},
                    timeout=120)
    for r in range(n - 1):
        short, short_took, msg, took, blocking, destroy = res[r]
        assert "timed out" in short.lower() and 0.9 < short_took < 3, (short, short_took)
        for m in (msg, blocking):
            assert f"rank {n - 1}" in m, f"rank {r}: {m}"
        assert 4 < took < 12 and destroy < 10, (took, destroy)


def other_inits(rank, n, store_dir, how, port):
    for k in ("CIUIC_RANK", "CIUIC_WORLD_SIZE", "CIUIC_STORE_ADDR", "CIUIC_STORE_EXTERNAL"):
        os.environ.pop(k, None)
    backend = "ciuic"
    if how == "env":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(n))
        dist.init_process_group(backend)  # env://, rank and size from the environment
    elif how == "tcp":
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    else:  # a backend per device type: CPU tensors go to ciuic
        dist.init_process_group("cpu:ciuic,cuda:gloo", init_method=f"file://{store_dir}/store", rank=rank,
                                world_size=n)
    x = torch.full((5,), float(rank))
    dist.all_reduce(x)
    cpu_backend = dist.group.WORLD._get_backend(torch.device("cpu")).name()
    dist.destroy_process_group()
    return x.tolist(), cpu_backend


@pytest.mark.parametrize("how", ["env", "tcp", "per-device"])
def test_init_methods_and_per_device_backends(how, tmp_path):
    port = ranks.free_port()
    n = 3
    for x, name in ranks.run(n, other_inits, str(tmp_path), how, port, timeout=120):
        assert x == [3.0] * 5 and name == "ciuic", (x, name)


def test_another_torch_than_the_one_built_against_is_a_clear_error(tmp_path):
    import shutil
    import subprocess
    import sys
    pkg = os.path.dirname(ciuic.__file__)
    shutil.copytree(pkg, tmp_path / "ciuic")
    (tmp_path / "ciuic" / "_torch_built.py").write_text('TORCH_VERSION = "1.0.0"\n')
    code = ("import warnings, torch.distributed\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    import ciuic\n"
            "print('WARN', [str(x.message) for x in w])\n"
            "try:\n"
            "    import ciuic.torch\n"
            "except ImportError as e:\n"
            "    print('ERROR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert "built against torch 1.0.0" in out.stdout and "not registered" in out.stdout, out.stdout
    assert "ERROR" in out.stdout and "pip install --no-build-isolation" in out.stdout, out.stdout
