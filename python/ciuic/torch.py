"""The torch.distributed backend "ciuic".

    import ciuic                      # registers "ciuic" with torch.distributed
    import torch.distributed as dist
    dist.init_process_group("ciuic", init_method="env://")   # or "cpu:ciuic,cuda:nccl"
    model = torch.nn.parallel.DistributedDataParallel(model)
    model.register_comm_hook(None, ciuic.torch.bf16_compress_hook)  # optional

The backend takes CPU tensors: all_reduce (SUM AVG PRODUCT MIN MAX, BAND
BOR BXOR on integers, PREMUL_SUM), all_reduce_coalesced, broadcast, reduce,
all_gather (and all_gather_into_tensor, the coalesced forms), gather,
scatter, reduce_scatter (and reduce_scatter_tensor), all_to_all (and
all_to_all_single with split sizes), send/recv with tags, barrier. Every
real torch dtype, reduced by the library's kernels: float32/64, float16,
bfloat16, float8_e4m3fn/e5m2 (partial sums between ranks rounded per hop,
or in f32 with CIUIC_ACCUMULATE=f32), int8/16/32/64, uint8/16/32/64 and
bool. recv from any source is refused.

The rendezvous goes through the store torch gives each group (no second
address); each group (new_group) is its own ciuic communicator. The group's
timeout (init_process_group(timeout=)) is every operation's deadline: a dead
or stalled peer fails the pending work on every rank with a RuntimeError
(DistBackendError) naming it. CIUIC_* variables tune it as for
CiuicContext; pg_options may be a dict of them.
"""

import torch
import torch.distributed as dist

try:
    from ._torch_built import TORCH_VERSION as _BUILT_WITH
except ImportError as e:
    raise ImportError("ciuic was built without its torch backend (torch was not importable by the Python it was "
                      "built for; pip: pip install --no-build-isolation .)") from e
if torch.__version__.split("+")[0] != _BUILT_WITH:
    raise ImportError(f"ciuic's torch backend was built against torch {_BUILT_WITH}, this is torch {torch.__version__}: "
                      "rebuild ciuic against it (pip install --no-build-isolation .)")

from . import _ciuic_torch  # noqa: E402

NAME = "ciuic"


def _create(opts, pg_options):
    knobs = []
    if isinstance(pg_options, dict):
        knobs = [(str(k), str(v)) for k, v in pg_options.items()]
    elif pg_options is not None:
        raise TypeError(f"the ciuic backend's pg_options: expected a dict of CIUIC_* settings, got {type(pg_options).__name__}")
    return _ciuic_torch.create_backend(opts.store, opts.group_rank, opts.group_size, opts.timeout, opts.group_id,
                                       knobs)


def register():
    """Registers "ciuic" with torch.distributed (again is a no-op)."""
    if NAME in dist.Backend.backend_list or getattr(dist.Backend, NAME.upper(), None) == NAME:
        return
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])


def describe(group=None):
    """(transport, last algorithm) of the group's ciuic backend."""
    pg = group if group is not None else dist.group.WORLD
    return _ciuic_torch.describe(pg._get_backend(torch.device("cpu")))


def _compress_hook(dtype, process_group, bucket):
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(dtype)
    # AVG in the library: the sum of the low-precision inputs is accumulated
    # in float32 and divided once, rather than each input divided first.
    fut = dist.all_reduce(compressed, op=dist.ReduceOp.AVG, group=group, async_op=True).get_future()

    def decompress(f):
        buffer.copy_(f.value()[0])
        return buffer

    return fut.then(decompress)


def bf16_compress_hook(process_group, bucket):
    """DDP comm hook: the gradient bucket goes in bfloat16 on the wire,
    averaged with float32 accumulation, written back in the bucket's dtype."""
    return _compress_hook(torch.bfloat16, process_group, bucket)


def fp16_compress_hook(process_group, bucket):
    """DDP comm hook: as bf16_compress_hook with float16."""
    return _compress_hook(torch.float16, process_group, bucket)


register()
