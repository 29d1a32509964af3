"""numpy arrays and torch tensors side by side: allocation, flattening and
splitting without importing torch unless the program already did."""

import sys

import numpy as np


def torch_module():
    return sys.modules.get("torch")


def is_tensor(x):
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def is_array(x):
    return isinstance(x, np.ndarray) or is_tensor(x)


def empty(like, shape):
    """An uninitialised array or tensor of `like`'s type (and device)."""
    if is_tensor(like):
        return torch_module().empty(shape, dtype=like.dtype, device=like.device)
    return np.empty(shape, dtype=like.dtype)


def stacked(like, n):
    """n blocks shaped like `like`, contiguous: the output of a gather."""
    return empty(like, (n,) + tuple(like.shape))


def blocks(out, n):
    """The n blocks of a stacked output, as views."""
    return [out[i] for i in range(n)]


def concat(xs, what):
    """The arrays of `xs` flattened and joined (contiguous); errors name `what`."""
    xs = list(xs)
    if not xs:
        raise ValueError(f"{what}: empty")
    if is_tensor(xs[0]):
        t = torch_module()
        if not all(isinstance(x, t.Tensor) for x in xs):
            raise TypeError(f"{what}: mixes torch tensors with other types")
        return t.cat([x.reshape(-1) for x in xs])
    if not all(isinstance(x, np.ndarray) for x in xs):
        raise TypeError(f"{what}: expected numpy arrays or torch tensors")
    return np.concatenate([x.reshape(-1) for x in xs])


def rows(x):
    """Elements per first-dimension row (splits count rows, as torch's)."""
    shape = tuple(x.shape)
    if len(shape) == 0:
        return 1
    if shape[0] == 0:
        return 0
    n = 1
    for d in shape[1:]:
        n *= d
    return n


def from_bytes(data):
    return np.frombuffer(data, dtype=np.uint8).copy()
