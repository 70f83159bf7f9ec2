#!/usr/bin/env python3
"""The demo's language model under DistributedDataParallel on the weft backend, kept
through a SIGKILL with weft.torch.ElasticState:

    weftrun -n 3 --elastic --replace -- python3 examples/torch_ddp_lm.py \\
        --steps 40 --kill-step 20 --kill-rank 1 --out run.json

The model is a plain one (an embedding, the demo's transformer body, an output layer:
examples/torch_lm), replicated on every rank; each rank trains on its rows of the step's
global batch of the demo's corpus, with Adam; DDP averages the gradients over weft. After
each step ElasticState snapshots model and optimizer in memory. The rank --kill-rank
SIGKILLs itself in step --kill-step after its forward pass; the survivors' backward
raises, ElasticState.recover() repairs, restores the newest step all of them committed,
admits the replacement weftrun starts (which begins with weft.torch.init_process_group()
and ElasticState.join()) and hands it that state; everyone wraps the model in DDP again
and the interrupted steps run again. Rank 0 writes the loss of every step, the recovery's
timing and a SHA-256 of every tensor of the final model and optimizer to --out, so that
a run with a failure can be compared with one without (examples/run_torch_ddp_demo.sh).
"""

import argparse
import hashlib
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_lm.runtime  # noqa: E402,F401  (threads, and the binding next door)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import weft  # noqa: E402
import weft.torch as wt  # noqa: E402

from torch_lm.corpus import Corpus  # noqa: E402
from torch_lm.model import Body  # noqa: E402


class LM(torch.nn.Module):
    """Token embedding, the demo's body, output layer: [n, T] ids -> [n, T, V] logits."""

    def __init__(self, a):
        super().__init__()
        self.embed = torch.nn.Embedding(a.vocab, a.d_model)
        self.body = Body(a.d_model, a.heads, a.layers, a.seq)
        self.head = torch.nn.Linear(a.d_model, a.vocab)

    def forward(self, ids):
        return self.head(self.body(self.embed(ids)))


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--kill-step", type=int, default=20, help="0: no failure")
    p.add_argument("--kill-rank", type=int, default=1, help="RANK of the process to kill")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=64, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=12, help="sequences per global batch")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--corpus-mb", type=float, default=2.0)
    p.add_argument("--out", help="JSON results, written by rank 0")
    return p.parse_args()


def digest(model, opt):
    """SHA-256 of every tensor of the model and the optimizer, in a fixed order."""
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode() + v.contiguous().numpy().tobytes())
    for i, p in enumerate(q for g in opt.param_groups for q in g["params"]):
        for k, v in sorted(opt.state[p].items()):
            h.update(("%d.%s" % (i, k)).encode() + v.contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    a = parse()
    t_start = time.perf_counter()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    corpus = Corpus(a.vocab, int(a.corpus_mb * 1e6))
    joining = os.environ.get("WEFT_JOIN") == "1"
    torch.manual_seed(a.seed)
    model = LM(a)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    pg = wt.init_process_group()
    if joining:
        state, step = wt.ElasticState.join(model, opt, pg)
        pg = state.pg
    else:
        state = wt.ElasticState(model, opt, pg)
        step = state.start(0)
    victim = not joining and dist.get_rank() == a.kill_rank
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
    losses, events = {}, []
    while step < a.steps:
        try:
            n, r = dist.get_world_size(), dist.get_rank()
            if a.batch % n:
                raise SystemExit("--batch %d does not split over %d ranks" % (a.batch, n))
            inputs, targets = corpus.batch(a.seed, step + 1, a.batch, a.seq)
            rows = slice(r * a.batch // n, (r + 1) * a.batch // n)
            opt.zero_grad()
            logits = ddp(inputs[rows])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab),
                                                     targets[rows].reshape(-1))
            if victim and step + 1 == a.kill_step:
                print("rank %d: killing myself (SIGKILL) in step %d" % (r, step + 1),
                      flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # the global batch's loss
            step += 1
            losses[step] = mean.item()
            state.commit(step)
            if r == 0 and (step % 10 == 0 or step == a.steps):
                print("step %4d  loss %.4f  width %d" % (step, losses[step], n), flush=True)
        except (RuntimeError, weft.PeerError) as e:
            if not wt.is_peer_failure(e):
                raise
            t0 = time.perf_counter()
            failed_in = step + 1
            pg, step = state.recover(replacements=1)
            ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
            events.append({"failed_in": failed_in, "resume_from": step + 1,
                           "seconds": round(time.perf_counter() - t0, 4),
                           "width": dist.get_world_size()})
            if dist.get_rank() == 0:
                print("recovered in %.3f s: a member died in step %d, resuming from step %d "
                      "at width %d" % (events[-1]["seconds"], failed_in, step + 1,
                                       dist.get_world_size()), flush=True)
    state.wait()
    if dist.get_rank() == 0:
        print("done: %d steps in %.1f s, final loss %.4f" % (a.steps, time.perf_counter() -
                                                            t_start, losses[a.steps]))
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"config": vars(a), "corpus": corpus.describe(),
                           "losses": {str(k): v for k, v in sorted(losses.items())},
                           "events": events, "digest": digest(model, opt),
                           "width": dist.get_world_size()}, f, indent=1)


if __name__ == "__main__":
    main()
