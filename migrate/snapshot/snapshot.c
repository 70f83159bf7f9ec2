/*
 * Taking snapshots: the layouts of the copies (buddies chosen in group rank order, on
 * another host first: the caller's host_of, else the hosts the members published), and
 * a request per snapshot that runs the copy plan through the migration engine and
 * commits the step when it completes on every member.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll/start.h"
#include "migrate/layout/box.h"
#include "migrate/engine/engine.h"
#include "migrate/layout/layout.h"
#include "migrate/snapshot/snapshot.h"
#include "migrate/ssd/ssd.h"
#include "util/array.h"
#include "util/bigmem.h"
#include "util/sized.h"
#include "weft/group.h"

int weft__snap_index(const weft_snapshot_t *s, int id)
{
    for (int i = 0; i < s->n; i++) {
        if (s->members[i] == id) {
            return i;
        }
    }
    return -1;
}

static int host_of(const weft_snapshot_params_t *p, int id)
{
    return p->host_of != NULL && id >= 0 && id < p->num_members ? p->host_of[id] : -1;
}

/* Without a host_of table from the caller, the group's own: the host each member
 * published with its address (util/host_id.h), as the lowest group rank on it, by
 * member id. Every member computes the same. Left NULL on one host (nothing to prefer)
 * and when out of memory (buddies then ignore hosts, as they do without a table). */
static int *group_host_of(const weft_group_t *g, weft_snapshot_params_t *p)
{
    if (p->host_of != NULL || weft__group_size(g) < 2) {
        return NULL;
    }
    int max_id = 0;
    for (int r = 0; r < weft__group_size(g); r++) {
        max_id = weft__group_members(g)[r] > max_id ? weft__group_members(g)[r] : max_id;
    }
    int *by_rank = malloc((size_t)weft__group_size(g) * sizeof(int));
    int *table = malloc(((size_t)max_id + 1) * sizeof(int));
    if (by_rank == NULL || table == NULL || weft__group_hosts(g, by_rank) < 2) {
        free(by_rank);
        free(table);
        return NULL;
    }
    for (int id = 0; id <= max_id; id++) {
        table[id] = -1;
    }
    for (int r = 0; r < weft__group_size(g); r++) {
        table[weft__group_members(g)[r]] = by_rank[r];
    }
    free(by_rank);
    p->host_of = table;
    p->num_members = max_id + 1;
    return table;
}

/* The @p r buddies of member index @p i: the next members in rank order, those on
 * another host first. The search starts as many members ahead as its host has (L): with
 * hosts of equal size in blocks of ranks, a member's buddies are its counterparts on the
 * next hosts, and every member holds r copies (from just ahead, the first members of
 * each host would hold the copies of their whole previous host). */
static void choose_buddies(const weft_snapshot_t *s, const weft_snapshot_params_t *p, int i, int r,
                           int *out)
{
    int k = 0, h = host_of(p, s->members[i]), L = 0;
    for (int j = 0; j < s->n && h >= 0; j++) {
        L += host_of(p, s->members[j]) == h;
    }
    L = L > 0 && L < s->n ? L : 1;
    for (int pass = 0; pass < 2 && k < r; pass++) {
        for (int e = 0; e < s->n - 1 && k < r; e++) {
            int d = 1 + (L - 1 + e) % (s->n - 1); /* L, L+1, ..., n-1, 1, ..., L-1 */
            int j = (i + d) % s->n;
            int hj = host_of(p, s->members[j]);
            bool other = h < 0 || hj < 0 || hj != h;
            bool taken = false;
            for (int q = 0; q < k; q++) {
                taken |= out[q] == j;
            }
            if (!taken && (pass == 1 || other)) {
                out[k++] = j;
            }
        }
    }
}

weft_status_t weft__snap_add_part(weft_layout_t *l, int member, int t, const weft_box_t *box)
{
    int nd = l->tensors[t].ndims;
    weft_box_t *parts = malloc(sizeof(weft_box_t)), *next = NULL;
    if (parts == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    parts[0] = *box;
    int nparts = 1;
    const weft__lmember_t *m = weft__layout_member(l, member);
    for (int k = 0; m != NULL && k < m->nregions && nparts > 0; k++) {
        const weft__lregion_t *q = &l->regions[m->regions[k]];
        if (q->tensor != t) {
            continue;
        }
        next = malloc((size_t)nparts * 2 * (size_t)nd * sizeof(weft_box_t) + sizeof(weft_box_t));
        if (next == NULL) {
            free(parts);
            return WEFT_ERR_NO_MEMORY;
        }
        int nn = 0;
        for (int j = 0; j < nparts; j++) {
            nn += weft__box_subtract(&parts[j], &q->box, nd, &next[nn]);
        }
        free(parts);
        parts = next;
        nparts = nn;
    }
    weft_status_t st = WEFT_OK;
    for (int j = 0; j < nparts && st == WEFT_OK; j++) {
        st = weft_layout_add_region(l, member, t, &parts[j]);
    }
    free(parts);
    return st;
}

/* Record @p owner for the copies regions from @p first on; with @p spill, mark them as
 * buffer 1 at *@p spill_off on (which grows by their bytes). */
static weft_status_t note_regions(weft_snapshot_t *s, int first, int owner, bool spill,
                                  size_t *spill_off)
{
    int n = s->copies->nregions;
    int *o = realloc(s->owner, (size_t)(n > 0 ? n : 1) * sizeof(int));
    if (o == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    s->owner = o;
    for (int k = first; k < n; k++) {
        o[k] = owner;
        if (spill) {
            weft__lregion_t *reg = &s->copies->regions[k];
            reg->buf = 1;
            reg->space_offset = *spill_off;
            *spill_off += reg->bytes;
        }
    }
    return WEFT_OK;
}

/* A buddy's region deferred to the spill pass: shard of member index i, for holder j. */
typedef struct deferred {
    int i, j, k;
} deferred_t;

/* src and copies (snapshot.h). With a budget, a buddy's state region goes to memory if
 * the holder's buddy bytes (both buffers) stay within it, else to the spill pass. */
static weft_status_t build_layouts(weft_snapshot_t *s, const weft_layout_t *state,
                                   const weft_snapshot_params_t *p, int r)
{
    weft_status_t st = weft_layout_keep(state, s->members, s->n, &s->src);
    if (st == WEFT_OK) {
        st = weft_layout_keep(state, NULL, 0, &s->copies);
    }
    uint64_t shape[1] = {8 + s->blob_bytes};
    for (int i = 0; i < s->n && st == WEFT_OK; i++) {
        char name[WEFT_LAYOUT_NAME_MAX + 1];
        snprintf(name, sizeof(name), WEFT_SNAP_BLOB_PREFIX "%d", s->members[i]);
        st = weft_layout_add_tensor(s->src, name, WEFT_U8, 1, shape, NULL);
        if (st == WEFT_OK) {
            st = weft_layout_add_tensor(s->copies, name, WEFT_U8, 1, shape, NULL);
        }
        if (st == WEFT_OK) {
            st = weft_layout_whole(s->src, s->nstate + i, s->members[i]);
        }
        if (st == WEFT_OK) { /* the blob lives in buffer 1 */
            weft__lregion_t *reg = &s->src->regions[s->src->nregions - 1];
            reg->buf = 1;
            reg->space_offset = 0;
        }
    }
    int *b = calloc((size_t)r + 1, sizeof(int));
    size_t *spent = calloc((size_t)s->n, sizeof(size_t)), *spill_off = NULL;
    deferred_t *later = NULL;
    size_t nlater = 0, cap_later = 0;
    if (st == WEFT_OK && (b == NULL || spent == NULL ||
                          (spill_off = calloc((size_t)s->n, sizeof(size_t))) == NULL)) {
        st = WEFT_ERR_NO_MEMORY;
    }
    /* Every member holds its own regions, then its buddies hold them. */
    for (int i = 0; i < s->n && st == WEFT_OK; i++) {
        b[0] = i;
        choose_buddies(s, p, i, r, &b[1]);
        const weft__lmember_t *m = weft__layout_member(s->src, s->members[i]);
        for (int h = 0; h <= r && st == WEFT_OK; h++) {
            int j = b[h];
            for (int k = 0; m != NULL && k < m->nregions && st == WEFT_OK; k++) {
                const weft__lregion_t *reg = &s->src->regions[m->regions[k]];
                bool counted = s->spill_mode && h > 0 && reg->tensor < s->nstate;
                if (counted && 2 * (spent[j] + reg->bytes) > p->buddy_mem_bytes) {
                    if (!weft__array_reserve((void **)&later, &cap_later, nlater + 1,
                                             sizeof(*later))) {
                        st = WEFT_ERR_NO_MEMORY;
                        break;
                    }
                    later[nlater++] = (deferred_t){i, j, k};
                    continue;
                }
                int first = s->copies->nregions;
                size_t before = weft_layout_packed_bytes(s->copies, s->members[j]);
                st = weft__snap_add_part(s->copies, s->members[j], reg->tensor, &reg->box);
                if (st == WEFT_OK) {
                    st = note_regions(s, first, s->members[i], false, NULL);
                }
                if (counted) {
                    spent[j] += weft_layout_packed_bytes(s->copies, s->members[j]) - before;
                }
            }
        }
    }
    /* The spilled regions come after every member's in-memory ones. */
    for (size_t q = 0; q < nlater && st == WEFT_OK; q++) {
        const deferred_t *d = &later[q];
        const weft__lmember_t *m = weft__layout_member(s->src, s->members[d->i]);
        const weft__lregion_t *reg = &s->src->regions[m->regions[d->k]];
        int first = s->copies->nregions;
        st = weft__snap_add_part(s->copies, s->members[d->j], reg->tensor, &reg->box);
        if (st == WEFT_OK) {
            st = note_regions(s, first, s->members[d->i], true, &spill_off[d->j]);
        }
    }
    if (st == WEFT_OK) {
        int me = weft__snap_index(s, weft__group_members(s->g)[weft__group_rank(s->g)]);
        s->spill_bytes = spill_off[me];
    }
    free(b);
    free(spent);
    free(spill_off);
    free(later);
    if (st == WEFT_OK) {
        weft_plan_params_t pp = {
            .size = sizeof(pp), .host_of = p->host_of, .num_members = p->num_members};
        st = weft_plan_create(s->src, s->copies, &pp, &s->plan);
    }
    return st;
}

weft_status_t weft_snapshot_create(weft_group_t *g, const weft_layout_t *state, size_t blob_bytes,
                                   const weft_snapshot_params_t *params, weft_snapshot_t **snap)
{
    WEFT_API_LOCK(g != NULL ? weft__group_ctx(g) : NULL);
    if (g == NULL || state == NULL || snap == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_snapshot_create: NULL argument");
    }
    weft_snapshot_params_t p;
    memset(&p, 0, sizeof(p));
    if (params != NULL) {
        if (params->size < sizeof(size_t)) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "weft_snapshot_create: params->size is not set");
        }
        memcpy(&p, params, params->size < sizeof(p) ? params->size : sizeof(p));
    }
    if (p.buddy_mem_bytes > 0 && (p.ssd_dir == NULL || p.ssd_dir[0] == '\0')) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_snapshot_create: buddy_mem_bytes (%zu) needs ssd_dir: "
                                 "buddies' copies beyond it are kept in the SSD tier only",
                                 p.buddy_mem_bytes);
    }
    int r = p.redundancy > 0 ? p.redundancy : 1;
    if (r > weft__group_size(g) - 1) {
        r = weft__group_size(g) - 1;
    }
    for (int t = 0; t < state->ntensors; t++) {
        if (strncmp(state->tensors[t].name, WEFT_SNAP_BLOB_PREFIX, strlen(WEFT_SNAP_BLOB_PREFIX)) ==
            0) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "weft_snapshot_create: tensor name %s is reserved",
                                     state->tensors[t].name);
        }
    }
    for (int k = 0; k < state->nmembers; k++) {
        int rank;
        if (state->members[k].nregions > 0 &&
            weft_group_rank_of(g, state->members[k].id, &rank) != WEFT_OK) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "weft_snapshot_create: the layout names member %d, which "
                                     "is not in group %u epoch %u",
                                     state->members[k].id, weft__group_id(g), weft__group_epoch(g));
        }
    }
    weft_status_t st = weft_layout_check_complete(state);
    if (st != WEFT_OK) {
        return st;
    }
    weft_snapshot_t *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->members = malloc((size_t)weft__group_size(g) * sizeof(int))) == NULL) {
        free(s);
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "weft_snapshot_create: out of memory");
    }
    s->g = g;
    s->n = weft__group_size(g);
    memcpy(s->members, weft__group_members(g), (size_t)weft__group_size(g) * sizeof(int));
    s->nstate = state->ntensors;
    s->blob_bytes = blob_bytes;
    s->spill_mode = p.buddy_mem_bytes > 0;
    int *hosts = group_host_of(g, &p);
    st = build_layouts(s, state, &p, r);
    free(hosts);
    if (st == WEFT_OK) {
        st = weft__snap_ssd_open(s, p.ssd_dir);
    }
    if (st == WEFT_OK) {
        int me = weft__group_members(g)[weft__group_rank(g)];
        /* The spilled regions come last in this member's packed order. */
        s->buf_bytes = weft_layout_packed_bytes(s->copies, me) - s->spill_bytes;
        s->stats.spill_bytes = s->spill_bytes;
        s->blob = calloc(1, 8 + blob_bytes);
        for (int k = 0; k < 2; k++) {
            s->buf[k] = weft__bigmem_alloc(s->buf_bytes);
        }
        if (s->blob == NULL || s->buf[0] == NULL || s->buf[1] == NULL) {
            st = WEFT_ERR_NO_MEMORY;
        }
    }
    if (st != WEFT_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", weft_last_error(NULL));
        weft_snapshot_free(s);
        weft__error_noctx(st, "%s", why);
        return st == WEFT_ERR_NO_MEMORY
                   ? weft__error_noctx(st, "weft_snapshot_create: out of memory")
                   : st;
    }
    *snap = s;
    return WEFT_OK;
}

size_t weft_snapshot_bytes(const weft_snapshot_t *snap)
{
    return snap != NULL ? 2 * snap->buf_bytes : 0;
}

/* The request of one snapshot: the migration is its child. */
typedef struct snap_req {
    weft_snapshot_t *snap; /* NULL once the snapshot object was freed */
    weft_req_t *child;     /* the migration into the copy buffers */
    bool writing;          /* committed; now writing it to the SSD tier */
} snap_req_t;

static weft_status_t snap_progress(weft_req_t *req)
{
    snap_req_t *q = weft__req_impl(req);
    weft_snapshot_t *s = q->snap;
    if (s == NULL) {
        return WEFT_ERR_REVOKED; /* the snapshot object was freed under it */
    }
    if (q->writing) {
        return weft__snap_ssd_progress(s);
    }
    weft_status_t st = weft__coll_child_test(&q->child, NULL);
    if (st == WEFT_OK) {
        s->have_committed = true;
        s->committed = s->pending_step;
        s->committed_parity = s->pending_parity;
        s->stats.have_committed = 1;
        s->stats.committed = s->committed;
        if (s->spill_mode) { /* written before the close; the spill buffer is done */
            /* Steps written by snapshots that fail later never push it out. */
            weft__ssd_pin(s->ssd, s->committed);
            weft__bigmem_free(s->spill, s->spill_bytes);
            s->spill = NULL;
            return WEFT_OK;
        }
        q->writing = true;
        return weft__snap_ssd_start(s, s->committed, s->committed_parity);
    }
    if (st != WEFT_INPROGRESS) {
        s->failed_once = true;
    }
    return st;
}

static void snap_cleanup(weft_req_t *req)
{
    snap_req_t *q = weft__req_impl(req);
    if (q == NULL) {
        return;
    }
    if (q->child != NULL && q->snap != NULL) {
        q->snap->failed_once = true; /* cancelled in flight */
    }
    if (q->snap != NULL && q->snap->ssd_running) {
        /* Freed before the SSD write ended: it stops here (the step is not written). */
        weft__job_cancel(weft__req_ctx(req), &q->snap->ssd_job);
        q->snap->ssd_running = false;
        q->snap->stats.ssd_status = WEFT_ERR_REVOKED;
    }
    weft__coll_child_drop(&q->child);
    if (q->snap != NULL && q->snap->pending == req) {
        q->snap->pending = NULL;
    }
    free(q);
    weft__req_set_impl(req, NULL);
}

weft_status_t weft_snapshot_start(weft_snapshot_t *snap, uint64_t step, const void *state_buf,
                                  const void *blob, size_t blob_len, weft_req_t **req)
{
    WEFT_API_LOCK(snap != NULL ? weft__group_ctx(snap->g) : NULL);
    if (snap == NULL || req == NULL || (blob == NULL && blob_len > 0)) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = weft__group_ctx(snap->g);
    if (snap->plan == NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_start: this object only received a restore "
                           "(weft_snapshot_restore_join); create one for the new layout");
    }
    if (snap->pending != NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_start: the snapshot of step %" PRIu64
                           " is still in flight (wait for it and free its request first)",
                           snap->pending_step);
    }
    if (blob_len > snap->blob_bytes) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_start: a blob of %zu bytes, at most %zu", blob_len,
                           snap->blob_bytes);
    }
    if (snap->have_committed && step <= snap->committed) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_snapshot_start: step %" PRIu64
                           " is not above the committed %" PRIu64,
                           step, snap->committed);
    }
    uint64_t len = blob_len;
    memcpy(snap->blob, &len, 8);
    if (blob_len > 0) {
        memcpy(snap->blob + 8, blob, blob_len);
    }
    int parity = snap->have_committed ? 1 - snap->committed_parity : 0;
    if (snap->spill != NULL) { /* left by a failed snapshot: cancelled receives may write it */
        weft__retire_big(ctx, snap->spill, snap->spill_bytes);
        snap->spill = NULL;
    }
    weft_req_t *r = weft__req_new(ctx, snap->g);
    snap_req_t *q = calloc(1, sizeof(*q));
    if (snap->spill_bytes > 0) {
        snap->spill = weft__bigmem_alloc(snap->spill_bytes);
    }
    if (r == NULL || q == NULL || (snap->spill_bytes > 0 && snap->spill == NULL)) {
        weft_req_free(r);
        free(q);
        weft__bigmem_free(snap->spill, snap->spill_bytes);
        snap->spill = NULL;
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_snapshot_start: out of memory");
    }
    weft_migrate_params_t mp = {.size = sizeof(mp), .resume_buf = snap->blob};
    weft__mig_ext_t ext = {.new_buf1 = snap->spill,
                           .before_close = snap->spill_mode ? weft__snap_ssd_before_close : NULL,
                           .arg = snap};
    snap->ssd_started = false;
    snap->pending_step = step;
    snap->pending_parity = parity;
    weft_req_t *child = NULL;
    weft_status_t st = weft__migrate_start_ext(snap->g, snap->plan, state_buf, snap->buf[parity],
                                               &mp, step, &ext, &child);
    if (st != WEFT_OK && st != WEFT_INPROGRESS) {
        weft_req_free(r);
        free(q);
        return st;
    }
    q->snap = snap;
    q->child = child;
    weft__req_set_ops(r, snap_progress, snap_cleanup, q);
    weft__req_set_runs_jobs(r, true);
    snap->pending = r;
    snap->pending_step = step;
    snap->pending_parity = parity;
    weft__req_publish(r);
    *req = r;
    return WEFT_INPROGRESS;
}

weft_status_t weft_snapshot_stats(const weft_snapshot_t *snap, weft_snapshot_stats_t *stats)
{
    if (snap == NULL || stats == NULL ||
        stats->size < WEFT__SIZED_MIN(weft_snapshot_stats_t, restore_in_place_bytes)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_snapshot_stats: NULL argument, or stats->size not set to "
                                 "sizeof(weft_snapshot_stats_t)");
    }
    weft__sized_copy(stats, &snap->stats, sizeof(snap->stats));
    return WEFT_OK;
}

weft_status_t weft_snapshot_committed(const weft_snapshot_t *snap, uint64_t *step)
{
    if (snap == NULL || step == NULL || !snap->have_committed) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_snapshot_committed: none");
    }
    *step = snap->committed;
    return WEFT_OK;
}

void weft_snapshot_free(weft_snapshot_t *snap)
{
    if (snap == NULL) {
        return;
    }
    WEFT_API_LOCK(weft__group_ctx(snap->g));
    if (snap->pending != NULL) {
        snap_req_t *q = weft__req_impl(snap->pending);
        weft__coll_child_drop(&q->child);
        q->snap = NULL;
        snap->failed_once = true;
    }
    weft_ctx_t *ctx = weft__group_ctx(snap->g);
    weft__snap_ssd_close(snap);
    if (snap->failed_once) {
        /* Cancelled sends of a failed snapshot may still read these (weft__retire). */
        weft__retire(ctx, snap->blob);
        weft__retire_big(ctx, snap->buf[0], snap->buf_bytes);
        weft__retire_big(ctx, snap->buf[1], snap->buf_bytes);
        weft__retire_big(ctx, snap->spill, snap->spill_bytes);
        snap->blob = snap->buf[0] = snap->buf[1] = snap->spill = NULL;
    }
    weft_layout_free(snap->src);
    weft_layout_free(snap->copies);
    weft_plan_free(snap->plan);
    weft_plan_free(snap->restore_plan);
    free(snap->blob);
    weft__bigmem_free(snap->buf[0], snap->buf_bytes);
    weft__bigmem_free(snap->buf[1], snap->buf_bytes);
    weft__bigmem_free(snap->spill, snap->spill_bytes);
    free(snap->owner);
    free(snap->blobs);
    free(snap->blob_ok);
    free(snap->members);
    free(snap);
}
