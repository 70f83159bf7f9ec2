"""Plans: the fewest transfers from one layout to another (weft_plan_t). Computed
locally and identically on every rank."""

from __future__ import annotations

from collections import namedtuple
from ctypes import byref, c_int, c_void_p
from typing import TYPE_CHECKING, List, Optional, Sequence

from . import _structs as S
from ._cfile import capture
from ._lib import lib
from .errors import check, invalid
from .layout import py_box

if TYPE_CHECKING:
    from .layout import Layout

Transfer = namedtuple("Transfer", "src dst tensor src_region dst_region box nbytes")
Transfer.__doc__ = ("One transfer: member src sends box of tensor to member dst (src == dst: "
                    "a local copy; src -1: a missing piece dst must restore).")
PlanStats = namedtuple("PlanStats", [f[0] for f in S.PlanStats._fields_ if f[0] != "size"])


class Plan:
    """weft_plan_create(old, new): every byte of a member's new regions arrives exactly
    once; bytes it held are local copies; senders are balanced among holders.

    host_of: host index of each member id (prefer same-host sources); balance_bytes:
    slab size for balancing (0: 1 MiB); allow_missing: list what nobody holds (missing)
    instead of refusing."""

    def __init__(self, old: Layout, new: Layout, host_of: Optional[Sequence[int]] = None,
                 balance_bytes: int = 0, allow_missing: bool = False) -> None:
        p = S.sized(S.PlanParams)
        hosts = None
        if host_of is not None:
            hosts = (c_int * max(len(host_of), 1))(*[int(h) for h in host_of])
            p.host_of, p.num_members = hosts, len(host_of)
        p.balance_bytes = balance_bytes
        p.allow_missing = 1 if allow_missing else 0
        h = c_void_p()
        check(lib.weft_plan_create(old.handle, new.handle, byref(p), byref(h)))
        self._handle = h.value
        self._owner = None
        self.old, self.new = old, new

    @classmethod
    def _wrap(cls, handle, old, new, owner=None):
        """A Plan over @p handle; with @p owner (an object whose _plan_alive(plan) says
        whether it still holds that plan) the plan belongs to the owner and is not freed."""
        obj = cls.__new__(cls)
        obj._handle, obj.old, obj.new, obj._owner = handle, old, new, owner
        return obj

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h and getattr(self, "_owner", None) is None:
            lib.weft_plan_free(h)
        self._handle = None

    def _h(self):
        if self._owner is not None and not self._owner._plan_alive(self):
            raise invalid("the plan belonged to a snapshot's restore, since freed or redone")
        return self._handle

    @property
    def handle(self) -> int:
        """The weft_plan_t pointer as an int (for C extensions)."""
        return self._h()

    def _ndims(self, tensor):
        """Dimensions of tensor @p tensor of the new layout; tensors past it are those a
        plan adds itself (a snapshot restore's blobs: bytes, one dimension)."""
        if tensor >= self.new.num_tensors:
            return 1
        return len(self.new.tensor(tensor).shape)

    def _transfer(self, fn, i):
        t = S.Transfer()
        check(fn(self._h(), i, byref(t)))
        return Transfer(t.src, t.dst, t.tensor, t.src_region, t.dst_region,
                        py_box(t.box, self._ndims(t.tensor)), t.bytes)

    @property
    def num_transfers(self) -> int:
        """Number of transfers of the plan."""
        return lib.weft_plan_num_transfers(self._h())

    @property
    def transfers(self) -> List[Transfer]:
        """Every Transfer, local copies included, in the plan's order."""
        return [self._transfer(lib.weft_plan_transfer, i) for i in range(self.num_transfers)]

    @property
    def missing(self) -> List[Transfer]:
        """Pieces of the new layout nobody holds (allow_missing plans), as Transfers with
        src and src_region -1."""
        n = lib.weft_plan_num_missing(self._h())
        return [self._transfer(lib.weft_plan_missing, i) for i in range(n)]

    def stats(self, member: int = -1) -> PlanStats:
        """PlanStats for @p member, or for the whole plan (-1)."""
        s = S.sized(S.PlanStats)
        check(lib.weft_plan_stats(self._h(), member, byref(s)))
        return PlanStats(*(getattr(s, f) for f in PlanStats._fields))

    @property
    def digest(self) -> int:
        """64-bit digest: ranks that built different plans get different digests."""
        return lib.weft_plan_digest(self._h())

    def summary(self) -> str:
        """weft_plan_print's text: bytes in/out and transfers per member, the bound."""
        h = self._h()
        text, st = capture(lambda f: lib.weft_plan_print(h, f))
        check(st)
        return text
