"""Inputs, references and conversions shared by the tests."""

import importlib.util

import numpy as np

try:
    import ml_dtypes
except ImportError:  # bfloat16 on numpy is then a uint16 array with dtype="bfloat16"
    ml_dtypes = None

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if HAVE_TORCH:
    import torch  # imported before forking: the children inherit it


def torch_backend_skip_reason():
    """Why the torch.distributed backend tests cannot run here, or None."""
    if not HAVE_TORCH:
        return "torch is not installed"
    try:
        import ciuic.torch  # noqa: F401
    except ImportError as e:
        return f"the torch backend is not built: {e}"
    return None


def init_torch_group(rank, n, store_dir, backend="ciuic", timeout=60):
    """torch.distributed's default group over a file store in store_dir (the
    ranks' CIUIC_* rendezvous variables dropped: torch's store is used)."""
    import datetime
    import os

    import torch.distributed as dist

    for k in ("CIUIC_RANK", "CIUIC_WORLD_SIZE", "CIUIC_STORE_ADDR", "CIUIC_STORE_EXTERNAL"):
        os.environ.pop(k, None)
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"file://{store_dir}/store", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=timeout))

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "uint32", "int64", "uint64"]
LIBS = ["numpy", "torch"] if HAVE_TORCH else ["numpy"]
INTS = {"int8", "uint8", "int32", "uint32", "int64", "uint64"}


def np_dtype(name):
    if name == "bfloat16":
        return ml_dtypes.bfloat16 if ml_dtypes is not None else np.uint16
    return np.dtype(name)


def make(values, dtype, lib):
    """values (float64, exact in every dtype) as an array or tensor of dtype."""
    a = np.asarray(values, dtype=np.float64)
    if dtype == "bfloat16" and ml_dtypes is None:
        raise RuntimeError("ml_dtypes is needed for bfloat16 tests")
    a = a.astype(np_dtype(dtype))
    if lib == "numpy":
        return a
    if dtype == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def empty(shape, dtype, lib, fill=77):
    return make(np.full(shape, fill, dtype=np.float64), dtype, lib)


def f64(x):
    """An array or tensor (any dtype) as float64 numpy."""
    if HAVE_TORCH and isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            x = x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        else:
            x = x.numpy()
    return np.asarray(x).astype(np.float64)


def values(rank, count, salt=0):
    """Rank `rank`'s input: small integers 1..3, so that sums and products
    of up to 4 ranks are exact in every dtype."""
    return np.array([(rank + i + salt) % 3 + 1 for i in range(count)], dtype=np.float64)


def reduce_ref(op, arrays, dtype):
    stack = np.stack(arrays)
    if op == 0:
        return stack.sum(0)
    if op == 1:
        return stack.prod(0)
    if op == 2:
        return stack.min(0)
    if op == 3:
        return stack.max(0)
    s = stack.sum(0)
    return np.floor(s / len(arrays)) if dtype in INTS else s / len(arrays)


def tolerance(dtype):
    return {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-6, "float64": 1e-12}.get(dtype, 0.0)


def close(got, want, dtype):
    got, want = f64(got), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False
    return bool(np.allclose(got, want, rtol=tolerance(dtype), atol=0.0))
