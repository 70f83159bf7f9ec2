/*
 * Inside a snapshot object: the layouts and plan of its copies, its buffers, and what
 * was committed. Shared by snapshot.c (taking snapshots) and snapshot_restore.c.
 *
 * Layouts over the members of the group at creation (in group rank order):
 *   src    each member's state regions (buffer 0: its state buffer) and its blob, a U8
 *          tensor "weft.blob.<id>" of 8 + blob_bytes bytes (buffer 1: the blob staging,
 *          a length then the bytes);
 *   copies each member holds its own regions and those of the members it is a buddy of,
 *          each element once (what it already holds of a region is not added again);
 *   plan   src -> copies, run into copies buffer (step parity) at every snapshot.
 *
 * With a budget (buddy_mem_bytes), buddies' regions that do not fit are added to copies
 * after every region kept in memory, marked as buffer 1 (lregion.buf) at an offset of
 * their own (space_offset): the migration writes them to the spill buffer, which lives
 * while the snapshot runs, and the SSD write before the close makes them durable. Every
 * member's in-memory regions thus come first in its packed order, and buf_bytes covers
 * them only.
 */
#ifndef WEFT_MIGRATE_SNAPSHOT_H
#define WEFT_MIGRATE_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/core.h"
#include "comm/progress/job.h"
#include "weft/snapshot.h"

struct weft__lregion; /* migrate/layout/layout.h */

#define WEFT_SNAP_BLOB_PREFIX "weft.blob."

struct weft_snapshot {
    weft_group_t *g;
    int n;        /* members at creation */
    int *members; /* [n], group rank order */
    int nstate;   /* state tensors; blob tensor of members[i] is nstate + i */
    size_t blob_bytes;
    weft_layout_t *src, *copies;
    weft_plan_t *plan;
    uint8_t *blob;    /* [8 + blob_bytes]: length, then the bytes */
    uint8_t *buf[2];  /* this member's copies, by step parity */
    size_t buf_bytes; /* each (the regions kept in memory) */
    int *owner;       /* [copies->nregions]: the member whose shard the region copies */
    bool spill_mode;  /* a budget was given: the SSD write runs before the close */
    size_t spill_bytes; /* this member's spilled regions (buffer 1), per step */
    uint8_t *spill;     /* their buffer while a snapshot runs, else NULL */
    bool ssd_started;   /* spill mode: the write of the pending step was started */
    bool have_committed;
    uint64_t committed;
    int committed_parity;
    weft_req_t *pending; /* the snapshot in flight (the caller's request), or NULL */
    uint64_t pending_step;
    int pending_parity;
    bool failed_once; /* a snapshot failed or was cancelled: buffers are retired, not freed */
    /* The SSD tier (snapshot_ssd.c): this member's directory, the write of the last
     * committed step (one weft__ssd_progress per job, outside the context's lock). */
    char *ssd_root;
    struct weft__ssd *ssd;
    weft_job_t ssd_job;
    weft_status_t ssd_result; /* of the job's progress call */
    char ssd_why[256];        /* the SSD module's text when it failed (job's thread) */
    bool ssd_running;
    uint64_t ssd_step;
    double ssd_t0;
    weft_snapshot_stats_t stats;
    /* After a restore. */
    weft_plan_t *restore_plan;
    uint8_t *blobs; /* [n][8 + blob_bytes] as restored */
    bool *blob_ok;  /* [n]: not missing */
    bool restored;
    const uint8_t *live; /* the caller's live state buffer, while a restore runs, or NULL */
};

/* Add to @p member of @p l the part of @p box of tensor @p t it does not hold yet (new
 * regions at the end of l->regions). */
weft_status_t weft__snap_add_part(weft_layout_t *l, int member, int t, const weft_box_t *box);

/* Index of member @p id among the snapshot's members, or -1. */
int weft__snap_index(const weft_snapshot_t *s, int id);

/* SSD tier (snapshot_ssd.c). Open this member's directory; NULL root: none. */
weft_status_t weft__snap_ssd_open(weft_snapshot_t *s, const char *root);
/* Start writing committed step @p step from copy buffer @p parity: WEFT_INPROGRESS with
 * the first job submitted, or WEFT_OK when there is nothing to do (or it failed: stats). */
weft_status_t weft__snap_ssd_start(weft_snapshot_t *s, uint64_t step, int parity);
/* Advance the write: WEFT_INPROGRESS, or WEFT_OK once it ended (its result in stats). */
weft_status_t weft__snap_ssd_progress(weft_snapshot_t *s);
void weft__snap_ssd_close(weft_snapshot_t *s);
/* Spill mode: the migration's step before its close (weft__mig_ext_t.before_close): the
 * pending step is written to this member's directory; an error when spilled copies of
 * this member could not be written. */
weft_status_t weft__snap_ssd_before_close(void *snap);
/* Where copies region @p reg of this member lies in copy buffer @p parity (or in the
 * spill buffer). */
uint8_t *weft__snap_region_data(const weft_snapshot_t *s, const struct weft__lregion *reg,
                                int parity);
/* Spill mode, in a restore of @p step: read this member's spilled regions whose owner is
 * gone into a new buffer (*@p out, spill_bytes; NULL when none is needed); false when
 * one could not be read (stats tell). */
bool weft__snap_ssd_read_spill(weft_snapshot_t *s, uint64_t step, uint8_t **out);
/* After a restore's migration: read from the SSD directories of @p step the missing
 * pieces whose destination is this member, into @p buf (packed in @p t); @p got[k] says
 * which of the plan's missing pieces were read. Returns the bytes read. */
size_t weft__snap_ssd_fill(weft_snapshot_t *s, const weft_layout_t *t, uint64_t step, void *buf,
                           bool *got);

/* A copy of @p target plus the blob tensors, each replicated on the members of @p g. */
weft_status_t weft__snap_target(const weft_snapshot_t *s, const weft_layout_t *target,
                                weft_layout_t **out);

#endif
