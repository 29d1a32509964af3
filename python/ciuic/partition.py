"""Balanced partitioning of uneven work."""

import numpy as np

from . import _ciuic


def partition(weights, parts):
    """Splits items of the given weights (a list or numpy array of
    non-negative numbers) into `parts` contiguous ranges whose largest total
    is as small as possible. Returns `parts` (start, stop) pairs covering
    0..len(weights); some may be empty when there are fewer items than
    parts.

        >>> ciuic.partition([5, 1, 1, 1, 1, 1], 2)
        [(0, 1), (1, 6)]
    """
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)):
        raise TypeError(f"parts={parts!r}: expected an int")
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"weights: expected a sequence of numbers ({e})") from None
    if w.ndim != 1:
        raise ValueError(f"weights: expected one dimension, got shape {w.shape}")
    return [(int(a), int(b)) for a, b in _ciuic.partition(w.tolist(), int(parts))]


class DataPartitioner:
    """Splits a list of work items into balanced contiguous parts by their
    complexity (estimated cost), e.g. images by pixel count:

        parts = DataPartitioner(images, complexity=lambda im: im.size).split_by_complexity(4)
        mine = parts[ctx.rank]

    complexity: a function of an item, or a sequence of weights; default
    len(item) for sized items, else 1."""

    def __init__(self, data, complexity=None):
        self.data = list(data)
        if complexity is None:
            self.weights = [float(len(d)) if hasattr(d, "__len__") else 1.0 for d in self.data]
        elif callable(complexity):
            self.weights = [float(complexity(d)) for d in self.data]
        else:
            self.weights = [float(c) for c in complexity]
            if len(self.weights) != len(self.data):
                raise ValueError(f"complexity: {len(self.weights)} weights for {len(self.data)} items")

    def ranges(self, parts=None):
        return partition(self.weights, self._parts(parts))

    def split_by_complexity(self, parts=None):
        """The items in `parts` lists (default: the default context's
        world_size, else 1)."""
        return [self.data[a:b] for a, b in self.ranges(parts)]

    @staticmethod
    def _parts(parts):
        if parts is not None:
            return parts
        from .context import default_context

        try:
            return default_context().world_size
        except ValueError:
            return 1
