"""A rank is killed (SIGKILL) while the others run allreduces from Python: each survivor
must get weft.PeerFailed or weft.Revoked (never a hang), repair the world group, agree on
who is gone, compute correctly at the new epoch, re-cut a flat (ZeRO) partition of a
model over the survivors with replan_flat (the dead member's part listed as missing),
and, where PyTorch is present, run the vocabulary-parallel loss over the survivors.

With the argument "request" the survivors wait on nonblocking allreduces (the error comes
out of Request.wait); with "migrate" they run migrations of the model between two flat
layouts (the error comes out of weft.migrate, which keeps the old buffer it was reading). Run by tests/groups/run_fault.sh under `weftrun --elastic`: it
counts the "SURVIVOR-OK" lines (one per survivor) and fails on any "SURVIVOR-FAIL".
"""

import os
import signal
import sys

import numpy as np

import weft
from fault_common import recover, run_survivor, say


def checked_allreduce(g, nonblocking=False):
    x = np.full(1000, g.rank + 1, np.float64)
    if nonblocking:  # the error comes out of Request.wait
        g.iallreduce(x).wait(timeout=60)
    else:
        g.allreduce(x)
    want = g.size * (g.size + 1) / 2
    if not (x == want).all():
        raise AssertionError("allreduce gave %s, not %s" % (x[0], want))


def checked_migration(g, old):
    """The model from `old` to a flat layout over the members in reverse order."""
    full = model()
    me = g.member_id()
    new = weft.Layout.from_tensors(full).flat(g.member_ids[::-1])
    buf = np.zeros(new.packed_bytes(me), np.uint8)
    weft.migrate(g, weft.Plan(old, new), old.pack(me, full), buf)
    if not (buf == new.pack(me, full)).all():
        raise AssertionError("migration delivered wrong bytes")


def model():
    rng = np.random.default_rng(3)
    return {"w": rng.standard_normal((50, 3)).astype(np.float32),
            "b": np.arange(13, dtype=np.int32)}


def recut(g, old, victim):
    """Re-cut over the survivors; each member's new buffer must hold the expected bytes
    except in the pieces that only the dead member held, which stay as they were."""
    full = model()
    me = g.member_id()
    new, plan = weft.replan_flat(old.keep(g.member_ids), g)
    if plan.stats().bytes_missing != old.packed_bytes(victim):
        raise AssertionError("missing %d bytes, the dead member held %d" %
                             (plan.stats().bytes_missing, old.packed_bytes(victim)))
    buf = np.full(new.packed_bytes(me), 0xCD, np.uint8)
    weft.migrate(g, plan, old.pack(me, full), buf)
    want = new.pack(me, full)
    lost = sum(t.nbytes for t in plan.missing if t.dst == me)
    if int((buf != want).sum()) > lost or int((buf == 0xCD).sum()) < lost:
        raise AssertionError("migration: wrong bytes outside the %d lost ones" % lost)


def vocab_loss(g):
    try:
        import torch
        import torch.nn.functional as F
        import weft.torch as wt
    except ImportError:
        return "no torch"
    gen = torch.Generator().manual_seed(1)
    W = torch.randn(23, 4, generator=gen, dtype=torch.float64)
    X = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 23, (5,), generator=gen)
    layer = wt.VocabParallelCrossEntropy(g, vocab_size=23)
    loss = layer(X.float(), wt.shard_vocab(W, g).float(), labels)
    ref = F.cross_entropy(X @ W.T, labels)
    if abs(loss.item() - ref.item()) > 1e-5 * abs(ref.item()) + 1e-6:
        raise AssertionError("vocab loss %s, reference %s" % (loss.item(), ref.item()))
    return "vocab loss ok"


def main():
    ctx = weft.init()
    g = ctx.world
    n, me = g.size, g.rank
    victim = n - 1
    old = weft.Layout.from_tensors(model()).flat(g.member_ids)
    for _ in range(5):
        checked_allreduce(g)
    if me == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    mode = sys.argv[1] if len(sys.argv) > 1 else "blocking"
    try:
        for _ in range(1_000_000):
            if mode == "migrate":
                checked_migration(g, old)
            else:
                checked_allreduce(g, mode == "request")
        say("SURVIVOR-FAIL rank %d: no error after the death" % me)
        return 1
    except weft.PeerError as e:
        seen = type(e).__name__
        assert e.status in (weft.Status.ERR_PEER_FAILED, weft.Status.ERR_REVOKED)
        if mode == "migrate" and not ctx._retired:
            raise AssertionError("the failed migration's old buffer was not kept")
    info = recover(g, checked_allreduce)
    if info.removed != [victim] or g.size != n - 1 or victim in g.member_ids:
        say("SURVIVOR-FAIL rank %d: repair removed %s, size %d" % (me, info.removed, g.size))
        return 1
    assert info.new_epoch == g.epoch > info.old_epoch and info.rank_map[victim] == -1
    recut(g, old, victim)
    extra = vocab_loss(g)
    say("SURVIVOR-OK rank %d (was %d): %s, epoch %d -> %d, %s" %
        (g.rank, me, seen, info.old_epoch, info.new_epoch, extra))
    ctx.finalize()
    return 0


if __name__ == "__main__":
    run_survivor(main)
