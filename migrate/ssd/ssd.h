/*
 * The SSD tier of snapshots: a directory per rank holding content-addressed chunk files
 * and one manifest per committed step, written and read through io_uring with several
 * operations in flight, O_DIRECT where the filesystem allows it.
 *
 * Internal (not exported). A handle runs one operation at a time (a snapshot, a region
 * read or a blob read): *_start() queues it and returns WEFT_INPROGRESS, then
 * weft__ssd_progress() advances it without blocking (the caller computes in between) and
 * returns its result once, after which the handle is idle again; weft__ssd_wait() blocks.
 * A handle is used by one thread at a time. Errors are recorded for weft_last_error(NULL)
 * of the calling thread, naming the file, step, tensor and region.
 *
 * The directory holds parameters and optimizer state, and another user must neither read
 * them nor make a rank write or restore anything else: it is created 0700, and when it
 * exists it must be a directory (not a symbolic link) owned by the effective user with
 * no permission for group or others, checked with fstat on the handle opened (so what is
 * checked is what is used). Every file is opened relative to that handle with
 * O_NOFOLLOW, and created 0600 with O_CREAT|O_EXCL under a name with 16 random hex
 * digits, then renamed into place. Every chunk file and manifest carries a MAC
 * (HMAC-SHA256) under the handle's key, checked before its contents are used; the
 * snapshot layer passes a key derived from the job's data key (WEFT__SSD_KEY_LABEL, with
 * weft__ctx_derive_key), so every member of a job, and only they, can restore what
 * another wrote. A directory whose "key-check" file shows another key (another job's
 * steps) has its steps removed when opened for writing, since this key cannot restore
 * them.
 *
 * Status codes: WEFT_ERR_INVALID_ARG for bad arguments, a directory refused by the rules
 * above, a handle already busy, and a step, tensor or blob the directory does not hold
 * (the code weft_layout_find() gives for an unknown name); WEFT_ERR_IO when a system call
 * fails or a file is missing, torn, corrupted or fails its MAC (the caller falls back to
 * another copy or an older step);
 * WEFT_ERR_UNSUPPORTED when io_uring cannot be set up; WEFT_ERR_TIMEOUT from
 * weft__ssd_wait(); WEFT_ERR_NO_MEMORY.
 */
#ifndef WEFT_MIGRATE_SSD_H
#define WEFT_MIGRATE_SSD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "weft/migrate.h"

typedef struct weft__ssd weft__ssd_t;

/* The label of the SSD tier's key: weft__ctx_derive_key(ctx, WEFT__SSD_KEY_LABEL, key). */
#define WEFT__SSD_KEY_LABEL "ssd-tier"

/* Whether chunk files are opened with O_DIRECT. */
typedef enum weft__ssd_direct {
    WEFT__SSD_DIRECT_AUTO = 0, /* O_DIRECT; buffered + fdatasync where the fs refuses it */
    WEFT__SSD_DIRECT_OFF = 1,  /* always buffered + fdatasync */
} weft__ssd_direct_t;

/* Settings of a handle; zero fields take the defaults. */
typedef struct weft__ssd_params {
    size_t chunk_bytes; /* payload per chunk file, a multiple of 4096 (0: 1 MiB) */
    int queue_depth;    /* chunk writes or reads in flight, 1..256 (0: 8) */
    int keep_steps;     /* committed steps garbage collection keeps (0: 2) */
    weft__ssd_direct_t direct;
    /* Replaces openat(2) for chunk files and manifests, called with the directory's
     * handle, a name in it, and flags that include O_NOFOLLOW (NULL: openat; the
     * directory, its lock and key-check files are opened with openat(2)). For tests: a
     * filesystem that refuses O_DIRECT, a crash at a chosen file. */
    int (*open_fn)(int dirfd, const char *name, int flags, mode_t mode);
    /* WEFT__SSD_KEY_BYTES bytes: the key of the MACs (NULL: this process's own key,
     * weft__ctx_derive_key(NULL, ...): what it writes no other process can restore). */
    const uint8_t *key;
    /* Read only: the directory must exist; it is neither locked nor cleaned, and nothing
     * is written (for reading what the process that owned it, now dead, left there). */
    bool read_only;
} weft__ssd_params_t;

/* A region of a tensor to snapshot: @p data holds @p box row-major and stays unchanged
 * until the snapshot completes. Regions of one tensor in one snapshot must not overlap
 * and must agree on dtype and ndims. */
typedef struct weft__ssd_region {
    const char *tensor;
    weft_dtype_t dtype;
    int ndims;
    weft_box_t box;
    const void *data;
} weft__ssd_region_t;

/* A named opaque blob (RNG state, data-loader position); stored as chunks too. */
typedef struct weft__ssd_blob {
    const char *name;
    const void *data;
    size_t bytes; /* may be 0 */
} weft__ssd_blob_t;

/* What the last operation moved. */
typedef struct weft__ssd_stats {
    uint64_t bytes_written; /* payload bytes of chunk files written */
    uint64_t bytes_skipped; /* payload bytes whose chunk file already existed */
    uint64_t chunks_written;
    uint64_t chunks_skipped;
    uint64_t bytes_read; /* payload bytes of chunk files read */
    uint64_t chunks_read;
    uint64_t files_removed; /* by the garbage collection that followed a commit */
} weft__ssd_stats_t;

/* Open (creating it if missing, 0700, with any missing parent) the directory @p dir for
 * this rank and lock it: a second handle on it fails while this one is open. Temporary
 * files a crash left are removed, and so are steps written under another key. A
 * directory that is a symbolic link, is not the effective user's, or gives group or
 * others any permission is refused with WEFT_ERR_INVALID_ARG, saying which. @p params
 * may be NULL. */
weft_status_t weft__ssd_open(const char *dir, const weft__ssd_params_t *params, weft__ssd_t **out);
/* Open directory @p dir (created first, 0700 with any missing parent, when @p create) as
 * *fd: refused with WEFT_ERR_INVALID_ARG when it is a symbolic link, not a directory, not
 * the effective user's or open to group or others (checked with fstat on what was
 * opened); messages start with @p what and say that @p keeps ("the SSD tier keeps ...").
 * Shared by the SSD tier and the spill space. */
weft_status_t weft__ssd_dir_open(const char *dir, bool create, const char *what, const char *keeps,
                                 int *fd);
/* Close @p s (NULL: no-op). An operation in flight is abandoned: what the kernel still
 * holds is waited for, and a snapshot that had not committed leaves no step behind. */
void weft__ssd_close(weft__ssd_t *s);
/* Whether chunk files are written and read with O_DIRECT (false once the filesystem
 * refused it, or with WEFT__SSD_DIRECT_OFF). */
bool weft__ssd_is_direct(const weft__ssd_t *s);

/* ---- writing ---- */
/* Start a snapshot of step @p step: every region and blob is cut into chunks, each
 * chunk named by the XXH3-128 of its bytes and written unless its file exists already.
 * The step is committed (its manifest renamed into place and the directory synced) once
 * every chunk is durable; then files no kept step needs are removed. A step that exists
 * already is replaced. Returns WEFT_INPROGRESS. */
weft_status_t weft__ssd_snapshot_start(weft__ssd_t *s, uint64_t step,
                                       const weft__ssd_region_t *regions, int nregions,
                                       const weft__ssd_blob_t *blobs, int nblobs);

/* ---- reading ---- */
/* The committed steps, newest first: writes up to @p cap of them and their count. */
weft_status_t weft__ssd_steps(weft__ssd_t *s, uint64_t *steps, size_t cap, size_t *count);
/* What step @p step holds of @p tensor: its dtype and ndims. */
weft_status_t weft__ssd_tensor_info(weft__ssd_t *s, uint64_t step, const char *tensor,
                                    weft_dtype_t *dtype, int *ndims);
/* Bytes of blob @p name in step @p step. */
weft_status_t weft__ssd_blob_bytes(weft__ssd_t *s, uint64_t step, const char *name, size_t *bytes);
/* Start reading @p box of @p tensor from step @p step into @p dst (row-major, the box's
 * bytes). The box may lie inside one stored region or span several; every element must
 * be stored. Every chunk is checked before use; on failure @p dst is partly written. */
weft_status_t weft__ssd_read_start(weft__ssd_t *s, uint64_t step, const char *tensor,
                                   const weft_box_t *box, void *dst);
/* Start reading blob @p name of step @p step into @p dst of @p cap bytes (at least
 * weft__ssd_blob_bytes()). */
weft_status_t weft__ssd_blob_read_start(weft__ssd_t *s, uint64_t step, const char *name, void *dst,
                                        size_t cap);

/* ---- driving an operation ---- */
/* Advance the operation without blocking: WEFT_INPROGRESS while it runs, then its result
 * (once; the handle is idle afterwards). WEFT_OK when idle. */
weft_status_t weft__ssd_progress(weft__ssd_t *s);
/* weft__ssd_progress() until the operation ends, sleeping on the ring in between;
 * WEFT_ERR_TIMEOUT after @p timeout_ns (the operation keeps running). */
weft_status_t weft__ssd_wait(weft__ssd_t *s, uint64_t timeout_ns);
/* What the last (or the running) operation moved. */
void weft__ssd_stats(const weft__ssd_t *s, weft__ssd_stats_t *stats);

/* Blocking twins: start, then wait without a time limit. */
weft_status_t weft__ssd_snapshot(weft__ssd_t *s, uint64_t step, const weft__ssd_region_t *regions,
                                 int nregions, const weft__ssd_blob_t *blobs, int nblobs);
weft_status_t weft__ssd_read(weft__ssd_t *s, uint64_t step, const char *tensor,
                             const weft_box_t *box, void *dst);
weft_status_t weft__ssd_blob_read(weft__ssd_t *s, uint64_t step, const char *name, void *dst,
                                  size_t cap);

/* Keep the newest keep_steps committed steps and remove every chunk file none of them
 * references (run after each commit; also callable when idle). Deletes nothing when a
 * kept manifest cannot be read. */
weft_status_t weft__ssd_gc(weft__ssd_t *s);
/* Garbage collection also keeps step @p step from now on (until pinned again), however
 * many newer steps are written: a snapshot's last committed step, when newer steps were
 * written by snapshots that did not commit. */
void weft__ssd_pin(weft__ssd_t *s, uint64_t step);

#endif
