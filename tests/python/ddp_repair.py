"""DistributedDataParallel over the weft backend when a rank is SIGKILLed mid-training (run
by tests/groups/run_fault.sh under `weftrun --elastic`, 4 ranks, 3 survivors):

- the victim (the last rank) kills itself at step KILL, before its backward; every
  survivor's backward raises, and weft.torch.distributed.is_peer_failure says it is a
  peer's failure (a RuntimeError from torch's C++, naming WEFT_ERR_PEER_FAILED);
- weft.torch.repair() returns the survivors' process group, now torch's default one
  (dist.get_world_size() is 3), with the victim's member id removed;
- the survivors wrap the same model and optimizer in a new DistributedDataParallel and
  train on; their parameters after STEPS steps equal a sequential computation on each
  survivor: from the parameters at the re-wrap, plain SGD on the mean over the
  survivors of each one's mean loss on its own batch (batches drawn from the member id
  and the step, so any rank can draw any other's), within float32 rounding.
Each survivor prints SURVIVOR-OK.
"""

import os
import signal
import sys

import torch
import torch.distributed as dist

import weft.torch as wt
from fault_common import run_survivor, say

KILL, STEPS = 3, 8


def batch(member, step):
    gen = torch.Generator().manual_seed(1000 * member + step)
    return torch.randn(6, 10, generator=gen), torch.randn(6, 3, generator=gen)


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 3))


def loss_fn(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def main():
    dist.init_process_group("weft")
    me, n = dist.get_rank(), dist.get_world_size()
    member = int(os.environ["WEFT_RANK"])
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    repaired = None
    step = 0
    while step < STEPS:
        x, y = batch(member, step)
        opt.zero_grad()
        loss = loss_fn(ddp, x, y)
        if step == KILL and me == n - 1 and repaired is None:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            loss.backward()
        except RuntimeError as e:
            if repaired is not None or not wt.distributed.is_peer_failure(e):
                raise
            pg, info = wt.repair()
            if info.removed != [n - 1] or dist.get_world_size() != n - 1 or \
                    pg is not dist.distributed_c10d._get_default_group():
                raise AssertionError("repair: removed %s, size %d" %
                                     (info.removed, dist.get_world_size()))
            ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
            repaired = (step, [p.detach().clone() for p in model.parameters()],
                        list(pg.weft_group.member_ids))
            continue  # the failed step again, at the new width
        opt.step()
        step += 1
    if repaired is None:
        raise AssertionError("no failure was seen")

    # The reference: from the parameters at the re-wrap, the same steps sequentially.
    first, params, members = repaired
    ref = make_model()
    with torch.no_grad():
        for p, q in zip(ref.parameters(), params):
            p.copy_(q)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for s in range(first, STEPS):
        ref_opt.zero_grad()
        total = sum(loss_fn(ref, *batch(m, s)) for m in members) / len(members)
        total.backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
            raise AssertionError("parameters differ from the sequential reference by %g"
                                 % (p - q).abs().max().item())
    t = torch.ones(1)
    dist.all_reduce(t)
    if t.item() != len(members):
        raise AssertionError("all_reduce on the new default group gave %g" % t.item())
    say("SURVIVOR-OK rank %d: repaired at step %d over members %s" % (me, first, members))
    return 0


if __name__ == "__main__":
    run_survivor(main)
