"""Activations offloaded to the SSD tier: the tensors autograd saves in the forward pass
for the backward pass are written to a spill space (weft.Spill) while the forward pass
goes on, and read back, ahead of need, during backward.

    weft.init()                         # a single process needs no launcher
    off = weft.torch.ActivationOffload("/scratch/me/act", layers=model.blocks, keep_last=1)
    for x, y in batches:
        with off:                       # saved tensors of this forward pass
            loss = loss_fn(model(x), y)
        loss.backward()                 # read back in reverse order, ahead of need
        print(off.stats())

What it does with each tensor autograd saves inside the `with` block:

- **Kept in memory**: tensors under `min_bytes`, parameters (they stay in memory
  anyway), CUDA tensors, tensors that are not contiguous, and those saved while one of
  the last `keep_last` modules of `layers` runs (their backward comes first, so writing
  them would only be read back at once; what runs after the last layer, such as the
  loss, counts as the last layer).
- **Written** otherwise, in the background: the call returns at once; the space copies
  the bytes out in chunks, and the tensor's memory is let go when they are all taken.
- **Deduplicated**: a tensor saved again (the same storage, shape, strides and version,
  still alive) is written once; chunks of equal content are written once by the space.
- **Forwarded**: a tensor whose bytes have not all been taken when backward needs it is
  handed back from memory, and its write is dropped.
- **Prefetched**: when backward unpacks a tensor, reads of the tensors saved before it
  start, newest first, until `prefetch_bytes` are read ahead (default: the largest
  layer's written bytes when `layers` is given, else 64 MiB).
- **Failures** (a full directory, an I/O error, a chunk that comes back corrupted) raise
  weft.OtherError from the backward pass, naming the tensor and the reason; a wrong
  value is never returned.
- **Nothing left behind**: blocks are freed when unpacked (or when autograd drops the
  graph); the space's file has no name, so a killed process leaves nothing.
- **Paced** when `max_rate=` (bytes per second) is given: the space starts chunk reads
  and writes no faster, leaving CPU and device time to the step's collectives.

Values come back bit for bit: losses and gradients equal those of a run without it.
"""

from __future__ import annotations

import time
import weakref
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from ..context import Context
from ..errors import Error, OtherError
from ..spill import Spill


class OffloadStats(NamedTuple):
    """What an ActivationOffload did since it was made (or since reset_stats())."""
    bytes_saved: int         #: of every tensor autograd saved in its blocks
    bytes_kept: int          #: left in memory (small, parameters, last layers, ...)
    bytes_offloaded: int     #: handed to the spill space
    bytes_deduplicated: int  #: saved again while an earlier save of them was held
    bytes_forwarded: int     #: handed back from memory: their write was not done
    bytes_read: int          #: read back from the spill space
    bytes_written: int       #: chunk bytes the space wrote (less its own dedup)
    resident_peak: int       #: most bytes of saved tensors held in memory at once
    wait_s: float            #: backward's time waiting for reads


class _Saved:
    """One offloaded tensor (or another save of it)."""
    __slots__ = ("owner", "bid", "alive", "kept", "shape", "dtype", "nbytes", "source",
                 "loaded", "reading", "served", "refs", "failed", "__weakref__")

    def __init__(self, owner, bid, t, kept=False):
        self.owner = owner
        self.bid = bid          # None for a tensor kept in memory
        self.alive = True       # until its last unpack, or the graph is dropped
        self.kept = t if kept else None
        self.shape, self.dtype, self.nbytes = t.shape, t.dtype, t.numel() * t.element_size()
        self.source = t         # the tensor, until its bytes are all taken
        self.loaded = None      # the tensor read back
        self.reading = False
        self.served = False     # counted as read or forwarded
        self.refs = 1           # unpacks still to come
        self.failed = None

    def __del__(self):
        if self.alive:  # the graph was dropped without a backward pass
            try:
                self.owner._drop(self)
            except Exception:
                pass


class ActivationOffload:
    """A context manager that offloads tensors saved for backward to a spill space in
    directory @p path (weft.Spill of context @p ctx, default weft.init()'s: created 0700,
    a private unlinked file; @p spill_args go to it). Reusable across steps; close() (or
    garbage collection) ends it. See the module's text."""

    def __init__(self, path: str, min_bytes: int = 1 << 20,
                 layers: Optional[Sequence[torch.nn.Module]] = None, keep_last: int = 0,
                 prefetch_bytes: Optional[int] = None, spill: Optional[Spill] = None,
                 enabled: bool = True, ctx: Optional[Context] = None,
                 **spill_args: int) -> None:
        if keep_last and not layers:
            raise ValueError("ActivationOffload: keep_last needs layers")
        if keep_last < 0 or min_bytes < 0 or (prefetch_bytes is not None and prefetch_bytes < 0):
            raise ValueError("ActivationOffload: keep_last, min_bytes and prefetch_bytes "
                             "must be >= 0")
        self.spill = spill if spill is not None else Spill(path, ctx=ctx, **spill_args)
        self._own_spill = spill is None
        self.enabled = bool(enabled)  # False: keep everything, count only (a baseline)
        self.min_bytes = int(min_bytes)
        self.keep_last = int(keep_last)
        self.prefetch_bytes = prefetch_bytes
        self._layers = list(layers or [])
        self._layer = -1
        self._layer_bytes: Dict[int, int] = {}
        self._handles = [m.register_forward_pre_hook(self._make_pre_hook(i))
                         for i, m in enumerate(self._layers)]
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._by_key: Dict[Tuple, Tuple[weakref.ref, _Saved]] = {}
        self._order: List[weakref.ref] = []   # offloaded saves in order, for prefetch
        self._cursor = -1                     # next position to prefetch, going down
        self._ahead = 0                       # bytes read ahead and not yet unpacked
        self._pending: Dict[int, weakref.ref] = {}  # bid -> save whose source is held
        self._active = False
        self._resident = 0
        self.reset_stats()

    # ---- the context ----
    def __enter__(self) -> ActivationOffload:
        if self._active:
            raise RuntimeError("ActivationOffload: already active")
        self._active = True
        self._layer = -1
        self._order, self._cursor, self._ahead = [], -1, 0
        self._layer_bytes = {}
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        self._active = False
        self._by_key.clear()  # saves of later blocks do not match this one's

    def _make_pre_hook(self, i):
        def hook(module, args):
            if self._active:
                self._layer = i
        return hook

    # ---- pack: in the forward pass ----
    def _keep(self, t: torch.Tensor) -> bool:
        if not self.enabled:
            return True
        if t.device.type != "cpu" or not t.is_contiguous() or t.layout != torch.strided:
            return True
        if t.numel() * t.element_size() < self.min_bytes:
            return True
        n = len(self._layers)
        return self.keep_last > 0 and self._layer >= n - self.keep_last

    def _pack(self, t: torch.Tensor):
        nbytes = t.numel() * t.element_size()
        self._st["bytes_saved"] += nbytes
        self._poll()
        if isinstance(t, torch.nn.Parameter) or (t.is_leaf and t.requires_grad):
            self._st["bytes_kept"] += nbytes
            return t  # a parameter: in memory anyway, and no activation
        key = (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()), t._version)
        owner = t._base if t._base is not None else t  # views of one tensor: one owner
        hit = self._by_key.get(key)
        if hit is not None and hit[0]() is owner and hit[1].alive:
            hit[1].refs += 1
            self._st["bytes_deduplicated"] += nbytes
            return hit[1]
        if self._keep(t):
            self._st["bytes_kept"] += nbytes
            s = _Saved(self, None, t.detach(), kept=True)  # no grad_fn: no cycle
            self._by_key[key] = (weakref.ref(owner), s)
            self._add_resident(nbytes)
            return s
        bid = self.spill.write(t.detach())
        s = _Saved(self, bid, t.detach())
        self._by_key[key] = (weakref.ref(owner), s)
        self._order.append(weakref.ref(s))
        self._cursor = len(self._order) - 1
        self._pending[bid] = weakref.ref(s)
        self._st["bytes_offloaded"] += nbytes
        self._layer_bytes[self._layer] = self._layer_bytes.get(self._layer, 0) + nbytes
        self._add_resident(nbytes)
        return s

    def _poll(self) -> None:
        """Let go of sources whose bytes the space has taken."""
        for bid, ref in list(self._pending.items()):
            s = ref()
            if s is None or not s.alive:
                self._pending.pop(bid, None)
                continue
            try:
                st = self.spill.state(bid)
            except Error as e:
                s.failed = e
                st = Spill.SOURCE_FREE
            if st & Spill.SOURCE_FREE:
                del self._pending[bid]
                if s.source is not None:
                    s.source = None
                    self._add_resident(-s.nbytes)

    def _add_resident(self, n: int) -> None:
        self._resident += n
        if self._resident > self._st["resident_peak"]:
            self._st["resident_peak"] = self._resident

    # ---- unpack: in the backward pass ----
    def _prefetch(self) -> None:
        budget = self.prefetch_bytes
        if budget is None:
            budget = max(self._layer_bytes.values()) if self._layers and self._layer_bytes \
                else 64 << 20
        while self._cursor >= 0 and self._ahead < budget:
            s = self._order[self._cursor]()
            self._cursor -= 1
            if s is None or not s.alive or s.source is not None or s.reading or \
                    s.loaded is not None or s.failed is not None:
                continue
            self._start_read(s)

    def _start_read(self, s: _Saved) -> None:
        out = torch.empty(s.shape, dtype=s.dtype)
        try:
            self.spill.read(s.bid, out)
        except Error as e:
            s.failed = e
            return
        s.loaded, s.reading = out, True
        self._ahead += s.nbytes
        self._add_resident(s.nbytes)

    def _unpack(self, s):
        if isinstance(s, torch.Tensor):
            return s
        if not s.alive:
            raise RuntimeError("ActivationOffload: a saved tensor was unpacked after its "
                               "block was freed (a second backward needs retain_graph "
                               "without offload)")
        self._poll()
        self._prefetch()
        try:
            out = self._get(s)
        finally:
            s.refs -= 1
            if s.refs == 0:
                self._drop(s)
        return out

    def _get(self, s: _Saved) -> torch.Tensor:
        if s.kept is not None:
            return s.kept
        if s.failed is not None:
            raise self._failure(s, s.failed)
        if s.source is not None:  # forwarded: the write is still under way
            if not s.served:
                s.served = True
                self._st["bytes_forwarded"] += s.nbytes
            return s.source
        if s.loaded is not None and not s.reading:  # another save of it, read already
            return s.loaded
        if not s.reading:
            self._start_read(s)
            if s.failed is not None:
                raise self._failure(s, s.failed)
        t0 = time.perf_counter()
        try:
            self.spill.wait(s.bid, Spill.LOADED)
        except Error as e:
            raise self._failure(s, e) from e
        finally:
            self._st["wait_s"] += time.perf_counter() - t0
        s.reading = False
        self._ahead -= s.nbytes
        if not s.served:
            s.served = True
            self._st["bytes_read"] += s.nbytes
        return s.loaded

    def _failure(self, s: _Saved, e: Error) -> Error:
        return OtherError(e.status, "activation offload: the saved tensor %s %s (%d bytes) "
                          "cannot be read back: %s" % (tuple(s.shape), s.dtype, s.nbytes,
                                                       e.detail or e))

    def _drop(self, s: _Saved) -> None:
        if not s.alive:
            return
        s.alive = False
        bid, s.bid = s.bid, None
        if s.kept is not None:
            s.kept = None
            self._add_resident(-s.nbytes)
            return
        self._pending.pop(bid, None)
        held = (s.source is not None) + (s.loaded is not None)
        if s.loaded is not None and s.reading:  # read ahead, never used
            self._ahead -= s.nbytes
        self._add_resident(-held * s.nbytes)
        s.source = s.loaded = None
        if self.spill._handle is not None:
            self.spill.free(bid)

    # ---- statistics and end ----
    def reset_stats(self) -> None:
        """Start the counters again (resident_peak from what is held now)."""
        self._st = dict.fromkeys(OffloadStats._fields, 0)
        self._st["wait_s"] = 0.0
        self._st["resident_peak"] = self._resident
        self._written0 = self.spill.stats().bytes_written

    def stats(self) -> OffloadStats:
        """The counters (bytes_written from the spill space)."""
        st = dict(self._st)
        st["bytes_written"] = self.spill.stats().bytes_written - self._written0
        return OffloadStats(**st)

    def close(self) -> None:
        """Remove the layer hooks and close the spill space (if this made it)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._own_spill:
            self.spill.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
