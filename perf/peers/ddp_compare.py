#!/usr/bin/env python3
"""DistributedDataParallel step time over the weft backend against gloo, in the same
processes and the same run.

    build/bin/weftrun -n 2 -- /usr/bin/python3 perf/peers/ddp_compare.py [--model big|demo]
        [--rounds R] [--steps S] [--batch B]

big:  three Linear(4096, 4096) layers (50.3 M parameters, 201 MB of float32 gradients
      a step) on a small batch: the step is mostly the gradients' allreduce.
demo: the demo's language model as a plain model (an embedding of 32768 x 128, the
      2-layer transformer body of examples/torch_lm, and the output layer: 8.8 M
      parameters) on the demo's batch per rank.

Each round runs S steps of SGD over weft, then S over gloo, then S without DDP (the same
model, forward, backward and step without communication: what the step costs without
communication, the floor), each timed per step after a barrier; a rank's step time is the
slowest rank's (an allreduce of MAX). The table shows the median over all rounds' steps.
Ranks are pinned to a core each, as in torch_compare.py.
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def bind_to_core():
    allowed = sorted(os.sched_getaffinity(0))
    rank = int(os.environ.get("LOCAL_RANK", "-1"))
    size = int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
    if 0 <= rank < size <= len(allowed):
        os.sched_setaffinity(0, {allowed[rank]})


bind_to_core()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import weft.torch  # noqa: E402,F401  (registers the backend)


def make_model(kind):
    torch.manual_seed(0)
    if kind == "big":
        return torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                   torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                   torch.nn.Linear(4096, 4096))
    from torch_lm.model import Body

    class LM(torch.nn.Module):
        def __init__(self, vocab=32768, d=128, heads=4, layers=2, length=64):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.body = Body(d, heads, layers, length)
            self.out = torch.nn.Linear(d, vocab)

        def forward(self, tokens):
            return self.out(self.body(self.emb(tokens)))
    return LM()


def batch(kind, b, gen):
    if kind == "big":
        x = torch.randn(b, 4096, generator=gen)
        return x, torch.randn(b, 4096, generator=gen)
    tokens = torch.randint(0, 32768, (b, 64), generator=gen)
    return tokens, torch.randint(0, 32768, (b, 64), generator=gen)


def loss_of(kind, out, y):
    if kind == "big":
        return torch.nn.functional.mse_loss(out, y)
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("big", "demo"), default="big")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=0, help="per rank; 0: 4 (big), 4 (demo)")
    a = p.parse_args()
    b = a.batch or 4
    dist.init_process_group("weft")
    rank, n = dist.get_rank(), dist.get_world_size()
    weft_pg = dist.distributed_c10d._get_default_group()
    gloo_pg = dist.new_group(backend="gloo")
    models = {}
    for name, pg in (("weft", weft_pg), ("gloo", gloo_pg), ("none", None)):
        m = make_model(a.model)
        ddp = torch.nn.parallel.DistributedDataParallel(
            m, process_group=pg, gradient_as_bucket_view=True) if pg else m
        models[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=1e-3))
    nparams = sum(t.numel() for t in models["none"][0].parameters())
    gen = torch.Generator().manual_seed(rank)
    times = {k: [] for k in models}

    def step(name):
        ddp, opt = models[name]
        x, y = batch(a.model, b, gen)
        dist.barrier(group=weft_pg)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_of(a.model, ddp(x), y).backward()
        opt.step()
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=weft_pg)
        return dt.item()

    for name in models:  # warm-up: first buckets, allocations
        step(name)
    for _ in range(a.rounds):
        for name in models:
            times[name] += [step(name) for _ in range(a.steps)]
    if rank == 0:
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print("# DDP step time, model %s (%.1f M parameters), %d ranks, batch %d per rank, "
              "%d rounds x %d steps alternating; median ms of the slowest rank"
              % (a.model, nparams / 1e6, n, b, a.rounds, a.steps))
        print("  no communication (floor): %9.1f ms" % med["none"])
        print("  DDP over weft:             %9.1f ms" % med["weft"])
        print("  DDP over gloo:             %9.1f ms" % med["gloo"])
        print("ddp_step_ms weft %.2f gloo %.2f none %.2f gloo/weft %.2f"
              % (med["weft"], med["gloo"], med["none"], med["gloo"] / med["weft"]))
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
