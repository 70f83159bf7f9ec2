#!/usr/bin/env python3
"""Allreduce from Python: weft's binding against torch.distributed with the gloo backend,
in the same processes and the same run, on float32 torch tensors.

    build/bin/weftrun -n 2 -- /usr/bin/python3 perf/peers/torch_compare.py [-r ROUNDS]

weftrun sets RANK and WORLD_SIZE; gloo meets at 127.0.0.1 on a port derived from the job
(MASTER_PORT overrides it). Each round times every size with weft, then with gloo, then
weft again (the two weft blocks bracket gloo's, so both see the same background load),
each a median of per-call times over many calls with a barrier before every call; the
table shows medians over rounds of the slowest rank's time and the ratio gloo / weft
(> 1: weft is faster). Each rank is pinned to a core first (--bind none: not), as
weft-perf's collectives pin theirs. perf/peers/torch_compare.sh adds the C side
(weft-perf) for the binding's own cost.
"""

import argparse
import hashlib
import os
import statistics
import sys
import time



def bind_to_core():
    """Pin this process to the LOCAL_RANK-th CPU it may use, as weft-perf's collectives
    and mpirun do by default (when the host's ranks fit its CPUs), before torch starts
    its threads: two ranks left to the scheduler on 2 cores now and then share one, and
    every figure of that run, weft's and gloo's alike, is several times slower."""
    allowed = sorted(os.sched_getaffinity(0))
    rank = int(os.environ.get("LOCAL_RANK", "-1"))
    size = int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
    if 0 <= rank < size <= len(allowed):
        os.sched_setaffinity(0, {allowed[rank]})


if "--bind" not in sys.argv or sys.argv[sys.argv.index("--bind") + 1:][:1] != ["none"]:
    bind_to_core()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import weft  # noqa: E402

SIZES = [8, 64, 1 << 10, 64 << 10, 1 << 20, 8 << 20, 16 << 20, 64 << 20]


def iters_for(nbytes):
    return 400 if nbytes <= 64 << 10 else 60 if nbytes <= 1 << 20 else 8


def timed(fn, barrier, n):
    times = []
    for _ in range(n):
        barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--bind", choices=("core", "none"), default="core",
                    help="pin each rank to a core before torch starts (default core, as "
                    "weft-perf and mpirun)")
    ap.add_argument("--overhead-only", action="store_true",
                    help="only the binding's cost: 8 B allreduces back to back, the mean per "
                    "call of the slowest rank (as weft-perf allreduce measures)")
    args = ap.parse_args()
    if args.overhead_only:
        with weft.init() as ctx:
            world = ctx.world
            x = torch.ones(2, dtype=torch.float32)
            for _ in range(500):
                world.allreduce(x)
            world.barrier()
            n = 5000
            t0 = time.perf_counter()
            for _ in range(n):
                world.allreduce(x)
            mine = torch.tensor([(time.perf_counter() - t0) / n * 1e6], dtype=torch.float64)
            world.allreduce(mine, op="max")
            if world.rank == 0:
                print("python_allreduce_8B_us %.3f" % float(mine[0]))
        return
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    token = os.environ.get("WEFT_JOB_TOKEN", "weft")
    port = int(os.environ.get("MASTER_PORT", 20000 + int(hashlib.sha1(token.encode())
                                                          .hexdigest()[:4], 16) % 20000))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    results = {n: {"weft": [], "gloo": []} for n in SIZES}
    with weft.init() as ctx:
        world = ctx.world
        for _ in range(args.rounds):
            for n in SIZES:
                x = torch.ones(n // 4, dtype=torch.float32)
                k = iters_for(n)
                w1 = timed(lambda: world.allreduce(x), world.barrier, k)
                g = timed(lambda: dist.all_reduce(x), dist.barrier, k)
                w2 = timed(lambda: world.allreduce(x), world.barrier, k)
                mine = torch.tensor([min(w1, w2), g], dtype=torch.float64)
                world.allreduce(mine, op="max")
                results[n]["weft"].append(float(mine[0]))
                results[n]["gloo"].append(float(mine[1]))
    if rank == 0:
        print("# allreduce f32 sum from Python, %d ranks, torch tensors; medians of %d rounds "
              "of the slowest rank's median call" % (size, args.rounds))
        print("# %10s %12s %12s %10s" % ("bytes", "weft_us", "gloo_us", "gloo/weft"))
        for n in SIZES:
            wv = statistics.median(results[n]["weft"]) * 1e6
            gv = statistics.median(results[n]["gloo"]) * 1e6
            print("  %10d %12.2f %12.2f %10.2f" % (n, wv, gv, gv / wv))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
