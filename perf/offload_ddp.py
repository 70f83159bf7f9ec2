#!/usr/bin/env python3
"""Activation offload in a data-parallel step: each rank of a weftrun job runs the demo's
model body forward and backward on its own batch, then allreduces its gradients over
weft; rounds alternate no offload, offload unpaced and offload paced (max_rate).

    weftrun -n 2 -- python3 perf/offload_ddp.py [--seq 512] [--layers 4] [--d 256]
        [--batch 2] [--steps 3] [--rounds 3] [--rate-mb 150] [--dir D]

Rank 0 prints, per side, the medians over rounds of the step time and of the gradient
allreduce's time (the slowest rank's, taken with a max allreduce), and checks that the
gradients every side computes are bitwise equal.
"""

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate-mb", type=int, default=150)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    import torch
    import weft
    import weft.torch as wt
    from torch_lm.model import Body

    ctx = weft.init()
    world = ctx.world
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world.size))
    torch.manual_seed(0)
    body = Body(args.d, args.heads, args.layers, args.seq)
    params = list(body.parameters())
    flat = np.zeros(sum(p.numel() for p in params), np.float32)
    g = torch.Generator().manual_seed(1 + world.rank)
    xs = [torch.randn(args.batch, args.seq, args.d, generator=g) for _ in range(args.steps)]
    base = args.dir or tempfile.mkdtemp(prefix="weft-offload-ddp-", dir="/var/tmp")
    sides = {
        "none": wt.ActivationOffload(os.path.join(base, "n%d" % world.rank), enabled=False),
        "offload": wt.ActivationOffload(os.path.join(base, "u%d" % world.rank),
                                        layers=body.blocks, keep_last=1),
        "paced": wt.ActivationOffload(os.path.join(base, "p%d" % world.rank),
                                      layers=body.blocks, keep_last=1,
                                      max_rate=args.rate_mb * 1000000),
    }
    res = {k: {"step": [], "allreduce": []} for k in sides}
    digests = {k: set() for k in sides}
    order = list(sides)
    for r in range(args.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            off = sides[name]
            steps, ars, digest = [], [], hashlib.sha256()
            for x in xs:
                for p in params:
                    p.grad = None
                world.barrier()
                t0 = time.perf_counter()
                with off:
                    loss = body(x).square().mean()
                loss.backward()
                torch.cat([p.grad.reshape(-1) for p in params], out=torch.from_numpy(flat))
                t1 = time.perf_counter()
                world.allreduce(flat)
                t2 = time.perf_counter()
                steps.append(t2 - t0)
                ars.append(t2 - t1)
                digest.update(flat.tobytes())
            slow = np.array([statistics.median(steps), statistics.median(ars)])
            world.allreduce(slow, op=weft.MAX)
            res[name]["step"].append(float(slow[0]))
            res[name]["allreduce"].append(float(slow[1]))
            digests[name].add(digest.hexdigest())
    if world.rank == 0:
        print("%d ranks, %d threads each; medians over %d rounds of %d steps (slowest rank)" % (
            world.size, torch.get_num_threads(), args.rounds, args.steps))
        none = statistics.median(res["none"]["step"])
        for name in order:
            st = statistics.median(res[name]["step"])
            ar = statistics.median(res[name]["allreduce"])
            print("%-8s step %.3f s (%.3fx none)  gradient allreduce %.1f ms" % (
                name, st, st / none, ar * 1e3))
        print("gradients bitwise equal across sides and rounds: %s" % (
            len(set().union(*digests.values())) == 1))
    for off in sides.values():
        off.close()
    weft.finalize()


if __name__ == "__main__":
    main()
