#!/usr/bin/env python3
"""The demo's language model in a pipeline over weft, with the vocabulary layers where
the schedule puts them (weft.torch.pipeline_schedule):

    weftrun -n 4 -- python3 examples/torch_pipeline_lm.py --schedule vocab-1 --steps 4

Each rank is one stage with an equal share of the transformer blocks (--chunks v > 1:
interleaved 1F1B, the blocks cut in stages x v chunks, chunk k on stage k mod stages). Activations go
forward and gradients back with weft's point-to-point calls (isend, so two neighbours
sending to each other never wait on each other). Per --schedule:

- 1f1b: the input embedding and the learned positions on the first stage, the final
  norm, the output layer and the loss on the last (torch's own layers).
- vocab-1 / vocab-2: the input embedding and the output layer sharded by vocabulary over
  every stage (weft.torch.VocabParallelEmbedding and VocabParallelCrossEntropy, "alg2"
  or "alg1"). The last stage broadcasts its output X of a microbatch to every stage in
  pass S; T runs the layer's backward, which gives ∇X to the last stage. The embedding
  runs once per step for all microbatches (one collective forward, one backward).

--tied shares the embedding table with the output layer (the vocab schedules hold one
sharded table; 1f1b keeps a copy on the first and the last stage and sums their
gradients). --reference runs the same model and batches in this one process, without a
pipeline, for comparison. Rank 0 (or the reference) writes per-step losses, per-stage
accounting (busy and idle seconds, the mean time of each kind of pass, peak RSS, and the
peak above the RSS of the runtime before the model was made: the model's own memory), the
throughput, the throughput projected for a core per stage (Schedule.makespan over the
measured pass times: on a machine with fewer cores than stages the stages share them),
and a SHA-256 of every parameter to --out,
and the parameters themselves to --out.pt.
"""

import argparse
import hashlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_lm.runtime  # noqa: E402,F401  (threads, and the binding next door)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import weft  # noqa: E402

from torch_lm.corpus import Corpus  # noqa: E402
from torch_lm.model import Block  # noqa: E402


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schedule", default="vocab-1", choices=("1f1b", "vocab-1", "vocab-2"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--chunks", type=int, default=1,
                   help="model chunks per stage: interleaved 1F1B when > 1")
    p.add_argument("--mb-size", type=int, default=2, help="sequences per microbatch")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--block-rows", type=int, default=0, help="vocab schedules: logits blocks")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optimizer", default="adam", choices=("adam", "sgd"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--corpus-mb", type=float, default=1.0)
    p.add_argument("--reference", action="store_true", help="one process, no pipeline")
    p.add_argument("--out", help="JSON results")
    return p.parse_args(argv)


class Whole(torch.nn.Module):
    """The whole model, made alike on every rank from the seed: embedding, positions,
    blocks, final norm and output weight (no bias: the vocabulary-parallel layer has
    none)."""

    def __init__(self, a):
        super().__init__()
        torch.manual_seed(a.seed)
        self.embed = torch.nn.Parameter(torch.randn(a.vocab, a.d_model) * 0.02)
        self.pos = torch.nn.Parameter(torch.randn(a.seq, a.d_model) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(a.d_model, a.heads) for _ in range(a.layers))
        self.ln = torch.nn.LayerNorm(a.d_model)
        self.out = self.embed if a.tied else torch.nn.Parameter(
            torch.randn(a.vocab, a.d_model) * 0.02)


def blocks_of(stage, stages, layers):
    """The blocks of @p stage: an equal share, the first stages one more when uneven."""
    base, extra = divmod(layers, stages)
    first = stage * base + min(stage, extra)
    return range(first, first + base + (1 if stage < extra else 0))


def microbatches(corpus, a, step):
    """The step's global batch cut into microbatches: lists of inputs and targets."""
    x, y = corpus.batch(a.seed, step, a.microbatches * a.mb_size, a.seq)
    return list(x.split(a.mb_size)), list(y.split(a.mb_size))


def optimizer(a, params):
    """Adam, or plain SGD (whose step does not amplify float32 rounding as Adam's
    division by the gradient's scale does: for comparisons)."""
    if a.optimizer == "sgd":
        return torch.optim.SGD(params, lr=a.lr)
    return torch.optim.Adam(params, lr=a.lr)


def digest(params):
    """SHA-256 of every tensor, by name, in name order."""
    return {k: hashlib.sha256(v.detach().contiguous().numpy().tobytes()).hexdigest()
            for k, v in sorted(params.items())}


def run_reference(a, corpus):
    """The same steps in one process: loss of each microbatch, mean over microbatches."""
    w = Whole(a)
    opt = optimizer(a, w.parameters())
    losses = []
    for step in range(a.steps):
        xs, ys = microbatches(corpus, a, step)
        opt.zero_grad()
        total = 0.0
        for x, y in zip(xs, ys):
            h = F.embedding(x, w.embed) + w.pos[:x.shape[1]]
            for b in w.blocks:
                h = b(h)
            h = w.ln(h)
            loss = F.cross_entropy(h.reshape(-1, a.d_model) @ w.out.T, y.reshape(-1),
                                   label_smoothing=a.label_smoothing) / a.microbatches
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    params = {"pos": w.pos, "embed": w.embed, "ln.weight": w.ln.weight, "ln.bias": w.ln.bias}
    if not a.tied:
        params["out"] = w.out
    for i, b in enumerate(w.blocks):
        for k, v in b.named_parameters():
            params["blocks.%d.%s" % (i, k)] = v
    return {"losses": losses, "params": {k: v.detach().clone() for k, v in params.items()}}


class Stage:
    """This rank's part of the model and the passes of the schedule on it."""

    def __init__(self, a, world):
        import weft.torch as wt
        self.a, self.g = a, world
        self.s, self.p = world.rank, world.size
        self.sched = wt.pipeline_schedule(a.schedule, self.p, a.microbatches, a.chunks)
        w = Whole(a)
        self.vocab = a.schedule != "1f1b"
        first, last = self.s == 0, self.s == self.p - 1
        self.nchunks = self.p * a.chunks  # chunk k runs on stage k % stages
        self.chunk_blocks = {k: [w.blocks[i] for i in blocks_of(k, self.nchunks, a.layers)]
                             for k in range(self.s, self.nchunks, self.p)}
        self.params = {}
        for k in self.chunk_blocks:
            for i in blocks_of(k, self.nchunks, a.layers):
                for n, v in w.blocks[i].named_parameters():
                    self.params["blocks.%d.%s" % (i, n)] = v
        self.pos = w.pos if first else None
        self.ln = w.ln if last else None
        if first:
            self.params["pos"] = w.pos
        if last:
            self.params["ln.weight"], self.params["ln.bias"] = w.ln.weight, w.ln.bias
        if self.vocab:
            algo = "alg2" if a.schedule == "vocab-1" else "alg1"
            self.emb = wt.VocabParallelEmbedding(world, a.vocab, a.d_model, grad_root=0)
            self.table = torch.nn.Parameter(wt.shard_vocab(w.embed.detach(), world).clone())
            self.emb.weight = self.table  # the whole table's shard, as the reference's
            self.xent = wt.VocabParallelCrossEntropy(
                world, algo=algo, vocab_size=a.vocab, label_smoothing=a.label_smoothing,
                block_rows=a.block_rows)
            self.out = self.table if a.tied else torch.nn.Parameter(
                wt.shard_vocab(w.out.detach(), world).clone())
            self.shard_params = {"embed": self.table}
            if not a.tied:
                self.shard_params["out"] = self.out
        else:
            self.embed = torch.nn.Parameter(w.embed.detach().clone()) if first or \
                (last and a.tied) else None
            self.out = (self.embed if a.tied else w.out) if last else None
            if first:
                self.params["embed"] = self.embed
            if last and not a.tied:
                self.params["out"] = self.out
            self.shard_params = {}
        mine = list(self.params.values()) + list(self.shard_params.values())
        if not self.vocab and last and a.tied and not first:
            mine.append(self.embed)
        self.opt = optimizer(a, list(dict.fromkeys(mine)))
        self.busy = self.idle = 0.0
        self.op_time = {op: 0.0 for op in "FBST"}  # busy seconds per kind of pass
        self.op_count = {op: 0 for op in "FBST"}

    # -- helpers ------------------------------------------------------------------------
    def _wait(self, fn):
        t0 = time.perf_counter()
        r = fn()
        self.idle += time.perf_counter() - t0
        return r

    def _shape(self):
        return (self.a.mb_size, self.a.seq, self.a.d_model)

    def _send(self, t, chunk, tag, sends, local):
        """@p t to the stage of @p chunk (kept here when that is this stage)."""
        dst = chunk % self.p
        if dst == self.s:
            local[tag] = t
        else:
            sends.append((self.g.isend(t, dst, tag=tag), t))

    def _recv(self, chunk, tag, local):
        """What the stage of @p chunk sent with @p tag."""
        src = chunk % self.p
        if src == self.s:
            return local.pop(tag)
        t = torch.empty(self._shape())
        self._wait(lambda: self.g.recv(t, src, tag=tag))
        return t

    # -- one step -----------------------------------------------------------------------
    def step(self, xs, ys):
        a, g, s, p = self.a, self.g, self.s, self.p
        m, last = a.microbatches, self.nchunks - 1
        # Tags: the activation into chunk k of microbatch i is k m + i; the gradient out
        # of chunk k + 1 into chunk k is (chunks + k) m + i.
        fwd_tag = lambda k, i: k * m + i  # noqa: E731
        bwd_tag = lambda k, i: (self.nchunks + k) * m + i  # noqa: E731
        local = {}
        self.opt.zero_grad()
        if self.vocab:
            self.table.grad = None
        sends, ins, outs, xh, loss_of = [], {}, {}, {}, {}
        emb_all = emb_leaf = None
        if self.vocab:  # the embedding, once for every microbatch: one collective
            t0 = time.perf_counter()
            emb_all = self.emb(torch.cat(xs))
            emb_leaf = emb_all.detach().split(a.mb_size)
            emb_leaf = [e.clone().requires_grad_() for e in emb_leaf]
            self.busy += time.perf_counter() - t0
        for act in self.sched.actions[s]:
            i, k = act.mb, act.chunk
            t0 = time.perf_counter()
            idle0 = self.idle
            if act.op == "F":
                if k == 0:
                    h = emb_leaf[i] if self.vocab else F.embedding(xs[i], self.embed)
                    h_in = h
                    h = h + self.pos[:a.seq]
                else:
                    h_in = self._recv(k - 1, fwd_tag(k, i), local)
                    h_in.requires_grad_()
                    h = h_in
                for b in self.chunk_blocks[k]:
                    h = b(h)
                if k == last:
                    h = self.ln(h)
                    if not self.vocab:
                        h = F.cross_entropy(h.reshape(-1, a.d_model) @ self.out.T,
                                            ys[i].reshape(-1),
                                            label_smoothing=a.label_smoothing) / m
                        loss_of[i] = h.item() * m
                else:
                    self._send(h.detach().contiguous(), k + 1, fwd_tag(k + 1, i), sends, local)
                ins[(k, i)], outs[(k, i)] = h_in, h
            elif act.op == "S":
                x = outs[(last, i)].detach().contiguous() if s == p - 1 else \
                    torch.empty(self._shape())
                self._wait(lambda: g.broadcast(x, root=p - 1))
                x.requires_grad_()
                loss = self.xent(x.reshape(-1, a.d_model), self.out, ys[i].reshape(-1))
                xh[i] = (x, loss)
                loss_of[i] = loss.item()
            elif act.op == "T":
                x, loss = xh.pop(i)
                (loss / m).backward()
                if s == p - 1:
                    xh[("dx", i)] = x.grad
            else:  # B
                h_in, h = ins.pop((k, i)), outs.pop((k, i))
                if k == last:
                    if self.vocab:
                        h.backward(xh.pop(("dx", i)))
                    else:
                        h.backward()
                else:
                    h.backward(self._recv(k + 1, bwd_tag(k, i), local))
                if k > 0:
                    self._send(h_in.grad.contiguous(), k - 1, bwd_tag(k - 1, i), sends, local)
            spent = (time.perf_counter() - t0) - (self.idle - idle0)
            self.busy += spent
            self.op_time[act.op] += spent
            self.op_count[act.op] += 1
        for req, _buf in sends:
            self._wait(req.wait)
        if self.vocab:  # the embedding's backward: broadcast from stage 0, scatter
            grad = torch.zeros_like(emb_all)
            if s == 0:
                grad = torch.cat([e.grad for e in emb_leaf]).reshape(emb_all.shape)
            emb_all.backward(grad)
        if not self.vocab and a.tied and p > 1:
            # The two copies of the tied table: sum their gradients (the other ranks add
            # zeros), so both take the same step.
            gt = self.embed.grad if s in (0, p - 1) and self.embed is not None and \
                self.embed.grad is not None else torch.zeros(a.vocab, a.d_model)
            gt = gt.contiguous()
            g.allreduce(gt)
            if s in (0, p - 1):
                self.embed.grad = gt
        self.opt.step()
        losses = torch.zeros(m)
        for i, v in loss_of.items():
            losses[i] = v
        if not self.vocab:  # only the last stage knows the losses
            g.broadcast(losses, root=p - 1)
        return float(losses.sum()) / m



def whole_params(stage):
    """Every parameter of the model, gathered to rank 0 by name (None elsewhere)."""
    g = stage.g
    mine = {k: v.detach() for k, v in stage.params.items()}
    if stage.vocab:
        for k, v in stage.shard_params.items():
            parts = torch.zeros(g.size * v.shape[0], v.shape[1])
            g.allgather(v.detach().contiguous(), parts)
            if g.rank == 0:
                rows = []
                for q in range(g.size):
                    rq = weft.shard_range(stage.a.vocab, g.size, q)
                    rows.append(parts[q * v.shape[0]:q * v.shape[0] + rq.length])
                mine[k] = torch.cat(rows)
    names = sorted(mine)
    gathered = [None] * g.size
    gathered[g.rank] = {k: mine[k].clone() for k in names}
    # One stage at a time to rank 0, as bytes of a state dict.
    import io
    out = {}
    for q in range(g.size):
        if q == g.rank:
            buf = io.BytesIO()
            torch.save(gathered[q], buf)
            data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
            n = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            n = torch.zeros(1, dtype=torch.int64)
        g.broadcast(n, root=q)
        if q != g.rank:
            data = torch.empty(int(n.item()), dtype=torch.uint8)
        g.broadcast(data, root=q)
        if g.rank == 0:
            part = torch.load(io.BytesIO(data.numpy().tobytes()))
            for k, v in part.items():
                if k in out and not torch.equal(out[k], v):
                    raise RuntimeError("stages disagree on %s" % k)
                out[k] = v
    return out if g.rank == 0 else None


def rss_now():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv=None):
    a = parse(argv)
    corpus = Corpus(a.vocab, int(a.corpus_mb * 1e6))
    if a.reference:
        r = run_reference(a, corpus)
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"losses": r["losses"], "params": digest(r["params"])}, f)
            torch.save(r["params"], a.out + ".pt")
        return 0
    ctx = weft.init()
    world = ctx.world
    base_rss = rss_now()  # the runtime's (Python, torch, weft): every stage's alike
    stage = Stage(a, world)
    losses, times = [], []
    for step in range(a.steps):
        xs, ys = microbatches(corpus, a, step)
        world.barrier()
        t0 = time.perf_counter()
        losses.append(stage.step(xs, ys))
        times.append(time.perf_counter() - t0)
    per_op = [stage.op_time[op] / max(stage.op_count[op], 1) for op in "FBST"]
    acct = torch.tensor([stage.busy / a.steps, stage.idle / a.steps, float(peak_rss()),
                         float(peak_rss() - base_rss)] + per_op, dtype=torch.float64)
    all_acct = torch.zeros(world.size * 8, dtype=torch.float64)
    world.allgather(acct, all_acct)
    params = whole_params(stage)
    if world.rank == 0:
        tokens = a.microbatches * a.mb_size * a.seq
        rows = all_acct.view(world.size, 8).tolist()
        # Each stage on a core of its own, the passes taking what they took here.
        span = stage.sched.makespan(lambda q, op: rows[q][4 + "FBST".index(op)])
        res = {"schedule": a.schedule, "stages": world.size, "losses": losses,
               "step_s": times, "tokens_per_s": tokens / (sorted(times)[len(times) // 2]),
               "stage_busy_s": [r[0] for r in rows], "stage_idle_s": [r[1] for r in rows],
               "stage_peak_rss": [int(r[2]) for r in rows],
               "stage_model_mem": [int(r[3]) for r in rows],
               "stage_pass_s": [dict(zip("FBST", r[4:8])) for r in rows],
               "projected_tokens_per_s": tokens / span if span > 0 else 0.0,
               "params": digest(params)}
        for q, r in enumerate(rows):
            print("stage %d: busy %.3f s idle %.3f s per step, peak RSS %.1f MiB (%.1f MiB "
                  "above the runtime)" % (q, r[0], r[1], r[2] / 2**20, r[3] / 2**20))
        print("losses %s; %.0f tokens/s (%.0f projected with a core per stage)" % (
            " ".join("%.4f" % v for v in losses), res["tokens_per_s"],
            res["projected_tokens_per_s"]))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f)
            torch.save(params, a.out + ".pt")
    ctx.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
