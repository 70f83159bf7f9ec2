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
"""

import json

import numpy as np
import torch

import weft
from weft.errors import invalid

from .distributed import ProcessGroupWeft, _install_default

_HEADER_WORDS = 4  # step, description bytes, number of old members, then the ids


class ElasticState:
    """Model and optimizer of this member, snapshotted in memory on @p pg's weft group."""

    def __init__(self, model, optimizer, pg):
        if not isinstance(pg, ProcessGroupWeft):
            raise invalid("ElasticState needs a weft process group, not %r" % (pg,))
        self.model, self.optimizer = model, optimizer
        self.pg, self.group = pg, pg.weft_group
        self.step = 0
        self._snap = self._pending = self._layout = self._names = None
        self._packed = None

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

    # -- taking snapshots --------------------------------------------------------------
    def _ready(self):
        """The state's tensors as they are now, each viewed as at least 1-dimensional, with
        the layout made for them (the optimizer makes its tensors at its first step: a new
        layout and snapshot then)."""
        tensors = self._tensors()
        names = list(tensors)
        if names != self._names:
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
        return {n: self._as_1d(t) for n, t in tensors.items()}

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
        snapshot reads while training goes on). Collective."""
        views = self._ready()
        self._wait_pending()
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
        step). Wrap the model in DistributedDataParallel again on that group."""
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
    def join(cls, model, optimizer, pg):
        """On a replacement, after weft.torch.init_process_group() admitted it: receive
        the state from the members' recover(). Returns (the ElasticState, the step)."""
        state = cls(model, optimizer, pg)
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
        and the optimizer, making the optimizer's tensors a replacement lacks."""
        params = self._params()
        have = self._views()
        for n, shape, dtype, ndim in self._desc:
            if n in have:
                continue
            if not n.startswith("optim."):
                raise RuntimeError("ElasticState: the model has no tensor %s" % n)
            _, i, key = n.split(".", 2)
            t = torch.zeros(shape, dtype=getattr(torch, dtype))
            self.optimizer.state[params[int(i)]][key] = t.reshape(()) if ndim == 0 else t
        views = self._views()
        with torch.no_grad():
            layout.unpack(self.group.member_id(), packed, views)
