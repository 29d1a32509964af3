"""ciuic: collective communication for numpy arrays and torch tensors.

    import ciuic
    ctx = ciuic.CiuicContext()                       # rank, size from the launcher
    ciuic.all_reduce(grad, op=ciuic.SUM, context=ctx)  # in place
    h = ciuic.all_reduce_async(grad, context=ctx)      # overlap with compute
    ...
    ciuic.all_reduce_wait(h)

Run N ranks with `ciuic-run -n N python3 train.py` (or mpirun, srun), or
inside a torch.distributed job (the context then uses torch's rank, size
and store). Arrays and tensors go to the library as their own memory (no
copies); they must be contiguous. Types: float32 float64 float16 bfloat16
float8_e4m3fn float8_e5m2 int8 uint8 int16 uint16 int32 uint32 int64 uint64
bool (numpy bfloat16 and fp8: ml_dtypes', or a uint16 / uint8 array with
dtype="bfloat16" / "float8_e4m3fn"). Ops: SUM PROD MIN MAX AVG, BAND BOR BXOR
(integers, bool), and ctx.premul_sum(factor). Across the hops of a network
algorithm f16/bf16/fp8 partial sums are rounded at each hop (as NCCL does),
or kept in f32 and rounded once with accumulate="f32" (twice the bytes).
Every blocking call releases the GIL.

The context's methods: all_reduce, all_gather, all_gather_into, reduce,
broadcast, reduce_scatter, all_to_all (with splits: all-to-all-v), gather,
scatter, send, recv, barrier, each with an *_async form returning a Request;
bucket (fusion); send_object, recv_object, broadcast_object,
all_gather_object. Errors are CiuicError subclasses (a peer failure names
the rank in .rank). `python3 -m ciuic.info` prints the build and every knob.
"""

from . import _ciuic
from ._errors import (AbortedError, CiuicError, DataLossError, DeadlineExceededError, FailedPreconditionError,
                      InternalError, InvalidArgumentError, NotFoundError, PeerError, ResourceExhaustedError,
                      UnavailableError, UnimplementedError)
from ._errors import BY_CODE as _BY_CODE
from .context import (AVG, BAND, BOR, BXOR, MAX, MIN, PREMUL_SUM, PROD, SUM, Bucket, CiuicContext, ReduceOp, Request,
                      default_context)
from .partition import DataPartitioner, partition

_ciuic._set_error_classes(_BY_CODE)
UNDEFINED = _ciuic.UNDEFINED  # CiuicContext.split's color for "no new context"


def _register_torch_backend():
    """Registers the torch.distributed backend "ciuic" now if torch.distributed
    is loaded, else once it is (importing ciuic does not import torch: 1.5 s)."""
    import importlib.util
    import sys

    if importlib.util.find_spec("ciuic._ciuic_torch") is None:
        return  # built without torch
    def register():
        try:
            from . import torch as _t  # noqa: F401  (registers)
        except Exception as e:  # never break the import of ciuic or torch
            import warnings

            warnings.warn(f"ciuic: the torch.distributed backend was not registered: {e}")

    if "torch.distributed" in sys.modules:
        register()
        return

    class _Hook:
        # Wraps torch.distributed's loader so that the registration runs
        # right after the module has executed.
        def find_spec(self, name, path=None, target=None):
            if name != "torch.distributed":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            inner = spec.loader

            class _Loader:
                def create_module(self, s):
                    return inner.create_module(s)

                def exec_module(self, module):
                    inner.exec_module(module)
                    register()

            spec.loader = _Loader()
            return spec

    if not any(type(h).__name__ == "_Hook" for h in sys.meta_path):
        sys.meta_path.insert(0, _Hook())


_register_torch_backend()

__version__ = _ciuic.version


def _ctx(context):
    return context if context is not None else default_context()


def all_reduce(x, op=SUM, context=None, out=None, dtype=None):
    """Reduces x (an array, a tensor, or an iterable of them such as
    model.parameters(): their .grad, fused) over the ranks of `context`
    (default: the first open CiuicContext), in place; returns x."""
    ctx = context if context is not None else default_context()
    return ctx.all_reduce(x, op, out, dtype)


def all_reduce_async(x, op=SUM, context=None, out=None, dtype=None):
    """Starts all_reduce and returns a Request (wait(), test(), awaitable).
    x must not change until it is waited for."""
    return _ctx(context).all_reduce_async(x, op, out, dtype)


def all_reduce_wait(handle, timeout=None):
    """Waits for a Request of all_reduce_async; returns its result."""
    return handle.wait(timeout)


def all_gather(x, context=None):
    """Every rank's x, as a list in rank order."""
    return _ctx(context).all_gather(x)


def broadcast(x, src=0, context=None):
    return _ctx(context).broadcast(x, src)


def reduce(x, dst=0, op=SUM, context=None):
    return _ctx(context).reduce(x, dst, op)


def barrier(context=None):
    _ctx(context).barrier()


def info():
    """What python3 -m ciuic.info prints: version, build, SIMD, caches, knobs."""
    return _ciuic.info_main(["ciuic-info"])


__all__ = [
    "CiuicContext", "ReduceOp", "Request", "Bucket", "SUM", "PROD", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR",
    "PREMUL_SUM", "UNDEFINED",
    "all_reduce", "all_reduce_async", "all_reduce_wait", "all_gather", "broadcast", "reduce", "barrier",
    "partition", "DataPartitioner", "default_context",
    "CiuicError", "InvalidArgumentError", "NotFoundError", "FailedPreconditionError", "ResourceExhaustedError",
    "UnavailableError", "PeerError", "DeadlineExceededError", "AbortedError", "UnimplementedError",
    "DataLossError", "InternalError",
]
