"""DistributedDataParallel on the weft backend with weft.torch.ElasticState, run on every
rank by run_ddp_elastic.sh under `weftrun --elastic --replace`:

    ddp_elastic.py --steps N --kill-step K --out FILE

An MLP trained with Adam (whose state has a 0-dimensional `step` tensor) on batches drawn
from the group rank and the step. With --kill-step K > 0 the last rank SIGKILLs itself in
step K before its backward; the survivors' backward raises, ElasticState.recover()
repairs, restores the newest step all committed, admits the replacement weftrun starts
and gives it that state; everyone wraps the model in DDP again and trains on. Rank 0
writes the losses of the steps that completed and a SHA-256 of every tensor of the final
model and optimizer to FILE, and how long the recovery took.
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


def batch(rank, step):
    gen = torch.Generator().manual_seed(7919 * rank + step)
    return torch.randn(8, 12, generator=gen), torch.randn(8, 4, generator=gen)


def make_model(hidden):
    return torch.nn.Sequential(torch.nn.Linear(12, hidden), torch.nn.Tanh(),
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


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--steps", type=int, default=8)
    a.add_argument("--kill-step", type=int, default=0)
    a.add_argument("--out", required=True)
    a.add_argument("--hidden", type=int, default=48, help="width of the hidden layer")
    a.add_argument("--save", help="rank 0 writes torch.save of the model and optimizer "
                   "after the last step to this file (perf/peers/ddp_recovery.sh)")
    args = a.parse_args()
    torch.set_num_threads(1)
    joining = os.environ.get("WEFT_JOIN") == "1"
    torch.manual_seed(0)
    model = make_model(args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    pg = wt.init_process_group()
    if joining:
        state, step = wt.ElasticState.join(model, opt, pg)
        pg = state.pg
    else:
        state = wt.ElasticState(model, opt, pg)
        step = state.start(0)
    victim = not joining and dist.get_rank() == dist.get_world_size() - 1
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
    losses, recovery = {}, None
    while step < args.steps:
        try:
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
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump({"losses": {str(k): v for k, v in sorted(losses.items())},
                       "digest": digest(model, opt), "recovery": recovery,
                       "width": dist.get_world_size()}, f)
    print("rank %d done at step %d (width %d)" % (dist.get_rank(), step,
                                                   dist.get_world_size()), flush=True)


if __name__ == "__main__":
    main()
