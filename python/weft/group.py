"""Groups (weft_group_t): ranks, member ids and epochs; split; repair, grow, revoke.

Collectives and point-to-point messages are methods too (coll.py, p2p.py).
"""

from __future__ import annotations

from ctypes import byref, c_int, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Literal, Optional, Union

from . import _structs as S
from ._lib import lib
from .coll import CollectivesMixin
from .context import timeout_ms
from .dtypes import torch_module
from .errors import invalid
from .p2p import PointToPointMixin

if TYPE_CHECKING:
    import torch

    from .context import Context


@dataclass(frozen=True)
class EditInfo:
    """What a repair or grow did (weft_edit_info_t)."""
    old_epoch: int
    new_epoch: int
    old_size: int
    new_size: int
    removed: List[int]      # stable ids of the members that left
    added: List[int]        # stable ids of the members admitted
    rank_map: List[int]     # old group rank -> new group rank (-1: removed)
    subgroups_revoked: int  # subgroups left revoked because they lost a member

    @property
    def changed(self) -> bool:
        """Whether the edit made a new epoch (a repair or grow that changed the membership)."""
        return self.new_epoch != self.old_epoch

    @classmethod
    def _from_c(cls, e):
        return cls(e.old_epoch, e.new_epoch, e.old_size, e.new_size,
                   list(e.removed[:min(e.n_removed, S.EDIT_INFO_MAX_LISTED)]),
                   list(e.added[:min(e.n_added, S.EDIT_INFO_MAX_LISTED)]),
                   list(e.rank_map[:min(max(e.old_size, 0), S.EDIT_INFO_MAX_RANKS)]),
                   e.n_subgroups_revoked)


class Group(CollectivesMixin, PointToPointMixin):
    """An ordered set of ranks that survives failures in place. The world group comes
    from Context.world; subgroups from split()."""

    def __init__(self, ctx: Context, handle: int, owned: bool) -> None:
        self._ctx = ctx
        self._handle = handle
        self._owned = owned
        if owned:
            ctx._track(self)

    def _h(self):
        if self._handle is None or self._ctx._handle is None:
            raise invalid("the group was freed (or its context finalized)")
        return self._handle

    def _call(self, fn, *args):
        return self._ctx._call(fn, self._h(), *args)

    def _get(self, fn, ctype, *args):
        out = ctype()
        self._call(fn, *args, byref(out))
        return out.value

    def _release(self, finalizing):
        self._handle = None

    # -- who is in it --------------------------------------------------------------------
    @property
    def context(self) -> Context:
        """The weft.Context the group belongs to."""
        return self._ctx

    @property
    def handle(self) -> int:
        """The weft_group_t pointer as an int (for C extensions)."""
        return self._h()

    @property
    def rank(self) -> int:
        """This process's position in the group (0 .. size-1)."""
        return self._get(lib.weft_group_rank, c_int)

    @property
    def size(self) -> int:
        """Number of active members."""
        return self._get(lib.weft_group_size, c_int)

    @property
    def epoch(self) -> int:
        """0 at creation, +1 per membership edit."""
        return self._get(lib.weft_group_epoch, c_uint32)

    def member_id(self, rank: Optional[int] = None) -> int:
        """Stable member id of group rank @p rank (default: this process)."""
        return self._get(lib.weft_group_member_id, c_int, self.rank if rank is None else rank)

    def rank_of(self, member_id: int) -> int:
        """Group rank of the member with stable id @p member_id (InvalidArgument if it
        is not an active member)."""
        return self._get(lib.weft_group_rank_of, c_int, member_id)

    @property
    def member_ids(self) -> List[int]:
        """Stable ids of the members, in group rank order."""
        return [self.member_id(r) for r in range(self.size)]

    @property
    def coll_count(self) -> int:
        """Collectives started on the group since it was made."""
        return self._get(lib.weft_group_coll_count, c_uint64)

    # -- subgroups -----------------------------------------------------------------------
    def split(self, color: Optional[int], key: int = 0) -> Optional[Group]:
        """weft_group_split(): members with equal @p color form a subgroup ordered by
        (key, rank). Collective over this group. color None or negative: returns None."""
        sub = c_void_p()
        self._call(lib.weft_group_split, -1 if color is None else color, key, byref(sub))
        return Group(self._ctx, sub.value, owned=True) if sub.value else None

    def free(self) -> None:
        """Destroy a subgroup (the world group belongs to its context). Requests still in
        flight on it are cancelled and its vocabularies destroyed first."""
        if not self._owned:
            raise invalid("the world group belongs to the context; finalize frees it")
        if self._handle is not None:
            with self._ctx._lock:
                self._ctx._release_group(self)
                self._call(lib.weft_group_free)
                self._handle = None

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if self._owned:
            self.free()
        return False

    # -- editing -------------------------------------------------------------------------
    def repair(self) -> EditInfo:
        """weft_group_repair(): after weft.PeerFailed / weft.Revoked, agree with the
        survivors on who is gone and shrink in place. Returns an EditInfo. A member is
        removed only once the store holds its failure notice: a member this one lost
        contact with but the store sees alive raises weft.Timeout after
        WEFT_FAILURE_TIMEOUT_MS, and nobody is removed."""
        info = S.sized(S.EditInfo)
        self._call(lib.weft_group_repair, byref(info))
        return EditInfo._from_c(info)

    def grow(self, min_new: int = 0, timeout: float = 0.0) -> EditInfo:
        """weft_group_grow(): admit processes waiting in Context.join(), waiting up to
        @p timeout seconds for at least @p min_new of them. Returns an EditInfo."""
        info = S.sized(S.EditInfo)
        self._call(lib.weft_group_grow, min_new, timeout_ms(timeout), byref(info))
        return EditInfo._from_c(info)

    def pending_joiners(self) -> int:
        """Processes waiting in Context.join() to be admitted."""
        return self._get(lib.weft_group_pending_joiners, c_int)

    def revoke(self) -> None:
        """weft_group_revoke(): make every operation on the group fail with
        weft.Revoked on every member until they repair it."""
        self._call(lib.weft_group_revoke)

    # -- CUDA ----------------------------------------------------------------------------
    @property
    def cuda_stream(self) -> int:
        """The cudaStream_t (an int; 0 for the legacy default stream) that GPU work of
        the group is enqueued on."""
        return self._get(lib.weft_group_cuda_stream, c_void_p) or 0

    def set_cuda_stream(self, stream: Union[torch.cuda.Stream, int, None]) -> None:
        """weft_group_set_cuda_stream(): a torch.cuda.Stream, a cudaStream_t as an int,
        or None/0 for the legacy default stream."""
        ptr = getattr(stream, "cuda_stream", stream) or None
        self._call(lib.weft_group_set_cuda_stream, ptr)

    def _follow_torch_stream(self, buffers):
        """GPU tensors: enqueue on torch's current stream of their device, so weft's
        work is ordered after the kernels that produced them."""
        for b in buffers:
            if b is not None and b.cuda_device is not None:
                torch = torch_module()
                self.set_cuda_stream(torch.cuda.current_stream(b.cuda_device).cuda_stream)
                return

    def __repr__(self):
        if self._handle is None or self._ctx._handle is None:
            return "<weft.Group freed>"
        return "<weft.Group rank %d of %d, epoch %d>" % (self.rank, self.size, self.epoch)
