/*
 * Snapshots and the SSD tier: after each committed step a member writes what it holds of
 * it (every region of its copy buffer: its shard, its buddies' copies, the blobs) to its
 * own directory, <ssd_dir>/member-<id>; a restore reads from those directories the pieces
 * no surviving memory copy holds. The write is one weft__ssd_progress call per job, so it
 * runs outside the context's lock, interleaved with other jobs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/crypto.h>

#include "migrate/layout/layout.h"
#include "migrate/snapshot/snapshot.h"
#include "migrate/ssd/ssd.h"
#include "util/clock.h"
#include "weft/group.h"

/* <root>/member-<id>; false if it does not fit. */
static bool member_dir(const char *root, int id, char *out, size_t len)
{
    return (size_t)snprintf(out, len, "%s/member-%d", root, id) < len;
}

/* Opens a member's directory with the job's key (from the token: every member of the job
 * restores what another wrote, and nobody else can forge it); the key is wiped after. */
static weft_status_t open_member_dir(const weft_snapshot_t *s, const char *dir, bool read_only,
                                     weft__ssd_t **out)
{
    uint8_t key[WEFT__CTX_KEY_BYTES];
    weft_status_t st = weft__ctx_derive_key(weft__group_ctx(s->g), WEFT__SSD_KEY_LABEL, key);
    if (st == WEFT_OK) {
        weft__ssd_params_t p = {.read_only = read_only, .key = key};
        st = weft__ssd_open(dir, &p, out);
    }
    OPENSSL_cleanse(key, sizeof(key));
    return st;
}

weft_status_t weft__snap_ssd_open(weft_snapshot_t *s, const char *root)
{
    s->ssd_result = WEFT_OK;
    if (root == NULL || root[0] == '\0') {
        return WEFT_OK;
    }
    char dir[4096];
    int me = weft__group_members(s->g)[weft__group_rank(s->g)];
    if (mkdir(root, 0700) != 0 && errno != EEXIST) {
        return weft__error_noctx(WEFT_ERR_IO, "snapshot SSD tier: cannot create %s: %s", root,
                                 strerror(errno));
    }
    if (!member_dir(root, me, dir, sizeof(dir)) || (s->ssd_root = strdup(root)) == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "snapshot SSD tier: bad directory %s", root);
    }
    return open_member_dir(s, dir, false, &s->ssd);
}

void weft__snap_ssd_close(weft_snapshot_t *s)
{
    if (s->ssd != NULL) {
        weft__job_cancel(weft__group_ctx(s->g), &s->ssd_job);
        weft__ssd_close(s->ssd);
        s->ssd = NULL;
    }
    free(s->ssd_root);
    s->ssd_root = NULL;
}

static void ssd_job(weft_job_t *job)
{
    weft_snapshot_t *s = (weft_snapshot_t *)((char *)job - offsetof(weft_snapshot_t, ssd_job));
    s->ssd_result = weft__ssd_progress(s->ssd);
    if (s->ssd_result != WEFT_OK && s->ssd_result != WEFT_INPROGRESS) {
        snprintf(s->ssd_why, sizeof(s->ssd_why), "%s", weft_last_error(NULL));
    }
}

/* The write ended with @p st (its text in ssd_why when it failed). */
static void finish(weft_snapshot_t *s, weft_status_t st)
{
    s->ssd_running = false;
    s->stats.ssd_status = st;
    weft__ssd_stats_t io;
    weft__ssd_stats(s->ssd, &io);
    s->stats.ssd_bytes_written = io.bytes_written;
    s->stats.ssd_bytes_skipped = io.bytes_skipped;
    s->stats.ssd_write_us = (double)(weft__now_ns() - (uint64_t)s->ssd_t0) / 1e3;
    if (st == WEFT_OK) {
        s->stats.have_durable = 1;
        s->stats.durable = s->ssd_step;
        s->stats.ssd_error[0] = '\0';
    } else {
        snprintf(s->stats.ssd_error, sizeof(s->stats.ssd_error), "%s", s->ssd_why);
        WEFT_WARN(weft__ctx_logger(weft__group_ctx(s->g)),
                  "snapshot of step %llu: the SSD write failed (%s); %s",
                  (unsigned long long)s->ssd_step, s->ssd_why,
                  s->spill_bytes > 0 ? "its spilled copies are not durable: the step does "
                                       "not commit"
                                     : "the memory copies are committed");
    }
}

weft_status_t weft__snap_ssd_start(weft_snapshot_t *s, uint64_t step, int parity)
{
    if (s->ssd == NULL) {
        return WEFT_OK;
    }
    int me = weft__group_members(s->g)[weft__group_rank(s->g)];
    const weft__lmember_t *m = weft__layout_member(s->copies, me);
    int n = m != NULL ? m->nregions : 0;
    weft__ssd_region_t *r = calloc((size_t)n + 1, sizeof(*r));
    s->ssd_t0 = (double)weft__now_ns();
    s->ssd_step = step;
    if (r == NULL) {
        snprintf(s->ssd_why, sizeof(s->ssd_why), "out of memory");
        finish(s, WEFT_ERR_NO_MEMORY);
        return WEFT_OK;
    }
    for (int k = 0; k < n; k++) {
        const weft__lregion_t *reg = &s->copies->regions[m->regions[k]];
        const weft__ltensor_t *t = &s->copies->tensors[reg->tensor];
        r[k].tensor = t->name;
        r[k].dtype = t->dtype;
        r[k].ndims = t->ndims;
        r[k].box = reg->box;
        r[k].data = weft__snap_region_data(s, reg, parity);
    }
    /* The regions are read as the write goes; their descriptions only now. */
    weft_status_t st = weft__ssd_snapshot_start(s->ssd, step, r, n, NULL, 0);
    free(r);
    if (st != WEFT_INPROGRESS) {
        snprintf(s->ssd_why, sizeof(s->ssd_why), "%s", weft_last_error(NULL));
        finish(s, st == WEFT_OK ? WEFT_ERR_IO : st);
        return WEFT_OK;
    }
    s->ssd_running = true;
    s->ssd_job.run = ssd_job;
    weft__job_submit(weft__group_ctx(s->g), &s->ssd_job, false);
    return WEFT_INPROGRESS;
}

uint8_t *weft__snap_region_data(const weft_snapshot_t *s, const weft__lregion_t *reg, int parity)
{
    return reg->buf == 1 ? s->spill + reg->space_offset : s->buf[parity] + reg->packed_offset;
}

weft_status_t weft__snap_ssd_before_close(void *arg)
{
    weft_snapshot_t *s = arg;
    if (!s->ssd_started) {
        s->ssd_started = true;
        if (weft__snap_ssd_start(s, s->pending_step, s->pending_parity) == WEFT_INPROGRESS) {
            return WEFT_INPROGRESS;
        }
    } else if (weft__snap_ssd_progress(s) == WEFT_INPROGRESS) {
        return WEFT_INPROGRESS;
    }
    if (s->spill_bytes > 0 && s->stats.ssd_status != WEFT_OK) {
        return weft__error_noctx(WEFT_ERR_IO,
                                 "snapshot of step %llu: member %d could not write the %zu "
                                 "bytes of buddies' copies it keeps on SSD only (%s)",
                                 (unsigned long long)s->pending_step,
                                 weft__group_members(s->g)[weft__group_rank(s->g)], s->spill_bytes,
                                 s->stats.ssd_error);
    }
    return WEFT_OK;
}

bool weft__snap_ssd_read_spill(weft_snapshot_t *s, uint64_t step, uint8_t **out)
{
    int me = weft__group_members(s->g)[weft__group_rank(s->g)];
    const weft__lmember_t *m = weft__layout_member(s->copies, me);
    weft__ssd_t *h = NULL;
    bool ok = true;
    char dir[4096];
    *out = NULL;
    s->stats.spill_read_bytes = 0;
    s->stats.spill_read_failed = 0;
    for (int k = 0; m != NULL && k < m->nregions && ok; k++) {
        const weft__lregion_t *reg = &s->copies->regions[m->regions[k]];
        int rank;
        if (reg->buf != 1 || weft_group_rank_of(s->g, s->owner[m->regions[k]], &rank) == WEFT_OK) {
            continue; /* in memory, or a living member's shard: it holds that itself */
        }
        if (h == NULL) {
            /* Read only: this member's own handle may be busy with an abandoned write. */
            ok = (*out = malloc(s->spill_bytes)) != NULL &&
                 member_dir(s->ssd_root, me, dir, sizeof(dir)) &&
                 open_member_dir(s, dir, true, &h) == WEFT_OK;
        }
        if (ok) {
            ok = weft__ssd_read(h, step, s->copies->tensors[reg->tensor].name, &reg->box,
                                *out + reg->space_offset) == WEFT_OK;
        }
        if (ok) {
            s->stats.spill_read_bytes += reg->bytes;
        } else {
            snprintf(s->stats.ssd_error, sizeof(s->stats.ssd_error), "%s", weft_last_error(NULL));
            WEFT_WARN(weft__ctx_logger(weft__group_ctx(s->g)),
                      "restore of step %llu: member %d cannot read its spilled copies (%s); "
                      "they are taken from elsewhere or counted missing",
                      (unsigned long long)step, me, s->stats.ssd_error);
        }
    }
    weft__ssd_close(h);
    if (!ok) {
        s->stats.spill_read_failed = 1;
        free(*out);
        *out = NULL;
    }
    return ok;
}

weft_status_t weft__snap_ssd_progress(weft_snapshot_t *s)
{
    if (!s->ssd_running) {
        return WEFT_OK;
    }
    if (!weft__job_done(&s->ssd_job)) {
        return WEFT_INPROGRESS;
    }
    if (s->ssd_result == WEFT_INPROGRESS) {
        weft__job_submit(weft__group_ctx(s->g), &s->ssd_job, false);
        return WEFT_INPROGRESS;
    }
    finish(s, s->ssd_result);
    return WEFT_OK;
}

/* Read missing piece @p x (destination this member) from member @p id's directory into
 * @p tmp; false if that directory does not hold it at @p step. */
static bool read_piece(const weft_snapshot_t *s, int id, uint64_t step, const char *tensor,
                       const weft_box_t *box, void *tmp)
{
    char dir[4096];
    struct stat sb;
    if (!member_dir(s->ssd_root, id, dir, sizeof(dir)) || stat(dir, &sb) != 0) {
        return false;
    }
    weft__ssd_t *h = NULL;
    if (open_member_dir(s, dir, true, &h) != WEFT_OK) { /* its owner is gone: no lock */
        return false;
    }
    bool ok = weft__ssd_read(h, step, tensor, box, tmp) == WEFT_OK;
    weft__ssd_close(h);
    return ok;
}

size_t weft__snap_ssd_fill(weft_snapshot_t *s, const weft_layout_t *t, uint64_t step, void *buf,
                           bool *got)
{
    size_t total = 0;
    int me = weft__group_members(s->g)[weft__group_rank(s->g)];
    size_t nmiss = weft_plan_num_missing(s->restore_plan);
    for (size_t k = 0; k < nmiss; k++) {
        weft_transfer_t x;
        weft_plan_missing(s->restore_plan, k, &x);
        got[k] = false;
        if (s->ssd_root == NULL || x.dst != me) {
            continue;
        }
        const weft__ltensor_t *tt = &t->tensors[x.tensor];
        void *tmp = malloc(x.bytes > 0 ? x.bytes : 1);
        if (tmp == NULL) {
            continue;
        }
        /* The directory of any member that is gone and held the piece: the living ones
         * hold theirs in memory, and may be writing to their directories. */
        for (int i = 0; i < s->n && !got[k]; i++) {
            int id = s->members[i], rank;
            if (weft_group_rank_of(s->g, id, &rank) != WEFT_OK) {
                got[k] = read_piece(s, id, step, tt->name, &x.box, tmp);
            }
        }
        if (got[k]) {
            weft_box_t region;
            size_t off;
            weft_layout_region(t, me, x.dst_region, NULL, &region, NULL, &off);
            weft_box_copy((char *)buf + off, &region, tmp, &x.box, &x.box, tt->ndims, tt->elem);
            total += x.bytes;
        }
        free(tmp);
    }
    return total;
}
