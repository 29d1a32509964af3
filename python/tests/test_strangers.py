"""Strangers at a running job's ports: a process without the job secret
connects to every port the ranks listen on and sends garbage, a hello with
absurd lengths, a hello with a guessed MAC, or nothing at all. The job must
not notice beyond a warning naming the stranger's address: every result
stays exact and no rank fails or hangs."""

import os
import socket
import struct
import threading
import time

import numpy as np
import pytest

import ranks

SECRET = "strangers-test-secret"
ITERS = 400


def listening_addresses(pid):
    """(host, port) of every TCP socket the process `pid` listens on (IPv4
    and IPv6), found by matching its socket fds against /proc/net/tcp*."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] != "0A" or cols[9] not in inodes:  # LISTEN
                        continue
                    addr, port = cols[1].split(":")
                    raw = bytes.fromhex(addr)
                    if table == "tcp":
                        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
                    else:  # four little-endian 32-bit words
                        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                        host = socket.inet_ntop(socket.AF_INET6, raw)
                    if host in ("0.0.0.0", "::"):
                        host = "127.0.0.1"
                    found.add((host, int(port, 16)))
        except OSError:
            pass
    return sorted(found)


def job(rank, n, sync_dir):
    import ciuic

    ctx = ciuic.CiuicContext(backend="tcp", timeout=60)
    x = np.arange(1 << 14, dtype=np.float32)
    ctx.all_reduce(x.copy())  # every connection is up before the strangers come
    path = os.path.join(sync_dir, f"ports.{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(" ".join(f"{h},{p}" for h, p in listening_addresses(os.getpid())))
    os.rename(path + ".tmp", path)  # whole, for the reader
    wrong = 0
    for i in range(ITERS):
        y = x * (rank + 1) + i
        ctx.all_reduce(y)
        want = x * (n * (n + 1) // 2) + n * i
        wrong += int(not np.array_equal(y, want))
        if i == 10:
            # The strangers come while the job runs: wait until they have.
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(sync_dir, "attacked")) and time.monotonic() < deadline:
                time.sleep(0.01)
        time.sleep(0.002)
    ctx.close()
    return wrong


def hello_with_absurd_lengths():
    # The tcp hello's fixed part (tcp_wire.h), a job id length of 65535.
    return b"CTH2" + struct.pack(">IIII", 0, 0, 0, 1) + bytes(32) + struct.pack(">H", 0xFFFF)


def hello_with_a_guessed_mac():
    # A foreign job id with a newline and a terminal escape: logged escaped.
    job_id = b"some-job\n[forged line]\x1b[2J"
    return (b"CTH2" + struct.pack(">IIII", 0, 0, 0, 1) + os.urandom(32) + struct.pack(">H", len(job_id))
            + job_id + os.urandom(32))


def frame_claiming_4_gib():
    # A frame header (kFrameMagic, write, length 0xffffffff).
    return struct.pack(">IIIIQII", (0xC17C << 16) | (1 << 8) | 1, 1, 0, 0xFFFFFFFF, 0, 0, 0)


def attack(sync_dir, n, sockets, sent_from, errors):
    try:
        deadline = time.monotonic() + 60
        while not all(os.path.exists(os.path.join(sync_dir, f"ports.{r}")) for r in range(n)):
            if time.monotonic() > deadline:
                raise TimeoutError("the ranks never wrote their ports")
            time.sleep(0.01)
        ports = set(listening_addresses(os.getpid()))  # the job's store, served here
        for r in range(n):
            with open(os.path.join(sync_dir, f"ports.{r}")) as f:
                ports.update((hp.split(",")[0], int(hp.split(",")[1])) for hp in f.read().split())
        if len(ports) < n + 1:
            raise AssertionError(f"the ranks listen on {sorted(ports)}: expected a data port each")
        payloads = [os.urandom(4096), hello_with_absurd_lengths(), hello_with_a_guessed_mac(),
                    frame_claiming_4_gib(), b"GET / HTTP/1.0\r\n\r\n"]
        for host, port in sorted(ports):
            for payload in payloads:
                s = socket.create_connection((host, port))
                s.sendall(payload)
                sent_from.append(f"{s.getsockname()[0]}:{s.getsockname()[1]}")
                sockets.append(s)
            for _ in range(8):  # silent: connect and say nothing until the job ends
                sockets.append(socket.create_connection((host, port)))
        open(os.path.join(sync_dir, "attacked"), "w").close()
    except Exception as e:  # reported by the test
        errors.append(repr(e))
        open(os.path.join(sync_dir, "attacked"), "w").close()


@pytest.mark.parametrize("n", [2, 3])
def test_strangers_do_not_disturb_a_running_job(n, tmp_path, capfd):
    sockets, sent_from, errors = [], [], []
    t = threading.Thread(target=attack, args=(str(tmp_path), n, sockets, sent_from, errors))
    t.start()
    try:
        wrong = ranks.run(n, job, str(tmp_path), secret=SECRET, timeout=120,
                          env={"CIUIC_SECRET": SECRET})
    finally:
        t.join()
        for s in sockets:
            s.close()
    assert not errors, errors
    assert wrong == [0] * n
    err = capfd.readouterr().err
    # Each rank's data listener named the strangers it turned away.
    named = [a for a in sent_from if a in err]
    assert len(named) >= n, f"warnings name {len(named)} of {len(sent_from)} strangers:\n{err[-3000:]}"
    assert "rejected a connection from" in err
    assert "\x1b[2J" not in err and "\n[forged line]" not in err, err[-3000:]
    assert "hello of job 'some-job\\x0a[forged line]\\x1b[2J'" in err, err[-3000:]
