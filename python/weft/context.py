"""The context (weft_init / weft_finalize) and the module-level default context.

One lock per context serialises the binding's calls into weft: the C API allows one
thread at a time per context, and ctypes releases the GIL during a call.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref
from collections import namedtuple
from contextlib import contextmanager
from ctypes import byref, c_char_p, c_void_p
from typing import TYPE_CHECKING, List, Literal, Mapping, Optional, Tuple

from ._lib import lib
from .errors import check, error_for, invalid, last_error
from .kv import KVMixin

if TYPE_CHECKING:
    from .group import Group

TIMEOUT_DEFAULT = (1 << 64) - 1  # WEFT_TIMEOUT_DEFAULT: the context's WEFT_TIMEOUT_MS

Setting = namedtuple("Setting", "name default doc value")


def timeout_ns(timeout: Optional[float]) -> int:
    """Seconds (None: the context's default) as the nanoseconds weft waits take."""
    if timeout is None:
        return TIMEOUT_DEFAULT
    if timeout < 0:
        raise invalid("timeout must be >= 0 seconds, not %r" % (timeout,))
    return int(timeout * 1e9)


def timeout_ms(timeout: float) -> int:
    """Seconds as whole milliseconds (for repair, grow and join)."""
    if timeout is None or timeout < 0:
        raise invalid("timeout must be >= 0 seconds, not %r" % (timeout,))
    return int(timeout * 1000)


class Context(KVMixin):
    """A process's weft instance (weft_ctx_t). Made by weft.init(); a context manager
    that finalizes on exit."""

    def __init__(self, handle: int, job: Optional[Tuple[str, str]] = None,
                 namespace: Optional[str] = None) -> None:
        from .group import Group
        self._handle = handle
        self._job = job  # (WEFT_STORE, namespace asked for): see init()
        self._namespace = namespace
        self._lock = threading.RLock()
        self._children = []  # weak references, in creation order
        self._orphans = []   # (handle, kept buffers, group) of requests dropped in flight
        self._retired = []   # buffers weft may still read after a failure, until finalize
        world = c_void_p()
        check(lib.weft_ctx_world(handle, byref(world)), handle)
        self._world = Group(self, world.value, owned=False)
        _live.add(self)

    # -- calls into weft ---------------------------------------------------------------
    def _h(self):
        if self._handle is None:
            raise invalid("the weft context was finalized")
        return self._handle

    def _call(self, fn, *args):
        """fn(*args) under the context's lock; raises for a negative status."""
        with self._lock:
            h = self._h()
            st = fn(*args)
            if st < 0:
                raise error_for(st, last_error(h))
            return st

    def _track(self, obj):
        """Remember @p obj (weakly) so finalize can release it first."""
        self._children.append(weakref.ref(obj))
        if len(self._children) >= 64 and len(self._children) % 64 == 0:
            self._children = [r for r in self._children if r() is not None]

    def _reap_orphans(self):
        """Free requests that were dropped in flight and have completed since."""
        if not self._orphans:
            return
        with self._lock:
            if self._handle is None:
                return
            keep = []
            for orphan in self._orphans:
                if lib.weft_test(orphan[0]) == 1:  # WEFT_INPROGRESS
                    keep.append(orphan)
                else:
                    lib.weft_req_free(orphan[0])
            self._orphans = keep

    def _release_group(self, group):
        """Before @p group is freed: release what was made on it, newest first (weft
        frees a group's requests with it, and a vocabulary must go before its group)."""
        with self._lock:
            for ref in reversed(self._children):
                obj = ref()
                if obj is not None and getattr(obj, "_owner_group", None) is group:
                    obj._release(finalizing=False)
            for orphan in self._orphans:
                if orphan[2] is group:
                    lib.weft_req_free(orphan[0])
            self._orphans = [o for o in self._orphans if o[2] is not group]

    # -- public ------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        """The weft_ctx_t pointer as an int (for C extensions)."""
        return self._h()

    @property
    def closed(self) -> bool:
        """True once the context was finalized."""
        return self._handle is None

    @property
    def world(self) -> Group:
        """The group of all ranks of the job (owned by the context)."""
        self._h()
        return self._world

    @property
    def rank(self) -> int:
        """This process's rank in the world group."""
        return self.world.rank

    @property
    def size(self) -> int:
        """Number of ranks of the world group."""
        return self.world.size

    @property
    def namespace(self) -> Optional[str]:
        """The prefix of this context's keys in the store: WEFT_NAMESPACE as it was at
        weft.init(), or the one it chose for a later context of the job (see there)."""
        return self._namespace

    @property
    def last_error(self) -> str:
        """weft_last_error(): detail of the last error on this context."""
        return last_error(self._h())

    def join(self, name: str = "world", timeout: float = 60.0) -> Group:
        """weft_group_join(): join group @p name as a new member (a process started with
        WEFT_JOIN=1, e.g. a replacement of `weftrun --elastic --replace`). Returns the
        group once the members admitted this process at their grow or repair."""
        from .group import Group
        g = c_void_p()
        self._call(lib.weft_group_join, self._h(), name.encode(), timeout_ms(timeout), byref(g))
        return Group(self, g.value, owned=False)

    def settings(self) -> List[Setting]:
        """Every WEFT_* setting as (name, default, doc, value in effect)."""
        out = []
        with self._lock:
            h = self._h()
            i = 0
            while True:
                value = c_char_p()
                e = lib.weft_config_entry(h, i, byref(value))
                if not e:
                    return out
                e = e.contents
                out.append(Setting(e.name.decode(), e.deflt.decode(), e.doc.decode(),
                                   value.value.decode() if value.value is not None else None))
                i += 1

    def finalize(self) -> None:
        """weft_finalize(): release everything made from this context (requests still in
        flight are cancelled, vocabularies destroyed), then the context. Collective over
        the job: every rank calls it. A second call does nothing."""
        with self._lock:
            if self._handle is None:
                return
            for ref in reversed(self._children):
                obj = ref()
                if obj is not None:
                    obj._release(finalizing=True)
            self._children = []
            for orphan in self._orphans:
                lib.weft_req_free(orphan[0])
            self._orphans = []
            h, self._handle = self._handle, None
            self._retired = []
            _live.discard(self)
            check(lib.weft_finalize(h))

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.finalize()
        return False

    def __repr__(self):
        if self._handle is None:
            return "<weft.Context finalized>"
        return "<weft.Context rank %d of %d>" % (self.rank, self.size)


_live = set()  # contexts not finalized yet (finalized at exit)
_default = None
_init_lock = threading.Lock()
_made = {}  # (WEFT_STORE, namespace asked for) -> contexts this process made on it


def _job_key():
    """(store address, namespace asked for) of the job weft_init would join, or None
    without a store (a single rank: its contexts share nothing)."""
    store = os.environ.get("WEFT_STORE")
    if not store:
        return None
    return store, os.environ.get("WEFT_NAMESPACE") or "weft"


def _refuse_second(job):
    """A context of this job still open in this process: the store would refuse a second
    claim of this rank (and blame a duplicate launch); say what is the matter instead."""
    for c in list(_live):
        if c._job == job and not c.closed:
            err = invalid(
                "a weft context is already open in this process for this job (%r, store %s, "
                "namespace '%s'): use it (the first one is weft.default_context()), or "
                "finalize it on every rank before weft.init() makes a new one; two contexts "
                "of one job at once need different namespaces (weft.init(settings="
                "{'NAMESPACE': 'other'}) on every rank)" % (c, job[0], c.namespace))
            err.context = c
            raise err


@contextmanager
def _namespace(ns):
    """WEFT_NAMESPACE set to @p ns (None: left alone) for the duration of a weft_init."""
    if ns is None:
        yield
        return
    old = os.environ.get("WEFT_NAMESPACE")
    os.environ["WEFT_NAMESPACE"] = ns
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("WEFT_NAMESPACE", None)
        else:
            os.environ["WEFT_NAMESPACE"] = old


def init(settings: Optional[Mapping[str, object]] = None) -> Context:
    """weft_init(): create a context from the launcher's environment (weftrun; srun
    --mpi=pmix or mpirun through PMIx; Hydra's mpiexec, torchrun or srun with WEFT_STORE
    and WEFT_JOB_TOKEN_FILE from weftrun --store-only; a single rank without one). Collective over the job. On failure the exception's detail says
    why (weft_last_error of the failed weft_init: a bad WEFT_* setting names the variable
    and its value).

    @p settings: optional WEFT_* settings for this process ({"TIMEOUT_MS": 5000} or
    {"WEFT_TIMEOUT_MS": 5000}), put into os.environ before the call. The first context
    becomes the default one that weft.world(), weft.rank() ... use, and once it is
    finalized the next one does.

    Again after finalize: in a job with a store (weftrun), a process's next context
    makes a new world of the same ranks (every rank calls weft.init() again, as the
    first time). The store keeps the finished job's keys, so that context uses the
    namespace "<namespace>.<n>" for its n-th context (WEFT_NAMESPACE, "weft" by default:
    "weft.2", "weft.3", ...; Context.namespace says which), the same on every rank that
    made as many. A replacement process that joins (weftrun --replace) finds the first
    namespace only, and weftrun's own failure notices go to the default namespace:
    failures in a later context are seen by its heartbeats (WEFT_FAILURE_TIMEOUT_MS).
    While a context of the job is open in this process, weft.init() raises
    weft.InvalidArgument saying so (its `context` attribute is that context); without a
    store (a single rank) contexts share nothing and several may be open."""
    global _default
    for name, value in (settings or {}).items():
        key = name if name.startswith("WEFT_") else "WEFT_" + name
        os.environ[key] = str(value)
    with _init_lock:
        job = _job_key()
        made = 0
        if job is not None:
            _refuse_second(job)
            made = _made.get(job, 0)
        ns = "%s.%d" % (job[1], made + 1) if made else None
        h = c_void_p()
        with _namespace(ns):
            check(lib.weft_init(None, byref(h)))
        ctx = Context(h.value, job, ns or os.environ.get("WEFT_NAMESPACE") or "weft")
        if job is not None:
            _made[job] = made + 1
        if _default is None or _default.closed:
            _default = ctx
    return ctx


def default_context() -> Context:
    """The context weft.init() made first (and not yet finalized)."""
    if _default is None or _default.closed:
        raise invalid("weft.init() has not been called (or the context was finalized)")
    return _default


def finalize() -> None:
    """Finalize the default context (weft.init()'s)."""
    if _default is not None:
        _default.finalize()


@atexit.register
def _finalize_at_exit():
    # A program that ends normally leaves together with the others, as weft_finalize
    # does; one that dies of an uncaught exception just exits (weftrun reports it).
    if hasattr(sys, "last_value"):
        return
    for ctx in list(_live):
        try:
            ctx.finalize()
        except Exception:
            pass
