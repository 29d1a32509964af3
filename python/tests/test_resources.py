"""Resource exhaustion: too few file descriptors, no locked memory, a store
that is not there. Each is a clear error naming the resource (and the knob
or limit to change), on every rank, never an abort of the process."""

import os
import resource
import socket
import time

import numpy as np
import pytest

import ciuic
import ranks


def with_nofile(rank, n, backend, limit):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        ctx = ciuic.CiuicContext(backend=backend, timeout=20)
        x = np.ones(1 << 16, dtype=np.float32)
        for _ in range(3):
            ctx.all_reduce(x)
        ctx.close()
        return "no error"
    except ciuic.CiuicError as e:
        return type(e).__name__, str(e)


@pytest.mark.parametrize("backend", ["shm", "tcp"])
def test_too_few_file_descriptors_is_named(backend, capfd):
    # Enough to import and start, too few for 6 ranks' connections.
    fds = len(os.listdir("/proc/self/fd"))
    res = ranks.run(6, with_nofile, backend, fds + 12, timeout=120)
    failed = [r for r in res if r != "no error"]
    assert failed, "every rank ran with the low limit: raise the rank count or lower the limit"
    for name, msg in failed:
        assert name in ("ResourceExhaustedError", "UnavailableError", "DeadlineExceededError"), (name, msg)
    # Whoever ran out says so at once, with the limit to raise.
    said = [(name, msg) for name, msg in failed if "RLIMIT_NOFILE" in msg]
    assert said, failed
    for name, msg in said:
        assert name == "ResourceExhaustedError" and "ulimit -n" in msg, (name, msg)
    # The others name them: the ranks that never joined (they ran out before
    # reaching the store; known at the timeout), or one that joined and
    # failed later (its record, at once).
    ran_out = [r for r, x in enumerate(res) if x != "no error" and "RLIMIT_NOFILE" in x[1]]
    for r, x in enumerate(res):
        if x == "no error" or r in ran_out:
            continue
        name, msg = x
        if "did not join the communicator" in msg:
            listed = msg.split(" of ")[0]
            assert all(str(q) in listed.replace(",", " ").split() for q in ran_out), (ran_out, msg)
        else:
            assert "failed to initialise" in msg and any(f"rank {q} " in msg for q in ran_out), (ran_out, msg)
    # A listener out of descriptors stays readable: its warning comes at
    # most once per 10 s per rank, not on every pump (50 ms) until the timeout.
    err = capfd.readouterr().err
    assert err.count("tcp: accept on port") <= 6 * 4, err[-3000:]


def store_not_there(rank, n, port):
    os.environ["CIUIC_STORE_ADDR"] = f"127.0.0.1:{port}"
    t0 = time.monotonic()
    try:
        ciuic.CiuicContext(timeout=2)
        return "no error"
    except ciuic.CiuicError as e:
        return type(e).__name__, str(e), time.monotonic() - t0


def test_an_unreachable_store_at_init_is_named():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = ranks.run(2, store_not_there, port, timeout=60)
    for r, (name, msg, took) in enumerate(res):
        assert name in ("UnavailableError", "DeadlineExceededError"), res[r]
        assert f"127.0.0.1:{port}" in msg, msg
        assert "CIUIC_STORE_ADDR" in msg or "store" in msg, msg
        assert took < 20, took


def with_memlock(rank, n, limit):
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, limit))
    ctx = ciuic.CiuicContext(backend="tcp", timeout=20)
    x = np.ones(1 << 20, dtype=np.float32)
    ctx.all_reduce(x)
    ok = bool(np.all(x == n))
    ctx.close()
    return ok


def test_no_locked_memory_still_works():
    # Pool memory is mlocked where the limit allows; without any, the job
    # runs on unlocked pages instead of failing.
    assert ranks.run(2, with_memlock, 0, timeout=60) == [True, True]
