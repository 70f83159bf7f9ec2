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
 */
#ifndef WEFT_MIGRATE_SNAPSHOT_H
#define WEFT_MIGRATE_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/ctx.h"
#include "weft/snapshot.h"

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
    size_t buf_bytes; /* each */
    bool have_committed;
    uint64_t committed;
    int committed_parity;
    weft_req_t *pending; /* the snapshot in flight (the caller's request), or NULL */
    uint64_t pending_step;
    int pending_parity;
    bool failed_once; /* a snapshot failed or was cancelled: buffers are retired, not freed */
    /* After a restore. */
    weft_plan_t *restore_plan;
    uint8_t *blobs; /* [n][8 + blob_bytes] as restored */
    bool *blob_ok;  /* [n]: not missing */
    bool restored;
};

/* Index of member @p id among the snapshot's members, or -1. */
int weft__snap_index(const weft_snapshot_t *s, int id);

/* A copy of @p target plus the blob tensors, each replicated on the members of @p g. */
weft_status_t weft__snap_target(const weft_snapshot_t *s, const weft_layout_t *target,
                                weft_layout_t **out);

#endif
