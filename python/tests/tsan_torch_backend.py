"""The torch backend's threads under ThreadSanitizer (tools/tsan-torch.sh):
callers waiting on works (wait, wait with a timeout, the future) while the
completer completes them, comm-hook callbacks on the completer, two groups
used from two threads at once, and destroy with work in flight. Every
result is checked. Usage: tsan_torch_backend.py NRANKS STORE_DIR [RANK]
(without RANK it starts the ranks as processes and waits for them)."""

import datetime
import os
import subprocess
import sys
import threading


def rank_main(rank, n, store_dir):
    import torch
    import torch.distributed as dist

    import ciuic.torch  # noqa: F401  (registers "ciuic")

    torch.set_num_threads(1)
    dist.init_process_group("ciuic", init_method=f"file://{store_dir}/store", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=120))
    want = float(sum(range(1, n + 1)))
    bad = []

    def check(what, t, value):
        if not torch.equal(t, torch.full_like(t, value)):
            bad.append(f"{what}: {t[:4].tolist()} != {value}")

    # 1. Works waited three ways while the completer runs.
    for it in range(60):
        ts = [torch.full((257 * (k + 1),), float(rank + 1)) for k in range(4)]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        works[0].wait()
        works[1].wait(datetime.timedelta(seconds=60))
        works[2].get_future().wait()
        while not works[3].is_completed():
            pass
        for k, t in enumerate(ts):
            check(f"iteration {it} tensor {k}", t, want)

    # 2. Futures with callbacks (what DDP's comm hooks do): the callback
    # runs on the completer thread and reads the tensor written there.
    for it in range(40):
        t = torch.full((1000,), float(rank + 1))
        fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
        check(f"callback {it}", fut.wait(), 2 * want)

    # 3. Two groups used from two threads at once.
    g1 = dist.new_group(list(range(n)))
    g2 = dist.new_group(list(range(n)))
    errors = []

    def use(group, salt):
        try:
            for it in range(40):
                t = torch.full((513,), float(rank + salt))
                dist.all_reduce(t, group=group, async_op=True).wait()
                check(f"group {salt} iteration {it}", t, float(sum(range(salt, n + salt))))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=use, args=(g, s)) for g, s in ((g1, 10), (g2, 20))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    bad += errors

    # 4. Destroy with work in flight: each work completes or fails, none hangs.
    dist.barrier()
    works = [dist.all_reduce(torch.ones(1 << 16), async_op=True) for _ in range(8)]
    dist.destroy_process_group()
    for w in works:
        try:
            w.wait(datetime.timedelta(seconds=30))
        except Exception:  # noqa: BLE001 (failing is allowed here, hanging is not)
            pass
    if bad:
        print(f"rank {rank}: WRONG: " + "; ".join(bad[:10]), flush=True)
        sys.exit(1)
    print(f"rank {rank}: ok", flush=True)


def main():
    n, store_dir = int(sys.argv[1]), sys.argv[2]
    if len(sys.argv) > 3:
        rank_main(int(sys.argv[3]), n, store_dir)
        return
    procs = [subprocess.Popen([sys.executable, __file__, str(n), store_dir, str(r)]) for r in range(n)]
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(timeout=900))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append("hung")
    print("ranks' exit statuses:", rcs, flush=True)
    sys.exit(0 if all(rc == 0 for rc in rcs) else 1)


if __name__ == "__main__":
    main()
