"""Balanced partitioning of uneven work (the second source document's
DataPartitioner.split_by_complexity).

ciuic-run -n 2 python3 examples/python/partition_work.py

Images of very different sizes are split among the ranks by their pixel
count instead of by number; each rank processes its part and the ranks
compare their busy times.
"""

import time

import numpy as np

import ciuic
from ciuic import CiuicContext, DataPartitioner

ctx = CiuicContext()
rng = np.random.default_rng(42)
images = [np.ones((s, s), dtype=np.float32) for s in rng.choice([32, 64, 128, 384], size=60, p=[.4, .3, .2, .1])]


def process_images(subset):
    t0 = time.perf_counter()
    total = 0.0
    for im in subset:
        total += float(np.sqrt(im).sum())
    return time.perf_counter() - t0, total


def busy(parts):
    took, total = process_images(parts[ctx.rank])
    return ctx.all_gather_object(took), ctx.all_gather_object(total)


by_count = [images[i::ctx.world_size] for i in range(ctx.world_size)]
balanced = DataPartitioner(images, complexity=lambda im: im.size).split_by_complexity(ctx.world_size)
t_count, s_count = busy(by_count)
t_bal, s_bal = busy(balanced)
loads = [sum(im.size for im in p) for p in balanced]
wrong = int(abs(sum(s_count) - sum(s_bal)) > 1e-3 * sum(s_count) or sum(len(p) for p in balanced) != len(images))
if ctx.rank == 0:
    print(f"partition: {len(images)} images over {ctx.world_size} ranks")
    print(f"  by count:      slowest rank {max(t_count) * 1e3:7.2f} ms, fastest {min(t_count) * 1e3:7.2f} ms")
    print(f"  by complexity: slowest rank {max(t_bal) * 1e3:7.2f} ms, fastest {min(t_bal) * 1e3:7.2f} ms"
          f"  (pixels per rank {loads})")
    print(f"  ranges {ciuic.partition([im.size for im in images], ctx.world_size)}  #wrong {wrong}")
ctx.close()
raise SystemExit(1 if wrong else 0)
