/*
 * A snapshot whose SSD write finds the directory full: run by snapshot_full_dir.sh on a
 * small tmpfs (its own mount namespace). The state is sized from the filesystem's
 * capacity so that two steps fit and a third does not. Steps 1 and 2 are written; the
 * write of step 3 fails with a clear error (no space) while its memory copies are still
 * committed; step 2 stays durable and reads back, byte for byte, from the files.
 *   test_snapshot_full DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "comm/core.h"
#include "migrate/ssd/ssd.h"
#include "snap_common.h"
#include "weft/weft.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL: " __VA_ARGS__);                                                          \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static weft_status_t snapshot(weft_snapshot_t *s, uint64_t step, const void *state)
{
    weft_req_t *req = NULL;
    weft_status_t st = weft_snapshot_start(s, step, state, &step, sizeof(step), &req);
    if (st == WEFT_INPROGRESS) {
        st = weft_wait(req, WEFT_TIMEOUT_DEFAULT);
        weft_req_free(req);
    }
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_snapshot_full DIR\n");
        return 2;
    }
    const char *dir = argv[1];
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
    /* Every element is written twice per step (its owner's copy and a buddy's): size the
     * tensor so that a step takes 1/2.4 of the disk. */
    struct statvfs fs;
    uint64_t elems = 0;
    if (me == 0 && statvfs(dir, &fs) == 0) {
        uint64_t cap = (uint64_t)fs.f_blocks * fs.f_frsize;
        elems = (uint64_t)((double)cap / 2.4 / 8.0);
    }
    weft_broadcast(world, &elems, 1, WEFT_I64, 0);
    if (elems < 1024) {
        printf("FAIL: %s is too small\n", dir);
        return 1;
    }
    weft_layout_t *l;
    weft_layout_create(&l);
    weft_layout_add_tensor(l, "w", WEFT_F32, 1, &elems, NULL);
    int t0 = 0;
    weft_layout_flat(l, &t0, 1, ids, n);
    weft_snapshot_params_t sp = {.size = sizeof(sp), .ssd_dir = dir};
    weft_snapshot_t *s;
    if (weft_snapshot_create(world, l, 64, &sp, &s) != WEFT_OK) {
        printf("FAIL: create: %s\n", weft_last_error(NULL));
        return 1;
    }
    size_t bytes = weft_layout_packed_bytes(l, id);
    unsigned char *live = malloc(bytes), *step2 = malloc(bytes), *back = malloc(bytes);
    weft_snapshot_stats_t st = {.size = sizeof(st)};
    for (uint64_t step = 1; step <= 3; step++) {
        snap_each(l, id, live, snap_set_elem, &step);
        if (step == 2) {
            memcpy(step2, live, bytes);
        }
        weft_status_t rc = snapshot(s, step, live);
        CHECK(rc == WEFT_OK, "snapshot %llu: %s", (unsigned long long)step, weft_status_str(rc));
        weft_snapshot_stats(s, &st);
        CHECK(st.have_committed && st.committed == step, "step %llu not committed in memory",
              (unsigned long long)step);
        if (step <= 2) {
            CHECK(st.ssd_status == WEFT_OK && st.durable == step, "step %llu: SSD %s: %s",
                  (unsigned long long)step, weft_status_str(st.ssd_status), st.ssd_error);
        }
    }
    /* Step 3 did not fit: said clearly, and step 2 is still the newest on disk. */
    CHECK(st.ssd_status == WEFT_ERR_IO, "step 3's write returned %s",
          weft_status_str(st.ssd_status));
    CHECK(strstr(st.ssd_error, "No space") != NULL, "step 3's error: \"%s\"", st.ssd_error);
    CHECK(st.have_durable && st.durable == 2, "newest durable step %llu",
          (unsigned long long)st.durable);
    weft_barrier(world);
    weft_snapshot_free(s);
    char mine[512];
    snprintf(mine, sizeof(mine), "%s/member-%d", dir, id);
    weft__ssd_t *h = NULL;
    uint8_t key[WEFT__CTX_KEY_BYTES]; /* the job's, as the snapshot layer derives it */
    CHECK(weft__ctx_derive_key(ctx, WEFT__SSD_KEY_LABEL, key) == WEFT_OK, "derive key: %s",
          weft_last_error(NULL));
    weft__ssd_params_t rp = {.read_only = true, .key = key};
    uint64_t newest[4] = {0};
    size_t count = 0;
    weft_box_t box;
    weft_layout_region(l, id, 0, NULL, &box, NULL, NULL);
    CHECK(weft__ssd_open(mine, &rp, &h) == WEFT_OK, "open %s: %s", mine, weft_last_error(NULL));
    if (h != NULL) {
        weft__ssd_steps(h, newest, 4, &count);
        CHECK(count >= 1 && newest[0] == 2, "%zu steps on disk, the newest %llu", count,
              (unsigned long long)newest[0]);
        CHECK(weft__ssd_read(h, 2, "w", &box, back) == WEFT_OK && memcmp(back, step2, bytes) == 0,
              "step 2 does not read back: %s", weft_last_error(NULL));
        weft__ssd_close(h);
    }
    printf("rank %d: %s\n", me, failures == 0 ? "OK" : "FAILED");
    free(live);
    free(step2);
    free(back);
    weft_layout_free(l);
    weft_finalize(ctx);
    return failures == 0 ? 0 : 1;
}
