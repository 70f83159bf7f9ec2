"""Layouts of sharded tensors (weft_layout_t, include/weft/migrate.h).

A layout names tensors (name, dtype, global shape) and, per stable member id, the boxes
of each tensor it holds. A member keeps its regions back to back in one "packed buffer",
in the order they were added, each row-major. Layouts are local values: no context.
"""

from __future__ import annotations

from collections import namedtuple
from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p
from typing import TYPE_CHECKING, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _structs as S
from ._buffer import as_buffer, mark_written
from ._lib import lib
from .dtypes import DType, dtype_of, is_tensor
from .errors import check, invalid

if TYPE_CHECKING:
    from ._types import Array, BoxLike, BytesLike, DTypeLike, TensorRef

Box = namedtuple("Box", "offset extent")
Box.__doc__ = "A box of a tensor in elements: offset and extent per dimension."
TensorInfo = namedtuple("TensorInfo", "name dtype shape nbytes")
Region = namedtuple("Region", "tensor box nbytes packed_offset")
Region.__doc__ = "Region k of a member: tensor index, box, bytes, offset in its packed buffer."


def c_box(box: BoxLike) -> S.Box:
    """A weft_box_t from a Box or an (offset, extent) pair."""
    offset, extent = box
    if len(offset) != len(extent) or not 1 <= len(offset) <= S.LAYOUT_MAX_DIMS:
        raise invalid("a box needs 1..%d offsets and as many extents" % S.LAYOUT_MAX_DIMS)
    b = S.Box()
    for i, (o, e) in enumerate(zip(offset, extent)):
        b.offset[i], b.extent[i] = int(o), int(e)
    return b


def py_box(b: S.Box, ndims: int) -> Box:
    """A weft_box_t as a Box of @p ndims dimensions."""
    return Box(tuple(b.offset[:ndims]), tuple(b.extent[:ndims]))


def _ints(values):
    vals = [int(v) for v in values]
    return (c_int * max(len(vals), 1))(*vals), len(vals)


def _bytes_view(x):
    """A NumPy view of the bytes of an array or CPU tensor, shaped like it, with an
    unsigned type of its element size (so bfloat16 copies as well as any other)."""
    if is_tensor(x):
        if x.device.type != "cpu":
            raise invalid("pack/unpack need CPU tensors")
        import torch
        x = x.detach()
        x = x.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
                   [x.element_size()]).numpy()
    if not isinstance(x, np.ndarray):
        raise invalid("expected a numpy.ndarray or torch.Tensor, got %s" % type(x).__name__)
    return x.view("u%d" % x.itemsize)


class Layout:
    """Tensors and who holds which part of them."""

    def __init__(self) -> None:
        h = c_void_p()
        check(lib.weft_layout_create(byref(h)))
        self._handle = h.value

    @classmethod
    def _wrap(cls, handle):
        obj = cls.__new__(cls)
        obj._handle = handle
        return obj

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Union[Array, Tuple[Sequence[int], DTypeLike]]]
                     ) -> Layout:
        """A layout with one tensor per entry of @p tensors (name -> array or tensor, or
        name -> (shape, dtype)), in that order, and no regions yet."""
        layout = cls()
        for name, t in tensors.items():
            if isinstance(t, tuple):
                shape, dtype = t
            else:
                shape, dtype = tuple(t.shape), dtype_of(t)
            layout.add_tensor(name, dtype, shape)
        return layout

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h:
            lib.weft_layout_free(h)
            self._handle = None

    @property
    def handle(self) -> int:
        """The weft_layout_t pointer as an int (for C extensions)."""
        return self._handle

    # -- building ------------------------------------------------------------------------
    def add_tensor(self, name: str, dtype: DTypeLike, shape: Sequence[int]) -> int:
        """Add tensor @p name (dtype, global shape of 1..8 dimensions); returns its index."""
        shape = [int(s) for s in shape]
        arr = (c_uint64 * max(len(shape), 1))(*shape)
        index = c_int()
        check(lib.weft_layout_add_tensor(self._handle, name.encode(), int(dtype_of(dtype)),
                                         len(shape), arr, byref(index)))
        return index.value

    def index(self, tensor: TensorRef) -> int:
        """Index of a tensor given by index or name."""
        if isinstance(tensor, str):
            return self.find(tensor)
        return int(tensor)

    def add_region(self, member: int, tensor: TensorRef, box: BoxLike) -> Layout:
        """Member @p member holds @p box (a Box or (offset, extent)) of @p tensor."""
        b = c_box(box)
        check(lib.weft_layout_add_region(self._handle, member, self.index(tensor), byref(b)))
        return self

    def shard(self, tensor: TensorRef, dim: int, members: Iterable[int]) -> Layout:
        """Even slabs of @p tensor along dimension @p dim over @p members, in order."""
        arr, n = _ints(members)
        check(lib.weft_layout_shard(self._handle, self.index(tensor), dim, arr, n))
        return self

    def flat(self, members: Iterable[int],
             tensors: Optional[Iterable[TensorRef]] = None) -> Layout:
        """Flat (ZeRO) partitions of @p tensors (all, in order, by default) over members."""
        if tensors is None:
            tensors = range(self.num_tensors)
        t_arr, nt = _ints(self.index(t) for t in tensors)
        m_arr, nm = _ints(members)
        check(lib.weft_layout_flat(self._handle, t_arr, nt, m_arr, nm))
        return self

    def whole(self, tensor: TensorRef, member: int) -> Layout:
        """All of @p tensor on @p member."""
        check(lib.weft_layout_whole(self._handle, self.index(tensor), member))
        return self

    def replicate(self, tensor: TensorRef, members: Iterable[int]) -> Layout:
        """All of @p tensor on every one of @p members."""
        arr, n = _ints(members)
        check(lib.weft_layout_replicate(self._handle, self.index(tensor), arr, n))
        return self

    def keep(self, members: Iterable[int]) -> Layout:
        """A copy keeping only the regions of @p members (the survivors of a repair)."""
        arr, n = _ints(members)
        out = c_void_p()
        check(lib.weft_layout_keep(self._handle, arr, n, byref(out)))
        return Layout._wrap(out.value)

    def absorb(self, members: Iterable[int]) -> Layout:
        """The re-cut after a repair that moves the least: each of @p members keeps its
        regions, first, and gets an even part (by rows) of what only leavers held."""
        arr, n = _ints(members)
        out = c_void_p()
        check(lib.weft_layout_absorb(self._handle, arr, n, byref(out)))
        return Layout._wrap(out.value)

    # -- reading -------------------------------------------------------------------------
    @property
    def num_tensors(self) -> int:
        """Number of tensors of the layout."""
        return lib.weft_layout_num_tensors(self._handle)

    def tensor(self, tensor: TensorRef) -> TensorInfo:
        """TensorInfo(name, dtype, shape, nbytes) of a tensor (index or name)."""
        info = S.TensorInfo()
        check(lib.weft_layout_tensor(self._handle, self.index(tensor), byref(info)))
        return TensorInfo(info.name.decode(), DType(info.dtype),
                          tuple(info.shape[:info.ndims]), info.bytes)

    @property
    def tensors(self) -> List[TensorInfo]:
        """TensorInfo (name, shape, dtype) of every tensor, in order."""
        return [self.tensor(i) for i in range(self.num_tensors)]

    def find(self, name: str) -> int:
        """The index of the tensor named @p name (weft.InvalidArgument if none)."""
        index = c_int()
        check(lib.weft_layout_find(self._handle, name.encode(), byref(index)))
        return index.value

    def num_regions(self, member: int) -> int:
        """Number of regions @p member holds."""
        return lib.weft_layout_num_regions(self._handle, member)

    def region(self, member: int, k: int) -> Region:
        """Region @p k of @p member (its tensor, box and place in the packed buffer)."""
        t, b, nbytes, off = c_int(), S.Box(), c_size_t(), c_size_t()
        check(lib.weft_layout_region(self._handle, member, k, byref(t), byref(b), byref(nbytes),
                                     byref(off)))
        ndims = len(self.tensor(t.value).shape)
        return Region(t.value, py_box(b, ndims), nbytes.value, off.value)

    def regions(self, member: int) -> List[Region]:
        """Every Region of @p member, in packed-buffer order."""
        return [self.region(member, k) for k in range(self.num_regions(member))]

    def packed_bytes(self, member: int) -> int:
        """Bytes of @p member's packed buffer."""
        return lib.weft_layout_packed_bytes(self._handle, member)

    def check_complete(self) -> None:
        """InvalidArgument unless every element of every tensor is held by someone."""
        check(lib.weft_layout_check_complete(self._handle))

    # -- packed buffers (NumPy, or CPU tensors) -------------------------------------------
    def pack(self, member: int, tensors: Mapping[str, Array],
             out: Optional[Array] = None) -> Array:
        """@p member's packed buffer (uint8, or @p out) filled from the whole tensors
        (name -> array or CPU tensor of the global shape)."""
        out = np.zeros(self.packed_bytes(member), np.uint8) if out is None else out
        flat = _bytes_view(out).reshape(-1).view(np.uint8)
        for region, src, view in self._region_views(member, tensors, flat):
            view[...] = src
        return out

    def unpack(self, member: int, packed: Array, tensors: Mapping[str, Array]) -> None:
        """Copy @p member's regions from its packed buffer into the whole tensors."""
        flat = _bytes_view(packed).reshape(-1).view(np.uint8)
        for region, dst, view in self._region_views(member, tensors, flat):
            dst[...] = view

    def _region_views(self, member, tensors, flat):
        infos = self.tensors
        needed = self.packed_bytes(member)
        if flat.size < needed:
            raise invalid("packed buffer of member %d has %d bytes, needs %d" %
                          (member, flat.size, needed))
        for r in self.regions(member):
            info = infos[r.tensor]
            whole = _bytes_view(tensors[info.name])
            if tuple(whole.shape) != info.shape:
                raise invalid("tensor %s has shape %s, the layout says %s" %
                              (info.name, tuple(whole.shape), info.shape))
            part = whole[tuple(slice(o, o + e) for o, e in zip(*r.box))]
            view = flat[r.packed_offset:r.packed_offset + r.nbytes].view(whole.dtype)
            yield r, part, view.reshape(r.box.extent)


def box_copy(dst: BytesLike, dst_box: BoxLike, src: BytesLike, src_box: BoxLike, box: BoxLike,
             elem_size: int) -> None:
    """weft_box_copy(): copy @p box of a tensor from @p src (holding @p src_box
    row-major) into @p dst (holding @p dst_box); boxes are Box or (offset, extent)."""
    d = as_buffer(dst, "box_copy dst", writable=True, typed=False)
    s = as_buffer(src, "box_copy src", typed=False)
    db, sb, b = c_box(dst_box), c_box(src_box), c_box(box)
    check(lib.weft_box_copy(d.ptr, byref(db), s.ptr, byref(sb), byref(b), len(box[0]),
                            elem_size))
    mark_written(d)
