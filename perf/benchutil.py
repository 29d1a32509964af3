"""What the Python benchmarks (py_bench.py, torch_bench.py) share."""


def size_bytes(s):
    """'8', '64K', '1M', '2G' (a trailing B allowed) -> bytes."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B")
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)
