"""In-memory snapshots of sharded training state on buddies (include/weft/snapshot.h).

    snap = weft.Snapshot(world, layout, blob_bytes=64)   # layout: every member's shard
    req = snap.start(step, packed_state, blob)           # after each step; in background
    ...                                                  # keep packed_state unchanged
    req.wait()                                           # committed on every member
    # after world.repair():
    r = snap.restore(layout_over_survivors)              # r.state: this member's part
    blob = snap.blob(dead_member_id)                     # of the newest step all committed
"""

from __future__ import annotations

import ctypes
import weakref
from collections import namedtuple
from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p
from typing import (TYPE_CHECKING, Callable, Iterable, List, Literal, Optional, Sequence, Tuple,
                    Union)

import numpy as np

from . import _structs as S
from ._buffer import as_buffer, mark_written
from ._lib import lib
from .dtypes import is_tensor
from .errors import Error, Status, error_for, invalid, last_error
from .layout import Layout
from .plan import Plan
from .request import Request

if TYPE_CHECKING:
    from ._types import BytesLike
    from .group import Group

Restored = namedtuple("Restored", "step bytes_moved bytes_local bytes_missing buffer state")
Restored.__doc__ = ("What Snapshot.restore() did: the step restored (the newest every survivor "
                    "committed), bytes moved between members, copied within members, and of "
                    "the target held in no surviving copy (left untouched); buffer: what "
                    "restore wrote (the packed state, then the members' blobs); state: its "
                    "first bytes, this member's packed buffer of the target.")


def _byte_prefix(obj, n):
    """The first @p n bytes of @p obj as a view (uint8 array or tensor, or memoryview)."""
    if isinstance(obj, np.ndarray):
        return obj.reshape(-1).view(np.uint8)[:n]
    if is_tensor(obj):
        import torch
        return obj.reshape(-1).view(torch.uint8)[:n]
    return memoryview(obj).cast("B")[:n]


class Snapshot:
    """Snapshots of @p layout (each member's packed buffer of it: parameters, optimizer
    state) on @p group, with a blob of at most @p blob_bytes per member (RNG state,
    data position, the step). Each snapshot is copied into the member's own memory and
    into @p redundancy buddies' (default 1: the next member in rank order; host_of: host
    index per member id, buddies on another host first). Every member makes it with
    equal arguments; it belongs to the group at its current membership: after a
    restore, make a new one for the new layout."""

    def __init__(self, group: Group, layout: Layout, blob_bytes: int = 0, redundancy: int = 0,
                 host_of: Optional[Sequence[int]] = None) -> None:
        if blob_bytes < 0 or redundancy < 0:
            raise invalid("Snapshot: blob_bytes and redundancy must be >= 0")
        p = S.sized(S.SnapshotParams)
        p.redundancy = int(redundancy)
        hosts = None
        if host_of is not None:
            hosts = (c_int * max(len(host_of), 1))(*[int(h) for h in host_of])
            p.host_of, p.num_members = hosts, len(host_of)
        h = c_void_p()
        self._call_noctx(group, lib.weft_snapshot_create, group._h(), layout.handle,
                         int(blob_bytes), byref(p), byref(h))
        self._handle = h.value
        self.group, self.layout, self.blob_bytes = group, layout, int(blob_bytes)
        self._owner_group = group  # freeing that group frees the snapshot first
        self._pending = None       # the Request of the snapshot in flight
        self._restores = 0         # restore generation, for the plan it leaves
        self._target = None        # the target of the last restore
        group._ctx._track(self)

    @staticmethod
    def _call_noctx(group, fn, *args):
        """Calls whose refusals weft explains in the thread's text, not the context's."""
        ctx = group._ctx
        with ctx._lock:
            ctx._h()
            st = fn(*args)
            if st < 0:
                raise error_for(st, last_error(None) or last_error(ctx._handle))
            return st

    def _h(self):
        if self._handle is None or self.group._ctx.closed:
            raise invalid("the snapshot was freed (or its context finalized)")
        return self._handle

    # -- lifetime ------------------------------------------------------------------------
    def free(self) -> None:
        """weft_snapshot_free(): a snapshot still in flight is cancelled (its Request then
        fails with weft.Revoked)."""
        if self._handle is not None:
            ctx = self.group._ctx
            with ctx._lock:
                if self._handle is not None and not ctx.closed:
                    lib.weft_snapshot_free(self._handle)
                self._handle = None

    close = free

    def _release(self, finalizing):
        self.free()

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.free()
        return False

    # -- taking snapshots ----------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """weft_snapshot_bytes(): bytes this member keeps for copies (both buffers)."""
        return lib.weft_snapshot_bytes(self._h())

    def start(self, step: int, state: BytesLike,
              blob: Union[bytes, bytearray, memoryview] = b"") -> Request:
        """Start the snapshot of @p step (collective: every member, same step, above the
        last committed one): @p state is this member's packed buffer of the layout (an
        array, tensor or bytes-like object; keep it unchanged until the request
        completes), @p blob at most blob_bytes bytes (copied at once). Returns a
        weft.Request: wait() returns the step once it is committed on every member, or
        raises like a migration (weft.PeerFailed, weft.Revoked, weft.Mismatch)."""
        h = self._h()
        me = self.group.member_id()
        need = self.layout.packed_bytes(me)
        buf = as_buffer(state, "snapshot state", typed=False)
        if buf.nbytes < need:
            raise invalid("snapshot: state has %d bytes; member %d's packed buffer needs %d" %
                          (buf.nbytes, me, need))
        data = bytes(blob)
        if len(data) > self.blob_bytes:
            raise invalid("snapshot: a blob of %d bytes, at most %d (blob_bytes)" %
                          (len(data), self.blob_bytes))
        if step < 0:
            raise invalid("snapshot: step must be >= 0, not %d" % step)
        ctx = self.group._ctx
        ctx._reap_orphans()
        req = c_void_p()
        with ctx._lock:
            self._collect_pending()
            ctx._call(lib.weft_snapshot_start, h, c_uint64(int(step)),
                      buf.ptr if need else None, data or None, len(data), byref(req))
        r = Request(ctx, req.value, keep=(buf,), result=int(step), keep_on_failure=buf,
                    group=self.group)
        self._pending = r
        return r

    def _collect_pending(self):
        """Finish the previous snapshot's request if it completed (a failed one is what
        a restore is for: its error was raised by wait() or is dropped here)."""
        r, self._pending = self._pending, None
        if r is not None and not r.done:
            try:
                if not r.test():
                    self._pending = r
            except Error:
                pass

    @property
    def committed(self) -> Optional[int]:
        """The newest step this member has seen committed, or None."""
        out = c_uint64()
        with self.group._ctx._lock:
            if lib.weft_snapshot_committed(self._h(), byref(out)) != Status.OK:
                return None
        return out.value

    # -- restoring -----------------------------------------------------------------------
    def restore_bytes(self, target: Layout) -> int:
        """weft_snapshot_restore_bytes(): bytes restore() writes for @p target on this
        member (its packed buffer of target, then every member's blob)."""
        return lib.weft_snapshot_restore_bytes(self._h(), target.handle)

    def restore(self, target: Layout, out: Optional[BytesLike] = None,
                live: Optional[BytesLike] = None) -> Restored:
        """After group.repair(): restore @p target (a layout of the same tensors over the
        survivors, e.g. a re-cut) from the survivors' copies of the newest step all of
        them committed. Collective over the group; blocking. A snapshot still pending is
        collected first (it failed with the member that died). Writes into @p out (a
        buffer of restore_bytes(target) bytes; a new uint8 array by default) and returns
        a Restored. Parts no surviving copy holds are left untouched and counted in
        bytes_missing (restore_plan.missing lists them). @p live: this member's packed
        state buffer when it still holds the committed step (the failure came before
        the state changed): if every survivor gives one, their regions come from these
        (weft_snapshot_restore_live), and only the dead members' shards move."""
        h = self._h()
        lbuf = None if live is None else as_buffer(live, "restore live", typed=False)
        need = self.restore_bytes(target)
        if out is None:
            out = np.zeros(need, np.uint8)
        buf = as_buffer(out, "restore out", writable=True, typed=False)
        if buf.nbytes < need:
            raise invalid("restore: out has %d bytes, the target and the blobs need %d" %
                          (buf.nbytes, need))
        ctx = self.group._ctx
        info = S.sized(S.SnapshotRestored)
        with ctx._lock:
            self._collect_pending()
            if self._pending is not None:
                raise invalid("restore: the snapshot of step %d is still in flight (wait for "
                              "its request, or repair the group first)" % self._pending.result)
            self._restores += 1
            if lbuf is None:
                ctx._call(lib.weft_snapshot_restore, h, target.handle, buf.ptr, buf.nbytes,
                          byref(info))
            else:
                ctx._call(lib.weft_snapshot_restore_live, h, target.handle, lbuf.ptr, buf.ptr,
                          buf.nbytes, byref(info))
        mark_written(buf)
        self._target = target
        state = _byte_prefix(out, target.packed_bytes(self.group.member_id()))
        return Restored(info.step, info.bytes_moved, info.bytes_local, info.bytes_missing, out,
                        state)

    def restore_generation(self, world: Group,
                           target: Callable[[List[int]], Layout]) -> Restored:
        """weft_elastic_restore_gen() (include/weft/elastic.h): restore this snapshot, the
        generation weft.choose_generation() chose, which this member holds committed.
        Collective over the snapshot's group (the generation's members that are alive);
        blocking. It revokes and repairs that group, checks that @p world (the group the
        generation was chosen on) was not edited meanwhile (weft.Revoked on every member:
        start the recovery over), calls @p target(members), the stable ids of the
        surviving members in group rank order, which returns a weft.Layout of the same
        tensors over them, and restores it into a new buffer of weft memory
        (weft.memory), freed when the last view of it is gone. Returns a Restored, as
        restore() does. One member's error (bad arguments, an exception in @p target, a
        layout the restore refuses) fails it on every member; an exception raised by
        @p target is raised again on its member. A snapshot still in flight is refused on
        this member alone (the others wait until the timeout): wait for it first. Call it
        again only after an operation every member takes part in on another group (the
        world's repair, say)."""
        ctx = self.group._ctx
        got = {}

        def call_target(arg, members, n, out):
            try:
                ids = [members[i] for i in range(n)]
                layout = target(ids)
                if not isinstance(layout, Layout):
                    raise invalid("restore_generation: target returned %r, not a weft.Layout"
                                  % (layout,))
                copy = c_void_p()  # the library frees the one it gets
                st = lib.weft_layout_keep(layout.handle, (c_int * max(n, 1))(*ids), n,
                                          byref(copy))
                if st == Status.OK:
                    out[0] = copy.value
                    got["layout"] = layout
                return st
            except BaseException as e:  # never across the C frames
                got["error"] = e
                return Status.ERR_INVALID_ARG

        fn = S.ElasticTargetFn(call_target)
        buf, nbytes = c_void_p(), c_size_t()
        info = S.sized(S.SnapshotRestored)
        with ctx._lock:
            self._collect_pending()
            if self._pending is not None:
                raise invalid("restore_generation: the snapshot of step %d is still in flight "
                              "(wait for its request first)" % self._pending.result)
            self._restores += 1
            try:
                ctx._call(lib.weft_elastic_restore_gen, self._h(), self.group._h(),
                          world._h(), fn, None, byref(buf), byref(nbytes), byref(info))
            except Error as e:
                if "error" in got:
                    raise got["error"] from e
                raise
        raw = (ctypes.c_uint8 * max(nbytes.value, 1)).from_address(buf.value)
        weakref.finalize(raw, lib.weft_mem_free, buf.value, nbytes.value)
        out = np.frombuffer(raw, dtype=np.uint8, count=nbytes.value)
        self._target = got["layout"]
        state = _byte_prefix(out, self._target.packed_bytes(self.group.member_id()))
        return Restored(info.step, info.bytes_moved, info.bytes_local, info.bytes_missing, out,
                        state)

    def blob(self, member: int) -> bytes:
        """After a restore: the blob member @p member (a stable id) stored with the
        restored step, as bytes. InvalidArgument if there was no restore, the member
        stored no blob, or every copy of it died."""
        cap = self.blob_bytes
        while True:
            out = (c_uint64 * ((cap + 7) // 8 or 1))()
            n = c_size_t()
            self._call_noctx(self.group, lib.weft_snapshot_blob, self._h(), int(member), out,
                             cap, byref(n))
            if n.value <= cap:
                return bytes(memoryview(out).cast("B")[:n.value])
            cap = n.value  # a joined member learns the blobs' size from the first call

    @classmethod
    def restore_join(cls, group: Group, target: Layout, out: Optional[BytesLike] = None
                     ) -> Tuple[Snapshot, Restored]:
        """The part of a restore that a member admitted since the snapshot was made (by
        group.grow(), or by the repair that removed the dead) plays, while the holders
        call restore(target) (weft_snapshot_restore_join): it receives its share of
        @p target into @p out (target.packed_bytes(its member id) bytes; a new uint8
        array by default). Returns (snapshot, Restored): the snapshot answers blob() and
        restore_plan only; free it when done."""
        need = target.packed_bytes(group.member_id())
        if out is None:
            out = np.zeros(need, np.uint8)
        buf = as_buffer(out, "restore_join out", writable=True, typed=False)
        if buf.nbytes < need:
            raise invalid("restore_join: out has %d bytes, the target needs %d" %
                          (buf.nbytes, need))
        info = S.sized(S.SnapshotRestored)
        h = c_void_p()
        cls._call_noctx(group, lib.weft_snapshot_restore_join, group._h(), target.handle,
                        buf.ptr, buf.nbytes, byref(h), byref(info))
        mark_written(buf)
        snap = cls.__new__(cls)
        snap._handle = h.value
        snap.group, snap.layout, snap.blob_bytes = group, None, 0
        snap._owner_group, snap._pending, snap._restores = group, None, 1
        snap._target = target
        group._ctx._track(snap)
        state = _byte_prefix(out, need)
        return snap, Restored(info.step, info.bytes_moved, info.bytes_local,
                              info.bytes_missing, out, state)

    @property
    def restore_plan(self) -> Optional[Plan]:
        """After a restore: the weft.Plan it ran (for missing and stats(); its tensors
        past the target's are the members' blobs), or None. Owned by the snapshot: it
        becomes unusable when the snapshot is freed or restores again."""
        h = lib.weft_snapshot_restore_plan(self._h())
        if not h:
            return None
        plan = Plan._wrap(h, None, self._target, owner=self)
        plan._gen = self._restores
        return plan

    def _plan_alive(self, plan):
        return (self._handle is not None and not self.group._ctx.closed and
                plan._gen == self._restores)

    def __repr__(self):
        if self._handle is None:
            return "<weft.Snapshot freed>"
        return "<weft.Snapshot committed %s, %d bytes>" % (self.committed, self.nbytes)


GEN_START = S.GEN_START  # the initial state: a generation without a Snapshot, committed
MAX_GENS = S.ELASTIC_MAX_GENS

GenChoice = namedtuple("GenChoice", "id index root holders")
GenChoice.__doc__ = ("What choose_generation() chose: id, the generation to restore from (None "
                     "when no member holds one it may restore: the state is lost); index, its "
                     "position in this member's list when this member holds it committed, "
                     "else None; root, the lowest group rank holding it (None with id None); "
                     "holders, how many members hold it committed.")


def choose_generation(group: Group,
                      generations: Iterable[Tuple[int, Optional[Snapshot]]]) -> GenChoice:
    """weft_elastic_choose_gen() (include/weft/elastic.h): with every member of @p group,
    choose the generation of snapshots to restore from after a membership change, the
    newest that some member holds committed and no member holds uncommitted. Collective
    over @p group; every member gets the same id, root and holders.

    @p generations: what this member holds, a list of (id, Snapshot), ids >= 0 equal on
    every member holding that generation and larger for newer ones, or (GEN_START, None)
    for the initial state; at most MAX_GENS; [] for a member that holds none (a joiner).
    The members holding the chosen one then restore() from its Snapshot (after repairing
    its group), the others receive their state from them."""
    gens = list(generations)
    arr = (S.SnapshotGen * max(len(gens), 1))()
    for i, (gid, snap) in enumerate(gens[:MAX_GENS]):
        arr[i].id = int(gid)
        if snap is not None:
            snap._collect_pending()  # a first snapshot that completed is committed
            arr[i].snap = snap._h()
    choice = S.sized(S.GenChoice)
    group._ctx._call(lib.weft_elastic_choose_gen, group._h(), arr, len(gens), byref(choice))
    if choice.id == S.GEN_NONE:
        return GenChoice(None, None, None, 0)
    return GenChoice(choice.id, choice.index if choice.index >= 0 else None, choice.root,
                     choice.holders)
