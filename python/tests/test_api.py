"""The package on one rank: import, docs, types, argument errors, partition."""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import ciuic
from helpers import HAVE_TORCH, ml_dtypes

if HAVE_TORCH:
    import torch


@pytest.fixture
def ctx():
    c = ciuic.CiuicContext()
    yield c
    c.close()


def test_import_and_docs():
    assert ciuic.__version__
    assert "CiuicContext" in ciuic.__doc__
    for name in ("CiuicContext", "all_reduce", "all_reduce_async", "all_reduce_wait", "partition", "Bucket"):
        assert getattr(ciuic, name).__doc__, name
    for name in ("all_reduce", "all_gather", "reduce", "broadcast", "reduce_scatter", "all_to_all", "gather",
                 "scatter", "send", "recv", "barrier", "bucket", "send_object", "all_gather_object"):
        assert getattr(ciuic.CiuicContext, name).__doc__, name
        if name not in ("bucket",):
            assert hasattr(ciuic.CiuicContext, name + "_async") or name.endswith("_object"), name
    assert ciuic.CiuicContext.SUM == ciuic.SUM == 0
    assert [int(o) for o in (ciuic.SUM, ciuic.PROD, ciuic.MIN, ciuic.MAX, ciuic.AVG)] == [0, 1, 2, 3, 4]


def test_single_rank_context(ctx):
    assert (ctx.rank, ctx.world_size) == (0, 1)
    assert ctx.backend in ("shm", "tcp", "verbs")
    x = np.arange(10, dtype=np.float32)
    assert ciuic.all_reduce(x, context=ctx) is x
    assert x.tolist() == list(range(10))
    assert [g.tolist() for g in ctx.all_gather(np.array([3, 4]))] == [[3, 4]]
    assert ctx.broadcast_object({"a": 1}) == {"a": 1}
    assert ctx.all_gather_object("x") == ["x"]


def test_context_manager_and_closed_context_raises():
    with ciuic.CiuicContext() as c:
        pass
    assert c.closed
    with pytest.raises(ValueError, match="closed"):
        c.all_reduce(np.zeros(2, np.float32))
    c.close()  # idempotent


def test_bad_constructor_arguments_name_them():
    with pytest.raises(ValueError, match="backend='gloo'"):
        ciuic.CiuicContext(backend="gloo")
    with pytest.raises(ValueError, match="buffer_size"):
        ciuic.CiuicContext(buffer_size=-1)
    with pytest.raises(ValueError, match="buffer_size=4096: expected at least 8192"):
        ciuic.CiuicContext(buffer_size=4096)
    with pytest.raises(ValueError, match="timeout"):
        ciuic.CiuicContext(timeout=0)
    with pytest.raises(TypeError, match="world_size"):
        ciuic.CiuicContext(world_size="8")
    with pytest.raises(ValueError, match="rank=3"):
        ciuic.CiuicContext(world_size=2, rank=3)
    with pytest.raises(ciuic.InvalidArgumentError, match="CIUIC_NCHANNELS"):
        ciuic.CiuicContext(knobs={"CIUIC_NCHANNELS": "many"})


def test_world_without_store_address_is_an_error_naming_it():
    with pytest.raises(ciuic.InvalidArgumentError, match="CIUIC_STORE_ADDR"):
        ciuic.CiuicContext(world_size=2, rank=0)


def test_bad_arrays_name_the_argument(ctx):
    with pytest.raises(TypeError, match="x: unsupported element type"):
        ctx.all_reduce(np.zeros(3, dtype=np.longdouble))
    with pytest.raises(TypeError, match="x: unsupported element type"):
        ctx.all_reduce(np.zeros(3, dtype=np.complex64))
    with pytest.raises(TypeError, match="x: unsupported element type"):
        ctx.all_reduce(np.zeros(3, dtype=np.int16).view(np.float16).astype(np.float16).view("S2"))
    with pytest.raises(ValueError, match="x is not contiguous"):
        ctx.all_reduce(np.zeros((4, 4), np.float32)[:, 1])
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="x is read-only"):
        ctx.all_reduce(ro)
    ctx.all_reduce(ro, out=np.zeros(4, np.float32))  # read-only input, separate output: fine
    with pytest.raises(TypeError, match="out is float64 but x is float32"):
        ctx.all_reduce(np.zeros(4, np.float32), out=np.zeros(4, np.float64))
    with pytest.raises(ValueError, match="out has 3 elements, expected 4"):
        ctx.all_reduce(np.zeros(4, np.float32), out=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="op=9"):
        ctx.all_reduce(np.zeros(4, np.float32), op=9)
    with pytest.raises(TypeError, match="x: expected a numpy array or a torch tensor, got str"):
        ctx.broadcast("abc")
    with pytest.raises(TypeError, match=r"x\[1\]: expected a numpy array or a torch tensor"):
        ctx.all_reduce([np.zeros(2, np.float32), "no"])
    with pytest.raises(ValueError, match="out has 2 elements, expected 3"):
        ctx.all_gather_into(np.zeros(2, np.float32), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="src=1: not a rank"):
        ctx.broadcast(np.zeros(2, np.float32), src=1)
    with pytest.raises(ValueError, match="dst=0 is this rank"):
        ctx.send(np.zeros(2, np.float32), 0)
    with pytest.raises(ValueError, match="dst=5: not a rank"):
        ctx.reduce(np.zeros(2, np.float32), dst=5)
    with pytest.raises(TypeError, match="dtype='float8'"):
        ctx.all_reduce(np.zeros(2, np.float32), dtype="float8")
    with pytest.raises(TypeError, match="needs 2-byte elements"):
        ctx.all_reduce(np.zeros(2, np.float32), dtype="bfloat16")
    # all-to-all splits: one per rank, none negative, summing to the array
    # without wrapping around (python/src/args.h; the sums of 3+ ranks are
    # in tests/unit/python).
    x4, out4 = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"in_splits\[0\] is negative"):
        ctx.all_to_all(out4, x4, in_splits=[-1])
    with pytest.raises(ValueError, match="in_splits sum to more than the 4 elements of x"):
        ctx.all_to_all(out4, x4, in_splits=[2**63 - 1])
    with pytest.raises(ValueError, match=r"out_splits has 2 entries, expected world_size \(1\)"):
        ctx.all_to_all(out4, x4, out_splits=[2, 2])
    with pytest.raises(ValueError, match="out_splits sum to 3, out has 4 elements"):
        ctx.all_to_all(out4, x4, out_splits=[3])


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed")
def test_numpy_bfloat16_both_ways(ctx):
    a = np.array([1.5, 2.0], dtype=ml_dtypes.bfloat16)
    ctx.all_reduce(a)
    assert a.astype(np.float32).tolist() == [1.5, 2.0]
    raw = a.view(np.uint16).copy()
    ctx.all_reduce(raw, dtype="bfloat16")
    assert ciuic._ciuic.buffer_info(raw, "bfloat16")[1:3] == (2, "bfloat16")
    assert ciuic._ciuic.buffer_info(a)[1:3] == (2, "bfloat16")


def test_zero_copy_the_arrays_own_memory():
    a = np.zeros(8, dtype=np.float64)
    ptr, count, dtype, gpu = ciuic._ciuic.buffer_info(a)
    assert ptr == a.ctypes.data and count == 8 and dtype == "float64" and not gpu
    for name in ("float32", "float64", "float16", "int8", "uint8", "int32", "uint32", "int64", "uint64"):
        assert ciuic._ciuic.buffer_info(np.zeros(2, dtype=name))[2] == name


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_tensors_zero_copy_and_errors(ctx):
    t = torch.arange(6, dtype=torch.float32)
    ptr, count, dtype, gpu = ciuic._ciuic.buffer_info(t)
    assert ptr == t.data_ptr() and count == 6 and dtype == "float32" and not gpu
    assert ciuic._ciuic.buffer_info(torch.zeros(2, dtype=torch.bfloat16))[2] == "bfloat16"
    ctx.all_reduce(t)
    assert t.tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="x is not contiguous"):
        ctx.all_reduce(torch.zeros(4, 4)[:, 1])
    with pytest.raises(TypeError, match="x: unsupported dtype torch.complex64"):
        ctx.all_reduce(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="out is float64 but x is float32"):
        ctx.all_reduce(torch.zeros(2), out=torch.zeros(2, dtype=torch.float64))


@pytest.mark.skipif(not HAVE_TORCH or torch.cuda.is_available(), reason="a GPU is present: see test_gpu.py")
def test_nccl_backend_without_gpu_says_why():
    with pytest.raises(ciuic.FailedPreconditionError, match="no CUDA GPU"):
        ciuic.CiuicContext(backend="nccl")


def test_mpi_backend_outside_mpi():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "SLURM_"))}
    # Without mpi4py (blocked here) and without a launcher: an error saying so.
    code = ("import sys; sys.modules['mpi4py'] = None\nimport ciuic\ntry:\n    ciuic.CiuicContext(backend='mpi')\n"
            "except ciuic.FailedPreconditionError as e:\n    print('OK', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("OK") and "mpirun" in out.stdout, out.stdout + out.stderr
    # With mpi4py: MPI's singleton world, one rank.
    if importlib.util.find_spec("mpi4py") is not None:
        code = "import ciuic\nc = ciuic.CiuicContext(backend='mpi')\nprint('ranks', c.world_size)\nc.close()\n"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert "ranks 1" in out.stdout, out.stdout + out.stderr


def test_module_functions_without_a_context():
    with pytest.raises(ValueError, match="context: no open CiuicContext"):
        ciuic.all_reduce(np.zeros(2, np.float32))


def test_errors_hierarchy():
    assert issubclass(ciuic.InvalidArgumentError, ciuic.CiuicError)
    assert issubclass(ciuic.InvalidArgumentError, ValueError)
    assert issubclass(ciuic.DeadlineExceededError, TimeoutError)
    assert issubclass(ciuic.UnavailableError, ciuic.CiuicError)
    assert ciuic.PeerError is ciuic.UnavailableError
    assert ciuic._ciuic._culprit_rank("rank 1: link to rank 3: closed", 1) == 3
    assert ciuic._ciuic._culprit_rank("connecting to rank 0 failed", 2) == 0
    assert ciuic._ciuic._culprit_rank("no rank here", 0) == -1
    nested = "direct shm: rank 0 failed: UNAVAILABLE: direct shm: rank 1: shm: peer rank 1 (pid 9) died"
    assert ciuic._ciuic._culprit_rank(nested, 2) == 1


def test_partition():
    assert ciuic.partition([5, 1, 1, 1, 1, 1], 2) == [(0, 1), (1, 6)]
    assert ciuic.partition(np.array([1.0, 1.0, 1.0, 1.0]), 2) == [(0, 2), (2, 4)]
    r = ciuic.partition(np.random.default_rng(1).random(1000), 7)
    assert r[0][0] == 0 and r[-1][1] == 1000 and all(a[1] == b[0] for a, b in zip(r, r[1:]))
    assert len(ciuic.partition([1, 2], 4)) == 4
    with pytest.raises(ValueError, match="parts=0"):
        ciuic.partition([1, 2], 0)
    with pytest.raises(ValueError, match=r"weights\[1\]"):
        ciuic.partition([1, -2], 2)
    with pytest.raises(ValueError, match=r"weights\[0\]"):
        ciuic.partition([float("nan")], 2)
    with pytest.raises(TypeError, match="weights"):
        ciuic.partition(["a"], 2)


def test_data_partitioner_balances_by_complexity():
    images = [np.zeros((s, s)) for s in (40, 10, 10, 10, 10, 30, 5, 5)]
    parts = ciuic.DataPartitioner(images, complexity=lambda im: im.size).split_by_complexity(3)
    assert sum(len(p) for p in parts) == len(images)
    loads = [sum(im.size for im in p) for p in parts]
    assert max(loads) == 1600  # the 40x40 image alone: the best possible
    assert ciuic.DataPartitioner([[1] * 3, [1], [1]]).split_by_complexity(2) == [[[1, 1, 1]], [[1], [1]]]


def test_python_m_ciuic_info_prints_what_ciuic_info_prints():
    out = subprocess.run([sys.executable, "-m", "ciuic.info"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "simd:" in out.stdout and "CIUIC_SIMD_TARGET" in out.stdout
    js = subprocess.run([sys.executable, "-m", "ciuic.info", "--format", "json"], capture_output=True, text=True,
                        timeout=60)
    assert '"chosen"' in js.stdout
    bad = subprocess.run([sys.executable, "-m", "ciuic.info", "--nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr
