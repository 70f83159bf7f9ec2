"""Pipeline schedules with the vocabulary layers placed: which pass each stage runs, in
which order, for a given number of stages and microbatches (no torch needed here).

Three kinds, on non-interleaved 1F1B:

- "1f1b": the baseline placement. The output layer and the loss live on the last stage
  and run inside its F and B passes; stages run F(i) (forward of microbatch i) and B(i)
  (backward), warming up with (stages - stage) forwards in flight, then one B per F.
- "vocab-1": the output layer sharded by vocabulary over every stage
  (weft.Microbatch, algorithm "alg2"): every stage runs S(i) (its shard's logits and
  statistics, after the last stage's F(i) broadcast X) and T(i) (its shard's ∇W, and ∇X)
  at the same place of its list; one collective per microbatch (C1, closing S).
- "vocab-2": the same with algorithm "alg1": a second collective (C2, closing T) sums
  ∇X.

The vocabulary passes form one lane that every stage walks in the same order: a stage
runs S(i) and T(i) in the same slot of the schedule's timeline as every other stage. So
the collectives that close them are started in one order by every rank (as weft's
collectives must be), and each stage carries 1/P of the output layer's compute and
memory. The last stage's B(i) needs ∇X: after T(i) in both.

The schedule is built by a simulation in unit slots: in each slot every stage runs at
most one pass whose inputs were produced in earlier slots, so any stage that runs its
list in order, waiting for what it needs, cannot deadlock. The lane runs a pass as soon
as it is ready, T before S (T frees what S kept); otherwise a stage runs 1F1B: a ready
B first, else a ready F while fewer than (stages - stage) microbatches are in flight on
it. A slot is a unit of ordering, not of time: real passes take their own time.

Interleaved (virtual-stage) 1F1B is not built yet: docs/vocab.md says what it needs.
"""

from collections import namedtuple

from ..errors import invalid

KINDS = ("1f1b", "vocab-1", "vocab-2")

Action = namedtuple("Action", "op mb")
Action.__doc__ = """One pass of a stage's list: op in "F", "B", "S", "T"; mb the microbatch."""


class Schedule:
    """The lists of a pipeline schedule (built by pipeline_schedule()).

    kind, stages, microbatches: as asked. actions[s]: stage s's list of Action, in the
    order to run them. slots[s]: the slot of the simulated timeline each action took
    (increasing). collectives_per_microbatch: 0 ("1f1b"), 1 or 2.
    """

    def __init__(self, kind, stages, microbatches, actions, slots):
        self.kind, self.stages, self.microbatches = kind, stages, microbatches
        self.actions, self.slots = actions, slots
        self.collectives_per_microbatch = {"1f1b": 0, "vocab-1": 1, "vocab-2": 2}[kind]

    def in_flight(self, stage):
        """The most microbatches whose activations stage @p stage holds at once: those
        past their F and not yet past their B (the transformer layers' activations; the
        vocabulary passes hold 1/stages of the output layer's between S and T)."""
        live = peak = 0
        for a in self.actions[stage]:
            if a.op == "F":
                live += 1
                peak = max(peak, live)
            elif a.op == "B":
                live -= 1
        return peak

    def vocab_in_flight(self):
        """The most microbatches between S and T at once (every stage alike); 0 for
        "1f1b", whose last stage holds the whole output layer's activations of each of
        its in-flight microbatches instead."""
        live = peak = 0
        for a in self.actions[0]:
            if a.op == "S":
                live += 1
                peak = max(peak, live)
            elif a.op == "T":
                live -= 1
        return peak

    def length(self):
        """Slots of the simulated timeline (the makespan in units of one pass)."""
        return 1 + max(s[-1] for s in self.slots if s)

    def makespan(self, duration):
        """The time the schedule takes when stage s runs its list in order on a device of
        its own and each pass takes duration(stage, op) (communication taken as free):
        each pass starts once its stage finished the previous one and what it needs is
        done (the previous stage's F, the next stage's B, the last stage's F for S, S on
        every stage for T, T for the last stage's B). A projection from measured pass
        times, for machines with fewer cores than stages."""
        p, vocab = self.stages, self.kind != "1f1b"
        end, pos, free = {}, [0] * p, [0.0] * p
        pending = sum(len(a) for a in self.actions)
        while pending:
            moved = False
            for s in range(p):
                if pos[s] == len(self.actions[s]):
                    continue
                a = self.actions[s][pos[s]]
                i = a.mb
                if a.op == "F":
                    needs = [("F", s - 1, i)] if s > 0 else []
                elif a.op == "B":
                    needs = [("B", s + 1, i)] if s < p - 1 else \
                        ([("T", s, i)] if vocab else [("F", s, i)])
                elif a.op == "S":
                    needs = [("F", p - 1, i)]
                else:
                    needs = [("S", q, i) for q in range(p)]
                if any(n not in end for n in needs):
                    continue
                start = max([free[s]] + [end[n] for n in needs])
                free[s] = end[(a.op, s, i)] = start + duration(s, a.op)
                pos[s] += 1
                pending -= 1
                moved = True
            if not moved:
                raise RuntimeError("weft: the schedule cannot run (a dependency cycle)")
        return max(free)

    def render(self):
        """The timeline as text: one row per stage, one column per slot."""
        width = self.length()
        rows = []
        for s in range(self.stages):
            cells = ["  ."] * width
            for a, t in zip(self.actions[s], self.slots[s]):
                cells[t] = "%s%-2d" % (a.op, a.mb) if a.mb < 100 else "%s**" % a.op
            rows.append("stage %d |%s" % (s, "".join(cells)))
        return "\n".join(rows)


def pipeline_schedule(kind, stages, microbatches):
    """The Schedule of @p kind ("1f1b", "vocab-1" or "vocab-2") for @p stages stages
    (>= 1) and @p microbatches microbatches (>= 1)."""
    if kind not in KINDS:
        raise invalid("schedule kind must be one of %s, not %r" % (", ".join(KINDS), kind))
    if int(stages) < 1 or int(microbatches) < 1:
        raise invalid("a schedule needs at least one stage and one microbatch, not %r and %r"
                      % (stages, microbatches))
    p, m = int(stages), int(microbatches)
    vocab = kind != "1f1b"
    done = {}  # (op, stage, mb) -> slot; the lane's passes under stage -1
    nxt_f, nxt_b = [0] * p, [0] * p
    lane_s = lane_t = 0
    actions = [[] for _ in range(p)]
    slots = [[] for _ in range(p)]

    def ready(key, t):
        return key in done and done[key] < t

    t = 0
    total = m * p * 2 + (2 * m if vocab else 0)
    ran = 0
    while ran < total:
        if t > 8 * (total + p):  # unreachable: every pass becomes ready
            raise RuntimeError("weft: schedule simulation made no progress")
        lane = None
        if vocab and lane_t < lane_s and ready(("S", -1, lane_t), t):
            lane = Action("T", lane_t)
        elif vocab and lane_s < m and ready(("F", p - 1, lane_s), t):
            lane = Action("S", lane_s)
        if lane is not None:
            for s in range(p):
                actions[s].append(lane)
                slots[s].append(t)
            done[(lane.op, -1, lane.mb)] = t
            if lane.op == "S":
                lane_s += 1
            else:
                lane_t += 1
            ran += 1  # a lane pass counts once, for every stage
            t += 1
            continue
        for s in range(p):
            b, f = nxt_b[s], nxt_f[s]
            act = None
            if b < f:
                # B(b) needs the next stage's B(b), or on the last stage the output
                # layer: its own F ("1f1b") or the lane's T ("vocab").
                if s < p - 1:
                    need = ("B", s + 1, b)
                else:
                    need = ("T", -1, b) if vocab else ("F", s, b)
                if ready(need, t):
                    act = Action("B", b)
            if act is None and f < m and f - b < p - s:
                if s == 0 or ready(("F", s - 1, f), t):
                    act = Action("F", f)
            if act is not None:
                actions[s].append(act)
                slots[s].append(t)
                done[(act.op, s, act.mb)] = t
                if act.op == "F":
                    nxt_f[s] += 1
                else:
                    nxt_b[s] += 1
                ran += 1
        t += 1
    return Schedule(kind, p, m, actions, slots)


def check_schedule(sched):
    """Check that @p sched is whole and that each pass comes after what it needs, on the
    simulated timeline; raises AssertionError saying what is wrong. (What the trainers
    and the tests rely on.)"""
    p, m, vocab = sched.stages, sched.microbatches, sched.kind != "1f1b"
    when = {}
    for s in range(p):
        assert sorted(sched.slots[s]) == sched.slots[s], "stage %d: slots out of order" % s
        assert len(set(sched.slots[s])) == len(sched.slots[s]), "stage %d: a slot twice" % s
        for a, t in zip(sched.actions[s], sched.slots[s]):
            assert (a.op, s, a.mb) not in when, "stage %d runs %s(%d) twice" % (s, a.op, a.mb)
            when[(a.op, s, a.mb)] = t
    ops = ("F", "B", "S", "T") if vocab else ("F", "B")
    for s in range(p):
        for op in ops:
            for i in range(m):
                assert (op, s, i) in when, "stage %d never runs %s(%d)" % (s, op, i)
    lane = [[a for a in sched.actions[s] if a.op in "ST"] for s in range(p)]
    assert all(lane[s] == lane[0] for s in range(p)), "the stages' lanes differ"
    for s in range(p):
        lane_slots = [t for a, t in zip(sched.actions[s], sched.slots[s]) if a.op in "ST"]
        assert lane_slots == [t for a, t in zip(sched.actions[0], sched.slots[0])
                              if a.op in "ST"], "stage %d runs the lane at other slots" % s
    for s in range(p):
        for i in range(m):
            f, b = when[("F", s, i)], when[("B", s, i)]
            assert s == 0 or when[("F", s - 1, i)] < f, "F(%d) on %d before its input" % (i, s)
            assert f < b, "B(%d) before F(%d) on stage %d" % (i, i, s)
            if s < p - 1:
                assert when[("B", s + 1, i)] < b, "B(%d) on %d before its gradient" % (i, s)
            if vocab:
                assert when[("F", p - 1, i)] < when[("S", s, i)], "S(%d) before X" % i
                assert when[("S", s, i)] < when[("T", s, i)], "T(%d) before S(%d)" % (i, i)
                if s == p - 1:
                    assert when[("T", s, i)] < b, "B(%d) on the last stage before ∇X" % i
    for s in range(p):
        for op in ops:
            seq = [a.mb for a in sched.actions[s] if a.op == op]
            assert seq == sorted(seq), "stage %d runs its %s passes out of order" % (s, op)
    return True
