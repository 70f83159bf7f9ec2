"""weft.torch.schedule: the pipeline schedules with the vocabulary passes placed, checked
pass by pass against the dependencies of a pipeline (check_schedule, and here again by
an independent replay that runs every stage's list in order with blocking waits)."""

import pytest

from helpers import torch_or_skip

torch_or_skip()
import weft  # noqa: E402
from weft.torch.schedule import KINDS, pipeline_schedule, check_schedule  # noqa: E402


def replay(sched):
    """Run every stage's list in order, one pass per stage per round, a pass waiting
    until what it needs ran in an earlier round (the lane's S and T also wait for every
    stage to reach them: their collectives). Returns the rounds taken; fails on a
    deadlock, which a wrong order would cause."""
    p, last, vocab = sched.stages, sched.stages * sched.chunks - 1, sched.kind != "1f1b"
    pos, ran, rounds = [0] * p, set(), 0
    while any(pos[s] < len(sched.actions[s]) for s in range(p)):
        rounds += 1
        assert rounds < 100000, "deadlock: %s" % [sched.actions[s][pos[s]:pos[s] + 1]
                                                  for s in range(p)]
        heads = [sched.actions[s][pos[s]] if pos[s] < len(sched.actions[s]) else None
                 for s in range(p)]
        now = []
        for s, a in enumerate(heads):
            if a is None:
                continue
            i, k = a.mb, a.chunk
            if a.op == "F":
                ok = k == 0 or ("F", k - 1, i) in ran
            elif a.op == "B":
                need = ("B", k + 1, i) if k < last else \
                    (("T", None, i) if vocab else ("F", k, i))
                ok = need in ran and ("F", k, i) in ran
            elif a.op == "S":  # X from the last chunk, and every stage at the collective
                ok = ("F", last, i) in ran and all(h == a for h in heads)
            else:  # T: after the collective of S
                ok = ("S", None, i) in ran and all(h == a for h in heads)
            if ok:
                now.append((a.op, k, i))
                pos[s] += 1
        ran.update(now)
    return rounds


@pytest.mark.parametrize("kind", KINDS)
def test_schedules_are_sound(kind):
    for p in range(1, 7):
        for m in range(1, 13):
            s = pipeline_schedule(kind, p, m)
            assert check_schedule(s)
            replay(s)
            n_ops = 4 if kind != "1f1b" else 2
            assert all(len(s.actions[q]) == n_ops * m for q in range(p))
            # 1F1B's memory: stage q holds at most stages - q microbatches (and m).
            assert [s.in_flight(q) for q in range(p)] == [min(p - q, m) for q in range(p)]
            if kind != "1f1b":
                assert 1 <= s.vocab_in_flight() <= 2
            assert s.collectives_per_microbatch == {"1f1b": 0, "vocab-1": 1,
                                                    "vocab-2": 2}[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_interleaved_schedules_are_sound(kind):
    for p in range(1, 6):
        for v in (2, 3):
            for m in range(p, 4 * p + 1, p):
                s = pipeline_schedule(kind, p, m, chunks=v)
                assert check_schedule(s)
                replay(s)
                assert all(sum(a.op == "F" for a in s.actions[q]) == v * m for q in range(p))
                # Megatron's warm-up bounds what a stage holds.
                for q in range(p):
                    assert s.in_flight(q) <= 2 * (p - q - 1) + (v - 1) * p + 1
    with pytest.raises(weft.InvalidArgument, match="multiple"):
        pipeline_schedule(kind, 4, 6, chunks=2)


def test_render_and_refusals():
    s = pipeline_schedule("vocab-1", 2, 2)
    rows = s.render().splitlines()
    assert len(rows) == 2 and "S0" in rows[0] and "T1" in rows[1]
    for bad in (("vocab-3", 4, 8), ("1f1b", 0, 8), ("1f1b", 4, 0), ("1f1b", 4, 8, 0)):
        with pytest.raises(weft.InvalidArgument):
            pipeline_schedule(*bad)


def test_check_finds_a_wrong_order():
    s = pipeline_schedule("vocab-1", 3, 4)
    last = s.actions[2]
    b0 = last.index(type(last[0])("B", 0, 2))
    t0 = last.index(type(last[0])("T", 0))
    last[b0], last[t0] = last[t0], last[b0]  # B(0) before ∇X on the last stage
    with pytest.raises(AssertionError):
        check_schedule(s)


def test_makespan():
    """With unit passes 1F1B takes 2(m + p - 1) slots; an output layer as heavy as the
    rest of a stage's work, put on the last stage, slows 1F1B down and the lane spreads
    it over every stage."""
    for p, m in ((1, 1), (2, 3), (4, 8)):
        s = pipeline_schedule("1f1b", p, m)
        assert s.makespan(lambda st, op: 1.0) == 2 * (m + p - 1)
    p, m, out = 4, 16, 4.0  # the output layer: 4 units forward and 4 backward

    def base(st, op):
        return 1.0 + (out if st == p - 1 else 0.0)

    def lane(st, op):
        return out / p if op in "ST" else 1.0
    t_base = pipeline_schedule("1f1b", p, m).makespan(base)
    t_vocab = pipeline_schedule("vocab-1", p, m).makespan(lane)
    assert t_vocab < t_base / 1.5


def test_interleaving_shrinks_the_bubble():
    """Passes that each do 1/v of a stage's work: more chunks, a shorter schedule."""
    for kind in ("1f1b", "vocab-1"):
        spans = []
        for v in (1, 2, 4):
            s = pipeline_schedule(kind, 4, 8, chunks=v)
            spans.append(s.makespan(lambda st, op: 1.0 if op in "ST" else 1.0 / v))
        assert spans[0] > spans[1] > spans[2], (kind, spans)
