"""The public C structs of include/weft/, as ctypes Structures (same field order and types).

tests/python/test_structs.py compares their sizes and offsets with the C compiler's.
"""

from __future__ import annotations

import ctypes
from ctypes import (c_float, Structure, POINTER, c_char_p, c_double, c_int, c_size_t, c_uint,
                    c_uint32, c_uint64, c_void_p)
from typing import TYPE_CHECKING, Type

if TYPE_CHECKING:
    from ._types import StructT

LAYOUT_MAX_DIMS = 8
EDIT_INFO_MAX_LISTED = 64   # WEFT_EDIT_INFO_MAX_LISTED
EDIT_INFO_MAX_RANKS = 1024  # WEFT_EDIT_INFO_MAX_RANKS
ELASTIC_MAX_GENS = 16       # WEFT_ELASTIC_MAX_GENS
GEN_NONE = -2 ** 31         # WEFT_GEN_NONE
GEN_START = -1              # WEFT_GEN_START


def sized(cls: Type[StructT]) -> StructT:
    """A zeroed struct with its `size` field set, as the C API asks."""
    s = cls()
    s.size = ctypes.sizeof(cls)
    return s


class ConfigEntry(Structure):
    _fields_ = [("name", c_char_p), ("deflt", c_char_p), ("doc", c_char_p)]


class InfoParams(Structure):
    _fields_ = [("size", c_size_t), ("flags", c_uint), ("topo_xml", c_char_p),
                ("peer_xml", c_char_p), ("gpu", c_int)]


class EditInfo(Structure):
    _fields_ = [("size", c_size_t), ("old_epoch", c_uint32), ("new_epoch", c_uint32),
                ("old_size", c_int), ("new_size", c_int), ("n_removed", c_int),
                ("removed", c_int * EDIT_INFO_MAX_LISTED), ("n_added", c_int),
                ("added", c_int * EDIT_INFO_MAX_LISTED), ("rank_map", c_int * EDIT_INFO_MAX_RANKS),
                ("n_subgroups_revoked", c_int)]


class Box(Structure):
    _fields_ = [("offset", c_uint64 * LAYOUT_MAX_DIMS), ("extent", c_uint64 * LAYOUT_MAX_DIMS)]


class TensorInfo(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndims", c_int),
                ("shape", c_uint64 * LAYOUT_MAX_DIMS), ("bytes", c_size_t)]


class PlanParams(Structure):
    _fields_ = [("size", c_size_t), ("host_of", POINTER(c_int)), ("num_members", c_int),
                ("balance_bytes", c_size_t), ("allow_missing", c_int)]


class Transfer(Structure):
    _fields_ = [("src", c_int), ("dst", c_int), ("tensor", c_int), ("src_region", c_int),
                ("dst_region", c_int), ("box", Box), ("bytes", c_size_t)]


class PlanStats(Structure):
    _fields_ = [(n, c_size_t) for n in (
        "size", "bytes_out", "bytes_in", "bytes_local", "transfers_out", "transfers_in",
        "bytes_lower_bound", "max_bytes_out", "bytes_missing")]


class BatchShare(Structure):
    _fields_ = [("size", c_size_t), ("first", c_uint64), ("samples", c_uint64), ("micro_batches", c_uint64),
                ("micro_size", c_uint64), ("last_micro", c_uint64), ("grad_scale", c_double)]


class MigrateParams(Structure):
    _fields_ = [("size", c_size_t), ("priority", POINTER(c_int)), ("num_priorities", c_int),
                ("max_staged_bytes", c_size_t), ("resume_buf", c_void_p)]


class SnapshotParams(Structure):
    _fields_ = [("size", c_size_t), ("redundancy", c_int), ("host_of", POINTER(c_int)),
                ("num_members", c_int), ("ssd_dir", c_char_p), ("buddy_mem_bytes", c_size_t)]


class SnapshotRestored(Structure):
    _fields_ = [("size", c_size_t), ("step", c_uint64), ("bytes_moved", c_size_t), ("bytes_local", c_size_t),
                ("bytes_missing", c_size_t), ("bytes_from_ssd", c_size_t)]


class SnapshotStats(Structure):
    _fields_ = [("size", c_size_t), ("have_committed", c_int), ("committed", c_uint64),
                ("have_durable", c_int), ("durable", c_uint64), ("ssd_status", c_int),
                ("ssd_error", ctypes.c_char * 256), ("ssd_bytes_written", c_uint64),
                ("ssd_bytes_skipped", c_uint64), ("ssd_write_us", c_double),
                ("spill_bytes", c_uint64), ("spill_read_bytes", c_uint64),
                ("spill_read_failed", c_int), ("restore_in_place_bytes", c_uint64)]


class SnapshotGen(Structure):
    _fields_ = [("id", ctypes.c_int32), ("snap", c_void_p)]


class GenChoice(Structure):
    _fields_ = [("size", c_size_t), ("id", ctypes.c_int32), ("index", c_int), ("root", c_int),
                ("holders", c_int)]


# weft_elastic_target_fn: (arg, members, n, &layout) -> status.
ElasticTargetFn = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_int), c_int, POINTER(c_void_p))


class VocabRange(Structure):
    _fields_ = [("start", c_size_t), ("length", c_size_t), ("padded_length", c_size_t)]


class VocabParams(Structure):
    _fields_ = [("size", c_size_t), ("vocab_size", c_size_t), ("hidden", c_size_t),
                ("align", c_size_t), ("dtype", c_int)]


class VocabMbParams(Structure):
    _fields_ = [("size", c_size_t), ("algo", c_int), ("reduction", c_int),
                ("max_tokens", c_size_t), ("accumulate_dw", c_int),
                ("label_smoothing", c_float), ("block_rows", c_size_t)]


class VocabMbStats(Structure):
    _fields_ = [("size", c_size_t), ("compute_ns", c_uint64), ("comm_ns", c_uint64),
                ("collectives", c_uint32), ("comm_bytes", c_size_t)]


class VocabMem(Structure):
    _fields_ = [("size", c_size_t), ("s_to_c1", c_size_t), ("c1_to_t", c_size_t),
                ("peak", c_size_t)]


# Every struct above, by its C name (for the layout test).
class SpillParams(Structure):
    _fields_ = [("size", c_size_t), ("chunk_bytes", c_size_t), ("queue_depth", c_int),
                ("buffered", c_int), ("max_bytes", c_uint64), ("max_rate", c_uint64),
                ("fail_write", c_uint64)]


class SpillStats(Structure):
    _fields_ = [("bytes_submitted", c_uint64), ("bytes_written", c_uint64),
                ("bytes_deduplicated", c_uint64), ("bytes_read", c_uint64),
                ("blocks_held", c_uint64), ("file_bytes", c_uint64),
                ("file_bytes_peak", c_uint64), ("write_ns", c_uint64), ("read_ns", c_uint64),
                ("direct", c_int)]


C_NAMES = {
    "weft_config_entry_t": ConfigEntry, "weft_info_params_t": InfoParams,
    "weft_edit_info_t": EditInfo, "weft_box_t": Box, "weft_tensor_info_t": TensorInfo,
    "weft_plan_params_t": PlanParams, "weft_transfer_t": Transfer,
    "weft_plan_stats_t": PlanStats, "weft_batch_share_t": BatchShare,
    "weft_migrate_params_t": MigrateParams, "weft_vocab_range_t": VocabRange,
    "weft_snapshot_params_t": SnapshotParams, "weft_snapshot_restored_t": SnapshotRestored,
    "weft_snapshot_stats_t": SnapshotStats, "weft_snapshot_gen_t": SnapshotGen,
    "weft_gen_choice_t": GenChoice,
    "weft_vocab_params_t": VocabParams, "weft_vocab_mb_params_t": VocabMbParams,
    "weft_vocab_mb_stats_t": VocabMbStats, "weft_vocab_mem_t": VocabMem,
    "weft_spill_params_t": SpillParams, "weft_spill_stats_t": SpillStats,
}
