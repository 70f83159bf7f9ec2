"""Pipeline schedules with the vocabulary layers placed: which pass each stage runs, in
which order, for a given number of stages and microbatches (no torch needed here).

Three kinds, on 1F1B, plain or interleaved (each stage then holds several chunks of the
model, as Megatron-LM's virtual stages):

- "1f1b": the baseline placement. The output layer and the loss live on the last stage
  and run inside its F and B passes; stages run F(i) (forward of microbatch i) and B(i)
  (backward), warming up with (stages - stage) forwards in flight, then one B per F.
- "vocab-1": the output layer sharded by vocabulary over every stage
  (weft.Microbatch, algorithm "alg2"): every stage runs S(i) (its shard's logits and
  statistics, after the last chunk's F(i) broadcast X) and T(i) (its shard's ∇W, and ∇X)
  at the same place of its list; one collective per microbatch (C1, closing S).
- "vocab-2": the same with algorithm "alg1": a second collective (C2, closing T) sums
  ∇X.

The vocabulary passes form one lane that every stage walks in the same order: a stage
runs S(i) and T(i) in the same slot of the schedule's timeline as every other stage. So
the collectives that close them are started in one order by every rank (as weft's
collectives must be), and each stage carries 1/P of the output layer's compute and
memory. The last chunk's B(i) needs ∇X: after T(i) in both.

The schedule is built by a simulation in unit slots: in each slot every stage runs at
most one pass whose inputs were produced in earlier slots, so any stage that runs its
list in order, waiting for what it needs, cannot deadlock. The lane runs a pass as soon
as it is ready, T before S (T frees what S kept); otherwise a stage runs 1F1B: a ready
B first (oldest microbatch, last chunk first), else a ready F (Megatron's order: groups
of `stages` microbatches, chunk by chunk) while fewer than its warm-up are in flight. A
slot is a unit of ordering, not of time: real passes take their own time.
"""

from collections import namedtuple

from ..errors import invalid

KINDS = ("1f1b", "vocab-1", "vocab-2")

Action = namedtuple("Action", "op mb chunk", defaults=(None,))
Action.__doc__ = """One pass of a stage's list: op in "F", "B", "S", "T"; mb the microbatch;
chunk the model chunk of an F or B (the stage itself without interleaving), None for S
and T (every stage's shard of the output layer)."""


def _needs(a, stages, chunks, vocab):
    """What pass @p a needs done before it starts: keys (op, chunk or None, mb)."""
    last, i = stages * chunks - 1, a.mb
    if a.op == "F":
        return [("F", a.chunk - 1, i)] if a.chunk > 0 else []
    if a.op == "B":
        if a.chunk < last:
            return [("B", a.chunk + 1, i)]
        return [("T", None, i)] if vocab else [("F", a.chunk, i)]
    if a.op == "S":
        return [("F", last, i)]
    return [("S", None, i)]


def _peak(actions, opens, closes):
    """The most passes of @p actions past an @p opens and not yet past its @p closes."""
    live = peak = 0
    for a in actions:
        if a.op == opens:
            live += 1
            peak = max(peak, live)
        elif a.op == closes:
            live -= 1
    return peak


class Schedule:
    """The lists of a pipeline schedule (built by pipeline_schedule()).

    kind, stages, microbatches, chunks: as asked. actions[s]: stage s's list of Action,
    in the order to run them. slots[s]: the slot of the simulated timeline each action
    took (increasing). collectives_per_microbatch: 0 ("1f1b"), 1 or 2.
    """

    def __init__(self, kind, stages, microbatches, actions, slots, chunks=1):
        self.kind, self.stages, self.microbatches = kind, stages, microbatches
        self.chunks = chunks
        self.actions, self.slots = actions, slots
        self.collectives_per_microbatch = {"1f1b": 0, "vocab-1": 1, "vocab-2": 2}[kind]

    def stage_of(self, chunk):
        """The stage that runs model chunk @p chunk."""
        return chunk % self.stages

    def in_flight(self, stage):
        """The most (microbatch, chunk) pairs whose activations stage @p stage holds at
        once: past their F and not yet past their B (the transformer layers'
        activations; the vocabulary passes hold 1/stages of the output layer's between S
        and T)."""
        return _peak(self.actions[stage], "F", "B")

    def vocab_in_flight(self):
        """The most microbatches between S and T at once (every stage alike); 0 for
        "1f1b", whose last stage holds the whole output layer's activations of each of
        its in-flight microbatches instead."""
        return _peak(self.actions[0], "S", "T")

    def length(self):
        """Slots of the simulated timeline (the makespan in units of one pass)."""
        return 1 + max(s[-1] for s in self.slots if s)

    def makespan(self, duration):
        """The time the schedule takes when stage s runs its list in order on a device of
        its own and each pass takes duration(stage, op) (communication taken as free):
        each pass starts once its stage finished the previous one and what it needs is
        done (the previous chunk's F, the next chunk's B, the last chunk's F for S, S on
        every stage for T, T for the last chunk's B). A projection from measured pass
        times, for machines with fewer cores than stages."""
        p, vocab = self.stages, self.kind != "1f1b"
        end, pos, free = {}, [0] * p, [0.0] * p
        lane_started = {}
        pending = sum(len(a) for a in self.actions)
        while pending:
            moved = False
            for s in range(p):
                if pos[s] == len(self.actions[s]):
                    continue
                a = self.actions[s][pos[s]]
                needs = _needs(a, p, self.chunks, vocab)
                if any(n not in end for n in needs):
                    continue
                t = max([free[s]] + [end[n] for n in needs])
                free[s] = t + duration(s, a.op)
                key = (a.op, a.chunk, a.mb)
                if a.op in "ST":  # done when every stage did its part
                    lane_started.setdefault(key, []).append(free[s])
                    if len(lane_started[key]) == p:
                        end[key] = max(lane_started[key])
                else:
                    end[key] = free[s]
                pos[s] += 1
                pending -= 1
                moved = True
            if not moved:
                raise RuntimeError("weft: the schedule cannot run (a dependency cycle)")
        return max(free)

    def render(self):
        """The timeline as text: one row per stage, one column per slot (F and B with
        their chunk after a dot when interleaved)."""
        width = self.length()
        wide = self.chunks > 1
        rows = []
        for s in range(self.stages):
            cells = ["    ." if wide else "  ."] * width
            for a, t in zip(self.actions[s], self.slots[s]):
                text = "%s%d" % (a.op, a.mb) if a.mb < 100 else "%s**" % a.op
                if wide and a.chunk is not None:
                    text += ".%d" % a.chunk
                cells[t] = text.ljust(5 if wide else 3)
            rows.append("stage %d |%s" % (s, "".join(cells)))
        return "\n".join(rows)


def _warmup(stages, chunks, s):
    """How many (microbatch, chunk) passes stage @p s keeps in flight at most."""
    if chunks == 1:
        return stages - s
    return 2 * (stages - s - 1) + (chunks - 1) * stages + 1


def pipeline_schedule(kind, stages, microbatches, chunks=1):
    """The Schedule of @p kind ("1f1b", "vocab-1" or "vocab-2") for @p stages stages
    (>= 1) and @p microbatches microbatches (>= 1); @p chunks > 1 for interleaved 1F1B
    with that many model chunks per stage (the microbatches then a multiple of the
    stages, as Megatron-LM's)."""
    if kind not in KINDS:
        raise invalid("schedule kind must be one of %s, not %r" % (", ".join(KINDS), kind))
    if int(stages) < 1 or int(microbatches) < 1 or int(chunks) < 1:
        raise invalid("a schedule needs at least one stage, microbatch and chunk, not %r, "
                      "%r and %r" % (stages, microbatches, chunks))
    p, m, v = int(stages), int(microbatches), int(chunks)
    if v > 1 and m % p != 0:
        raise invalid("interleaved 1F1B takes a multiple of the %d stages in microbatches, "
                      "not %d" % (p, m))
    vocab, last = kind != "1f1b", p * v - 1
    done = {}  # (op, chunk or None, mb) -> slot
    todo_f = [sorted(((i // p, k, i) for k in range(s, p * v, p) for i in range(m)))
              for s in range(p)]
    todo_b = [sorted(((i, -k) for k in range(s, p * v, p) for i in range(m)))
              for s in range(p)]
    live = [0] * p
    lane_s = lane_t = 0
    actions = [[] for _ in range(p)]
    slots = [[] for _ in range(p)]

    def ready(a, t):
        return all(n in done and done[n] < t for n in _needs(a, p, v, vocab))

    t, ran, total = 0, 0, 2 * m * p * v + (2 * m if vocab else 0)
    while ran < total:
        if t > 8 * (total + p):
            raise RuntimeError("weft: schedule simulation made no progress")
        lane = None
        if vocab and lane_t < lane_s and ready(Action("T", lane_t), t):
            lane = Action("T", lane_t)
        elif vocab and lane_s < m and ready(Action("S", lane_s), t):
            lane = Action("S", lane_s)
        if lane is not None:
            for s in range(p):
                actions[s].append(lane)
                slots[s].append(t)
            done[(lane.op, None, lane.mb)] = t
            lane_s += lane.op == "S"
            lane_t += lane.op == "T"
            ran += 1  # a lane pass counts once, for every stage
            t += 1
            continue
        for s in range(p):
            act = None
            for j, (i, negk) in enumerate(todo_b[s]):
                a = Action("B", i, -negk)
                if ("F", a.chunk, i) in done and ready(a, t):
                    act = a
                    del todo_b[s][j]
                    break
            if act is None and live[s] < _warmup(p, v, s):
                for j, (_, k, i) in enumerate(todo_f[s]):
                    a = Action("F", i, k)
                    if ready(a, t):
                        act = a
                        del todo_f[s][j]
                    break  # forwards in their order, as Megatron-LM's
            if act is not None:
                actions[s].append(act)
                slots[s].append(t)
                done[(act.op, act.chunk, act.mb)] = t
                live[s] += 1 if act.op == "F" else -1
                ran += 1
        t += 1
    return Schedule(kind, p, m, actions, slots, v)


def check_schedule(sched):
    """Check that @p sched is whole and that each pass comes after what it needs, on the
    simulated timeline; raises AssertionError saying what is wrong. (What the trainers
    and the tests rely on.)"""
    p, m, v = sched.stages, sched.microbatches, sched.chunks
    vocab = sched.kind != "1f1b"
    when = {}
    for s in range(p):
        assert sorted(sched.slots[s]) == sched.slots[s], "stage %d: slots out of order" % s
        assert len(set(sched.slots[s])) == len(sched.slots[s]), "stage %d: a slot twice" % s
        for a, t in zip(sched.actions[s], sched.slots[s]):
            if a.op in "FB":
                assert sched.stage_of(a.chunk) == s, "stage %d runs chunk %d" % (s, a.chunk)
                key = (a.op, a.chunk, a.mb)
                assert key not in when, "%s(%d) of chunk %d twice" % (a.op, a.mb, a.chunk)
                when[key] = t
            else:
                when.setdefault((a.op, None, a.mb), t)
    for k in range(p * v):
        for i in range(m):
            for op in "FB":
                assert (op, k, i) in when, "chunk %d never runs %s(%d)" % (k, op, i)
    lane = [[a for a in sched.actions[s] if a.op in "ST"] for s in range(p)]
    assert all(lane[s] == lane[0] for s in range(p)), "the stages' lanes differ"
    for s in range(p):
        lane_slots = [t for a, t in zip(sched.actions[s], sched.slots[s]) if a.op in "ST"]
        assert lane_slots == [t for a, t in zip(sched.actions[0], sched.slots[0])
                              if a.op in "ST"], "stage %d runs the lane at other slots" % s
    if vocab:
        assert sorted(a.mb for a in lane[0] if a.op == "S") == list(range(m)), "S missing"
        assert sorted(a.mb for a in lane[0] if a.op == "T") == list(range(m)), "T missing"
    else:
        assert not lane[0], "S and T in a 1f1b schedule"
    for s in range(p):
        for a, t in zip(sched.actions[s], sched.slots[s]):
            for n in _needs(a, p, v, vocab):
                assert n in when and when[n] < t, "%s(%d) of chunk %s on stage %d before " \
                    "%s(%d) of chunk %s" % (a.op, a.mb, a.chunk, s, n[0], n[2], n[1])
            if a.op == "B":
                assert when[("F", a.chunk, a.mb)] < t, "B(%d) before F(%d)" % (a.mb, a.mb)
    return True
