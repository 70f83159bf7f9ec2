"""weft as a torch.distributed backend: `dist.init_process_group("weft")`.

Importing weft.torch registers the backend "weft" and the rendezvous "weft://". Under a
launcher that starts weft ranks (weftrun, mpirun or srun with PMIx), the rank, the size and
the store come from weft's own start-up: `dist.init_process_group("weft")` needs no
MASTER_ADDR, and the default "env://" rendezvous, when MASTER_ADDR is not set, takes them
from weft too (for any backend: gloo then rendezvous through weft's store). The store
torch gets (WeftStore) keeps its keys in the job's store (weft.Context.kv_*), so process
groups of other backends made with `dist.new_group(backend="gloo")` find each other
through it.

What the process group does (ProcessGroupWeft):

- allreduce (SUM, PRODUCT, MIN, MAX, AVG), broadcast, allgather and _allgather_base,
  reduce_scatter and _reduce_scatter_base, alltoall_base (equal and uneven splits),
  reduce, barrier, send and recv, on contiguous CPU tensors, on the default context's world
  group;
- each collective runs to completion before it returns, and its Work is made from a
  completed torch.futures.Future (what DistributedDataParallel waits on); a failed call
  raises the weft exception (weft.PeerFailed when a peer died); send and recv start
  weft's isend and irecv and return a Work whose future one thread of the process
  completes (_Completer), so batch_isend_irecv's sends and receives are all posted
  before any is waited for;
- a group of part of the world (`dist.new_group(ranks)`, which every rank calls) is a
  weft subgroup: torch.distributed.new_group is wrapped so that, for the weft backend,
  every rank first splits weft's world (weft_group_split, collective over it; the ranks
  in torch's order), and the backend's creator, which torch calls on members only,
  takes the subgroup.
"""

import importlib
import inspect
import os
from datetime import timedelta

import torch.distributed as dist

from .. import context as _ctx_module
from ..errors import PeerError, invalid
from .process_group import BACKEND, ProcessGroupWeft
from .store import WeftStore

__all__ = ["BACKEND", "ProcessGroupWeft", "WeftStore", "init_process_group", "is_peer_failure",
           "repair"]


# Python objects torch holds only from C++ (a PrefixStore around a WeftStore): pybind11
# finds a Python method of such an object only while Python holds it too.
_keep = []


def _context():
    """The default context, made by weft.init() if the program has not made one."""
    try:
        return _ctx_module.default_context()
    except Exception:  # weft.InvalidArgument: none yet
        return _ctx_module.init()


# The weft subgroup that new_group's split made for this process, until the creator
# takes it (new_group runs on every rank; torch calls the creator on members only).
_split_made = []


def _create(store, rank, world_size, timeout):
    """Backend.register_backend's creator: the subgroup new_group split for this process,
    else the default context's world (rank and size must be weft's)."""
    group = _split_made.pop() if _split_made else _context().world
    if world_size != group.size or rank != group.rank:
        raise invalid("the weft backend made a group where this process is rank %d of %d; "
                      "torch asked for rank %d of %d (a weft group of part of the world "
                      "comes from torch.distributed.new_group, called on every rank)"
                      % (group.rank, group.size, rank, world_size))
    return ProcessGroupWeft(group, timeout)


def _weft_world():
    default = dist.distributed_c10d._get_default_group()
    return default.weft_group if isinstance(default, ProcessGroupWeft) else _context().world


def _wrap_new_group(orig):
    """torch.distributed.new_group, which every rank of the world calls: for the weft
    backend, first split weft's world (weft_group_split, collective over it) so that the
    ranks listed form a subgroup in torch's order (the sorted ranks), which the creator
    then takes; non-members get none."""
    sig = inspect.signature(orig)

    def new_group(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        backend = bound.arguments.get("backend")
        c10d = dist.distributed_c10d
        if not backend and c10d.is_initialized():
            backend = c10d._pg_map[c10d._get_default_group()][0]
        if str(backend).lower() != BACKEND:
            return orig(*args, **kwargs)
        world = _weft_world()
        ranks = bound.arguments.get("ranks")
        ranks = sorted(ranks) if ranks is not None else list(range(world.size))
        me = world.rank
        sub = world.split(0 if me in ranks else -1, ranks.index(me) if me in ranks else 0)
        if sub is not None:
            _split_made.append(sub)
        try:
            return orig(*args, **kwargs)
        finally:
            _split_made.clear()
    new_group.__doc__ = orig.__doc__
    new_group._weft = True
    return new_group


def is_peer_failure(exc):
    """Whether @p exc (or an exception it was raised from) says a peer of a weft group
    failed or the group was revoked: weft.PeerFailed and weft.Revoked, and the
    RuntimeError that torch's C++ (DistributedDataParallel's backward) raises in their
    place, whose text names the status."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, PeerError):
            return True
        text = str(exc)
        if "WEFT_ERR_PEER_FAILED" in text or "WEFT_ERR_REVOKED" in text:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def repair(pg=None):
    """After a peer failure (is_peer_failure), agree with the survivors on who is gone
    and return (new process group, weft.EditInfo). The weft group is repaired in place
    (weft_group_repair); torch fixes a process group's rank and size when it is made, so
    the survivors get a new ProcessGroupWeft on it, and where @p pg is torch's default
    group (None: that one) the new one takes its place, so that dist.get_world_size()
    and every dist.* call without a group use it.

    What to make again: the DistributedDataParallel wrapper (its reducer holds the old
    group and divides by the old size), on the same model, whose parameters the wrapper
    broadcasts from the new rank 0 as it is made; the model and the optimizer stay. A
    survivor whose last step's allreduces all completed before the failure was seen has
    taken that step and the others have not: the broadcast makes them equal again, at
    rank 0's state (restore from a weft.Snapshot to choose the step instead). Groups of
    other backends are not repaired."""
    c10d = dist.distributed_c10d
    old = c10d._get_default_group() if pg is None else pg
    if not isinstance(old, ProcessGroupWeft):
        raise invalid("weft.torch.repair: %r is not a weft process group" % (old,))
    info = old.weft_group.repair()
    new = ProcessGroupWeft(old.weft_group, old._timeout)
    if old is c10d.GroupMember.WORLD:
        _install_default(new)
    return new, info


def _install_default(new, store=None):
    """Make @p new torch's default process group (torch 1.13's tables: GroupMember.WORLD,
    _pg_map, _pg_names, _pg_group_ranks), in place of the one there, whose store and name
    it takes; else with @p store, as init_process_group would have set them."""
    c10d = dist.distributed_c10d
    old = c10d.GroupMember.WORLD
    if old is not None and old in c10d._pg_map:
        backend_store, name = c10d._pg_map.pop(old), c10d._pg_names.pop(old)
        c10d._pg_group_ranks.pop(old, None)
    else:
        backend_store, name = (BACKEND, store), "0"
        c10d._group_count = max(c10d._group_count, 1)
    c10d._pg_map[new] = backend_store
    c10d._pg_names[new] = name
    c10d._pg_group_ranks[new] = {i: i for i in range(new.size())}
    c10d._update_default_pg(new)
    c10d._backend = BACKEND


def init_process_group(timeout=timedelta(minutes=30), join_timeout=120.0):
    """torch.distributed on weft for a process a weft launcher started; returns the
    default ProcessGroupWeft. The job's first processes run
    dist.init_process_group("weft"). A replacement (WEFT_JOIN=1: weftrun --elastic
    --replace) joins the world group instead, waiting up to @p join_timeout seconds for
    the members to admit it (ElasticState.recover), and is made torch's default group
    directly: torch's start-up barrier counts the processes that start together, and
    the members do not start again."""
    if os.environ.get("WEFT_JOIN") != "1":
        dist.init_process_group(BACKEND, timeout=timeout)
        return dist.distributed_c10d._get_default_group()
    ctx = _context()
    group = ctx.join("world", timeout=join_timeout)
    store = WeftStore(ctx, timeout)
    _keep.append(store)
    pg = ProcessGroupWeft(group, timeout)
    _install_default(pg, dist.PrefixStore("default_pg", store))
    return pg


def _under_weft_launcher():
    return "WEFT_STORE" in os.environ or "PMIX_RANK" in os.environ


def _weft_rendezvous(url, timeout=timedelta(seconds=300), **kwargs):
    """The rendezvous "weft://" (and "env://" without MASTER_ADDR under a weft launcher):
    the store, rank and size of weft's world."""
    if os.environ.get("WEFT_JOIN") == "1":
        raise invalid("this process is a replacement (WEFT_JOIN=1): it joins the members' "
                      "group with weft.torch.init_process_group(), not "
                      "torch.distributed.init_process_group")
    ctx = _context()
    from urllib.parse import parse_qs, urlparse
    query = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
    for what, mine in (("rank", ctx.rank), ("world_size", ctx.size)):
        if what in query and int(query[what]) not in (-1, mine):
            raise invalid("init_process_group: %s %s, but weft's launcher made this process "
                          "%s %d" % (what, query[what], what, mine))
    store = WeftStore(ctx, timeout)
    _keep.append(store)
    yield store, ctx.rank, ctx.size


def _register():
    # The module, which torch.distributed's function of the same name hides.
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    if BACKEND.upper() not in dist.Backend._plugins:
        # torch 2.x takes the devices a backend serves; 1.13 has no such argument.
        params = inspect.signature(dist.Backend.register_backend).parameters
        extra = {"devices": ["cpu"]} if "devices" in params else {}
        dist.Backend.register_backend(BACKEND, _create, **extra)
    handlers = rdzv._rendezvous_handlers
    if "weft" not in handlers:
        rdzv.register_rendezvous_handler("weft", _weft_rendezvous)
    c10d = dist.distributed_c10d
    if not getattr(c10d.new_group, "_weft", False):
        c10d.new_group = _wrap_new_group(c10d.new_group)
        dist.new_group = c10d.new_group
    env = handlers.get("env")
    if env is not None and not getattr(env, "_weft", False):
        def env_or_weft(url, **kwargs):
            if "MASTER_ADDR" not in os.environ and _under_weft_launcher():
                return _weft_rendezvous(url, **kwargs)
            return env(url, **kwargs)
        env_or_weft._weft = True
        handlers["env"] = env_or_weft


_register()
