/*
 * Prints the size of every public struct and the offset of each of its fields, as the C
 * compiler lays them out, for test_load.py to compare with the Python binding's
 * ctypes Structures: "<struct> <sizeof>" then "<struct>.<field> <offset>" lines.
 */
#include <stddef.h>
#include <stdio.h>

#include "weft/weft.h"

#define SIZE(T) printf(#T " %zu\n", sizeof(T))
#define FIELD(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))

int main(void)
{
    SIZE(weft_config_entry_t);
    FIELD(weft_config_entry_t, name);
    FIELD(weft_config_entry_t, deflt);
    FIELD(weft_config_entry_t, doc);
    SIZE(weft_info_params_t);
    FIELD(weft_info_params_t, flags);
    FIELD(weft_info_params_t, topo_xml);
    FIELD(weft_info_params_t, peer_xml);
    FIELD(weft_info_params_t, gpu);
    SIZE(weft_edit_info_t);
    FIELD(weft_edit_info_t, old_epoch);
    FIELD(weft_edit_info_t, new_epoch);
    FIELD(weft_edit_info_t, old_size);
    FIELD(weft_edit_info_t, new_size);
    FIELD(weft_edit_info_t, n_removed);
    FIELD(weft_edit_info_t, removed);
    FIELD(weft_edit_info_t, n_added);
    FIELD(weft_edit_info_t, added);
    FIELD(weft_edit_info_t, rank_map);
    FIELD(weft_edit_info_t, n_subgroups_revoked);
    SIZE(weft_box_t);
    FIELD(weft_box_t, offset);
    FIELD(weft_box_t, extent);
    SIZE(weft_tensor_info_t);
    FIELD(weft_tensor_info_t, name);
    FIELD(weft_tensor_info_t, dtype);
    FIELD(weft_tensor_info_t, ndims);
    FIELD(weft_tensor_info_t, shape);
    FIELD(weft_tensor_info_t, bytes);
    SIZE(weft_plan_params_t);
    FIELD(weft_plan_params_t, host_of);
    FIELD(weft_plan_params_t, num_members);
    FIELD(weft_plan_params_t, balance_bytes);
    FIELD(weft_plan_params_t, allow_missing);
    SIZE(weft_transfer_t);
    FIELD(weft_transfer_t, src);
    FIELD(weft_transfer_t, dst);
    FIELD(weft_transfer_t, tensor);
    FIELD(weft_transfer_t, src_region);
    FIELD(weft_transfer_t, dst_region);
    FIELD(weft_transfer_t, box);
    FIELD(weft_transfer_t, bytes);
    SIZE(weft_plan_stats_t);
    FIELD(weft_plan_stats_t, size);
    FIELD(weft_plan_stats_t, bytes_out);
    FIELD(weft_plan_stats_t, bytes_in);
    FIELD(weft_plan_stats_t, bytes_local);
    FIELD(weft_plan_stats_t, transfers_out);
    FIELD(weft_plan_stats_t, transfers_in);
    FIELD(weft_plan_stats_t, bytes_lower_bound);
    FIELD(weft_plan_stats_t, max_bytes_out);
    FIELD(weft_plan_stats_t, bytes_missing);
    SIZE(weft_batch_share_t);
    FIELD(weft_batch_share_t, size);
    FIELD(weft_batch_share_t, first);
    FIELD(weft_batch_share_t, samples);
    FIELD(weft_batch_share_t, micro_batches);
    FIELD(weft_batch_share_t, micro_size);
    FIELD(weft_batch_share_t, last_micro);
    FIELD(weft_batch_share_t, grad_scale);
    SIZE(weft_migrate_params_t);
    FIELD(weft_migrate_params_t, priority);
    FIELD(weft_migrate_params_t, num_priorities);
    FIELD(weft_migrate_params_t, max_staged_bytes);
    FIELD(weft_migrate_params_t, resume_buf);
    SIZE(weft_snapshot_params_t);
    FIELD(weft_snapshot_params_t, redundancy);
    FIELD(weft_snapshot_params_t, host_of);
    FIELD(weft_snapshot_params_t, num_members);
    FIELD(weft_snapshot_params_t, ssd_dir);
    SIZE(weft_snapshot_restored_t);
    FIELD(weft_snapshot_restored_t, size);
    FIELD(weft_snapshot_restored_t, step);
    FIELD(weft_snapshot_restored_t, bytes_moved);
    FIELD(weft_snapshot_restored_t, bytes_local);
    FIELD(weft_snapshot_restored_t, bytes_missing);
    FIELD(weft_snapshot_restored_t, bytes_from_ssd);
    SIZE(weft_snapshot_stats_t);
    FIELD(weft_snapshot_stats_t, have_committed);
    FIELD(weft_snapshot_stats_t, committed);
    FIELD(weft_snapshot_stats_t, have_durable);
    FIELD(weft_snapshot_stats_t, durable);
    FIELD(weft_snapshot_stats_t, ssd_status);
    FIELD(weft_snapshot_stats_t, ssd_error);
    FIELD(weft_snapshot_stats_t, ssd_bytes_written);
    FIELD(weft_snapshot_stats_t, ssd_bytes_skipped);
    FIELD(weft_snapshot_stats_t, ssd_write_us);
    FIELD(weft_snapshot_stats_t, spill_bytes);
    FIELD(weft_snapshot_stats_t, spill_read_bytes);
    FIELD(weft_snapshot_stats_t, spill_read_failed);
    FIELD(weft_snapshot_stats_t, restore_in_place_bytes);
    SIZE(weft_snapshot_gen_t);
    FIELD(weft_snapshot_gen_t, id);
    FIELD(weft_snapshot_gen_t, snap);
    SIZE(weft_gen_choice_t);
    FIELD(weft_gen_choice_t, size);
    FIELD(weft_gen_choice_t, id);
    FIELD(weft_gen_choice_t, index);
    FIELD(weft_gen_choice_t, root);
    FIELD(weft_gen_choice_t, holders);
    SIZE(weft_vocab_range_t);
    FIELD(weft_vocab_range_t, start);
    FIELD(weft_vocab_range_t, length);
    FIELD(weft_vocab_range_t, padded_length);
    SIZE(weft_vocab_params_t);
    FIELD(weft_vocab_params_t, vocab_size);
    FIELD(weft_vocab_params_t, hidden);
    FIELD(weft_vocab_params_t, align);
    SIZE(weft_vocab_mb_params_t);
    FIELD(weft_vocab_mb_params_t, algo);
    FIELD(weft_vocab_mb_params_t, reduction);
    FIELD(weft_vocab_mb_params_t, max_tokens);
    FIELD(weft_vocab_mb_params_t, accumulate_dw);
    SIZE(weft_vocab_mb_stats_t);
    FIELD(weft_vocab_mb_stats_t, compute_ns);
    FIELD(weft_vocab_mb_stats_t, comm_ns);
    FIELD(weft_vocab_mb_stats_t, collectives);
    FIELD(weft_vocab_mb_stats_t, comm_bytes);
    SIZE(weft_vocab_mem_t);
    FIELD(weft_vocab_mem_t, s_to_c1);
    FIELD(weft_vocab_mem_t, c1_to_t);
    FIELD(weft_vocab_mem_t, peak);
    SIZE(weft_spill_params_t);
    FIELD(weft_spill_params_t, chunk_bytes);
    FIELD(weft_spill_params_t, queue_depth);
    FIELD(weft_spill_params_t, buffered);
    FIELD(weft_spill_params_t, max_bytes);
    FIELD(weft_spill_params_t, max_rate);
    FIELD(weft_spill_params_t, fail_write);
    SIZE(weft_spill_stats_t);
    FIELD(weft_spill_stats_t, bytes_written);
    FIELD(weft_spill_stats_t, bytes_deduplicated);
    FIELD(weft_spill_stats_t, bytes_read);
    FIELD(weft_spill_stats_t, blocks_held);
    FIELD(weft_spill_stats_t, file_bytes_peak);
    FIELD(weft_spill_stats_t, write_ns);
    FIELD(weft_spill_stats_t, read_ns);
    FIELD(weft_spill_stats_t, direct);
    return 0;
}
