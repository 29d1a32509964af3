"""Tip 3: the backend chosen from the hardware.

ciuic-run -n 2 python3 examples/python/tip3_backend.py

NCCL for GPU tensors when a GPU is there; otherwise "auto" (shared memory
between the ranks of a host, RDMA verbs or TCP between hosts), or "mpi"
when an MPI launcher started the job. Then an all-gather, as the document.
"""

import os
import time

import numpy as np

import ciuic
from ciuic import CiuicContext

try:
    import torch

    gpu = torch.cuda.is_available()
except ImportError:
    torch, gpu = None, False

if gpu:
    backend = "nccl"
elif "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ:
    backend = "mpi"
else:
    backend = "auto"
ctx = CiuicContext(backend=backend)
if gpu:
    torch.cuda.set_device(ctx.rank % torch.cuda.device_count())
    data = torch.tensor([ctx.rank], device="cuda")
else:
    data = np.array([ctx.rank], dtype=np.int64)
times = []
wrong = 0
for _ in range(2):  # the first call also makes the links to the peers
    t0 = time.perf_counter()
    results = ctx.all_gather(data)
    times.append(time.perf_counter() - t0)
    got = [int(r[0]) for r in results]
    wrong += int(got != list(range(ctx.world_size)))
print(f"tip 3: rank {ctx.rank} asked for {backend!r}, runs on {ctx.backend} "
      f"({'GPU' if gpu else 'CPU'}); gathered {got} in {times[0] * 1e6:.0f} us "
      f"(first call, with connection setup), then {times[1] * 1e6:.0f} us  #wrong {wrong}")
ctx.close()
raise SystemExit(1 if wrong else 0)
