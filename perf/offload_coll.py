#!/usr/bin/env python3
"""Does the spill space's I/O hold up collectives? Allreduce latency on every rank of a
weftrun job, alternating rounds without and with a spill space writing and reading
blocks in the background of each rank, as activation offload does during a step.

    weftrun -n 2 -- python3 perf/offload_coll.py [--sizes 8,65536,4194304] [--iters 200]
                                                [--rounds 5] [--dir D] [--block-mib 16]
                                                [--rates 0,400,150]

Rank 0 prints, per size, the median over rounds of each side's median latency and their
ratio (with I/O / without), and the bytes per second the background I/O moved.
"""

import argparse
import os
import statistics
import tempfile
import threading
import time

import numpy as np

import weft


def until(sp, bid, bits, stop):
    """Poll every millisecond, as activation offload's hooks do between ops (a thread
    that waited in weft_wait would spin and yield, and measure itself, not the I/O)."""
    while (sp.state(bid) & bits) != bits:
        if stop.is_set():
            return False
        time.sleep(1e-3)
    return True


def background(sp, block, stop, moved):
    """Write a block, read it back once stored, drop it; again until @p stop."""
    out = np.empty_like(block)
    n = 0
    while not stop.is_set():
        block.reshape(-1, 4096)[:, :8] = n  # no chunk deduplicated
        bid = sp.write(block)
        if until(sp, bid, weft.Spill.STORED, stop):
            sp.read(bid, out)
            if until(sp, bid, weft.Spill.LOADED, stop):
                moved[0] += 2 * block.nbytes
        sp.free(bid)
        n += 1


def latency(world, buf, iters):
    world.barrier()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        world.allreduce(buf)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8,65536,4194304")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--block-mib", type=int, default=16)
    ap.add_argument("--rates", default="0",
                    help="the spill space's max_rate in MB/s, several compared (0: unpaced)")
    args = ap.parse_args()
    weft.init()
    world = weft.world()
    base = args.dir or tempfile.mkdtemp(prefix="weft-offload-coll-", dir="/var/tmp")
    block = np.random.default_rng(world.rank).integers(0, 255, args.block_mib << 20, dtype=np.uint8)
    sizes = [int(s) for s in args.sizes.split(",")]
    paces = [int(x) for x in args.rates.split(",")]
    for pace in paces:
        sp = weft.Spill(os.path.join(base, "rank%d" % world.rank), max_rate=pace * 1000000)
        run(world, sp, block, sizes, args, pace)
        sp.close()
    weft.finalize()


def run(world, sp, block, sizes, args, pace):
    res = {s: {False: [], True: []} for s in sizes}
    rates = []
    for r in range(args.rounds):
        for io in ((False, True) if r % 2 == 0 else (True, False)):
            stop, moved = threading.Event(), [0]
            t = None
            if io:
                t = threading.Thread(target=background, args=(sp, block, stop, moved))
                t.start()
                time.sleep(0.2)  # the I/O under way first
            t0 = time.perf_counter()
            st0 = sp.stats()
            for s in sizes:
                buf = np.ones(max(1, s // 4), np.float32)
                res[s][io].append(latency(world, buf, args.iters))
            if t is not None:
                st1 = sp.stats()
                rates.append((st1.bytes_written + st1.bytes_read - st0.bytes_written -
                              st0.bytes_read) / (time.perf_counter() - t0))
                stop.set()
                t.join()
    if world.rank == 0:
        print("allreduce on %d ranks, median latency over %d rounds of %d calls; spill I/O "
              "%s" % (world.size, args.rounds, args.iters,
                      "paced at %d MB/s" % pace if pace else "unpaced"))
        for s in sizes:
            quiet = statistics.median(res[s][False])
            busy = statistics.median(res[s][True])
            print("%10d B  without I/O %9.1f us  with I/O %9.1f us  ratio %.2f" % (
                s, quiet * 1e6, busy * 1e6, busy / quiet))
        print("background I/O on rank 0 while measuring: %.2f GB/s (writes and reads)" % (
            statistics.median(rates) / 1e9), flush=True)


if __name__ == "__main__":
    main()
