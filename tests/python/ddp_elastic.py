"""DistributedDataParallel on the weft backend with weft.torch.ElasticState, run on every
rank by run_ddp_elastic.sh under `weftrun --elastic --replace`:

    ddp_elastic.py --steps N --kill-step K [--kill-rank R] [--per-rank] --out FILE

An MLP trained with Adam (whose state has a 0-dimensional `step` tensor) on batches drawn
from the group rank and the step. With --kill-step K > 0 rank R (default: the last)
SIGKILLs itself in step K before its backward; the survivors' backward raises,
ElasticState.recover() repairs, restores the newest step all committed, admits the
replacement weftrun starts and gives it that state; everyone wraps the model in DDP again
and trains on. Rank 0 writes the losses of the steps that completed and a SHA-256 of
every tensor of the final model and optimizer to FILE, and how long the recovery took.

With --per-rank, training also draws from each rank's CPU generator (dropout, noise on
the inputs; each rank seeded apart) and reads its batches from a per-rank Stream whose
position only its saved state tells, and ElasticState carries both (rng=True,
data=stream); FILE then also holds every rank's final generator digest and position.
"""

import argparse
import hashlib
import json
import os
import signal
import time

import torch
import torch.distributed as dist

import weft
import weft.torch as wt


class Stream:
    """A rank's data: variable-length batches (a stand-in for documents of varying
    length), so where a rank stands is known from its state only. The batch at a
    position depends on the rank that reads it and on a per-epoch order."""

    EPOCH = 60  # samples per epoch

    def __init__(self):
        self.position, self.epoch = 0, 0
        self.order = torch.arange(4)

    def next(self, rank):
        """The batch at this position for @p rank; moves past it."""
        seed = 7919 * rank + 101 * self.epoch + self.position
        gen = torch.Generator().manual_seed(seed + int(self.order[self.position % 4]))
        x, y = torch.randn(8, 12, generator=gen), torch.randn(8, 4, generator=gen)
        self.position += 5 + int(torch.randint(0, 6, (1,), generator=gen))
        if self.position >= self.EPOCH:
            self.position, self.epoch = self.position - self.EPOCH, self.epoch + 1
            self.order = torch.randperm(4, generator=gen)
        return x, y

    def state_dict(self):
        """Ints and a tensor, as ElasticState carries them."""
        return {"position": self.position, "epoch": self.epoch, "order": self.order}

    def load_state_dict(self, d):
        """Back to a state_dict()."""
        self.position, self.epoch, self.order = d["position"], d["epoch"], d["order"]


def batch(rank, step):
    gen = torch.Generator().manual_seed(7919 * rank + step)
    return torch.randn(8, 12, generator=gen), torch.randn(8, 4, generator=gen)


def make_model(hidden, dropout=0.0):
    extra = [torch.nn.Dropout(dropout)] if dropout else []
    return torch.nn.Sequential(torch.nn.Linear(12, hidden), torch.nn.Tanh(), *extra,
                               torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, 4))


def digest(model, opt):
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode() + v.contiguous().numpy().tobytes())
    params = [p for g in opt.param_groups for p in g["params"]]
    for i, p in enumerate(params):
        for k, v in sorted(opt.state[p].items()):
            h.update(("%d.%s" % (i, k)).encode() + v.contiguous().numpy().tobytes())
    return h.hexdigest()


def per_rank_state(stream):
    """Every rank's [position, epoch, first 8 bytes of the SHA-256 of its generator
    state], gathered to every rank (a fixed-size tensor: nothing unpickled)."""
    rng = hashlib.sha256(torch.get_rng_state().numpy().tobytes()).digest()[:8]
    rng = int.from_bytes(rng, "little", signed=True)
    mine = torch.tensor([stream.position, stream.epoch, rng], dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [t.tolist() for t in every]


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--steps", type=int, default=8)
    a.add_argument("--kill-step", type=int, default=0)
    a.add_argument("--kill-rank", type=int, default=-1, help="default: the last rank")
    a.add_argument("--per-rank", action="store_true",
                   help="dropout, input noise and a per-rank Stream, carried by "
                   "ElasticState(rng=True, data=stream)")
    a.add_argument("--out", required=True)
    a.add_argument("--hidden", type=int, default=48, help="width of the hidden layer")
    a.add_argument("--save", help="rank 0 writes torch.save of the model and optimizer "
                   "after the last step to this file (perf/peers/ddp_recovery.sh)")
    args = a.parse_args()
    torch.set_num_threads(1)
    joining = os.environ.get("WEFT_JOIN") == "1"
    torch.manual_seed(0)
    model = make_model(args.hidden, 0.25 if args.per_rank else 0.0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    stream = Stream() if args.per_rank else None
    per_rank = {"rng": True, "data": stream} if args.per_rank else {}
    pg = wt.init_process_group()
    if joining:
        state, step = wt.ElasticState.join(model, opt, pg, **per_rank)
        pg = state.pg
    else:
        if args.per_rank:
            torch.manual_seed(1000 + dist.get_rank())  # each rank draws its own numbers
        state = wt.ElasticState(model, opt, pg, **per_rank)
        step = state.start(0)
    victim = not joining and dist.get_rank() == args.kill_rank % dist.get_world_size()
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
    losses, recovery = {}, None
    while step < args.steps:
        try:
            if stream is not None:
                x, y = stream.next(dist.get_rank())
                x = x + 0.1 * torch.randn_like(x)
            else:
                x, y = batch(dist.get_rank(), step + 1)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            if victim and step + 1 == args.kill_step:
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            opt.step()
            losses[step + 1] = loss.item()
            step += 1
            state.commit(step)
        except (RuntimeError, weft.PeerError) as e:
            if not wt.is_peer_failure(e):
                raise
            t0 = time.perf_counter()
            pg, step = state.recover(replacements=1)
            ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
            recovery = {"seconds": time.perf_counter() - t0, "resume_from": step,
                        "width": dist.get_world_size()}
    state.wait()
    if dist.get_rank() == 0 and args.save:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step},
                   args.save)
    ranks = per_rank_state(stream) if stream is not None else None
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump({"losses": {str(k): v for k, v in sorted(losses.items())},
                       "digest": digest(model, opt), "recovery": recovery,
                       "width": dist.get_world_size(), "ranks": ranks}, f)
    print("rank %d done at step %d (width %d)" % (dist.get_rank(), step,
                                                   dist.get_world_size()), flush=True)


if __name__ == "__main__":
    main()
