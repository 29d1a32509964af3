"""Every collective x dtype x numpy/torch x in place/out of place x
blocking/async, on 1-4 ranks, checked against references computed here."""

import numpy as np
import pytest

import ciuic
import ranks
from helpers import DTYPES, LIBS, close, empty, f64, make, reduce_ref, values

COUNT = 5
OPS = [ciuic.SUM, ciuic.PROD, ciuic.MIN, ciuic.MAX, ciuic.AVG]


def run_call(ctx, name, is_async, *args, **kwargs):
    if not is_async:
        return getattr(ctx, name)(*args, **kwargs)
    h = getattr(ctx, name + "_async")(*args, **kwargs)
    assert isinstance(h, ciuic.Request)
    return h.wait(timeout=60)


def check_calls(ctx, rank, n, lib, dt, asy):
    """Failures (strings) of every call for one (lib, dtype, async)."""
    fails = []

    def expect(what, got, want):
        if not close(got, want, dt):
            fails.append(f"{what}: got {f64(got).tolist()} want {np.asarray(want).tolist()}")

    ins = [values(r, COUNT) for r in range(n)]
    for op in OPS:
        x = make(ins[rank], dt, lib)
        got = run_call(ctx, "all_reduce", asy, x, op)
        assert got is x
        expect(f"all_reduce op={op.name} in place", x, reduce_ref(op, ins, dt))
        x = make(ins[rank], dt, lib)
        out = empty(COUNT, dt, lib)
        got = run_call(ctx, "all_reduce", asy, x, op, out=out)
        assert got is out
        expect(f"all_reduce op={op.name} out", out, reduce_ref(op, ins, dt))
        expect(f"all_reduce op={op.name} out leaves x", x, ins[rank])

    root = n - 1
    x = make(ins[rank], dt, lib)
    assert run_call(ctx, "broadcast", asy, x, src=root) is x
    expect("broadcast", x, ins[root])

    for op in (ciuic.SUM, ciuic.MAX):
        x = make(ins[rank], dt, lib)
        got = run_call(ctx, "reduce", asy, x, dst=root, op=op)
        if rank == root:
            expect(f"reduce op={op.name}", got, reduce_ref(op, ins, dt))
        elif got is not None:
            fails.append("reduce returned a value off dst")
        expect("reduce leaves x", x, ins[rank])
        out = empty(COUNT, dt, lib) if rank == root else None
        got = run_call(ctx, "reduce", asy, make(ins[rank], dt, lib), dst=root, op=op, out=out)
        if rank == root:
            assert got is out
            expect(f"reduce op={op.name} into out", out, reduce_ref(op, ins, dt))

    x = make(ins[rank], dt, lib)
    got = run_call(ctx, "all_gather", asy, x)
    if len(got) != n:
        fails.append(f"all_gather: {len(got)} blocks")
    for r in range(min(n, len(got))):
        expect(f"all_gather block {r}", got[r], ins[r])
    out = empty(n * COUNT, dt, lib)
    assert run_call(ctx, "all_gather_into", asy, out, x) is out
    expect("all_gather_into", out, np.concatenate(ins))

    blocks = [values(rank, COUNT, salt=b) for b in range(n)]  # rank's block b
    every = [[values(r, COUNT, salt=b) for b in range(n)] for r in range(n)]
    for op in (ciuic.SUM, ciuic.MIN):
        out = empty(COUNT, dt, lib)
        run_call(ctx, "reduce_scatter", asy, out, make(np.concatenate(blocks), dt, lib), op)
        expect(f"reduce_scatter op={op.name}", out, reduce_ref(op, [every[r][rank] for r in range(n)], dt))
        out = empty(COUNT, dt, lib)
        run_call(ctx, "reduce_scatter", asy, out, [make(b, dt, lib) for b in blocks], op)
        expect(f"reduce_scatter list op={op.name}", out, reduce_ref(op, [every[r][rank] for r in range(n)], dt))

    out = empty(n * COUNT, dt, lib)
    run_call(ctx, "all_to_all", asy, out, make(np.concatenate(blocks), dt, lib))
    expect("all_to_all", out, np.concatenate([every[q][rank] for q in range(n)]))

    # all-to-all-v: rank p sends (p + q) % 3 rows of 2 elements to rank q.
    def rows(p, q):
        return (p + q) % 3

    send = np.concatenate([np.full(2 * rows(rank, q), rank * 10 + q, dtype=np.float64) for q in range(n)] or [[]])
    want = np.concatenate([np.full(2 * rows(q, rank), q * 10 + rank, dtype=np.float64) for q in range(n)] or [[]])
    x = make(send.reshape(-1, 2), dt, lib)
    out = empty((len(want) // 2, 2), dt, lib)
    run_call(ctx, "all_to_all", asy, out, x, out_splits=[rows(q, rank) for q in range(n)],
             in_splits=[rows(rank, q) for q in range(n)])
    expect("all_to_all with splits", out.reshape(-1), want)

    x = make(ins[rank], dt, lib)
    got = run_call(ctx, "gather", asy, x, dst=root)
    if rank == root:
        for r in range(n):
            expect(f"gather block {r}", got[r], ins[r])
    elif got is not None:
        fails.append("gather returned a value off dst")
    out = empty(n * COUNT, dt, lib) if rank == root else None
    got = run_call(ctx, "gather", asy, x, dst=root, out=out)
    if rank == root:
        expect("gather into out", out, np.concatenate(ins))

    xs = [make(values(root, COUNT, salt=b), dt, lib) for b in range(n)] if rank == root else None
    out = empty(COUNT, dt, lib)
    assert run_call(ctx, "scatter", asy, out, xs, src=root) is out
    expect("scatter list", out, values(root, COUNT, salt=rank))
    flat = make(np.concatenate([values(root, COUNT, salt=b) for b in range(n)]), dt, lib) if rank == root else None
    out = empty(COUNT, dt, lib)
    run_call(ctx, "scatter", asy, out, flat, src=root)
    expect("scatter array", out, values(root, COUNT, salt=rank))

    if n > 1:
        right, left = (rank + 1) % n, (rank - 1) % n
        # A ring on each of two tags, even ranks sending first (a tag's link
        # is made when both ends ask for it, so a ring where every rank sends
        # first would wait on itself).
        for tag in (3, 7):
            mine, got = make(values(rank, COUNT, salt=tag), dt, lib), empty(COUNT, dt, lib)
            if rank % 2 == 0:
                run_call(ctx, "send", asy, mine, right, tag=tag)
                assert run_call(ctx, "recv", asy, got, left, tag=tag) is got
            else:
                run_call(ctx, "recv", asy, got, left, tag=tag)
                run_call(ctx, "send", asy, mine, right, tag=tag)
            expect(f"ring recv tag {tag}", got, values(left, COUNT, salt=tag))
        # Over the links now made, tag 7's message is matched with tag 7's
        # receive although tag 3's was sent first.
        a = make(values(rank, COUNT, salt=13), dt, lib)
        b = make(values(rank, COUNT, salt=17), dt, lib)
        got7, got3 = empty(COUNT, dt, lib), empty(COUNT, dt, lib)
        hs = [ctx.send_async(a, right, tag=3), ctx.send_async(b, right, tag=7)]
        run_call(ctx, "recv", asy, got7, left, tag=7)
        run_call(ctx, "recv", asy, got3, left, tag=3)
        for h in hs:
            h.wait(60)
        expect("recv tag 7 before tag 3", got7, values(left, COUNT, salt=17))
        expect("recv tag 3 after tag 7", got3, values(left, COUNT, salt=13))
    run_call(ctx, "barrier", asy)
    return fails


def matrix(rank, n, backend):
    fails = []
    with ciuic.CiuicContext(backend=backend, timeout=60) as ctx:
        assert ctx.rank == rank and ctx.world_size == n
        for lib in LIBS:
            for dt in DTYPES:
                for asy in (False, True):
                    try:
                        fails += [f"{lib} {dt} async={asy}: {f}" for f in check_calls(ctx, rank, n, lib, dt, asy)]
                    except Exception as e:
                        fails.append(f"{lib} {dt} async={asy}: {type(e).__name__}: {e}")
                        if len(fails) > 20:
                            return fails
    return fails


@pytest.mark.parametrize("n,backend", [(1, "auto"), (2, "shm"), (3, "shm"), (4, "shm"), (2, "tcp"), (3, "tcp")])
def test_every_call_every_dtype(n, backend):
    results = ranks.run(n, matrix, backend, timeout=300)
    for r, fails in enumerate(results):
        assert not fails, f"rank {r}:\n" + "\n".join(fails[:20])


def large(rank, n):
    with ciuic.CiuicContext() as ctx:
        x = np.full(1 << 20, rank + 1, dtype=np.float32)
        ciuic.all_reduce(x, context=ctx)
        want = n * (n + 1) / 2
        return bool((x == want).all()), ctx.last_algorithm


def test_large_all_reduce_module_function():
    for ok, alg in ranks.run(3, large):
        assert ok, alg


def module_functions(rank, n):
    ctx = ciuic.CiuicContext()
    x = np.arange(4, dtype=np.float64) + rank
    h = ciuic.all_reduce_async(x, op=ciuic.CiuicContext.SUM, context=ctx)
    ciuic.all_reduce_wait(h)
    y = np.full(3, rank, dtype=np.int32)
    ciuic.all_reduce(y, op=ciuic.MAX)  # the default context
    got = ciuic.all_gather(np.array([rank], dtype=np.int64))
    b = np.array([rank * 1.5])
    ciuic.broadcast(b, src=1)
    red = ciuic.reduce(np.array([rank + 1.0]), dst=0)
    ciuic.barrier()
    ctx.close()
    return x.tolist(), y.tolist(), [int(g[0]) for g in got], float(b[0]), None if red is None else float(red[0])


def test_module_functions_use_the_default_context():
    for r, (x, y, g, b, red) in enumerate(ranks.run(2, module_functions)):
        assert x == [1.0, 3.0, 5.0, 7.0]
        assert y == [1, 1, 1]
        assert g == [0, 1]
        assert b == 1.5
        assert red == (3.0 if r == 0 else None)


def split_groups(rank, n):
    ctx = ciuic.CiuicContext()
    halves = ctx.split(rank // 2, key=-rank)  # reversed within each half
    rest = ctx.split(None if rank == 0 else 7)
    dup = ctx.dup()
    x = np.array([rank + 1.0])
    halves.all_reduce(x)
    y = np.array([rank + 1.0])
    dup.all_reduce(y)
    bad = None
    try:
        ctx.split(-3 if rank == n - 1 else 0)
    except ciuic.InvalidArgumentError as e:
        bad = str(e)
    ctx.close()  # the splits outlive it
    z = np.array([1.0])
    if rest is not None:
        rest.all_reduce(z)
    got = (halves.rank, halves.world_size, float(x[0]), rest is None, None if rest is None else rest.rank,
           float(z[0]), dup.rank, dup.world_size, float(y[0]), bad)
    for c in (halves, rest, dup):
        if c is not None:
            c.close()
    return got


def test_split_dup_and_a_bad_color():
    n = 4
    for r, (hr, hn, hsum, rest_none, rest_rank, rest_sum, dr, dn, dsum, bad) in enumerate(ranks.run(n, split_groups)):
        assert (hn, hr) == (2, 1 - r % 2), r
        assert hsum == (r // 2 * 2 + 1) + (r // 2 * 2 + 2)
        assert rest_none == (r == 0)
        if r > 0:
            assert rest_rank == r - 1 and rest_sum == n - 1
        assert (dr, dn, dsum) == (r, n, n * (n + 1) / 2)
        assert bad is not None and f"color -3 of rank {n - 1}" in bad, bad


def across_hosts(rank, n):
    # CIUIC_HOST_ID splits this machine into two "hosts" of two ranks: shm
    # inside each, tcp between.
    with ciuic.CiuicContext(knobs={"CIUIC_HOST_ID": f"h{rank // 2}"}) as ctx:
        x = np.full(100003, rank + 1.0, dtype=np.float32)
        ctx.all_reduce(x)
        g = ctx.all_gather(np.array([rank], dtype=np.int64))
        return ctx.transport, float(x[0]), float(x[-1]), [int(a[0]) for a in g]


def test_ranks_on_two_hosts_take_shm_inside_and_tcp_between():
    n = 4
    for transport, first, last, gathered in ranks.run(n, across_hosts):
        assert transport == "shm+tcp"
        assert first == last == n * (n + 1) / 2
        assert gathered == list(range(n))
