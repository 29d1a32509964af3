"""CUDA tensors on the library's GPU route: host copies for ranks sharing a
GPU, NCCL for a rank with a GPU of its own, an error naming the ranks when
NCCL is asked for and they share one. Run on a machine with a CUDA GPU and
torch built with CUDA (the GPU machine); skipped here with the reason.

The ranks run under ciuic-run as fresh processes: a parent that has asked
the driver anything cannot fork children that use CUDA."""

import os
import subprocess
import sys
import textwrap

import pytest

RUN = os.environ.get("CIUIC_TEST_RUN", "")


def _gpu_reason():
    # Asked in a child so that this process never initialises CUDA.
    probe = ("import torch; print(torch.cuda.is_available() and torch.cuda.device_count())")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "asking torch for a GPU took over 120 s"
    if out.returncode != 0:
        return "torch is not importable: " + (out.stderr.strip().splitlines() or ["?"])[-1]
    if out.stdout.strip() in ("False", "0", ""):
        return "no CUDA GPU: torch.cuda.is_available() is False"
    return None


REASON = None if not os.path.exists(RUN) else _gpu_reason()
if not os.path.exists(RUN):
    REASON = "CIUIC_TEST_RUN (the ciuic-run binary) is not set"
if REASON and os.environ.get("CIUIC_TEST_REQUIRE_CUDA") == "1":
    raise RuntimeError(f"CIUIC_TEST_REQUIRE_CUDA=1 but {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def run_ranks(n, body, tmp_path, env=None):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    e = dict(os.environ)
    e.pop("CIUIC_RANK", None)
    e.update(env or {})
    out = subprocess.run([RUN, "-n", str(n), sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, env=e)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


COLLECTIVES = """
    import torch
    import ciuic

    ctx = ciuic.CiuicContext(backend=BACKEND)
    n, r = ctx.world_size, ctx.rank
    dev = torch.device("cuda", 0)
    checks = 0
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64):
        for count in (1, 1000, 1 << 20):
            x = torch.full((count,), r + 1, dtype=dtype, device=dev)
            ctx.all_reduce(x)
            assert x.is_cuda and x.device == dev
            want = n * (n + 1) // 2
            assert bool((x == want).all()), (dtype, count, x[:4].tolist())
            checks += 1
    x = torch.arange(4096, dtype=torch.float32, device=dev) * (r + 1)
    ctx.all_reduce(x, op=ciuic.MAX)
    assert torch.equal(x.cpu(), torch.arange(4096, dtype=torch.float32) * n)
    g = ctx.all_gather(torch.full((3,), r, dtype=torch.int64, device=dev))
    assert [t.cpu().tolist() for t in g] == [[k] * 3 for k in range(n)]
    b = torch.full((1000,), r, dtype=torch.float32, device=dev)
    ctx.broadcast(b, src=n - 1)
    assert bool((b == n - 1).all())
    grads = [torch.full((k + 1,), float(r), device=dev) for k in range(50)]
    ctx.all_reduce(grads)  # fused through the buckets
    assert all(bool((t == n * (n - 1) / 2).all()) for t in grads)
    h = ctx.all_reduce_async(torch.ones(1 << 16, device=dev))
    h.wait()
    print(f"rank {r} on {ctx.backend}: {checks} all-reduces and the others correct", flush=True)
    ctx.close()
"""


def test_ranks_sharing_a_gpu_run_on_host_copies(tmp_path):
    out = run_ranks(2, "BACKEND = 'auto'\n" + textwrap.dedent(COLLECTIVES), tmp_path)
    assert out.count("correct") == 2, out


def test_one_rank_with_its_own_gpu_runs_on_nccl(tmp_path):
    out = run_ranks(1, "BACKEND = 'nccl'\n" + textwrap.dedent(COLLECTIVES), tmp_path)
    assert "on nccl" in out and "correct" in out, out


def test_nccl_for_ranks_sharing_a_gpu_is_an_error_naming_them(tmp_path):
    body = """
        import torch
        import ciuic

        ctx = ciuic.CiuicContext(backend="nccl", timeout=60)
        try:
            ctx.all_reduce(torch.ones(16, device="cuda"))
            print("no error", flush=True)
        except ciuic.CiuicError as e:
            print(f"rank {ctx.rank}: {type(e).__name__}: {e}", flush=True)
    """
    out = run_ranks(2, body, tmp_path)
    assert "no error" not in out, out
    assert out.count("share GPU") == 2 and "ranks 0 and 1" in out, out
