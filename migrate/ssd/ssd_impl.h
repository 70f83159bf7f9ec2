/*
 * Inside an SSD-tier handle: the ring, the slots (one aligned bounce buffer and one file
 * per chunk in flight, and a control slot for a snapshot's manifest and directory syncs),
 * and the state of the operation running. Shared by ssd.c (the handle, progress),
 * ssd_steps.c (committed steps, garbage collection), ssd_write.c (snapshots), ssd_read.c
 * (reads) and ssd_hset.c (sets of hashes).
 */
#ifndef WEFT_MIGRATE_SSD_IMPL_H
#define WEFT_MIGRATE_SSD_IMPL_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "migrate/ssd/ssd.h"
#include "migrate/ssd/ssd_format.h"

/* What a slot's request in flight is. */
typedef enum weft__ssd_stage {
    WEFT__SSD_WRITE, /* a chunk file's header and payload */
    WEFT__SSD_SYNC,  /* its fdatasync */
    WEFT__SSD_READ,  /* a chunk file, header and payload at once */
} weft__ssd_stage_t;

typedef struct weft__ssd_slot {
    bool busy;
    weft__ssd_stage_t stage;
    int fd;
    bool direct;      /* fd was opened with O_DIRECT */
    uint8_t *buf;     /* WEFT__SSD_ALIGN-aligned: header block, then the payload */
    size_t io_bytes;  /* of the read or write in flight */
    size_t entry;     /* of the manifest */
    uint64_t chunk;   /* inside the entry */
    uint64_t payload; /* bytes */
    weft__ssd_hash_t hash;
    char tmp[WEFT__SSD_NAME_MAX]; /* the temporary name of the file being written */
} weft__ssd_slot_t;

/* A snapshot after its chunks: each phase is one request on the control slot. */
typedef enum weft__ssd_phase {
    WEFT__SSD_CHUNKS,    /* chunk files being written */
    WEFT__SSD_DIRSYNC,   /* the directory synced, so the chunk files' names are durable */
    WEFT__SSD_MAN_WRITE, /* the manifest written to its temporary file */
    WEFT__SSD_MAN_SYNC,  /* and synced, then renamed into place */
    WEFT__SSD_COMMIT,    /* the directory synced again: the step is committed */
    WEFT__SSD_DONE,
} weft__ssd_phase_t;

typedef enum weft__ssd_op {
    WEFT__SSD_IDLE,
    WEFT__SSD_SNAPSHOT,
    WEFT__SSD_READING,
} weft__ssd_op_t;

/* A set of chunk hashes (open addressing, sized once for what it will hold). */
typedef struct weft__ssd_hset {
    weft__ssd_hash_t *keys;
    uint8_t *used;
    size_t mask;
} weft__ssd_hset_t;

/* One chunk a read needs. */
typedef struct weft__ssd_work {
    size_t entry;
    uint64_t chunk;
} weft__ssd_work_t;

struct weft__ssd {
    char *dir;
    int dirfd;
    int lockfd;
    struct io_uring ring;
    size_t chunk_bytes;
    int queue_depth;
    int keep_steps;
    bool pinned; /* garbage collection also keeps step pin (weft__ssd_pin) */
    uint64_t pin;
    bool direct;
    bool read_only; /* opened without the lock, for reading a dead owner's steps */
    int (*open_fn)(int dirfd, const char *name, int flags, mode_t mode);
    uint8_t key[WEFT__SSD_KEY_BYTES]; /* of the MACs */
    uint8_t *bufs;                    /* queue_depth slot buffers */
    weft__ssd_slot_t *slots;          /* queue_depth chunk slots, then the control slot */
    int inflight;                     /* requests submitted and not yet completed */

    weft__ssd_op_t op;
    weft_status_t status; /* the operation's first error */
    char why[512];        /* its text: the thread that ends the operation may be another */
    bool finished;        /* nothing more will happen: report status */
    weft__ssd_stats_t stats;

    struct {                    /* a snapshot (ssd_write.c) */
        weft__ssd_manifest_t m; /* filled as chunks are hashed */
        const void **src;       /* per entry */
        size_t entry;           /* next chunk to hash */
        uint64_t chunk;
        weft__ssd_hset_t queued; /* written or skipped in this snapshot */
        weft__ssd_phase_t phase;
        uint8_t *man_buf;
        size_t man_len;
    } w;
    struct { /* a region or blob read (ssd_read.c) */
        const weft__ssd_manifest_t *m;
        weft__ssd_work_t *work;
        size_t nwork, next;
        uint8_t *dst;
        weft_box_t box; /* regions: what dst holds */
    } r;
    weft__ssd_manifest_t cache; /* the manifest read last */
    bool cached;
};

/* ---- ssd.c ---- */
#define WEFT__SSD_ROUND_UP(n) (((n) + WEFT__SSD_ALIGN - 1) / WEFT__SSD_ALIGN * WEFT__SSD_ALIGN)

/* One pass of the running operation (reap, advance, submit) without reporting its end:
 * what *_start() calls so that work begins at once. */
void weft__ssd_kick(weft__ssd_t *s);
/* "<dir>/<name>" into @p buf of PATH_MAX bytes. */
void weft__ssd_path(const weft__ssd_t *s, const char *name, char *buf);
/* Open @p name in the directory (relative to its handle, O_NOFOLLOW, new files 0600)
 * with @p flags, adding O_DIRECT while the handle uses it and dropping it for good when
 * the filesystem refuses it (EINVAL). -errno on failure. */
int weft__ssd_open_file(weft__ssd_t *s, const char *name, int flags, bool try_direct);
/* "<final>.<16 random hex digits>.tmp" into @p tmp (WEFT__SSD_NAME_MAX bytes); false
 * when the OS gives no random bytes. */
bool weft__ssd_tmp_name(const char *final, char *tmp);
/* Create a new temporary file for @p final, write only, with O_CREAT|O_EXCL: its name
 * into @p tmp. -errno on failure. */
int weft__ssd_create_tmp(weft__ssd_t *s, const char *final, char *tmp, bool try_direct);
/* Queue @p slot's read or write of slot->io_bytes at offset 0, or its fdatasync. */
void weft__ssd_queue_rw(weft__ssd_t *s, weft__ssd_slot_t *slot, bool write);
void weft__ssd_queue_fsync(weft__ssd_t *s, weft__ssd_slot_t *slot, int fd, bool datasync);
/* A free chunk slot, or NULL; and whether any is busy. */
weft__ssd_slot_t *weft__ssd_free_slot(weft__ssd_t *s);
bool weft__ssd_slots_busy(const weft__ssd_t *s);
/* Record the operation's first error (weft__error_noctx) and return it. */
weft_status_t weft__ssd_fail(weft__ssd_t *s, weft_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The manifest of @p step, read and checked (kept until another step is read). */
weft_status_t weft__ssd_manifest_get(weft__ssd_t *s, uint64_t step, const weft__ssd_manifest_t **m);
/* Forget the cached manifest of @p step (it is being replaced or removed). */
void weft__ssd_manifest_forget(weft__ssd_t *s, uint64_t step);
/* Garbage collection without the idle check (a commit runs it). */
weft_status_t weft__ssd_gc_run(weft__ssd_t *s);
/* Make the directory this key's (opened for writing): unless its "key-check" file shows
 * this key, remove its steps (manifests first, then chunk files), which it could not
 * restore, and write the key-check file. */
weft_status_t weft__ssd_adopt_key(weft__ssd_t *s);
/* "tensor w, region [0:4, 0:8], chunk 3" or "blob rng, chunk 0", for messages. */
void weft__ssd_describe(const weft__ssd_entry_t *e, uint64_t chunk, char *buf, size_t len);

bool weft__ssd_hset_init(weft__ssd_hset_t *h, size_t expect);
/* true when @p k was not in the set (and now is). */
bool weft__ssd_hset_add(weft__ssd_hset_t *h, const weft__ssd_hash_t *k);
bool weft__ssd_hset_has(const weft__ssd_hset_t *h, const weft__ssd_hash_t *k);
void weft__ssd_hset_free(weft__ssd_hset_t *h);

/* ---- ssd_write.c ---- */
void weft__ssd_write_advance(weft__ssd_t *s);
void weft__ssd_write_done(weft__ssd_t *s, weft__ssd_slot_t *slot, int res);
void weft__ssd_write_end(weft__ssd_t *s);

/* ---- ssd_read.c ---- */
void weft__ssd_read_advance(weft__ssd_t *s);
void weft__ssd_read_done(weft__ssd_t *s, weft__ssd_slot_t *slot, int res);
void weft__ssd_read_end(weft__ssd_t *s);

#endif
