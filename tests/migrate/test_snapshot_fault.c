/*
 * Lose a rank, keep training from the last committed step: a toy training loop (a flat
 * ZeRO state of two tensors, one step = an elementwise update and a "loss" allreduce,
 * then a snapshot with the step in the blob) in which the last member kills itself
 * (SIGKILL) in the middle of step KILL_STEP. The survivors' allreduce fails, they repair,
 * restore a flat re-cut over themselves from the snapshots (nothing is missing with one
 * buddy), read the step to resume from the blobs (the dead member's included), take new
 * snapshots on the new layout and train to the end. Every element of every survivor's
 * shard must then be bitwise equal to the same number of steps computed without any
 * failure. Run by run_fault.sh, which counts "SURVIVOR-OK" lines.
 *
 * With --ssd, the snapshots also go to an SSD directory, and the last two members die
 * together: the second-to-last one's shard was in memory only on itself and on the last
 * one (its buddy), so the restore must read it from the files, and still match bitwise.
 *
 * With --budget, a budget of 4 KiB for buddies' copies (less than any buddy's region)
 * spills every buddy copy to the members' SSD directories: the last member dies, and its
 * buddy (the first member) must read its shard back from its own spilled files and send
 * it (its stats count the bytes; nothing comes from the dead member's files). With
 * --budget-corrupt the first member's chunk files are damaged before the restore: its
 * read fails (its stats say so), and the shard comes from the dead member's own files
 * instead. Both match bitwise.
 *
 * With --live, a step reduces first and updates the state after (the optimizer writes
 * only once the gradients are in), so the survivors' live state is the committed step
 * when the allreduce fails: they restore with weft_snapshot_restore_live into their live
 * buffers themselves, grown, with a target that keeps each survivor's regions where they
 * were and splits the dead member's among them. Their own regions must stay in place
 * (the stats count all of them), only the dead member's shard moves, and the run still
 * matches bitwise (the target is weft_layout_absorb's). With --live-budget, the same with
 * the buddies' copies spilled as with --budget: the dead member's shard comes from its
 * buddy's spilled files while the survivors' own regions stay in place.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../groups/fault_common.h"
#include "snap_common.h"
#include "weft/weft.h"

#define STEPS 12
#define KILL_STEP 6

static weft_layout_t *model(const int *members, int k)
{
    uint64_t a[1] = {40000}, b[2] = {123, 77};
    weft_layout_t *l;
    weft_layout_create(&l);
    weft_layout_add_tensor(l, "w", WEFT_F32, 1, a, NULL);
    weft_layout_add_tensor(l, "m", WEFT_F64, 2, b, NULL);
    int t[2] = {0, 1};
    if (k > 0) {
        weft_layout_flat(l, t, 2, members, k);
    }
    return l;
}

/* Live mode: the gradients are reduced first, the state updated only if that worked. */
static weft_status_t train_step_reduce_first(weft_group_t *g, const weft_layout_t *l, int id,
                                             void *buf, uint64_t step)
{
    double loss = 1.0, sum = 0;
    weft_status_t st = weft_allreduce(g, &loss, &sum, 1, WEFT_F64, WEFT_SUM);
    if (st == WEFT_OK) {
        snap_each(l, id, buf, snap_step_elem, &step);
    }
    return st;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Flip a byte in the payload of every chunk file of @p dir; how many were damaged. */
static int damage_chunks(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d != NULL && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        char path[512];
        if (len < 6 || strcmp(e->d_name + len - 6, ".chunk") != 0 ||
            (size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path)) {
            continue;
        }
        int fd = open(path, O_RDWR);
        unsigned char c;
        if (fd >= 0 && pread(fd, &c, 1, 4096 + 100) == 1) {
            c ^= 0x5a;
            n += pwrite(fd, &c, 1, 4096 + 100) == 1;
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    bool pair = strcmp(mode, "--ssd") == 0, corrupt = strcmp(mode, "--budget-corrupt") == 0;
    bool live_budget = strcmp(mode, "--live-budget") == 0;
    bool budget = corrupt || live_budget || strcmp(mode, "--budget") == 0, ssd = pair || budget;
    bool live = live_budget || strcmp(mode, "--live") == 0;
    setenv("WEFT_TIMEOUT_MS", "60000", 0);
    weft_ctx_t *ctx;
    weft_group_t *world;
    int me, n, id, ids[64];
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK) {
        return 1;
    }
    weft_group_rank(world, &me);
    weft_group_size(world, &n);
    weft_group_member_id(world, me, &id);
    for (int r = 0; r < n; r++) {
        weft_group_member_id(world, r, &ids[r]);
    }
    int victim = ids[n - 1], victim2 = pair ? ids[n - 2] : -1;
    char dir[64] = {0};
    if (ssd && me == 0) {
        snprintf(dir, sizeof(dir), "/tmp/weft-snapfault-XXXXXX");
        if (mkdtemp(dir) == NULL) {
            SURVIVOR_FAIL(me, "mkdtemp");
            return 1;
        }
    }
    if (ssd && weft_broadcast(world, dir, sizeof(dir), WEFT_U8, 0) != WEFT_OK) {
        return 1;
    }
    weft_layout_t *l = model(ids, n);
    weft_snapshot_t *snap;
    weft_snapshot_params_t sp = {
        .size = sizeof(sp), .ssd_dir = ssd ? dir : NULL, .buddy_mem_bytes = budget ? 4096 : 0};
    if (weft_snapshot_create(world, l, sizeof(snap_blob_t), &sp, &snap) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(NULL));
        return 1;
    }
    unsigned char *buf = malloc(weft_layout_packed_bytes(l, id) + 1);
    snap_each(l, id, buf, snap_init_elem, NULL);
    uint64_t step = 1;
    weft_status_t st = WEFT_OK;
    for (; step <= STEPS && st == WEFT_OK; step++) {
        if ((id == victim || id == victim2) && step == KILL_STEP) {
            raise(SIGKILL);
        }
        st = live ? train_step_reduce_first(world, l, id, buf, step)
                  : snap_train_step(world, l, id, buf, step);
        if (st == WEFT_OK) {
            st = snap_take(snap, step, buf);
        }
    }
    if (id == victim || id == victim2) {
        raise(SIGKILL); /* it saw the other victim's death before its own step came */
    }
    if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
        printf("rank %d: training returned %s\n", me, weft_status_str(st));
        SURVIVOR_FAIL(me, "the step with the dead member did not fail");
        return 1;
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    if (fault_recover(world, &info) != WEFT_OK || fault_has_member(world, victim) ||
        (pair && fault_has_member(world, victim2))) {
        SURVIVOR_FAIL(me, "repair");
        return 1;
    }
    char mine[128];
    snprintf(mine, sizeof(mine), "%s/member-%d", dir, id);
    if (corrupt && id == ids[0] && damage_chunks(mine) == 0) {
        SURVIVOR_FAIL(me, "no chunk file to damage");
        return 1;
    }
    /* Restore a flat re-cut over the survivors from the snapshots. */
    int k = 0, left[64];
    weft_group_size(world, &k);
    for (int r = 0; r < k; r++) {
        weft_group_member_id(world, r, &left[r]);
    }
    weft_layout_t *nl = NULL;
    if (live) { /* each survivor keeps its regions and gets a part of the dead member's */
        weft_layout_absorb(l, left, k, &nl);
    } else {
        nl = model(left, k);
    }
    size_t nb = weft_snapshot_restore_bytes(snap, nl);
    unsigned char *nbuf = malloc(nb);
    weft_snapshot_restored_t got = {.size = sizeof(got)};
    if (live) { /* the live buffer, grown, is the new one: the own regions stay in place */
        memcpy(nbuf, buf, weft_layout_packed_bytes(l, id));
        free(buf);
        buf = NULL;
        st = weft_snapshot_restore_live(snap, nl, nbuf, nbuf, nb, &got);
    } else {
        st = weft_snapshot_restore(snap, nl, nbuf, nb, &got);
    }
    if (st != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(ctx));
        return 1;
    }
    snap_blob_t vb = {0, 0};
    size_t len = 0;
    weft_snapshot_stats_t ss = {.size = sizeof(ss)};
    weft_snapshot_stats(snap, &ss);
    bool buddy = id == ids[0]; /* the victim's buddy */
    if (live && (ss.restore_in_place_bytes != weft_layout_packed_bytes(l, id) ||
                 got.bytes_moved > weft_layout_packed_bytes(l, victim) +
                                       (size_t)(k * n) * (8 + sizeof(snap_blob_t)))) {
        printf("rank %d: %llu B in place of %zu, %zu B moved\n", me,
               (unsigned long long)ss.restore_in_place_bytes, weft_layout_packed_bytes(l, id),
               got.bytes_moved);
        SURVIVOR_FAIL(me, "the live regions did not stay in place");
        return 1;
    }
    if (budget && (ss.spill_bytes == 0 || (buddy && !corrupt && ss.spill_read_bytes == 0) ||
                   (buddy && ss.spill_read_failed != corrupt) ||
                   (!buddy && ss.spill_read_bytes != 0) || (got.bytes_from_ssd != 0) != corrupt)) {
        printf("rank %d: %llu B spilled, %llu B read back, read failed %d, %zu B from the "
               "dead member's files\n",
               me, (unsigned long long)ss.spill_bytes, (unsigned long long)ss.spill_read_bytes,
               ss.spill_read_failed, got.bytes_from_ssd);
        SURVIVOR_FAIL(me, "the spilled copies were not used as they should");
        return 1;
    }
    if (got.bytes_missing != 0 || (pair && got.bytes_from_ssd == 0) ||
        weft_snapshot_blob(snap, victim, &vb, sizeof(vb), &len) != WEFT_OK || len != sizeof(vb) ||
        vb.step != got.step || vb.seed != got.step * 1000003u ||
        (got.step != KILL_STEP - 1 && got.step != KILL_STEP - 2)) {
        printf("rank %d: restored step %llu, %zu B missing, the victim's blob says step %llu\n", me,
               (unsigned long long)got.step, got.bytes_missing, (unsigned long long)vb.step);
        SURVIVOR_FAIL(me, "restore");
        return 1;
    }
    printf("rank %d: restored step %llu: %zu B moved, %zu B copied locally, %zu B from SSD "
           "files, %llu B from spilled files\n",
           me, (unsigned long long)got.step, got.bytes_moved, got.bytes_local, got.bytes_from_ssd,
           (unsigned long long)ss.spill_read_bytes);
    weft_snapshot_free(snap);
    if (weft_snapshot_create(world, nl, sizeof(snap_blob_t), &sp, &snap) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(NULL));
        return 1;
    }
    for (step = vb.step + 1; step <= STEPS && st == WEFT_OK; step++) {
        st = live ? train_step_reduce_first(world, nl, id, nbuf, step)
                  : snap_train_step(world, nl, id, nbuf, step);
        if (st == WEFT_OK) {
            st = snap_take(snap, step, nbuf);
        }
    }
    size_t wrong = snap_count_wrong(nl, id, nbuf, STEPS);
    if (st != WEFT_OK || wrong != 0) {
        printf("rank %d: %s, %zu elements differ from the run without failure\n", me,
               weft_status_str(st), wrong);
        SURVIVOR_FAIL(me, "the state after the failure is not the state without it");
        return 1;
    }
    SURVIVOR_OK(me);
    weft_snapshot_free(snap);
    if (ssd && weft_barrier(world) == WEFT_OK && me == 0) {
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
    weft_layout_free(l);
    weft_layout_free(nl);
    free(buf);
    free(nbuf);
    weft_finalize(ctx);
    return 0;
}
