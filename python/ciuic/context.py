"""CiuicContext: a communicator of ranks and the collectives on it."""

import asyncio
import atexit
import enum
import os
import pickle
import secrets
import socket
import sys
import threading
import time
import weakref

import numpy as np

from . import _arrays
from . import _ciuic
from ._errors import FailedPreconditionError
from ._store import StoreAdapter


class ReduceOp(enum.IntEnum):
    """How all-reduce, reduce and reduce-scatter combine the ranks' values."""

    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4  # the sum divided by the number of ranks
    BAND = 5  # bitwise and (integers, bool)
    BOR = 6  # bitwise or (integers, bool)
    BXOR = 7  # bitwise xor (integers, bool)
    PREMUL_SUM = 8  # with a factor: CiuicContext.premul_sum(factor); alone, a factor of 1


SUM, PROD, MIN, MAX, AVG = ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG
BAND, BOR, BXOR, PREMUL_SUM = ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR, ReduceOp.PREMUL_SUM

BACKENDS = ("auto", "shm", "tcp", "verbs", "nccl", "mpi")

# Every open context, so that the progress threads stop before the
# interpreter does; and the first one, the default of the module functions.
_open = weakref.WeakSet()
_default = None
_created = 0  # contexts made over a shared store: each gets its own keys
_lock = threading.Lock()


def default_context():
    """The context the module-level functions use without `context=`: the
    first one created that is still open."""
    ctx = _default() if _default is not None else None
    if ctx is None or ctx.closed:
        raise ValueError("context: no open CiuicContext; create one (ciuic.CiuicContext()) or pass context=")
    return ctx


@atexit.register
def _close_all():
    for ctx in list(_open):
        ctx.close()


class Request:
    """The handle of an async operation. `wait()` returns its result (the
    array or tensor written, a list for gathers); `test()` says whether it is
    done. Awaitable: `await handle` waits without blocking the event loop.

    The handle keeps the buffers alive; the input must not change, and the
    output must not be read, until the wait."""

    __slots__ = ("_req", "_result", "_then", "_done")

    def __init__(self, req, result, then=None):
        self._req = req
        self._result = result
        self._then = then
        self._done = False

    def wait(self, timeout=None):
        """Blocks (other Python threads run) until done, for at most `timeout`
        seconds (None = the library's own timeout). Returns the result.
        Raises the operation's CiuicError; DeadlineExceededError when it is
        not done in time (it goes on: wait again)."""
        if not self._done:
            self._req.wait(timeout)
            self._finish()
        return self._result

    def test(self):
        """True once done (then wait() returns at once). Raises the
        operation's error."""
        if self._done:
            return True
        if self._req.test():
            self._finish()
            return True
        return False

    def _finish(self):
        if not self._done:
            self._done = True
            if self._then is not None:
                self._result = self._then()
                self._then = None

    def is_completed(self):
        return self.test()

    def __await__(self):
        if self._done or self.test():
            return self._ready().__await__()
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self.wait).__await__()

    async def _ready(self):
        return self._result


class _BucketRequest(Request):
    """Fused all-reduces in flight (a bucket)."""

    __slots__ = ("_buckets", "_release")

    def __init__(self, buckets, result, release):
        super().__init__(None, result)
        self._buckets = buckets
        self._release = release  # gives the buckets back for reuse once done

    def _finished(self):
        self._done = True
        release, self._release = self._release, None
        if release is not None:
            release(self._buckets)

    def wait(self, timeout=None):
        if not self._done:
            if timeout is not None:
                deadline = time.monotonic() + timeout
                while not self.test():
                    if time.monotonic() >= deadline:
                        from ._errors import DeadlineExceededError

                        raise DeadlineExceededError(f"the fused all-reduce is not done after {timeout} s (it goes on)")
                    time.sleep(0.0002)
                return self._result
            try:
                for b in self._buckets:
                    b.wait()
            finally:
                self._finished()
        return self._result

    def test(self):
        if not self._done and all(b.test() for b in self._buckets):
            try:
                for b in self._buckets:
                    b.wait()
            finally:
                self._finished()
        return self._done


class _Chain(Request):
    """Library requests in sequence: `_next` (called on the thread that waits
    or tests, which must be the context's) posts the next one once the
    current are done. Awaiting polls test() on the event loop's thread."""

    __slots__ = ("_reqs", "_next")

    def __init__(self, reqs, result):
        super().__init__(None, result)
        self._reqs = reqs
        self._next = None

    def _advance(self, block, timeout=None):
        while True:
            for r in self._reqs:
                if block:
                    r.wait(timeout)
                elif not r.test():
                    return False
            if self._next is None:
                self._done = True
                if self._then is not None:
                    self._result = self._then()
                return True
            nxt, self._next = self._next, None
            req, self._then = nxt()
            self._reqs = [req] if req is not None else []

    def wait(self, timeout=None):
        if not self._done:
            self._advance(True, timeout)
        return self._result

    def test(self):
        return self._done or self._advance(False)

    def __await__(self):
        return self._poll().__await__()

    async def _poll(self):
        while not self.test():
            await asyncio.sleep(0.0002)
        return self._result


def _dt(dtype):
    if dtype is None:
        return ""
    if isinstance(dtype, str):
        return dtype
    if isinstance(dtype, np.dtype):
        return dtype.name
    if isinstance(dtype, type):  # np.float32, ml_dtypes.bfloat16
        try:
            return np.dtype(dtype).name
        except TypeError:
            return dtype.__name__
    return str(dtype).replace("torch.", "")  # torch.float32


def _gradients(items):
    """The arrays of an iterable: a Parameter's .grad (None: skipped)."""
    torch = _arrays.torch_module()
    param = torch.nn.Parameter if torch is not None else ()
    out = []
    ndarray = np.ndarray
    for i, x in enumerate(items):
        if type(x) is ndarray:
            pass
        elif param and isinstance(x, param):
            if x.grad is None:
                continue
            x = x.grad
        elif not _arrays.is_array(x):
            raise TypeError(f"x[{i}]: expected a numpy array or a torch tensor, got {type(x).__name__}")
        out.append(x)
    return out


class CiuicContext:
    """A communicator: this process's rank among `world_size` ranks.

    CiuicContext(world_size=None, rank=None, backend="auto", buffer_size=None, timeout=None)

    What is not given comes from the launcher (ciuic-run, mpirun, srun: their
    environment variables), or, when torch.distributed is initialised, from
    its default group (rank, size) and its store, so there is no second
    rendezvous address:

        ctx = CiuicContext(world_size=8, rank=torch.distributed.get_rank())

    A single process with no launcher is a context of one rank.

    backend: "auto" (shared memory between the ranks of a host, RDMA verbs
      between hosts when a device is usable, else TCP), "shm", "tcp",
      "verbs", "nccl" (tensors in GPU memory go through NCCL; an error says
      why when that is impossible), "mpi" (rank, size and rendezvous from
      the MPI launcher or an initialised mpi4py COMM_WORLD; transport auto).
    buffer_size: bytes; each link's receive ring (CIUIC_BUFFER_SIZE) and the
      capacity of the fusion buckets (all_reduce of an iterable).
    timeout: seconds after which a stalled peer is an error
      (DeadlineExceededError naming it; CIUIC_TIMEOUT_MS).
    accumulate: "wire" (the default: float16/bfloat16/fp8 partial sums are
      rounded at every hop of a network algorithm, as NCCL does) or "f32"
      (kept in f32 and rounded once; twice the bytes for 16-bit types, four
      times for fp8); CIUIC_ACCUMULATE. Every rank must pass the same.
    store: a torch.distributed Store (or an object with its set/get/add/wait)
      to rendezvous through, with rank and world_size.
    knobs: further CIUIC_* settings as {"CIUIC_NCHANNELS": 2, ...}.

    Every rank must issue the same collectives in the same order. A context
    is used from one thread at a time; handles may be waited on from any.
    Errors are CiuicError subclasses; after a peer failure the context
    raises on every further call. Use as a context manager or call close().
    """

    SUM, PROD, MIN, MAX, AVG = ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG
    BAND, BOR, BXOR, PREMUL_SUM = ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR, ReduceOp.PREMUL_SUM

    def __init__(self, world_size=None, rank=None, backend="auto", buffer_size=None, timeout=None, *, store=None,
                 knobs=None, accumulate=None):
        global _default, _created
        if not isinstance(backend, str) or backend.lower() not in BACKENDS:
            raise ValueError(f"backend={backend!r}: expected one of {', '.join(BACKENDS)}")
        backend = backend.lower()
        for name, v in (("world_size", world_size), ("rank", rank)):
            if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool)):
                raise TypeError(f"{name}={v!r}: expected an int")
        if world_size is not None and world_size < 1:
            raise ValueError(f"world_size={world_size}: expected at least 1")
        if rank is not None and (rank < 0 or (world_size is not None and rank >= world_size)):
            raise ValueError(f"rank={rank}: expected 0 <= rank < world_size ({world_size})")
        settings = {}
        for k, v in (knobs or {}).items():
            settings[str(k)] = str(v)
        if backend in ("shm", "tcp", "verbs"):
            settings["CIUIC_TRANSPORT"] = backend
        if accumulate is not None:
            if accumulate not in ("f32", "wire"):
                raise ValueError(f"accumulate={accumulate!r}: expected 'f32' or 'wire'")
            settings["CIUIC_ACCUMULATE"] = accumulate
        if buffer_size is not None:
            if not isinstance(buffer_size, (int, np.integer)) or isinstance(buffer_size, bool) or buffer_size <= 0:
                raise ValueError(f"buffer_size={buffer_size!r}: expected a positive number of bytes")
            if buffer_size < 8192:
                raise ValueError(f"buffer_size={buffer_size}: expected at least 8192 bytes (two 4 KiB chunks)")
            settings["CIUIC_BUFFER_SIZE"] = str(int(buffer_size))
            if "CIUIC_CHUNK_SIZE" not in settings and buffer_size < 2 * _ciuic.chunk_size():
                # A ring holds at least two chunks: a small buffer means small chunks.
                settings["CIUIC_CHUNK_SIZE"] = str(max(4096, (int(buffer_size) // 2) & ~4095))
        if timeout is not None:
            if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
                raise ValueError(f"timeout={timeout!r}: expected a positive number of seconds")
            settings["CIUIC_TIMEOUT_MS"] = str(max(1, int(timeout * 1000)))
        if backend == "nccl":
            _check_nccl_possible()
            settings["CIUIC_GPU"] = "nccl"
        self._requested = backend
        self._bucket_pool = {}
        self._buffer_size = int(buffer_size) if buffer_size is not None else None
        knob_items = sorted(settings.items())

        dist = sys.modules.get("torch.distributed")
        torch_ready = (dist is not None and dist.is_available() and dist.is_initialized())
        if store is not None or (torch_ready and backend != "mpi"):
            if store is None:
                size_t, rank_t = dist.get_world_size(), dist.get_rank()
                if world_size is not None and world_size != size_t:
                    raise ValueError(f"world_size={world_size} but torch.distributed's default group has {size_t} ranks")
                if rank is not None and rank != rank_t:
                    raise ValueError(f"rank={rank} but torch.distributed says this process is rank {rank_t}")
                world_size, rank = size_t, rank_t
                store = dist.distributed_c10d._get_default_store()
            elif world_size is None or rank is None:
                raise ValueError("store: give rank and world_size with it")
            with _lock:
                _created += 1
                prefix = f"ciuic/{_created}/"
            self._c = _ciuic.Comm.with_store(int(rank), int(world_size), StoreAdapter(store, prefix), knob_items)
        elif backend == "mpi":
            self._c = _from_mpi(world_size, rank, knob_items)
        else:
            if rank is not None:
                knob_items.append(("CIUIC_RANK", str(int(rank))))
            if world_size is not None:
                knob_items.append(("CIUIC_WORLD_SIZE", str(int(world_size))))
            self._c = _ciuic.Comm.from_env(knob_items)
        self._rank = self._c.rank
        self._size = self._c.size
        with _lock:
            _open.add(self)
            if _default is None or _default() is None or _default().closed:
                _default = weakref.ref(self)

    # -- properties ------------------------------------------------------
    @property
    def rank(self):
        """This process's rank, 0 <= rank < world_size."""
        return self._rank

    @property
    def world_size(self):
        """The number of ranks."""
        return self._size

    @property
    def backend(self):
        """What carries the data: "shm", "tcp" or "verbs" between hosts'
        memory ("nccl" when that was asked for: GPU tensors on NCCL)."""
        return "nccl" if self._requested == "nccl" else self._c.transport

    @property
    def transport(self):
        """The host transport chosen: "shm", "tcp" or "verbs"."""
        return self._c.transport

    @property
    def buffer_size(self):
        """The fusion buckets' capacity in bytes (None: CIUIC_BUFFER_SIZE)."""
        return self._buffer_size

    @property
    def closed(self):
        return self._c.closed

    @property
    def last_algorithm(self):
        """The algorithm the last operation ran and why."""
        return self._c.last_algorithm

    def close(self):
        """Releases the communicator (waits for nothing pending: wait for
        your handles first). Idempotent."""
        self._c.close()

    def abort(self):
        """Fails every pending and later operation at once (AbortedError)."""
        self._c.abort()

    def premul_sum(self, factor):
        """An op for all_reduce, reduce, reduce_scatter and buckets on float
        types (as NCCL's ncclRedOpCreatePreMulSum): each rank's input is
        multiplied by `factor` before the sum, e.g. 1 / world_size to average
        fp16 gradients without overflowing on the way. Returns an int (256 or
        more) valid on this context until destroy_op."""
        if isinstance(factor, bool) or not isinstance(factor, (int, float, np.floating, np.integer)):
            raise TypeError(f"factor={factor!r}: expected a number")
        return self._c.premul_sum(float(factor))

    def destroy_op(self, op):
        """Releases an op of premul_sum (ValueError: not a live one)."""
        self._c.destroy_op(int(op))

    def split(self, color, key=None):
        """Sub-contexts, as MPI_Comm_split (for data-, tensor- and
        pipeline-parallel groups): every rank of this context calls it, in
        order with its other calls. The ranks passing the same `color` (an
        int >= 0) get a new context among themselves, ranked by `key`
        (default: their rank here; ties by rank here); color=None (or
        ciuic.UNDEFINED) takes part and returns None. The new context has this one's settings and
        rendezvous, and its own connections and progress thread: calls on it
        run concurrently with this context and its other splits, and it
        stays usable after this one is closed. A negative color fails on
        every rank (InvalidArgumentError naming the rank that passed it)."""
        for name, v in (("color", color), ("key", key)):
            if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool)):
                raise TypeError(f"{name}={v!r}: expected an int or None")
        c = self._c.split(_ciuic.UNDEFINED if color is None else int(color), self._rank if key is None else int(key))
        return None if c is None else self._adopt(c)

    def dup(self):
        """split(0): the same ranks on a context of their own (e.g. for a
        library that must not share its caller's order of calls)."""
        return self.split(0)

    def _adopt(self, c):
        ctx = object.__new__(CiuicContext)
        ctx._requested = self._requested
        ctx._bucket_pool = {}
        ctx._buffer_size = self._buffer_size
        ctx._c = c
        ctx._rank = c.rank
        ctx._size = c.size
        with _lock:
            _open.add(ctx)
        return ctx

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else self.backend
        return f"CiuicContext(rank={self._rank}, world_size={self._size}, {state})"

    # -- all-reduce ------------------------------------------------------
    def all_reduce(self, x, op=SUM, out=None, dtype=None):
        """Reduces `x` over all ranks, in place (or into `out`); returns it.

        x: a numpy array or torch tensor, or an iterable of them (a model's
        parameters(): each Parameter's .grad, skipping those without one):
        an iterable is fused into as few all-reduces as the bucket capacity
        (buffer_size) allows, grouped by dtype, and the results are written
        back into each. dtype: read the memory as this type (a uint16 array
        holding "bfloat16")."""
        if out is None and dtype is None and type(x) is np.ndarray:
            self._c.all_reduce_fast(x, op)
            return x
        if _arrays.is_array(x):
            self._c.all_reduce(x, op, out, _dt(dtype), False)
            return x if out is None else out
        if out is not None:
            raise ValueError("out: not supported when x is an iterable (the results go back into each)")
        return self._fused(x, op, dtype, False).wait()

    def all_reduce_async(self, x, op=SUM, out=None, dtype=None):
        """all_reduce, returning a Request at once; its wait() returns what
        all_reduce returns. Overlap computation with it; do not change x
        until the wait."""
        if _arrays.is_array(x):
            req = self._c.all_reduce(x, op, out, _dt(dtype), True)
            return Request(req, x if out is None else out)
        if out is not None:
            raise ValueError("out: not supported when x is an iterable (the results go back into each)")
        return self._fused(x, op, dtype, True)

    def _fused(self, items, op, dtype, async_):
        arrays = _gradients(items)
        groups = {}
        ndarray = np.ndarray
        for a in arrays:
            key = (a.dtype, type(a) is not ndarray and _arrays.is_tensor(a) and a.is_cuda)
            g = groups.get(key)
            if g is None:
                groups[key] = g = []
            g.append(a)
        # Buckets are reused from call to call (their packs keep their memory,
        # so a training step allocates nothing); one in flight is not shared.
        override = _dt(dtype)
        buckets = []
        for (dt, gpu), members in groups.items():
            key = (override or _dt(dt), gpu, int(op))
            free = self._bucket_pool.get(key)
            b = free.pop() if free else Bucket(self, key[0], op, self._buffer_size)
            b._key = key
            buckets.append(b)
            b._b.add_all(members, override)
            b.flush()
        return _BucketRequest(buckets, arrays, self._give_back)

    def _give_back(self, buckets):
        for b in buckets:
            self._bucket_pool.setdefault(b._key, []).append(b)

    def bucket(self, dtype, op=SUM, capacity=None):
        """A fusion bucket: add() tensors of one dtype, wait() writes their
        all-reduced values back. capacity: bytes per fused all-reduce
        (None: buffer_size, else CIUIC_BUFFER_SIZE)."""
        return Bucket(self, _dt(dtype), op, capacity if capacity is not None else self._buffer_size)

    # -- the other collectives -------------------------------------------
    def broadcast(self, x, src=0, dtype=None):
        """Rank src's x into every rank's x (in place); returns x."""
        self._c.broadcast(x, src, _dt(dtype), False)
        return x

    def broadcast_async(self, x, src=0, dtype=None):
        return Request(self._c.broadcast(x, src, _dt(dtype), True), x)

    def reduce(self, x, dst=0, op=SUM, out=None, dtype=None):
        """The reduction of every rank's x, on rank dst: returns it there
        (in `out`, else a new array or tensor), None on the other ranks. x
        is not changed."""
        if self._rank == dst and out is None:
            out = _arrays.empty(x, tuple(x.shape))
        self._c.reduce(x, out, op, dst, _dt(dtype), False)
        return out if self._rank == dst else None

    def reduce_async(self, x, dst=0, op=SUM, out=None, dtype=None):
        if self._rank == dst and out is None:
            out = _arrays.empty(x, tuple(x.shape))
        req = self._c.reduce(x, out, op, dst, _dt(dtype), True)
        return Request(req, out if self._rank == dst else None)

    def all_gather(self, x, dtype=None):
        """Every rank's x, in rank order: a list of world_size arrays or
        tensors shaped like x (views of one contiguous block)."""
        out = _arrays.stacked(x, self._size)
        self._c.all_gather(out, x, _dt(dtype), False)
        return _arrays.blocks(out, self._size)

    def all_gather_async(self, x, dtype=None):
        out = _arrays.stacked(x, self._size)
        req = self._c.all_gather(out, x, _dt(dtype), True)
        n = self._size
        return Request(req, None, lambda: _arrays.blocks(out, n))

    def all_gather_into(self, out, x, dtype=None):
        """Every rank's x into `out` (world_size x x's elements), rank r's at
        block r; returns out."""
        self._c.all_gather(out, x, _dt(dtype), False)
        return out

    def all_gather_into_async(self, out, x, dtype=None):
        return Request(self._c.all_gather(out, x, _dt(dtype), True), out)

    def reduce_scatter(self, out, x, op=SUM, dtype=None):
        """Block r of the reduction of every rank's x into rank r's out; x
        holds world_size blocks of out's size (an array, or a list of them).
        Returns out."""
        x = self._joined(x, "x")
        self._c.reduce_scatter(out, x, op, _dt(dtype), False)
        return out

    def reduce_scatter_async(self, out, x, op=SUM, dtype=None):
        x = self._joined(x, "x")
        return Request(self._c.reduce_scatter(out, x, op, _dt(dtype), True), out)

    def all_to_all(self, out, x, out_splits=None, in_splits=None, dtype=None):
        """Block p of x to rank p; block q of out from rank q. Splits (rows of
        the first dimension per rank, as torch's all_to_all_single) make it
        all-to-all-v; without them the blocks are equal. Returns out."""
        oc, ic = self._splits(out, out_splits, "out_splits"), self._splits(x, in_splits, "in_splits")
        self._c.all_to_all(out, x, oc, ic, _dt(dtype), False)
        return out

    def all_to_all_async(self, out, x, out_splits=None, in_splits=None, dtype=None):
        oc, ic = self._splits(out, out_splits, "out_splits"), self._splits(x, in_splits, "in_splits")
        return Request(self._c.all_to_all(out, x, oc, ic, _dt(dtype), True), out)

    def gather(self, x, dst=0, out=None, dtype=None):
        """Every rank's x on rank dst: there a list of world_size arrays (or
        `out`, world_size x x's elements, filled); None elsewhere."""
        stacked = None
        if self._rank == dst and out is None:
            stacked = _arrays.stacked(x, self._size)
        self._c.gather(out if stacked is None else stacked, x, dst, _dt(dtype), False)
        if self._rank != dst:
            return None
        return out if stacked is None else _arrays.blocks(stacked, self._size)

    def gather_async(self, x, dst=0, out=None, dtype=None):
        stacked = None
        if self._rank == dst and out is None:
            stacked = _arrays.stacked(x, self._size)
        req = self._c.gather(out if stacked is None else stacked, x, dst, _dt(dtype), True)
        if self._rank != dst:
            return Request(req, None)
        if stacked is None:
            return Request(req, out)
        n = self._size
        return Request(req, None, lambda: _arrays.blocks(stacked, n))

    def scatter(self, out, xs=None, src=0, dtype=None):
        """Block r of rank src's xs (a list of world_size arrays, or one
        array of world_size blocks) into rank r's out; xs is read at src
        only. Returns out."""
        xs = self._joined(xs, "xs") if self._rank == src and xs is not None else None
        self._c.scatter(out, xs, src, _dt(dtype), False)
        return out

    def scatter_async(self, out, xs=None, src=0, dtype=None):
        xs = self._joined(xs, "xs") if self._rank == src and xs is not None else None
        return Request(self._c.scatter(out, xs, src, _dt(dtype), True), out)

    def send(self, x, dst, tag=0, dtype=None):
        """x to rank dst; matched in order with dst's recv of the same tag
        (0 <= tag < 65536)."""
        self._c.send(x, dst, tag, _dt(dtype), False)

    def send_async(self, x, dst, tag=0, dtype=None):
        return Request(self._c.send(x, dst, tag, _dt(dtype), True), None)

    isend = send_async

    def recv(self, x, src, tag=0, dtype=None):
        """Rank src's message of this tag into x (its size must be x's);
        returns x."""
        self._c.recv(x, src, tag, _dt(dtype), False)
        return x

    def recv_async(self, x, src, tag=0, dtype=None):
        return Request(self._c.recv(x, src, tag, _dt(dtype), True), x)

    irecv = recv_async

    def barrier(self):
        """Returns once every rank has entered it."""
        self._c.barrier(False)

    def barrier_async(self):
        return Request(self._c.barrier(True), None)

    # -- Python objects (pickled; sizes exchanged first) -----------------
    def send_object(self, obj, dst, tag=0):
        """Any picklable object to rank dst (its recv_object)."""
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        self._c.send(np.array([len(data)], dtype=np.int64), dst, tag, "", False)
        if data:
            self._c.send(np.frombuffer(data, dtype=np.uint8), dst, tag, "", False)

    def send_object_async(self, obj, dst, tag=0):
        """send_object, returning a Request at once."""
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        reqs = [self._c.send(np.array([len(data)], dtype=np.int64), dst, tag, "", True)]
        if data:
            reqs.append(self._c.send(np.frombuffer(data, dtype=np.uint8), dst, tag, "", True))
        return _Chain(reqs, None)

    def recv_object_async(self, src, tag=0):
        """recv_object, returning a Request whose wait() returns the object."""
        size = np.zeros(1, dtype=np.int64)
        chain = _Chain([self._c.recv(size, src, tag, "", True)], None)

        def payload():
            buf = np.empty(int(size[0]), dtype=np.uint8)
            if not buf.size:
                return None, lambda: pickle.loads(b"")
            return self._c.recv(buf, src, tag, "", True), lambda: pickle.loads(buf.tobytes())

        chain._next = payload
        return chain

    def recv_object(self, src, tag=0):
        """The object rank src sent with send_object."""
        size = np.zeros(1, dtype=np.int64)
        self._c.recv(size, src, tag, "", False)
        buf = np.empty(int(size[0]), dtype=np.uint8)
        if buf.size:
            self._c.recv(buf, src, tag, "", False)
        return pickle.loads(buf.tobytes())

    def broadcast_object(self, obj=None, src=0):
        """Rank src's obj on every rank (returned)."""
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if self._rank == src else b""
        size = np.array([len(data)], dtype=np.int64)
        self._c.broadcast(size, src, "", False)
        buf = np.frombuffer(data, dtype=np.uint8).copy() if self._rank == src else np.empty(int(size[0]), np.uint8)
        if buf.size:
            self._c.broadcast(buf, src, "", False)
        return obj if self._rank == src else pickle.loads(buf.tobytes())

    def all_gather_object(self, obj):
        """Every rank's obj, in rank order (a list)."""
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        sizes = np.zeros(self._size, dtype=np.int64)
        self._c.all_gather(sizes, np.array([len(data)], dtype=np.int64), "", False)
        width = int(sizes.max()) if self._size else 0
        mine = np.zeros(width, dtype=np.uint8)
        mine[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        everyone = np.empty(width * self._size, dtype=np.uint8)
        if width:
            self._c.all_gather(everyone, mine, "", False)
        return [pickle.loads(everyone[r * width:r * width + int(sizes[r])].tobytes()) for r in range(self._size)]

    # -- helpers -----------------------------------------------------------
    def _joined(self, xs, what):
        if xs is None or _arrays.is_array(xs):
            return xs
        if isinstance(xs, (list, tuple)):
            if len(xs) != self._size:
                raise ValueError(f"{what}: {len(xs)} blocks, expected world_size ({self._size})")
            return _arrays.concat(xs, what)
        return xs  # the binding names the type

    def _splits(self, x, splits, what):
        if splits is None:
            return None
        splits = [int(s) for s in splits]
        per_row = _arrays.rows(x) if _arrays.is_array(x) else 1
        return [s * per_row for s in splits]


class Bucket:
    """Fusion: tensors of one dtype packed into few all-reduces.

    add(x) copies x into the open pack and sends the pack once the next
    tensor would overflow `capacity` bytes; flush() sends the open pack;
    wait() waits for all and writes the results back into every tensor
    added. A tensor larger than the capacity is all-reduced on its own.
    Every rank must add the same sizes in the same order."""

    def __init__(self, context, dtype, op=SUM, capacity=None):
        self._ctx = context
        self._key = None
        self._b = _ciuic.Bucket(context._c, _dt(dtype), int(op), int(capacity or 0))

    def add(self, x, dtype=None):
        """Copies x into the open pack (dtype: read x's memory as this type)."""
        self._b.add(x, dtype=_dt(dtype))

    def flush(self):
        self._b.flush()

    def test(self):
        """True when every pack sent is done (wait() then returns at once)."""
        return self._b.test()

    def wait(self):
        self._b.wait()

    @property
    def allreduces_issued(self):
        """All-reduces sent so far (packs plus oversized tensors)."""
        return self._b.allreduces_issued


def _check_nccl_possible():
    """backend="nccl" needs a CUDA GPU and NCCL: say which is missing."""
    torch = _arrays.torch_module()
    if torch is not None:
        if not torch.cuda.is_available():
            raise FailedPreconditionError("backend='nccl': no CUDA GPU is usable here (torch.cuda.is_available() is False)")
        return
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise FailedPreconditionError(f"backend='nccl': no CUDA driver (libcuda.so.1: {e})") from None
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        raise FailedPreconditionError("backend='nccl': the CUDA driver sees no GPU")
    lib = os.environ.get("CIUIC_NCCL_LIB", "libnccl.so.2")
    try:
        ctypes.CDLL(lib)
    except OSError as e:
        raise FailedPreconditionError(f"backend='nccl': NCCL cannot be loaded (CIUIC_NCCL_LIB={lib}: {e})") from None


_MPI_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS", "MPI_LOCALNRANKS")


def _from_mpi(world_size, rank, knobs):
    """backend="mpi": an initialised mpi4py COMM_WORLD rendezvous through a
    store rank 0 serves (its address broadcast over MPI); else the MPI
    launcher's environment."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None and not any(v in os.environ for v in _MPI_LAUNCHER_VARS):
        try:
            from mpi4py import MPI as mpi  # noqa: N811
        except ImportError:
            mpi = None
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        world = mpi.COMM_WORLD
        if world_size is not None and world_size != world.Get_size():
            raise ValueError(f"world_size={world_size} but MPI's COMM_WORLD has {world.Get_size()} ranks")
        if rank is not None and rank != world.Get_rank():
            raise ValueError(f"rank={rank} but MPI says this process is rank {world.Get_rank()}")
        hosts = world.allgather(socket.gethostname())
        server = None
        address = None
        if world.Get_rank() == 0:
            one_host = len(set(hosts)) == 1
            secret = "" if one_host else secrets.token_hex(16)
            try:
                server = _ciuic.StoreServer("127.0.0.1" if one_host else "", secret)
                host = "127.0.0.1" if one_host else socket.gethostbyname(socket.gethostname())
                address = (host, server.port, secret)
            except Exception as e:  # every rank must hear of it
                address = ("", 0, str(e))
        address = world.bcast(address, root=0)
        if not address[0]:
            raise FailedPreconditionError(f"backend='mpi': rank 0 could not serve the rendezvous store: {address[2]}")
        comm = _ciuic.Comm.over_tcp(world.Get_rank(), world.Get_size(), address[0], address[1], True, address[2], knobs)
        if server is not None:
            comm.keep(server)  # rank 0's store lives as long as its communicator
        return comm
    if any(v in os.environ for v in _MPI_LAUNCHER_VARS):
        items = list(knobs)
        if rank is not None:
            items.append(("CIUIC_RANK", str(int(rank))))
        if world_size is not None:
            items.append(("CIUIC_WORLD_SIZE", str(int(world_size))))
        return _ciuic.Comm.from_env(items)
    raise FailedPreconditionError("backend='mpi': not started by an MPI launcher (mpirun, srun) and mpi4py's MPI "
                                  "is not initialised (pip install mpi4py, or run under mpirun)")
