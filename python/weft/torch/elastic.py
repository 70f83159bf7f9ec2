"""A data-parallel trainer's state kept in weft's in-memory snapshots, for recovery in place
under DistributedDataParallel on the weft backend.

    pg = weft.torch.init_process_group()          # a replacement joins here instead
    state = weft.torch.ElasticState(model, optimizer, pg)
    step = state.start() if pg is not None else ... # see init_process_group
    while step < steps:
        try:
            train one step with ddp(...)            # loss.backward(), optimizer.step()
            step += 1
            state.commit(step)                      # snapshot in memory, asynchronously
        except RuntimeError as e:
            if not weft.torch.is_peer_failure(e):
                raise
            pg, step = state.recover(replacements=1)
            ddp = DistributedDataParallel(model, process_group=pg)

The state is the model's state_dict (parameters and buffers) and the optimizer's tensors
(`optimizer.state`: momentum, Adam's moments and step), replicated on every member: a
weft.Layout with every tensor whole on every member, snapshotted with weft.Snapshot after
each step (the copy is taken while the next step runs). recover() repairs the group,
restores the newest step every survivor committed (a survivor that took one more step
than another goes back to it), admits replacements (weft_group_grow) and moves that
state to every member with one migration, the replacements included; each member's model
and optimizer then hold it, bit for bit. The optimizer's hyperparameters (param_groups)
are not part of it: every member builds its optimizer alike.

Per-rank state, opt-in: with rng=True and data=loader, ElasticState also carries each
rank's CPU random number generator (torch.get_rng_state()) and the position of its data
(loader.state_dict(), a dict of ints and CPU tensors, given back with
loader.load_state_dict()). Each commit packs them into one fixed-size row of bytes, and one
allgather gives every member every rank's row, kept in the replicated state as a
[ranks, bytes] tensor: any member can hand a replacement the row it needs. Rows belong to
ranks, not processes: after recover() and join() the member at rank r loads the row rank
r committed. Survivors keep their order and replacements are appended, so a dead last
rank's replacement takes its row, and after the death of an earlier rank each member
behind it takes over the row of the rank it now holds: a trainer whose batches and
random draws follow its rank (as DistributedSampler's do) goes on as without the
failure. A member whose rank had no row (more members than at that commit) keeps its own.
A row is read as the fixed-size numbers this member's own description names, never
unpickled. Cost: one allgather per commit, and one allreduce of two integers (the rows'
sizes agree) when a layout is made.
"""

import hashlib
import json

import numpy as np
import torch

import weft
from weft.errors import invalid

from .distributed import ProcessGroupWeft, _install_default

_HEADER_WORDS = 4  # step, description bytes, number of old members, then the ids
_ROWS = "ranks.rows"  # every rank's row of per-rank state, [ranks, bytes] of uint8
_TAG_BYTES = 8  # a row starts with a hash of what it holds


class ElasticState:
    """Model and optimizer of this member, snapshotted in memory on @p pg's weft group;
    with @p rng True, this rank's CPU generator state too, and with @p data (an object
    with state_dict() of ints and CPU tensors, and load_state_dict()) its data position.
    Every member passes the same @p rng and a @p data of the same keys, dtypes and
    shapes."""

    def __init__(self, model, optimizer, pg, rng=False, data=None):
        if not isinstance(pg, ProcessGroupWeft):
            raise invalid("ElasticState needs a weft process group, not %r" % (pg,))
        if not isinstance(rng, bool):
            raise invalid("ElasticState: rng is True or False, not %r" % (rng,))
        if data is not None and not (callable(getattr(data, "state_dict", None)) and
                                     callable(getattr(data, "load_state_dict", None))):
            raise invalid("ElasticState: data needs state_dict() and load_state_dict(); "
                          "%r lacks them" % (data,))
        self.model, self.optimizer = model, optimizer
        self.pg, self.group = pg, pg.weft_group
        self.rng, self.data = rng, data
        self.step = 0
        self._snap = self._pending = self._layout = self._names = None
        self._packed = None
        self._rows = None      # [members, bytes]: every rank's row at the last commit
        self._row_desc = None  # what this rank's row holds, fixed at its first commit
        self._row_tag = None   # its hash, the first bytes of the row

    @property
    def _per_rank(self):
        return self.rng or self.data is not None

    # -- the tensors -------------------------------------------------------------------
    def _params(self):
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _tensors(self):
        """name -> tensor of the state, in a fixed order: the model's state_dict, then
        the optimizer's tensors by parameter index ("optim.<i>.<key>")."""
        out = {"model." + k: v for k, v in self.model.state_dict().items()}
        for i, p in enumerate(self._params()):
            for key, v in sorted(self.optimizer.state.get(p, {}).items()):
                if torch.is_tensor(v):
                    out["optim.%d.%s" % (i, key)] = v
        for name, t in out.items():
            if t.is_cuda or not t.is_contiguous():
                raise invalid("ElasticState: %s is not a contiguous CPU tensor" % name)
        return out

    @staticmethod
    def _as_1d(t):
        return t.reshape(1) if t.dim() == 0 else t

    def _describe(self, tensors):
        """[name, shape (a scalar as [1]), dtype name, dimensions] of each tensor."""
        return [(n, list(self._as_1d(t).shape), str(t.dtype)[len("torch."):], t.dim())
                for n, t in tensors.items()]

    @staticmethod
    def _layout_of(desc, members):
        layout = weft.Layout.from_tensors({n: (tuple(s), weft.dtype_of(d))
                                           for n, s, d, _ in desc})
        for n, _, _, _ in desc:
            layout.replicate(n, members)
        return layout

    def _views(self):
        return {n: self._as_1d(t) for n, t in self._tensors().items()}

    # -- per-rank state ----------------------------------------------------------------
    def _data_parts(self):
        """(name, kind, tensor) of each entry of data.state_dict(), by key: an int (or
        bool) as one int64, a tensor as it is."""
        sd = self.data.state_dict()
        if not isinstance(sd, dict):
            raise invalid("ElasticState: data.state_dict() returned a %s, not a dict"
                          % type(sd).__name__)
        out = []
        for key in sorted(sd, key=str):
            if not isinstance(key, str):
                raise invalid("ElasticState: data.state_dict()'s key %r is not a str"
                              % (key,))
            v = sd[key]
            if isinstance(v, (int, np.integer)):
                if not -2**63 <= int(v) < 2**63:
                    raise invalid("ElasticState: data.state_dict()[%r] = %d does not fit "
                                  "in int64" % (key, v))
                out.append((key, "bool" if isinstance(v, bool) else "int",
                            torch.tensor(int(v), dtype=torch.int64)))
            elif torch.is_tensor(v):
                if v.device.type != "cpu" or v.layout != torch.strided:
                    raise invalid("ElasticState: data.state_dict()[%r] is not a dense CPU "
                                  "tensor" % key)
                out.append((key, "tensor", v))
            else:
                raise invalid("ElasticState: data.state_dict()[%r] is a %s: only ints and "
                              "CPU tensors are carried (fixed size, never pickled)"
                              % (key, type(v).__name__))
        return out

    def _own_row(self):
        """This rank's row, its generator state and data position as one uint8 tensor
        after 8 bytes that tag their description (name, kind, dtype, shape of each part).
        The description is fixed by the first row: every row has one size, so that one
        allgather gathers them."""
        parts = [("rng", "tensor", torch.get_rng_state())] if self.rng else []
        if self.data is not None:
            parts += [("data." + k, kind, t) for k, kind, t in self._data_parts()]
        desc = tuple((n, kind, str(t.dtype)[len("torch."):], tuple(t.shape))
                     for n, kind, t in parts)
        if self._row_desc is None:
            if not parts:
                raise invalid("ElasticState: data.state_dict() is empty and rng is False: "
                              "no per-rank state to carry (pass data=None)")
            self._row_desc = desc
            tag = hashlib.sha256(repr(desc).encode()).digest()[:_TAG_BYTES]
            self._row_tag = torch.tensor(list(tag), dtype=torch.uint8)
        elif desc != self._row_desc:
            raise invalid("ElasticState: the per-rank state changed since the first commit "
                          "(%s, now %s): its entries, dtypes and shapes must stay"
                          % (self._row_desc, desc))
        return torch.cat([self._row_tag] + [t.detach().contiguous().reshape(-1)
                                            .view(torch.uint8) for _, _, t in parts])

    def _load_row(self, row):
        """Set this rank's generator and data position from @p row, a row a peer may
        have written: read as the fixed-size numbers of this rank's own description."""
        at, sd = _TAG_BYTES, {}
        for name, kind, dtype, shape in self._row_desc:
            dt = getattr(torch, dtype)
            size = torch.empty((), dtype=dt).element_size() * int(np.prod(shape))
            t = row[at:at + size].clone().view(dt).reshape(shape)
            at += size
            if name == "rng":
                torch.set_rng_state(t)
            elif kind == "tensor":
                sd[name[len("data."):]] = t
            else:
                sd[name[len("data."):]] = bool(t) if kind == "bool" else int(t)
        if self.data is not None:
            self.data.load_state_dict(sd)

    def _check_row_size(self, n):
        """One allreduce, when the layout is made: every rank's row has @p n bytes."""
        both = np.array([n, -n], np.int64)
        self.group.allreduce(both, op="max")
        if both[0] != -both[1]:
            raise invalid("ElasticState: the ranks' per-rank states differ in size (%d to "
                          "%d bytes): every member passes the same rng and a data of the "
                          "same keys, dtypes and shapes" % (-both[1], both[0]))

    def _check_row_tags(self):
        """After the first allgather of a layout: every rank's row holds what this one's
        does (the same tag), else every member raises."""
        tags = self._rows[:, :_TAG_BYTES]
        if not bool((tags == self._row_tag).all()):
            raise invalid("ElasticState: the ranks' per-rank states hold different "
                          "entries, dtypes or shapes: every member passes the same rng "
                          "and a data of the same keys, dtypes and shapes")

    # -- taking snapshots --------------------------------------------------------------
    def _ready(self, row=None):
        """The state's tensors as they are now, each viewed as at least 1-dimensional, with
        the layout made for them (the optimizer makes its tensors at its first step: a new
        layout and snapshot then); with @p row, this rank's per-rank row, the rows of every
        rank too (gathered by the caller). Returns (those views, whether the layout is
        new)."""
        tensors = self._tensors()
        fresh = False
        if row is not None:
            shape = (self.group.size, row.numel())
            if self._rows is None or tuple(self._rows.shape) != shape:
                self._rows, fresh = torch.zeros(shape, dtype=torch.uint8), True
            tensors[_ROWS] = self._rows
        names = list(tensors)
        rebuilt = names != self._names or fresh
        if rebuilt:
            if row is not None:
                self._check_row_size(row.numel())
            self._wait_pending()
            if self._snap is not None:
                self._snap.free()
            self._names = names
            self._desc = self._describe(tensors)
            self._layout = self._layout_of(self._desc, self.group.member_ids)
            self._snap = weft.Snapshot(self.group, self._layout, blob_bytes=8)
            need = self._layout.packed_bytes(self.group.member_id())
            if self._packed is None or self._packed.size != need:
                self._packed = np.zeros(need, np.uint8)
        return {n: self._as_1d(t) for n, t in tensors.items()}, rebuilt

    def _wait_pending(self):
        if self._pending is not None:
            p, self._pending = self._pending, None
            p.wait()

    def start(self, step=0):
        """Snapshot step @p step (the initial state) and wait until every member has
        it. Collective."""
        self.commit(step, wait=True)
        return step

    def commit(self, step, wait=False):
        """After the optimizer's step @p step on every member: wait for the previous
        snapshot, then start this one from a copy of the state (the copy is what the
        snapshot reads while training goes on). With per-rank state, this rank's row is
        taken now (the generator and data position the next step starts from) and one
        allgather gives every member every rank's row. Collective."""
        row = self._own_row() if self._per_rank else None
        views, new_layout = self._ready(row)
        self._wait_pending()
        if row is not None:
            self.group.allgather(row, self._rows)
            if new_layout:
                self._check_row_tags()
        self._layout.pack(self.group.member_id(), views, out=self._packed)
        self._pending = self._snap.start(step, self._packed, np.int64(step).tobytes())
        self.step = step
        if wait:
            self._wait_pending()

    def wait(self):
        """Wait until the last commit's snapshot is on every member."""
        self._wait_pending()

    # -- recovery ----------------------------------------------------------------------
    def recover(self, replacements=0, timeout=60.0, attempts=5):
        """After a peer's failure (weft.torch.is_peer_failure): repair, restore the newest
        step every survivor committed, admit @p replacements new members (waiting up to
        @p timeout seconds; 0: continue without), and give every member that step's
        state. Returns (the process group of the members, now torch's default one, the
        step). Wrap the model in DistributedDataParallel again on that group. With
        per-rank state, the member at rank r then holds the generator and data position
        rank r committed at that step."""
        g = self.group
        for _ in range(attempts):
            try:
                g.repair()
                r = self._snap.restore(self._layout_of(self._desc, g.member_ids))
                break
            except weft.PeerError:
                continue
        else:
            raise weft.PeerFailed(weft.Status.ERR_PEER_FAILED,
                                  "ElasticState: no repair and restore in %d attempts"
                                  % attempts)
        if r.bytes_missing:
            raise RuntimeError("ElasticState: %d bytes of the state died with every copy"
                               % r.bytes_missing)
        survivors, buf, step = g.member_ids, r.state, r.step  # r.state: a view of ours
        self._pending = None
        self._snap.free()
        self._snap = None
        self._names = None
        if replacements > 0:
            g.grow(min_new=replacements, timeout=timeout)
        return self._resync(survivors, step, buf)

    @classmethod
    def join(cls, model, optimizer, pg, rng=False, data=None):
        """On a replacement, after weft.torch.init_process_group() admitted it: receive
        the state from the members' recover(), with @p rng and @p data as the members
        made theirs (this rank's row of them is loaded: the generator and data position
        its rank committed). Returns (the ElasticState, the step)."""
        state = cls(model, optimizer, pg, rng=rng, data=data)
        _, step = state._resync(None, None, None)
        return state, step

    def _resync(self, old_ids, step, buf):
        """On every member, a replacement included (which passes None): rank 0 says the
        step, the tensors and who held them; one migration moves the state to every
        member; each loads it into its model and optimizer."""
        g = self.group
        head = np.zeros(_HEADER_WORDS + g.size, np.int64)
        desc = b""
        if g.rank == 0:
            desc = json.dumps(self._desc).encode()
            head[0], head[1], head[2] = step, len(desc), len(old_ids)
            head[_HEADER_WORDS:_HEADER_WORDS + len(old_ids)] = old_ids
        g.broadcast(head, root=0)
        step, n_old = int(head[0]), int(head[2])
        old_ids = [int(i) for i in head[_HEADER_WORDS:_HEADER_WORDS + n_old]]
        text = np.frombuffer(desc, np.uint8).copy() if g.rank == 0 else \
            np.zeros(int(head[1]), np.uint8)
        g.broadcast(text, root=0)
        self._desc = [tuple(e) for e in json.loads(text.tobytes().decode())]
        old, new = self._layout_of(self._desc, old_ids), self._layout_of(self._desc,
                                                                         g.member_ids)
        out = np.zeros(new.packed_bytes(g.member_id()), np.uint8)
        weft.migrate(g, weft.Plan(old, new), buf if buf is not None else
                     np.zeros(0, np.uint8), out)
        self._load(new, out)
        self._packed = out  # the next commit packs into it: no new buffer to touch
        self.pg = ProcessGroupWeft(g, self.pg._timeout)
        _install_default(self.pg)
        self.step = step
        # The first snapshot at the new membership is taken while training goes on (a
        # replacement's snapshot buffers are new memory: touching them takes a while).
        # Until it is committed, the state lives only in the members' models: a second
        # failure before then leaves nothing to restore (recover() raises).
        self.commit(step)
        return self.pg, step

    def _load(self, layout, packed):
        """Copy the state in @p packed (this member's buffer of @p layout) into the model
        and the optimizer, making the optimizer's tensors a replacement lacks, and load
        this rank's row of the per-rank state."""
        params = self._params()
        have = self._views()
        rows = None
        for n, shape, dtype, ndim in self._desc:
            if n in have:
                continue
            if n == _ROWS:
                rows = torch.zeros(shape, dtype=torch.uint8)
                continue
            if not n.startswith("optim."):
                raise RuntimeError("ElasticState: the model has no tensor %s" % n)
            _, i, key = n.split(".", 2)
            t = torch.zeros(shape, dtype=getattr(torch, dtype))
            self.optimizer.state[params[int(i)]][key] = t.reshape(()) if ndim == 0 else t
        if (rows is not None) != self._per_rank:
            raise RuntimeError("ElasticState: this member %s per-rank state and the "
                               "members it recovers with %s: pass the same rng and data "
                               "everywhere"
                               % (("carries", "do not") if self._per_rank else
                                  ("carries no", "do")))
        views = self._views()
        if rows is not None:
            views[_ROWS] = rows
        with torch.no_grad():
            layout.unpack(self.group.member_id(), packed, views)
        if rows is not None:
            # A row of another size or tag is refused on every member by the next commit.
            mine, r = self._own_row(), self.group.rank
            if r < rows.shape[0] and rows.shape[1] == mine.numel() and \
                    bool((rows[r, :_TAG_BYTES] == self._row_tag).all()):
                self._load_row(rows[r])
