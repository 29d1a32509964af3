"""A rank killed mid-call: every survivor raises naming it, within the
timeout; the context then refuses further calls."""

import os
import signal
import time

import numpy as np
import pytest

import ciuic
import ranks


def warmed_up(rank, n, sync_dir, victim):
    """The victim dies only once every survivor has finished the warm-up
    call: a rank that returns from a collective may still have peers inside
    it, and killing it then fails the warm-up instead of the call under test
    (TCP resets the connection, discarding bytes the peer had not read)."""
    if rank != victim:
        open(os.path.join(sync_dir, f"ready.{rank}"), "w").close()
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(sync_dir, f"ready.{r}")) for r in range(n) if r != victim):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.001)
    raise TimeoutError("the survivors never finished the warm-up call")


def killed(rank, n, backend, victim, sync_dir):
    ctx = ciuic.CiuicContext(backend=backend, timeout=20)
    x = np.ones(1 << 18, dtype=np.float32)
    ctx.all_reduce(x)
    warmed_up(rank, n, sync_dir, victim)
    t0 = time.monotonic()
    try:
        for _ in range(10000):
            ctx.all_reduce(x)
        return "no error"
    except ciuic.CiuicError as e:
        took = time.monotonic() - t0
        err = (type(e).__name__, e.rank, e.code, str(e), took)
    try:
        ctx.barrier()
        again = "the failed context kept working"
    except ciuic.CiuicError as e:
        again = type(e).__name__
    return err, again


@pytest.mark.parametrize("backend", ["shm", "tcp"])
def test_rank_killed_mid_call_is_named_on_every_survivor(backend, tmp_path):
    n, victim = 3, 1
    res = ranks.run(n, killed, backend, victim, str(tmp_path), allow_signals=(signal.SIGKILL,), timeout=120)
    assert res[victim] == ("signal", signal.SIGKILL)
    for r in range(n):
        if r == victim:
            continue
        assert res[r] != "no error", f"rank {r} saw no error"
        (name, culprit, code, msg, took), again = res[r]
        assert culprit == victim, f"rank {r}: {name} {msg}"
        assert isinstance(getattr(ciuic, name), type) and issubclass(getattr(ciuic, name), ciuic.CiuicError)
        assert took < 20, f"rank {r} noticed only after {took:.1f} s"
        assert again.endswith("Error"), again


def stopped_mid_collective(rank, n, victim, sync_dir):
    import threading

    timeout = 3
    ctx = ciuic.CiuicContext(backend="tcp", timeout=timeout)
    x = np.ones(1 << 22, dtype=np.float32)  # 16 MiB: a schedule of many steps and chunks
    ctx.all_reduce(x)
    open(os.path.join(sync_dir, f"ready.{rank}"), "w").close()
    while not all(os.path.exists(os.path.join(sync_dir, f"ready.{r}")) for r in range(n)):
        time.sleep(0.001)
    if rank == victim:
        pid = os.getpid()
        if os.fork() == 0:
            # The reaper: ends the stopped rank once every survivor has its error.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(
                    os.path.exists(os.path.join(sync_dir, f"error.{r}")) for r in range(n) if r != victim):
                time.sleep(0.01)
            os.kill(pid, signal.SIGKILL)
            os._exit(0)
        # Stopped from a thread while the main thread is inside a call.
        threading.Thread(target=lambda: (time.sleep(0.2), os.kill(pid, signal.SIGSTOP)), daemon=True).start()
    t0 = time.monotonic()
    try:
        for _ in range(100000):
            ctx.all_reduce(x)
        return "no error"
    except ciuic.CiuicError as e:
        took = time.monotonic() - t0 - (0.2 if rank != victim else 0)
        open(os.path.join(sync_dir, f"error.{rank}"), "w").close()
        return e.rank, str(e), took, timeout


def assert_survivors_name(res, victim):
    """Every survivor's (culprit, message, took, timeout) names `victim`
    within 2 x timeout; returns the survivors' messages."""
    msgs = []
    for r, x in enumerate(res):
        if r == victim:
            continue
        assert x != "no error", f"rank {r} saw no error"
        culprit, msg, took, timeout = x
        assert culprit == victim, f"rank {r}: {msg}"
        assert took < 2 * timeout, f"rank {r} noticed only after {took:.1f} s: {msg}"
        msgs.append(f"rank {r}: {msg}")
    return msgs


def test_a_rank_stopped_mid_collective_is_named_with_the_stalled_step(tmp_path):
    # Every survivor names the stopped rank (not only the neighbour it waits
    # on), and the step of the schedule that stalled, within 2 x timeout.
    n, victim = 4, 2
    res = ranks.run(n, stopped_mid_collective, victim, str(tmp_path), allow_signals=(signal.SIGKILL,), timeout=120)
    assert res[victim] == ("signal", signal.SIGKILL), res[victim]
    for msg in assert_survivors_name(res, victim):
        assert "step" in msg and "timed out" in msg, msg


def broadcast_behind_a_stalled_rank(rank, n, victim, sync_dir):
    timeout = 3
    ctx = ciuic.CiuicContext(backend="shm", timeout=timeout)
    x = np.ones(1 << 24, dtype=np.float32)  # 64 MiB: more chunks than the ring holds
    ctx.broadcast(x, src=0)
    ctx.barrier()
    if rank == victim:  # alive, never calls again
        while not all(os.path.exists(os.path.join(sync_dir, f"error.{r}")) for r in range(n) if r != victim):
            time.sleep(0.01)
        return "stalled"
    if rank == 0:
        time.sleep(1)  # the other reader waits longer: its timeout comes first
    t0 = time.monotonic()
    try:
        ctx.broadcast(x, src=0)
        return "no error"
    except ciuic.CiuicError as e:
        open(os.path.join(sync_dir, f"error.{rank}"), "w").close()
        return e.rank, str(e), time.monotonic() - t0, timeout


def test_a_stalled_rank_behind_a_direct_shm_broadcast_is_named_by_every_survivor(tmp_path):
    # The root waits for the stalled rank to free a slot, and the other
    # reader, which entered the call first, for the root: the reader's
    # timeout follows the root's wait to the stalled rank, and the root,
    # seeing the reader fail, names it too. (Before: the reader named the
    # root and the root the reader; the soak's seed 470492201, trial 41.)
    n, victim = 3, 2
    res = ranks.run(n, broadcast_behind_a_stalled_rank, victim, str(tmp_path), timeout=120)
    assert res[victim] == "stalled", res[victim]
    assert_survivors_name(res, victim)


def killed_async(rank, n, sync_dir):
    ctx = ciuic.CiuicContext(timeout=20)
    x = np.ones(1 << 16, dtype=np.float32)
    ctx.barrier()
    warmed_up(rank, n, sync_dir, 0)
    try:
        h = ctx.all_reduce_async(x)
        h.wait()
        return "no error"
    except ciuic.CiuicError as e:
        return e.rank


def test_async_wait_names_the_dead_rank(tmp_path):
    res = ranks.run(2, killed_async, str(tmp_path), allow_signals=(signal.SIGKILL,), timeout=120)
    assert res[1] == 0


def last_call_then_exit(rank, n, call, count):
    ctx = ciuic.CiuicContext()
    x = np.full(count, rank + 1, np.float32)
    if call == "reduce":
        out = ctx.reduce(x, dst=n - 1)
        ok = rank != n - 1 or bool(np.all(out == n * (n + 1) / 2))
    else:
        out = ctx.all_reduce(x)
        ok = bool(np.all(out == n * (n + 1) / 2))
    return ok  # and leave at once (os._exit): no destroy, no barrier


@pytest.mark.parametrize("call,count", [("reduce", 1000), ("reduce", 100000), ("allreduce", 100000)])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_rank_that_finished_and_left_fails_nobody(transport, call, count):
    # A peer that sent its part and exited before the receiver connected to
    # it (links are made on first use) or while the receiver still waited on
    # another rank used to fail that receiver ("peer died", "has exited; it
    # will never connect"): 5 to 7 jobs in 10 at 4 ranks over shm.
    for _ in range(10):
        res = ranks.run(4, last_call_then_exit, call, count, env={"CIUIC_TRANSPORT": transport}, timeout=60)
        assert res == [True] * 4, res


def abort_while_blocked(rank, n, backend, call, sync_dir):
    """Ranks 0..n-2 block in `call` (rank n-1 stays out of it) and a thread
    of each aborts the communicator; rank n-1 then calls in and must hear
    of its peers' departure instead of hanging."""
    import threading

    ctx = ciuic.CiuicContext(backend=backend, timeout=60)
    x = np.ones(1 << 16, dtype=np.float32)
    ctx.all_reduce(x)  # connections up
    late = n - 1
    if rank == late:
        deadline = time.monotonic() + 60
        while not all(os.path.exists(os.path.join(sync_dir, f"aborted.{r}")) for r in range(late)):
            if time.monotonic() > deadline:
                raise TimeoutError("the other ranks never aborted")
            time.sleep(0.01)
        t0 = time.monotonic()
        try:
            ctx.all_reduce(x)
            return "no error"
        except ciuic.CiuicError as e:
            return type(e).__name__, e.rank, time.monotonic() - t0
    fired = []

    def abort_soon():
        time.sleep(0.5)
        fired.append(time.monotonic())
        ctx.abort()

    t = threading.Thread(target=abort_soon)
    t.start()
    try:
        if call == "all_reduce":
            ctx.all_reduce(x)
        elif call == "recv":
            ctx.recv(x, src=late)
        else:
            ctx.all_reduce_async(x).wait()
        result = "no error"
    except ciuic.CiuicError as e:
        # Under load a peer's abort may end the call before this rank's own.
        after = time.monotonic() - fired[0] if fired else 0.0
        result = (type(e).__name__, e.code, after, str(e))
    t.join()
    try:
        ctx.barrier()
        again = "the aborted context kept working"
    except ciuic.CiuicError as e:
        again = type(e).__name__
    # Nobody leaves before every aborting rank has its result: a departed
    # peer would fail a call that has not seen its own abort yet.
    open(os.path.join(sync_dir, f"result.{rank}"), "w").close()
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(sync_dir, f"result.{r}")) for r in range(late)):
        if time.monotonic() > deadline:
            raise TimeoutError("the other aborting ranks never returned")
        time.sleep(0.01)
    ctx.close()
    open(os.path.join(sync_dir, f"aborted.{rank}"), "w").close()
    return result, again


@pytest.mark.parametrize("call", ["all_reduce", "recv", "async"])
@pytest.mark.parametrize("backend", ["shm", "tcp"])
def test_abort_from_another_thread_returns_the_blocked_call(backend, call, tmp_path):
    n = 3
    res = ranks.run(n, abort_while_blocked, backend, call, str(tmp_path), timeout=120)
    # The aborting ranks abort at about the same time: a call may see a
    # peer's abort before its own and then names that peer (unavailable);
    # the first rank to abort always gets its own abort back.
    for r in range(n - 1):
        (name, code, after, msg), again = res[r]
        if name == "UnavailableError":
            assert "ABORTED" in msg and any(f"rank {p} failed" in msg for p in range(n - 1) if p != r), res[r]
        else:
            assert (name, code) == ("AbortedError", "aborted"), res[r]
        assert after < 2.0, f"rank {r}: the blocked call returned {after:.2f} s after abort"
        assert again == "AbortedError", again
    assert any(res[r][0][0] == "AbortedError" for r in range(n - 1)), res
    # The rank that was not in the call learns that its peers left, naming
    # one of them, well within its 60 s timeout.
    name, culprit, took = res[n - 1]
    assert name in ("UnavailableError", "AbortedError"), res[n - 1]
    assert culprit in range(n - 1), res[n - 1]
    assert took < 20, res[n - 1]
