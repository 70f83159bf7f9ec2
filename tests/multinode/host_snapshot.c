/*
 * Snapshots over several hosts, and the loss of a whole host: run_hosts.sh starts it on
 * every host of the bed (weftrun --elastic) and kills the last host when its ranks say so.
 *
 *   host_snapshot
 *
 * First, where the copies go. Each member's host name (the bed gives every host its
 * own, nsh<i>) is gathered; that is the reference the library's host ids are checked
 * against. With default parameters the buddy of every member (the members that hold a
 * copy of its blob in the snapshot's copy layout) must be on another host; with a
 * host_of table that puts everyone on one host, the buddy must be the next member in
 * rank order (the table still overrides what the library knows).
 *
 * Then a toy training loop (snap_common.h: each step an elementwise update and a "loss"
 * allreduce, then a snapshot with the step in the blob). At step KILL_STEP the members
 * on the last host print "HOST-VICTIM" and wait to be killed with their host (weftrun
 * and all); the others' allreduce fails, they repair until every member of that host
 * is gone, restore a flat re-cut over themselves from the buddies' copies (nothing may
 * be missing: every shard of the dead host has a copy on another host), read each dead
 * member's step from its blob, and train to the end. Every element of every survivor's
 * shard must then be bitwise equal to the same steps computed without any failure.
 * Prints "SURVIVOR-OK" on each survivor.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../groups/fault_common.h"
#include "migrate/snapshot/snapshot.h"
#include "../migrate/snap_common.h"
#include "weft/weft.h"

#define STEPS 12
#define KILL_STEP 6
#define MAX_RANKS 64
#define NAME_LEN 64

static weft_layout_t *model(const int *members, int k)
{
    uint64_t a[1] = {40000}, b[2] = {123, 77};
    weft_layout_t *l;
    weft_layout_create(&l);
    weft_layout_add_tensor(l, "w", WEFT_F32, 1, a, NULL);
    weft_layout_add_tensor(l, "m", WEFT_F64, 2, b, NULL);
    int t[2] = {0, 1};
    weft_layout_flat(l, t, 2, members, k);
    return l;
}

/* The group ranks other than @p i that hold a copy of member i's blob (tensor
 * nstate + i of the copy layout), into @p out; returns how many. */
static int buddies_of(const weft_snapshot_t *s, int i, int *out)
{
    int k = 0;
    for (int j = 0; j < s->n; j++) {
        for (int q = 0; j != i && q < weft_layout_num_regions(s->copies, s->members[j]); q++) {
            int t;
            weft_layout_region(s->copies, s->members[j], q, &t, NULL, NULL, NULL);
            if (t == s->nstate + i) {
                out[k++] = j;
                break;
            }
        }
    }
    return k;
}

/* With default parameters, each member's one buddy is on another host (by host name);
 * with every member on host 0 by host_of, it is the next member in rank order. */
static bool buddies_placed(weft_group_t *g, const weft_layout_t *l, char (*names)[NAME_LEN], int me)
{
    int n, ids[MAX_RANKS], b[MAX_RANKS];
    weft_group_size(g, &n);
    int one_host[MAX_RANKS] = {0};
    for (int r = 0; r < n; r++) {
        weft_group_member_id(g, r, &ids[r]);
    }
    bool ok = true;
    for (int pass = 0; pass < 2 && ok; pass++) {
        int max_id = 0;
        for (int r = 0; r < n; r++) {
            max_id = ids[r] > max_id ? ids[r] : max_id;
        }
        weft_snapshot_params_t sp = {.size = sizeof(sp)};
        if (pass == 1) {
            sp.host_of = one_host;
            sp.num_members = max_id + 1;
        }
        weft_snapshot_t *s;
        if (max_id >= MAX_RANKS ||
            weft_snapshot_create(g, l, sizeof(snap_blob_t), &sp, &s) != WEFT_OK) {
            SURVIVOR_FAIL(me, "snapshot_create");
            return false;
        }
        int held[MAX_RANKS] = {0};
        for (int i = 0; i < n && ok; i++) {
            int k = buddies_of(s, i, b);
            held[k > 0 ? b[0] : i]++;
            ok = k == 1 && (pass == 0 ? strcmp(names[b[0]], names[i]) != 0 : b[0] == (i + 1) % n);
            if (!ok) {
                printf("rank %d: with %s, rank %d (on %s) has %d buddies, the first rank %d "
                       "(on %s)\n",
                       me, pass == 0 ? "default parameters" : "host_of all 0", i, names[i], k,
                       k > 0 ? b[0] : -1, k > 0 ? names[b[0]] : "-");
            } else if (pass == 0 && me == 0) {
                printf("buddy of rank %d (on %s): rank %d (on %s)\n", i, names[i], b[0],
                       names[b[0]]);
            }
        }
        /* The bed's hosts have equal numbers of ranks: each member holds one copy. */
        for (int j = 0; j < n && ok; j++) {
            ok = held[j] == 1;
            if (!ok) {
                printf("rank %d: with %s, rank %d holds %d copies, not 1\n", me,
                       pass == 0 ? "default parameters" : "host_of all 0", j, held[j]);
            }
        }
        weft_snapshot_free(s);
    }
    return ok;
}

/* Repair until no member of the dead host is left (their deaths may be noticed one at a
 * time), within 30 s. */
static weft_status_t repair_without(weft_group_t *g, const int *victims, int nv)
{
    double until = fault_now_ms() + 30000;
    weft_edit_info_t info = {.size = sizeof(info)};
    weft_status_t st = fault_recover(g, &info);
    for (;;) {
        int left = 0;
        for (int v = 0; v < nv; v++) {
            left += fault_has_member(g, victims[v]);
        }
        if (st != WEFT_OK || left == 0) {
            return st;
        }
        if (fault_now_ms() > until) {
            return WEFT_ERR_TIMEOUT;
        }
        if (fault_checked_allreduce(g) != WEFT_OK) {
            st = fault_recover(g, &info);
        }
    }
}

int main(void)
{
    setenv("WEFT_TIMEOUT_MS", "60000", 0);
    weft_ctx_t *ctx;
    weft_group_t *world;
    int me, n, id, ids[MAX_RANKS];
    static char names[MAX_RANKS][NAME_LEN];
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK) {
        printf("SURVIVOR-FAIL init\n");
        return 1;
    }
    weft_group_rank(world, &me);
    weft_group_size(world, &n);
    weft_group_member_id(world, me, &id);
    if (n > MAX_RANKS) {
        SURVIVOR_FAIL(me, "too many ranks");
        return 1;
    }
    for (int r = 0; r < n; r++) {
        weft_group_member_id(world, r, &ids[r]);
    }
    char mine[NAME_LEN] = {0};
    gethostname(mine, sizeof(mine) - 1);
    if (weft_allgather(world, mine, names, NAME_LEN, WEFT_U8) != WEFT_OK) {
        SURVIVOR_FAIL(me, "allgather of the host names");
        return 1;
    }
    /* The victims: every member on the last rank's host. */
    int victims[MAX_RANKS], nv = 0;
    for (int r = 0; r < n; r++) {
        if (strcmp(names[r], names[n - 1]) == 0) {
            victims[nv++] = ids[r];
        }
    }
    bool victim = strcmp(mine, names[n - 1]) == 0;
    weft_layout_t *l = model(ids, n);
    if (nv == n || !buddies_placed(world, l, names, me)) {
        SURVIVOR_FAIL(me, nv == n ? "every member is on one host" : "buddies");
        return 1;
    }
    weft_snapshot_t *snap;
    if (weft_snapshot_create(world, l, sizeof(snap_blob_t), NULL, &snap) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(NULL));
        return 1;
    }
    unsigned char *buf = malloc(weft_layout_packed_bytes(l, id) + 1);
    snap_each(l, id, buf, snap_init_elem, NULL);
    uint64_t step = 1;
    weft_status_t st = WEFT_OK;
    for (; step <= STEPS && st == WEFT_OK; step++) {
        if (victim && step == KILL_STEP) {
            /* Wait for the test to kill this host; never train on. */
            printf("HOST-VICTIM rank %d on %s\n", me, mine);
            fflush(stdout);
            sleep(60);
            printf("SURVIVOR-FAIL rank %d: its host was not killed\n", me);
            return 1;
        }
        st = snap_train_step(world, l, id, buf, step);
        if (st == WEFT_OK) {
            st = snap_take(snap, step, buf);
        }
    }
    if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
        printf("rank %d: training returned %s\n", me, weft_status_str(st));
        SURVIVOR_FAIL(me, "the step without the dead host did not fail");
        return 1;
    }
    if (repair_without(world, victims, nv) != WEFT_OK) {
        SURVIVOR_FAIL(me, "repair");
        return 1;
    }
    int k = 0, left[MAX_RANKS];
    weft_group_size(world, &k);
    for (int r = 0; r < k; r++) {
        weft_group_member_id(world, r, &left[r]);
    }
    weft_layout_t *nl = model(left, k);
    size_t nb = weft_snapshot_restore_bytes(snap, nl);
    unsigned char *nbuf = malloc(nb);
    weft_snapshot_restored_t got = {.size = sizeof(got)};
    if (k != n - nv || (st = weft_snapshot_restore(snap, nl, nbuf, nb, &got)) != WEFT_OK) {
        SURVIVOR_FAIL(me, k != n - nv ? "survivors" : weft_last_error(ctx));
        return 1;
    }
    snap_blob_t vb = {0, 0};
    bool blobs_ok = true;
    for (int v = 0; v < nv; v++) {
        size_t len = 0;
        blobs_ok &= weft_snapshot_blob(snap, victims[v], &vb, sizeof(vb), &len) == WEFT_OK &&
                    len == sizeof(vb) && vb.step == got.step && vb.seed == got.step * 1000003u;
    }
    if (got.bytes_missing != 0 || got.bytes_from_ssd != 0 || !blobs_ok ||
        (got.step != KILL_STEP - 1 && got.step != KILL_STEP - 2)) {
        printf("rank %d: restored step %llu, %zu B missing, the victims' blobs %s\n", me,
               (unsigned long long)got.step, got.bytes_missing, blobs_ok ? "agree" : "do not");
        SURVIVOR_FAIL(me, "restore");
        return 1;
    }
    printf("rank %d: restored step %llu without host %s: %zu B moved, %zu B copied locally\n", me,
           (unsigned long long)got.step, names[n - 1], got.bytes_moved, got.bytes_local);
    weft_snapshot_free(snap);
    if (weft_snapshot_create(world, nl, sizeof(snap_blob_t), NULL, &snap) != WEFT_OK) {
        SURVIVOR_FAIL(me, weft_last_error(NULL));
        return 1;
    }
    for (step = got.step + 1; step <= STEPS && st == WEFT_OK; step++) {
        st = snap_train_step(world, nl, id, nbuf, step);
        if (st == WEFT_OK) {
            st = snap_take(snap, step, nbuf);
        }
    }
    size_t wrong = snap_count_wrong(nl, id, nbuf, STEPS);
    if (st != WEFT_OK || wrong != 0) {
        printf("rank %d: %s, %zu elements differ from the run without failure\n", me,
               weft_status_str(st), wrong);
        SURVIVOR_FAIL(me, "the state after the loss of a host is not the state without it");
        return 1;
    }
    SURVIVOR_OK(me);
    weft_snapshot_free(snap);
    weft_layout_free(l);
    weft_layout_free(nl);
    free(buf);
    free(nbuf);
    weft_finalize(ctx);
    return 0;
}
