"""Running a plan (weft_imigrate / weft_migrate), replanning after a membership
change (weft_migrate_replan_flat), resuming a failed migration (weft_migrate_resume) and
sharing a global batch (weft_batch_share)."""

from __future__ import annotations

from collections import namedtuple
from ctypes import byref, c_int, c_void_p
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Tuple, Union

from . import _structs as S
from ._buffer import as_buffer, mark_written
from ._lib import lib
from .errors import Error, check, invalid
from .layout import Layout
from .plan import Plan
from .request import Request

if TYPE_CHECKING:
    from ._types import BytesLike, OptBytesT
    from .group import Group

BatchShare = namedtuple("BatchShare", "first samples micro_batches micro_size last_micro "
                                      "grad_scale")


def _params(plan, priority, max_staged_bytes, resume):
    p = S.sized(S.MigrateParams)
    if resume is not None:
        p.resume_buf = resume.ptr
    keep = None
    if priority is not None:
        if isinstance(priority, dict):
            values = [0] * plan.new.num_tensors
            for name, prio in priority.items():
                values[plan.new.index(name)] = int(prio)
        else:
            values = [int(v) for v in priority]
        keep = (c_int * max(len(values), 1))(*values)
        p.priority, p.num_priorities = keep, len(values)
    p.max_staged_bytes = max_staged_bytes
    return p, keep


def _buffers(group, plan, old_buf, new_buf, resume_buf=None):
    me = group.member_id()
    need_old, need_new = plan.old.packed_bytes(me), plan.new.packed_bytes(me)
    old = new = resume = None
    if old_buf is not None:
        old = as_buffer(old_buf, "migrate old_buf", typed=False)
    if new_buf is not None:
        new = as_buffer(new_buf, "migrate new_buf", writable=True, typed=False)
    if resume_buf is not None:
        resume = as_buffer(resume_buf, "migrate resume_buf", typed=False)
    for what, b, need in (("old_buf", old, need_old), ("new_buf", new, need_new)):
        have = b.nbytes if b is not None else 0
        if have < need:
            raise invalid("migrate: %s has %d bytes; member %d's packed buffer needs %d" %
                          (what, have, me, need))
    if resume is not None and new is not None and resume.nbytes and new.nbytes and \
            resume.ptr < new.ptr + new.nbytes and new.ptr < resume.ptr + resume.nbytes:
        raise invalid("migrate: resume_buf overlaps new_buf (give the resumed migration a "
                      "new buffer)")
    return old, new, resume


def imigrate(group: Group, plan: Plan, old_buf: Optional[BytesLike], new_buf: Optional[BytesLike],
             priority: Union[Sequence[int], Mapping[str, int], None] = None,
             max_staged_bytes: int = 0, resume_buf: Optional[BytesLike] = None) -> Request:
    """Start running @p plan on @p group (collective): this member sends what it holds
    of the old layout from its packed buffer @p old_buf and receives its packed buffer of
    the new layout into @p new_buf. Returns a weft.Request (wait() returns new_buf); the
    request keeps both buffers until done, and old_buf until finalize if it fails (sends
    of a failed migration may still read it). priority: per tensor (list by index, or
    dict by name), higher moves first; the same on every member.

    A request that fails (weft.PeerFailed, weft.Revoked) can be resumed after the
    repair: weft.migrate_resume(group, request, old, target) plans from what survivors
    hold, and that plan runs with resume_buf = this migration's new_buf."""
    old, new, resume = _buffers(group, plan, old_buf, new_buf, resume_buf)
    params, prio = _params(plan, priority, max_staged_bytes, resume)
    group._ctx._reap_orphans()
    req = c_void_p()
    group._call(lib.weft_imigrate, plan.handle, old.ptr if old else None,
                new.ptr if new else None, byref(params), byref(req))
    mark_written(new)  # again when the request completes
    return Request(group._ctx, req.value, keep=(old, new, resume, prio, plan), result=new_buf,
                   keep_on_failure=(old, resume), group=group, resumable=plan)


def migrate(group: Group, plan: Plan, old_buf: Optional[BytesLike], new_buf: OptBytesT,
            priority: Union[Sequence[int], Mapping[str, int], None] = None,
            max_staged_bytes: int = 0, resume_buf: Optional[BytesLike] = None) -> OptBytesT:
    """imigrate() and wait for it (the context's default timeout). Returns new_buf.
    A migration run this way cannot be resumed (its request is gone): use
    imigrate() for that."""
    old, new, resume = _buffers(group, plan, old_buf, new_buf, resume_buf)
    params, _prio = _params(plan, priority, max_staged_bytes, resume)
    try:
        group._call(lib.weft_migrate, plan.handle, old.ptr if old else None,
                    new.ptr if new else None, byref(params))
    except Error:
        # Sends of the failed attempt may still read old_buf: keep it until finalize.
        group._ctx._retired.append((old, resume))
        mark_written(new)  # partly written
        raise
    mark_written(new)
    return new_buf


def migrate_resume(group: Group, failed: Request, old: Layout, target: Layout,
                   host_of: Optional[Sequence[int]] = None, balance_bytes: int = 0) -> Plan:
    """weft_migrate_resume(): after a repair of @p group, the plan from what the
    survivors hold to @p target, counting the chunks the failed migration (@p failed, the
    weft.Request of a imigrate() that raised weft.PeerFailed or weft.Revoked) had
    already delivered. @p old is the failed plan's old layout. Collective over @p group;
    every survivor passes its own failed request. Pieces nobody holds any more are in
    plan.missing. Run the plan with migrate(..., old_buf, new target buffer,
    resume_buf=failed.result): the failed migration's new buffer is a source."""
    from .request import Request
    if not isinstance(failed, Request):
        raise invalid("migrate_resume: failed must be the weft.Request of a imigrate(), "
                      "not %s" % type(failed).__name__)
    if failed._failed is None:
        if not failed.done:
            why = "it is still in flight (wait for it first)"
        elif failed._error is None:
            why = "it succeeded"
        else:
            why = "it is not a migration's, or was cancelled or resumed already"
        raise invalid("migrate_resume: the request is not a failed migration: " + why)
    params = S.sized(S.PlanParams)
    hosts = None
    if host_of is not None:
        hosts = (c_int * max(len(host_of), 1))(*[int(h) for h in host_of])
        params.host_of, params.num_members = hosts, len(host_of)
    params.balance_bytes = balance_bytes
    out = c_void_p()
    with group._ctx._lock:
        if failed._failed is None:
            raise invalid("migrate_resume: the failed request was freed meanwhile")
        group._call(lib.weft_migrate_resume, failed._failed, old.handle, target.handle,
                    byref(params), byref(out))
    return Plan._wrap(out.value, old, target)


def replan_flat(old: Layout, group: Group) -> Tuple[Layout, Plan]:
    """The flat (ZeRO) re-cut of every tensor of @p old over the members of @p group (in
    group rank order) and the plan to it from what members of @p group hold in @p old;
    pieces only departed members held are in plan.missing. Returns (layout, plan)."""
    new_h, plan_h = c_void_p(), c_void_p()
    check(lib.weft_migrate_replan_flat(old.handle, group._h(), byref(new_h), byref(plan_h)))
    new = Layout._wrap(new_h.value)
    return new, Plan._wrap(plan_h.value, old, new)


def batch_share(global_batch: int, width: int, rank: int, max_micro: int = 0) -> BatchShare:
    """Member @p rank's share of a global batch over @p width data-parallel members:
    BatchShare(first, samples, micro_batches, micro_size, last_micro, grad_scale)."""
    s = S.sized(S.BatchShare)
    check(lib.weft_batch_share(global_batch, width, rank, max_micro, byref(s)))
    return BatchShare(s.first, s.samples, s.micro_batches, s.micro_size, s.last_micro,
                      s.grad_scale)
