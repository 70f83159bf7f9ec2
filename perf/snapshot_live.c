/*
 * weft-perf snapshot: recovery when the failure came before the state moved on (the
 * gradient allreduce of the next step fails before the optimizer writes), so each
 * survivor's live shard is the committed step. After the same kill, detection and repair
 * as the restore from the copies, the survivors restore with weft_snapshot_restore_live
 * into their live buffers themselves (allocated from the start with room for their part
 * of the dead rank's shard, that part touched before the kill): every survivor keeps its
 * shard where it is and gets a k-th of the dead rank's shard, cut by rows, from that
 * rank's buddy. The same kill serves both restores: before this one, untimed, the
 * survivors undo the marks the next step wrote, which leaves the state a failure before
 * the optimizer's write leaves. recover_live_us = detect_us + repair_us + restore_live_us.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"

weft_layout_t *snap_live_target(const snap_bench_t *b, const int *left, int k)
{
    weft_layout_t *l = NULL;
    return weft_layout_absorb(b->layout, left, k, &l) == WEFT_OK ? l : NULL;
}

/* Words of this member's packed buffer @p buf of @p l that differ from step @p step. */
static long count_wrong_in(const snap_bench_t *b, const weft_layout_t *l, int me,
                           const uint64_t *buf, uint64_t step)
{
    uint64_t base[NTENSORS] = {0};
    for (int t = 1; t < NTENSORS; t++) {
        weft_tensor_info_t ti;
        weft_layout_tensor(b->layout, t - 1, &ti);
        base[t] = base[t - 1] + ti.shape[0] * ROW_WORDS;
    }
    long wrong = 0;
    for (int i = 0; i < weft_layout_num_regions(l, me); i++) {
        int t;
        weft_box_t box;
        size_t off;
        weft_layout_region(l, me, i, &t, &box, NULL, &off);
        const uint64_t *p = buf + off / 8;
        for (uint64_t row = 0; row < box.extent[0]; row++) {
            uint64_t g0 = base[t] + (box.offset[0] + row) * ROW_WORDS + box.offset[1];
            for (uint64_t c = 0; c < box.extent[1]; c++) {
                wrong += *p++ != snap_word_at(g0 + c, step);
            }
        }
    }
    return wrong;
}

/* Restore into b->state over the re-cut that keeps every survivor's shard: from the live
 * buffers (@p live) or from the copies (the state has moved on), each checked word by
 * word against the committed step. */
static weft_status_t restore_state(snap_bench_t *b, snap_result_t *r, bool live, double *t_done)
{
    weft_group_t *g = b->w.world;
    int k, rank, left[MAX_RANKS];
    weft_group_size(g, &k);
    weft_group_rank(g, &rank);
    for (int i = 0; i < k; i++) {
        weft_group_member_id(g, i, &left[i]);
    }
    weft_layout_t *nl = snap_live_target(b, left, k);
    bool fits = nl != NULL && weft_snapshot_restore_bytes(b->snap, nl) <= b->state_cap;
    uint64_t none;
    weft_snapshot_restored_t info = {.size = sizeof(info)};
    const weft_layout_t *target = nl != NULL ? nl : b->layout;
    void *into = fits ? (void *)b->state : &none;
    size_t cap = fits ? b->state_cap : 0;
    double t0 = perf_now_us();
    weft_status_t st = live ? weft_snapshot_restore_live(b->snap, target, b->state, into, cap, &info)
                            : weft_snapshot_restore(b->snap, target, into, cap, &info);
    *t_done = perf_now_us();
    double us = perf_slowest(&b->w, *t_done - t0);
    if (st != WEFT_OK) {
        weft_layout_free(nl);
        return st;
    }
    weft_snapshot_stats_t ss = {.size = sizeof(ss)};
    weft_snapshot_stats(b->snap, &ss);
    long wrong = count_wrong_in(b, nl, left[rank], b->state, r->committed), all[2];
    long mine[2] = {wrong, info.step != r->committed || info.bytes_missing != 0};
    weft_allreduce(g, mine, all, 2, WEFT_I64, WEFT_SUM);
    int64_t place = (int64_t)ss.restore_in_place_bytes, place_all = 0;
    weft_allreduce(g, &place, &place_all, 1, WEFT_I64, WEFT_SUM);
    snap_restore_t *o = live ? &r->live : &r->keep;
    o->us = us;
    o->wrong = all[0];
    o->verified = all[0] == 0 && all[1] == 0;
    o->moved = info.bytes_moved;
    o->local = info.bytes_local;
    o->in_place = (size_t)place_all;
    weft_layout_free(nl);
    return WEFT_OK;
}

weft_status_t snap_restore_live(snap_bench_t *b, snap_result_t *r, double *t_done)
{
    /* Poisoned where the dead rank's shard goes (a restore from the copies wrote it
     * before): the live restore must move it again. */
    memset((char *)b->state + b->state_bytes, 0xa5, b->state_cap - b->state_bytes);
    return restore_state(b, r, true, t_done);
}

weft_status_t snap_restore_keep(snap_bench_t *b, snap_result_t *r, double *t_done)
{
    return restore_state(b, r, false, t_done);
}
