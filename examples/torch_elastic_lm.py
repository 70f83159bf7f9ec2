#!/usr/bin/env python3
"""A small transformer language model trained over weft on CPU, surviving a killed rank.

    build/bin/weftrun -n 4 --elastic --replace -- /usr/bin/python3 \\
        examples/torch_elastic_lm.py --steps 40 --kill-step 20 --out run.json

The body is data-parallel (each rank runs weft.batch_share of a fixed global batch); the
input embedding and the output layer with its cross-entropy are vocabulary-parallel over
the same ranks (weft.torch). After every step each member snapshots its state (its shard
of the vocabulary tensors, the body, Adam's moments) into its own and a buddy's memory
with weft.Snapshot, in the background of the next step.

At --kill-step, rank --kill-rank kills itself (SIGKILL) after the forward pass. The
others' next collective raises weft.PeerFailed or weft.Revoked; they repair the world
group, restore the newest step all of them committed, re-cut over themselves, wait for
weftrun's replacement (it starts with WEFT_JOIN=1 and joins), admit it with grow, and
migrate the state to the layout over the new members; the steps after the restored one
are computed again. Everything is seeded and deterministic, so the run matches one
without a failure bit for bit (examples/run_torch_demo.sh runs both and compares).

Rank 0 prints one line per step and writes --out: per-step losses (with their float32
bits), the recovery's events and timings, and SHA-256 digests of every tensor at the end.
"""

import argparse
import json
import os
import signal
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_lm.runtime  # noqa: E402,F401  (threads, and the binding next door)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import weft  # noqa: E402

from torch_lm.corpus import Corpus  # noqa: E402
from torch_lm.model import loss_of_batch  # noqa: E402
from torch_lm.state import TrainState, gather_digests, layout_of  # noqa: E402

BLOB = struct.Struct("<Qd")  # step, its loss: what a snapshot keeps beside the tensors
HEADER = 66                  # int64s of the resynchronisation header
EXIT_JOB_FAILED = 86         # WEFT_EXIT_JOB_FAILED (weft/core.h)


def job_failed(why):
    """Stop because the job failed, not this process (every survivor sees the same):
    weftrun replaces nobody for WEFT_EXIT_JOB_FAILED, stops the job and exits with it."""
    sys.stderr.write("torch_elastic_lm: %s\n" % why)
    sys.stderr.flush()
    raise SystemExit(EXIT_JOB_FAILED)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--kill-step", type=int, default=20, help="0: no failure")
    p.add_argument("--kill-rank", type=int, default=1, help="RANK of the process to kill")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=64, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=16, help="sequences per global batch")
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--corpus-mb", type=float, default=8.0,
                   help="MB of Python standard library sources to read")
    p.add_argument("--wait-replacement", type=float, default=60.0,
                   help="seconds survivors wait for a replacement (0: go on without)")
    p.add_argument("--out", help="JSON results, written by rank 0")
    return p.parse_args(argv)


def say(text):
    """One line in one write: the ranks share weftrun's output."""
    os.write(1, (text + "\n").encode())


class Trainer:
    def __init__(self, args, corpus, group):
        self.args, self.corpus, self.group = args, corpus, group
        self.state = self.snap = self.pending = None
        self.step = 0            # the last step completed here
        # step -> (loss, float32 bits, width, epoch, tokens/s, share of the step spent
        # waiting for the previous step's snapshot)
        self.losses = {}
        self.discarded = []      # (step, loss) computed, then lost to a failure
        self.redo_until = 0      # the step a failure interrupted
        self.events = []
        self.victim = (os.environ.get("WEFT_JOIN") != "1" and
                       int(os.environ.get("RANK", "0")) == args.kill_rank)

    @property
    def lead(self):
        return self.group.rank == 0

    # -- snapshots -----------------------------------------------------------------------
    def snapshot(self, step, loss, wait=False):
        """Wait for the previous snapshot, then start this step's from a fresh pack.
        Returns the seconds spent waiting for the previous one."""
        t0 = time.perf_counter()
        if self.pending is not None:
            self.pending.wait()
        waited = time.perf_counter() - t0
        self.pending = self.snap.start(step, self.state.pack(), BLOB.pack(step, loss))
        if wait:
            self.pending.wait()
        return waited

    # -- training ------------------------------------------------------------------------
    def train_step(self, step):
        a = self.args
        t0 = time.perf_counter()
        inputs, targets = self.corpus.batch(a.seed, step, a.batch, a.seq)
        loss = loss_of_batch(self.state, inputs, targets)
        if self.victim and step == a.kill_step:
            say("rank %d: killing myself (SIGKILL) in step %d, after its forward pass" %
                (self.group.rank, step))
            os.kill(os.getpid(), signal.SIGKILL)
        loss.backward()
        self.state.reduce_body_grads()
        self.state.adam(step)
        value = loss.item()
        waited = self.snapshot(step, value)
        self.step = step
        seconds = time.perf_counter() - t0
        rate = a.batch * a.seq / seconds
        self.losses[step] = (value, struct.pack("<f", value).hex(), self.group.size,
                             self.group.epoch, rate, round(waited / seconds, 4))
        if self.lead:
            say("step %4d  loss %.4f  tokens/s %6.0f  epoch %d  width %d%s" %
                (step, value, rate, self.group.epoch, self.group.size,
                 "  (computed again)" if step <= self.redo_until else ""))

    def train(self):
        while self.step < self.args.steps:
            try:
                self.train_step(self.step + 1)
                continue
            except weft.PeerError as e:
                kind = type(e).__name__
            self.recover(kind)
        if self.pending is not None:
            self.pending.wait()

    # -- recovery ------------------------------------------------------------------------
    def event(self, what, t0, **fields):
        fields.update(what=what, seconds=round(time.perf_counter() - t0, 4))
        self.events.append(fields)
        if self.lead:
            say("  %s: %s" % (what, ", ".join("%s %s" % kv for kv in fields.items()
                                                if kv[0] != "what")))

    def repair(self):
        """Repair until an attempt holds (a failure during recovery fails a call)."""
        for _ in range(5):
            try:
                return self.group.repair()
            except weft.PeerError:
                continue
        raise SystemExit("rank %d: no repair in 5 attempts" % self.group.rank)

    def restore(self, t0, kind):
        """Repair, then restore the newest step every survivor committed, re-cut over the
        survivors; again if another member dies meanwhile. Returns (Restored, the ids
        of the members gone)."""
        g, gone, failed_in = self.group, [], self.step + 1
        self.state.close()
        while True:
            info = self.repair()
            gone += info.removed
            if self.lead:
                say("%s in step %d: the survivors repaired the world group" %
                    (kind, failed_in))
            self.event("repair", t0, step=failed_in, removed=info.removed, epoch=g.epoch,
                       width=g.size)
            if info.added:
                job_failed("a replacement was admitted by the repair, before the "
                           "survivors restored their snapshots: not handled here")
            t1 = time.perf_counter()
            try:
                r = self.snap.restore(layout_of(self.args, g.member_ids))
            except weft.PeerError as e:
                kind = type(e).__name__
                continue
            if r.bytes_missing:
                job_failed("training state lost: %d bytes of it died with every copy of "
                           "them" % r.bytes_missing)
            lost = {m: BLOB.unpack(self.snap.blob(m)) for m in gone}
            self.event("restore", t1, step=r.step, moved_mb=round(r.bytes_moved / 1e6, 2),
                       local_mb=round(r.bytes_local / 1e6, 2),
                       dead_blob=["member %d: step %d loss %.4f" % (m, s, l)
                                  for m, (s, l) in lost.items()])
            return r, gone

    def recover(self, kind):
        """After a member died: restore from the snapshots, admit replacements, and
        resynchronise everyone. A failure after the restore is not handled here (the
        restored state then lives only in the survivors' buffers)."""
        g, t0 = self.group, time.perf_counter()
        self.redo_until = self.step + 1
        r, gone = self.restore(t0, kind)
        survivors = g.member_ids
        self.snap.free()
        self.pending = None
        state_buf = np.array(r.state)
        if self.args.wait_replacement > 0:
            t2 = time.perf_counter()
            grown = g.grow(min_new=len(gone), timeout=self.args.wait_replacement)
            self.event("grow", t2, added=grown.added, epoch=g.epoch, width=g.size)
        self.resync(survivors, r.step, state_buf)
        self.event("recovered", t0, resume_from=r.step + 1, width=g.size)

    def resync(self, old_ids, step, buf):
        """The first operations at a new membership, on every member, a new one included
        (which passes None): rank 0 says the step and who held the state, and one
        migration moves it to the layout over the members now."""
        g, t0 = self.group, time.perf_counter()
        head = np.zeros(HEADER, np.int64)
        if g.rank == 0:
            head[0], head[1] = step, len(old_ids)
            head[2:2 + len(old_ids)] = old_ids
        g.broadcast(head, root=0)
        step, old_ids = int(head[0]), [int(i) for i in head[2:2 + head[1]]]
        old, new = layout_of(self.args, old_ids), layout_of(self.args, g.member_ids)
        plan = weft.Plan(old, new)
        new_buf = np.zeros(new.packed_bytes(g.member_id()), np.uint8)
        weft.migrate(g, plan, buf, new_buf)
        self.state = TrainState.from_packed(self.args, g, new_buf)
        self.step = step
        for s in [s for s in self.losses if s > step]:
            self.discarded.append((s, self.losses.pop(s)[0]))
        self.snap = weft.Snapshot(g, self.state.layout, blob_bytes=BLOB.size)
        self.snapshot(step, self.losses.get(step, (float("nan"),))[0], wait=True)
        st = plan.stats()
        self.event("migrate", t0, step=step, moved_mb=round(st.bytes_in / 1e6, 2),
                   lower_bound_mb=round(st.bytes_lower_bound / 1e6, 2), width=g.size)

    def start(self):
        self.state = TrainState.initial(self.args, self.group)
        self.snap = weft.Snapshot(self.group, self.state.layout, blob_bytes=BLOB.size)
        self.snapshot(0, float("nan"), wait=True)
        if self.lead:
            say("snapshots: %.1f MB per member (own copy and a buddy's, two steps)" %
                (self.snap.nbytes / 1e6))


def results(args, corpus, trainer, digests, seconds):
    return {
        "config": vars(args), "corpus": corpus.describe(), "corpus_digest": corpus.digest,
        "losses": {str(s): v for s, v in sorted(trainer.losses.items())},
        "discarded": trainer.discarded, "events": trainer.events, "digests": digests,
        "seconds": round(seconds, 2),
    }


def main():
    args = parse()
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    corpus = Corpus(args.vocab, int(args.corpus_mb * 1e6))
    joining = os.environ.get("WEFT_JOIN") == "1"
    ctx = weft.init()
    group = ctx.join("world", timeout=120) if joining else ctx.world
    trainer = Trainer(args, corpus, group)
    if joining:
        say("replacement (member %d) admitted at epoch %d as rank %d" %
            (group.member_id(), group.epoch, group.rank))
        trainer.resync(None, None, None)
    else:
        if group.rank == 0:
            say("corpus: " + corpus.describe())
            say("model: %d layers, d_model %d, vocabulary %d over %d ranks, batch %d x %d "
                "tokens" % (args.layers, args.d_model, args.vocab, group.size, args.batch,
                            args.seq))
        trainer.start()
    trainer.train()
    digests = gather_digests(trainer.state)
    if group.rank == 0:
        final = trainer.losses[args.steps][0]
        waits = [v[5] for v in trainer.losses.values()]
        say("done: %d steps in %.1f s, final loss %.4f; waiting for the previous step's "
            "snapshot took %.1f%% of a step on average" % (
                args.steps, time.perf_counter() - t0, final, 100 * sum(waits) / len(waits)))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results(args, corpus, trainer, digests, time.perf_counter() - t0),
                          f, indent=1)
    ctx.finalize()


if __name__ == "__main__":
    main()
