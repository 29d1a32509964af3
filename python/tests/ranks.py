"""Runs a function on N ranks: forked processes rendezvousing through a
store this process serves. The parent never makes a context, so forking is
safe (children leave with os._exit, skipping the parent's finalizers)."""

import multiprocessing
import os
import pickle
import random
import signal
import socket
import time
import traceback

import ciuic


class RankFailure(AssertionError):
    pass


def free_port():
    """A loopback port free now, for a server a test starts later (torch's
    TCPStore). Drawn from below the kernel's ephemeral range: a port bind(0)
    hands out can be taken by any connect() before the server listens."""
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(200):
        port = random.randrange(max(1024, lo // 2), lo)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def _child(fn, rank, n, port, env, args, conn):
    try:
        os.environ.update({
            "CIUIC_RANK": str(rank),
            "CIUIC_WORLD_SIZE": str(n),
            "CIUIC_STORE_ADDR": f"127.0.0.1:{port}",
            "CIUIC_STORE_EXTERNAL": "1",
        })
        os.environ.update(env)
        value = fn(rank, n, *args)
        msg = ("ok", value)
    except BaseException as e:  # reported to the parent
        msg = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    try:
        conn.send_bytes(pickle.dumps(msg))
    except Exception as e:  # an unpicklable result
        conn.send_bytes(pickle.dumps(("error", f"result not picklable: {e}")))
    conn.close()
    os._exit(0)


def run(n, fn, *args, env=None, timeout=120, allow_signals=(), secret=""):
    """fn(rank, n, *args) on n forked ranks; returns their values in rank
    order. A rank that raised, or died by a signal not in `allow_signals`,
    fails the test with every rank's report. A rank killed by an allowed
    signal reports ("signal", number). The store demands `secret` (the
    ranks then need CIUIC_SECRET in `env`)."""
    server = ciuic._ciuic.StoreServer("127.0.0.1", secret)
    ctx = multiprocessing.get_context("fork")
    procs, pipes = [], []
    for r in range(n):
        recv_end, send_end = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(fn, r, n, server.port, dict(env or {}), args, send_end))
        p.start()
        send_end.close()
        procs.append(p)
        pipes.append(recv_end)
    deadline = time.monotonic() + timeout
    results = [None] * n
    for r, (p, c) in enumerate(zip(procs, pipes)):
        left = max(0.1, deadline - time.monotonic())
        if c.poll(left):
            try:
                results[r] = pickle.loads(c.recv_bytes())
            except EOFError:
                pass
        p.join(max(0.1, deadline - time.monotonic()))
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            p.join()
            results[r] = ("error", f"still running after {timeout} s (killed)")
        elif results[r] is None:
            sig = -p.exitcode if p.exitcode is not None and p.exitcode < 0 else None
            results[r] = ("signal", sig) if sig is not None else ("error", f"exited {p.exitcode} without a result")
    bad = [r for r, res in enumerate(results)
           if res[0] == "error" or (res[0] == "signal" and res[1] not in allow_signals)]
    if bad:
        report = "\n".join(f"rank {r}: {res}" for r, res in enumerate(results))
        raise RankFailure(f"{len(bad)} of {n} ranks failed:\n{report}")
    return [res[1] if res[0] == "ok" else res for res in results]


KILL = signal.SIGKILL
