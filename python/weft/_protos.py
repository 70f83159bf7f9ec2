"""Argument and result types of every function libweft.so exports (include/weft/*.h).

Handles (contexts, groups, requests, layouts, plans, vocabularies, microbatches) travel
as void pointers; statuses as int. tests/python/test_load.py checks that this table
names every exported function.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

from . import _structs as S

P = c_void_p
I = c_int
SZ = c_size_t
PI = POINTER(c_int)
PP = POINTER(c_void_p)
PSZ = POINTER(c_size_t)

_CORE = {
    "weft_version": (c_char_p, [PI, PI, PI]),
    "weft_status_str": (c_char_p, [I]),
    "weft_init": (I, [P, PP]),
    "weft_finalize": (I, [P]),
    "weft_last_error": (c_char_p, [P]),
    "weft_ctx_world": (I, [P, PP]),
    "weft_group_rank": (I, [P, PI]),
    "weft_group_size": (I, [P, PI]),
    "weft_isend": (I, [P, P, SZ, I, c_uint32, PP]),
    "weft_irecv": (I, [P, P, SZ, I, c_uint32, PP]),
    "weft_send": (I, [P, P, SZ, I, c_uint32]),
    "weft_recv": (I, [P, P, SZ, I, c_uint32, PSZ]),
    "weft_test": (I, [P]),
    "weft_wait": (I, [P, c_uint64]),
    "weft_req_bytes": (I, [P, PSZ]),
    "weft_mem_alloc": (I, [SZ, PP]),
    "weft_mem_free": (I, [P, SZ]),
    "weft_req_free": (I, [P]),
    "weft_config_entry": (POINTER(S.ConfigEntry), [P, SZ, POINTER(c_char_p)]),
    "weft_info_print": (I, [P, POINTER(S.InfoParams)]),
    "weft_kv_set": (I, [P, c_char_p, c_char_p, SZ]),
    "weft_kv_get": (I, [P, c_char_p, c_void_p, SZ, PSZ, c_uint64]),
    "weft_kv_add": (I, [P, c_char_p, c_int64, POINTER(c_int64)]),
    "weft_kv_delete": (I, [P, c_char_p, PI]),
}

# (name, argument types after the group, before the request pointer)
_COLL_ARGS = {
    "allreduce": [P, P, SZ, I, I],
    "reduce_scatter": [P, P, SZ, I, I],
    "allgather": [P, P, SZ, I],
    "broadcast": [P, SZ, I, I],
    "reduce": [P, P, SZ, I, I, I],
    "alltoall": [P, P, SZ, I],
    "alltoallv": [P, PSZ, PSZ, P, PSZ, PSZ, I],
    "barrier": [],
}

_COLL = {
    "weft_dtype_size": (SZ, [I]),
    "weft_dtype_name": (c_char_p, [I]),
    "weft_op_name": (c_char_p, [I]),
    "weft_op_create": (I, [P, P, PI]),
    "weft_op_free": (I, [P, I]),
    "weft_group_coll_count": (I, [P, POINTER(c_uint64)]),
}
for _name, _args in _COLL_ARGS.items():
    _COLL["weft_" + _name] = (I, [P] + _args)
    _COLL["weft_i" + _name] = (I, [P] + _args + [PP])

_GROUP = {
    "weft_group_epoch": (I, [P, POINTER(c_uint32)]),
    "weft_group_member_id": (I, [P, I, PI]),
    "weft_group_rank_of": (I, [P, I, PI]),
    "weft_group_repair": (I, [P, POINTER(S.EditInfo)]),
    "weft_group_grow": (I, [P, I, c_uint64, POINTER(S.EditInfo)]),
    "weft_group_pending_joiners": (I, [P, PI]),
    "weft_group_join": (I, [P, c_char_p, c_uint64, PP]),
    "weft_group_split": (I, [P, I, I, PP]),
    "weft_group_free": (I, [P]),
    "weft_group_revoke": (I, [P]),
    "weft_group_set_cuda_stream": (I, [P, P]),
    "weft_group_cuda_stream": (I, [P, PP]),
    "weft_memory_is_cuda": (I, [P, PI]),
}

_BOX = POINTER(S.Box)
_MIGRATE = {
    "weft_layout_create": (I, [PP]),
    "weft_layout_free": (None, [P]),
    "weft_layout_add_tensor": (I, [P, c_char_p, I, I, POINTER(c_uint64), PI]),
    "weft_layout_add_region": (I, [P, I, I, _BOX]),
    "weft_layout_shard": (I, [P, I, I, PI, I]),
    "weft_layout_flat": (I, [P, PI, I, PI, I]),
    "weft_layout_whole": (I, [P, I, I]),
    "weft_layout_replicate": (I, [P, I, PI, I]),
    "weft_box_copy": (I, [P, _BOX, P, _BOX, _BOX, I, SZ]),
    "weft_layout_num_tensors": (I, [P]),
    "weft_layout_tensor": (I, [P, I, POINTER(S.TensorInfo)]),
    "weft_layout_find": (I, [P, c_char_p, PI]),
    "weft_layout_num_regions": (I, [P, I]),
    "weft_layout_region": (I, [P, I, I, PI, _BOX, PSZ, PSZ]),
    "weft_layout_packed_bytes": (SZ, [P, I]),
    "weft_layout_check_complete": (I, [P]),
    "weft_plan_create": (I, [P, P, POINTER(S.PlanParams), PP]),
    "weft_plan_free": (None, [P]),
    "weft_plan_num_transfers": (SZ, [P]),
    "weft_plan_transfer": (I, [P, SZ, POINTER(S.Transfer)]),
    "weft_plan_stats": (I, [P, I, POINTER(S.PlanStats)]),
    "weft_plan_num_missing": (SZ, [P]),
    "weft_plan_missing": (I, [P, SZ, POINTER(S.Transfer)]),
    "weft_plan_digest": (c_uint64, [P]),
    "weft_plan_print": (I, [P, P]),
    "weft_layout_keep": (I, [P, PI, I, PP]),
    "weft_layout_absorb": (I, [P, PI, I, PP]),
    "weft_migrate_replan_flat": (I, [P, P, PP, PP]),
    "weft_batch_share": (I, [c_uint64, I, I, c_uint64, POINTER(S.BatchShare)]),
    "weft_imigrate": (I, [P, P, P, P, POINTER(S.MigrateParams), PP]),
    "weft_migrate": (I, [P, P, P, P, POINTER(S.MigrateParams)]),
    "weft_migrate_resume": (I, [P, P, P, P, POINTER(S.PlanParams), PP]),
}

_SNAPSHOT = {
    "weft_snapshot_create": (I, [P, P, SZ, POINTER(S.SnapshotParams), PP]),
    "weft_snapshot_free": (None, [P]),
    "weft_snapshot_bytes": (SZ, [P]),
    "weft_snapshot_start": (I, [P, c_uint64, P, P, SZ, PP]),
    "weft_snapshot_committed": (I, [P, POINTER(c_uint64)]),
    "weft_snapshot_restore_bytes": (SZ, [P, P]),
    "weft_snapshot_restore": (I, [P, P, P, SZ, POINTER(S.SnapshotRestored)]),
    "weft_snapshot_restore_live": (I, [P, P, P, P, SZ, POINTER(S.SnapshotRestored)]),
    "weft_snapshot_blob": (I, [P, I, P, SZ, PSZ]),
    "weft_snapshot_restore_plan": (P, [P]),
    "weft_snapshot_restore_join": (I, [P, P, P, SZ, PP, POINTER(S.SnapshotRestored)]),
    "weft_snapshot_stats": (I, [P, POINTER(S.SnapshotStats)]),
    "weft_elastic_choose_gen": (I, [P, POINTER(S.SnapshotGen), I, POINTER(S.GenChoice)]),
    "weft_elastic_restore_gen": (I, [P, P, P, S.ElasticTargetFn, P, PP, PSZ,
                                     POINTER(S.SnapshotRestored)]),
}

_VOCAB = {
    "weft_vocab_shard_range": (I, [SZ, I, SZ, I, POINTER(S.VocabRange)]),
    "weft_vocab_create": (I, [P, POINTER(S.VocabParams), PP]),
    "weft_vocab_free": (I, [P]),
    "weft_vocab_local_range": (I, [P, POINTER(S.VocabRange)]),
    "weft_vocab_algo_name": (c_char_p, [I]),
    "weft_vocab_mb_create": (I, [P, POINTER(S.VocabMbParams), PP]),
    "weft_vocab_mb_free": (I, [P]),
    "weft_vocab_xent_logits": (I, [P, P, P, P, SZ]),
    "weft_vocab_xent_merge_start": (I, [P, PP]),
    "weft_vocab_xent_loss": (I, [P, P, P]),
    "weft_vocab_xent_grad": (I, [P, P, P, P]),
    "weft_vocab_xent_dx_reduce_start": (I, [P, PP]),
    "weft_vocab_xent_forward": (I, [P, P, P, P, SZ, P, P]),
    "weft_vocab_xent_backward": (I, [P, P, P, P]),
    "weft_vocab_mb_stats": (I, [P, POINTER(S.VocabMbStats)]),
    "weft_vocab_xent_memory": (I, [P, I, SZ, POINTER(S.VocabMem)]),
    "weft_vocab_mb_memory": (I, [P, SZ, POINTER(S.VocabMem)]),
    "weft_vocab_iembed_forward": (I, [P, P, P, SZ, P, PP]),
    "weft_vocab_embed_forward": (I, [P, P, P, SZ, P]),
    "weft_vocab_embed_grad_bcast_start": (I, [P, P, SZ, I, PP]),
    "weft_vocab_embed_grad_scatter": (I, [P, P, P, SZ, P]),
    "weft_vocab_embed_backward": (I, [P, P, P, SZ, I, P]),
}

_SPILL = {
    "weft_spill_create": (I, [P, c_char_p, POINTER(S.SpillParams), PP]),
    "weft_spill_free": (I, [P]),
    "weft_spill_write_start": (I, [P, P, SZ, POINTER(c_uint64), PP]),
    "weft_spill_read_start": (I, [P, c_uint64, P, SZ, PP]),
    "weft_spill_state": (I, [P, c_uint64, POINTER(c_uint32)]),
    "weft_spill_drop": (I, [P, c_uint64]),
    "weft_spill_stats": (I, [P, POINTER(S.SpillStats)]),
}

TABLE = {}
for _t in (_CORE, _COLL, _GROUP, _MIGRATE, _SNAPSHOT, _VOCAB, _SPILL):
    TABLE.update(_t)


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Set restype and argtypes of every function of TABLE on the loaded library."""
    for name, (restype, argtypes) in TABLE.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib
