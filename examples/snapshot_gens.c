/* The example trainer's snapshot generations (see snapshot_gens.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot_gens.h"

#define WATCH_NS 20000000ull /* how often a first snapshot checks the world meanwhile */

/* The blob each member stores with its shard: what a step depends on besides the shard
 * and w (which the shards hold too). */
typedef struct progress {
    uint64_t step;        /* steps done */
    uint64_t next_sample; /* the data position: the first sample of the next global batch */
} progress_t;

static void gen_free(gen_t *x)
{
    weft_snapshot_free(x->snap);
    if (x->sub != NULL) {
        weft_group_free(x->sub);
    }
    memset(x, 0, sizeof(*x));
    x->id = WEFT_GEN_NONE;
}

static gen_t *gen_find(gens_t *g, int32_t id)
{
    for (int i = 0; i < g->n; i++) {
        if (g->held[i].id == id) {
            return &g->held[i];
        }
    }
    return NULL;
}

/* Keep only the generations for which @p keep_it says so, in their order. */
static void gens_filter(gens_t *g, int (*keep_it)(const gens_t *, int, int32_t), int32_t arg)
{
    int k = 0, cur = -1;
    for (int i = 0; i < g->n; i++) {
        if (keep_it(g, i, arg)) {
            cur = i == g->cur ? k : cur;
            g->held[k++] = g->held[i];
        } else {
            gen_free(&g->held[i]);
        }
    }
    for (int i = k; i < g->n; i++) {
        memset(&g->held[i], 0, sizeof(g->held[i]));
        g->held[i].id = WEFT_GEN_NONE;
    }
    g->n = k;
    g->cur = cur;
}

weft_status_t gens_choose(const gens_t *g, weft_group_t *world, weft_gen_choice_t *choice)
{
    weft_snapshot_gen_t held[GEN_MAX];
    for (int i = 0; i < g->n; i++) {
        held[i] = (weft_snapshot_gen_t){.id = g->held[i].id, .snap = g->held[i].snap};
    }
    return weft_elastic_choose_gen(world, held, g->n, choice);
}

void gens_init(gens_t *g, int redundancy, int first)
{
    memset(g, 0, sizeof(*g));
    for (int i = 0; i < GEN_MAX; i++) {
        g->held[i].id = WEFT_GEN_NONE;
    }
    if (first) {
        g->held[0].id = WEFT_GEN_START;
        g->n = 1;
    }
    g->cur = -1;
    g->redundancy = redundancy;
}

static int keep_not_older(const gens_t *g, int i, int32_t id)
{
    return g->held[i].id >= id;
}

static int keep_current(const gens_t *g, int i, int32_t unused)
{
    (void)unused;
    return i == g->cur;
}

void gens_drop_older(gens_t *g, int32_t id)
{
    gens_filter(g, keep_not_older, id);
    g->cur = -1; /* no snapshot until the next generation is made */
}

void gens_step_committed(gens_t *g)
{
    if (g->n > 1 && g->cur >= 0) {
        gens_filter(g, keep_current, 0);
    }
}

weft_status_t gens_take(gens_t *g, const state_t *s)
{
    progress_t b = {(uint64_t)s->step, (uint64_t)s->step * BATCH};
    weft_req_t *req = NULL;
    weft_status_t st =
        weft_snapshot_start(g->held[g->cur].snap, (uint64_t)s->step, s->shard, &b, sizeof(b), &req);
    if (st != WEFT_OK && st != WEFT_INPROGRESS) {
        return st;
    }
    g->req = req;
    g->req_step = s->step;
    g->req_buf = s->shard;
    return WEFT_OK;
}

/* The snapshot in flight is given up or failed: a migration that failed may still read
 * its buffer, so the state that owns it lets it go to @p r. */
static void let_go(gens_t *g, state_t *owner, retired_t *r)
{
    weft_req_free(g->req);
    if (owner->shard == g->req_buf) {
        retire(r, owner->shard);
        owner->shard = NULL;
    }
    g->req = NULL;
    g->req_buf = NULL;
}

/* The snapshot in flight completed: it is committed. */
static void done(gens_t *g)
{
    weft_req_free(g->req);
    g->req = NULL;
    g->req_buf = NULL;
}

weft_status_t gens_wait(gens_t *g, state_t *owner, retired_t *r)
{
    if (g->req_buf == NULL) {
        return WEFT_OK;
    }
    weft_status_t st = weft_wait(g->req, WEFT_TIMEOUT_DEFAULT);
    if (st == WEFT_OK) {
        done(g);
    } else {
        let_go(g, owner, r);
    }
    return st;
}

void gens_cancel(gens_t *g, state_t *owner, retired_t *r)
{
    if (g->req_buf == NULL) {
        return;
    }
    if (weft_test(g->req) == WEFT_OK) {
        done(g); /* completed meanwhile */
    } else {
        let_go(g, owner, r);
    }
}

void gens_free(gens_t *g, state_t *owner, retired_t *r)
{
    gens_cancel(g, owner, r);
    for (int i = 0; i < g->n; i++) {
        gen_free(&g->held[i]);
    }
    g->n = 0;
    g->cur = -1;
}

void gens_revoke(gens_t *g)
{
    for (int i = 0; i < g->n; i++) {
        if (g->held[i].sub != NULL) {
            (void)weft_group_repair(g->held[i].sub, NULL); /* to the newest epoch ... */
            (void)weft_group_revoke(g->held[i].sub);       /* ... and revoke that one */
        }
    }
}

/* Whether @p world was revoked or edited: repair applies any edit, and leaves a healthy
 * group alone. WEFT_ERR_REVOKED if the epoch moved. */
static weft_status_t world_unchanged(weft_group_t *world)
{
    uint32_t before, after;
    weft_group_epoch(world, &before);
    weft_status_t st = weft_group_repair(world, NULL);
    weft_group_epoch(world, &after);
    return st != WEFT_OK ? st : after != before ? WEFT_ERR_REVOKED : WEFT_OK;
}

static void print_missing(const gen_t *x, const weft_snapshot_t *snap, const int *src, int n_src,
                          const restored_t *out)
{
    const weft_plan_t *plan = weft_snapshot_restore_plan(snap);
    char gone[12 * MAX_MEMBERS] = "";
    size_t len = 0;
    for (int i = 0; i < x->n; i++) {
        int alive = 0;
        for (int j = 0; j < n_src; j++) {
            alive |= src[j] == x->members[i];
        }
        if (!alive) {
            len += (size_t)snprintf(gone + len, sizeof(gone) - len, " %d", x->members[i]);
        }
    }
    for (size_t i = 0; i < weft_plan_num_missing(plan); i++) {
        weft_transfer_t m;
        weft_plan_missing(plan, i, &m);
        if (m.tensor > 1) {
            continue; /* a blob: every step's blob says the same */
        }
        fprintf(stderr,
                "trainer: %s[%llu, %llu) of step %d, which member %d needs, had every copy "
                "on members that are gone:%s\n",
                m.tensor == 0 ? "w" : "momentum", (unsigned long long)m.box.offset[0],
                (unsigned long long)(m.box.offset[0] + m.box.extent[0]), out->step, m.dst, gone);
    }
}

/* Every blob that survived must say the restored step. */
static weft_status_t check_blobs(const gen_t *x, int32_t step)
{
    for (int i = 0; i < x->n; i++) {
        progress_t b;
        size_t len;
        if (weft_snapshot_blob(x->snap, x->members[i], &b, sizeof(b), &len) != WEFT_OK) {
            continue; /* missing: counted with the state */
        }
        if (len != sizeof(b) || b.step != (uint64_t)step || b.next_sample != b.step * BATCH) {
            fprintf(stderr, "trainer: member %d's blob says step %llu, the restore step %d\n",
                    x->members[i], (unsigned long long)b.step, step);
            return WEFT_ERR_PROTOCOL;
        }
    }
    return WEFT_OK;
}

/* The caller's part of the library's restore: the state layout over the survivors. */
static weft_status_t restore_target(void *arg, const int *members, int n, weft_layout_t **target)
{
    (void)arg;
    return state_layout(members, n, target);
}

weft_status_t gens_restore(gens_t *g, int32_t id, weft_group_t *world, restored_t *out)
{
    memset(out, 0, sizeof(*out));
    gen_t *x = gen_find(g, id);
    if (x == NULL || x->snap == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_snapshot_restored_t info = {.size = sizeof(info)};
    void *buf;
    size_t bytes;
    weft_status_t st =
        weft_elastic_restore_gen(x->snap, x->sub, world, restore_target, NULL, &buf, &bytes, &info);
    if (st != WEFT_OK) {
        return st; /* the library keeps a buffer a failed restore may still write into */
    }
    out->buf = buf;
    out->bytes = bytes;
    out->n_src = group_members(x->sub, out->src);
    out->step = (int32_t)info.step;
    out->moved = info.bytes_moved;
    out->local = info.bytes_local;
    out->missing = info.bytes_missing;
    int sub_rank;
    weft_group_rank(x->sub, &sub_rank);
    if (out->missing > 0 && sub_rank == 0) {
        print_missing(x, x->snap, out->src, out->n_src, out);
    }
    return out->missing > 0 ? WEFT_OK : check_blobs(x, out->step);
}

/* Wait for the first snapshot of a generation, and give it up if the world was revoked
 * meanwhile. */
static weft_status_t wait_watching(gens_t *g, weft_group_t *world, state_t *s, retired_t *r)
{
    for (;;) {
        weft_status_t st = weft_wait(g->req, WATCH_NS);
        if (st == WEFT_ERR_TIMEOUT && (st = world_unchanged(world)) == WEFT_OK) {
            continue;
        }
        if (st == WEFT_OK) {
            done(g);
        } else {
            let_go(g, s, r);
        }
        return st;
    }
}

weft_status_t gens_make(gens_t *g, weft_group_t *world, state_t *s, retired_t *r)
{
    uint32_t epoch;
    int rank;
    weft_group_epoch(world, &epoch);
    weft_group_rank(world, &rank);
    if (g->n == GEN_MAX || gen_find(g, (int32_t)epoch) != NULL) {
        fprintf(stderr, "trainer: %s\n",
                g->n == GEN_MAX ? "too many recoveries in a row"
                                : "a generation of this epoch exists");
        return WEFT_ERR_UNSUPPORTED;
    }
    weft_group_t *sub;
    weft_status_t st = weft_group_split(world, 0, rank, &sub);
    if (st != WEFT_OK) {
        return st;
    }
    gen_t *x = &g->held[g->n];
    x->id = (int32_t)epoch;
    x->sub = sub;
    x->n = group_members(sub, x->members);
    weft_layout_t *l;
    if ((st = state_layout(x->members, x->n, &l)) == WEFT_OK) {
        weft_snapshot_params_t p = {.size = sizeof(p), .redundancy = g->redundancy};
        st = weft_snapshot_create(sub, l, sizeof(progress_t), &p, &x->snap);
        weft_layout_free(l);
    }
    if (st != WEFT_OK) {
        gen_free(x);
        return st;
    }
    g->cur = g->n++; /* held from now on, committed or not */
    st = gens_take(g, s);
    if (st == WEFT_OK) {
        st = wait_watching(g, world, s, r);
    }
    if (st != WEFT_OK) {
        g->cur = -1;
    }
    return st;
}
