/*
 * Snapshots to the SSD tier. Each region and blob is cut into chunks; a chunk is hashed
 * (XXH3-128) and, unless a file of that name exists, copied behind its header into an
 * aligned slot buffer, sealed with its MAC and written to a new temporary file
 * ("<hash>.chunk.<random>.tmp", O_CREAT|O_EXCL, O_DIRECT where allowed), synced and
 * renamed, queue_depth chunks in flight. Then the directory is synced, the manifest
 * written to a temporary file, synced, renamed into place, and the directory synced
 * again: the step is committed, and garbage collection follows.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/core.h"
#include "migrate/layout/box.h"
#include "migrate/ssd/ssd_impl.h"
#include "migrate/engine/xxh.h"

static bool name_ok(const char *name)
{
    return name != NULL && name[0] != '\0' && strlen(name) <= WEFT_LAYOUT_NAME_MAX;
}

/* A region's box and dtype make sense on their own; its bytes into *bytes. */
static weft_status_t check_region(const weft__ssd_region_t *r, int i, uint64_t *bytes)
{
    if (!name_ok(r->tensor) || r->data == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "ssd: snapshot: region %d has no data "
                                 "or a tensor name not of 1 to %d characters",
                                 i, WEFT_LAYOUT_NAME_MAX);
    }
    size_t elem = weft_dtype_size(r->dtype);
    if (elem == 0 || r->ndims < 1 || r->ndims > WEFT_LAYOUT_MAX_DIMS) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "ssd: snapshot: tensor %s: dtype %d or "
                                 "%d dimensions not allowed",
                                 r->tensor, (int)r->dtype, r->ndims);
    }
    uint64_t n = elem;
    for (int d = 0; d < r->ndims; d++) {
        uint64_t e = r->box.extent[d];
        if (e == 0 || r->box.offset[d] > UINT64_MAX - e || n > SIZE_MAX / e) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "ssd: snapshot: tensor %s: "
                                     "dimension %d of the box is empty or too large",
                                     r->tensor, d);
        }
        n *= e;
    }
    *bytes = n;
    return WEFT_OK;
}

/* Regions of one tensor agree on dtype and ndims and do not overlap; blob names are
 * unique. */
static weft_status_t check_items(const weft__ssd_region_t *regions, int nregions,
                                 const weft__ssd_blob_t *blobs, int nblobs)
{
    for (int i = 0; i < nregions; i++) {
        for (int j = 0; j < i; j++) {
            const weft__ssd_region_t *a = &regions[i], *b = &regions[j];
            if (strcmp(a->tensor, b->tensor) != 0) {
                continue;
            }
            if (a->dtype != b->dtype || a->ndims != b->ndims) {
                return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                         "ssd: snapshot: regions %d and %d "
                                         "of tensor %s differ in dtype or dimensions",
                                         j, i, a->tensor);
            }
            if (weft__box_intersect(&a->box, &b->box, a->ndims, NULL)) {
                return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                         "ssd: snapshot: regions %d and %d "
                                         "of tensor %s overlap",
                                         j, i, a->tensor);
            }
        }
    }
    for (int i = 0; i < nblobs; i++) {
        if (!name_ok(blobs[i].name) || (blobs[i].data == NULL && blobs[i].bytes > 0)) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "ssd: snapshot: blob %d has no data "
                                     "or a name not of 1 to %d characters",
                                     i, WEFT_LAYOUT_NAME_MAX);
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(blobs[i].name, blobs[j].name) == 0) {
                return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                         "ssd: snapshot: blob %s is given "
                                         "twice",
                                         blobs[i].name);
            }
        }
    }
    return WEFT_OK;
}

/* The manifest to be, without its hashes; and where each entry's bytes are. */
static weft_status_t plan_entries(weft__ssd_t *s, const weft__ssd_region_t *regions, int nregions,
                                  const weft__ssd_blob_t *blobs, int nblobs)
{
    weft__ssd_manifest_t *m = &s->w.m;
    size_t n = (size_t)nregions + (size_t)nblobs;
    m->entries = calloc(n ? n : 1, sizeof(*m->entries));
    s->w.src = calloc(n ? n : 1, sizeof(*s->w.src));
    if (m->entries == NULL || s->w.src == NULL) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "ssd: snapshot: out of memory");
    }
    uint64_t chunks = 0;
    for (size_t i = 0; i < n; i++) {
        weft__ssd_entry_t *e = &m->entries[i];
        if (i < (size_t)nregions) {
            const weft__ssd_region_t *r = &regions[i];
            e->kind = WEFT__SSD_REGION;
            strcpy(e->name, r->tensor);
            e->dtype = r->dtype;
            e->ndims = r->ndims;
            e->box = r->box;
            weft_status_t status = check_region(r, (int)i, &e->bytes);
            if (status != WEFT_OK) {
                return status;
            }
            s->w.src[i] = r->data;
        } else {
            const weft__ssd_blob_t *b = &blobs[i - (size_t)nregions];
            e->kind = WEFT__SSD_BLOB;
            e->dtype = WEFT_U8;
            strcpy(e->name, b->name);
            e->bytes = b->bytes;
            s->w.src[i] = b->data;
        }
        e->first_chunk = chunks;
        e->nchunks =
            weft__ssd_nchunks(weft__ssd_entry_elems(e), weft__ssd_entry_elem(e), s->chunk_bytes);
        chunks += e->nchunks;
    }
    m->nentries = n;
    m->nhashes = (size_t)chunks;
    m->hashes = calloc(chunks ? chunks : 1, sizeof(*m->hashes));
    if (m->hashes == NULL || !weft__ssd_hset_init(&s->w.queued, (size_t)chunks)) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY,
                                 "ssd: snapshot: out of memory for %llu "
                                 "chunks",
                                 (unsigned long long)chunks);
    }
    return WEFT_OK;
}

weft_status_t weft__ssd_snapshot_start(weft__ssd_t *s, uint64_t step,
                                       const weft__ssd_region_t *regions, int nregions,
                                       const weft__ssd_blob_t *blobs, int nblobs)
{
    if (s != NULL && s->read_only) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: %s was opened read only", s->dir);
    }
    if (s == NULL || nregions < 0 || nblobs < 0 || (regions == NULL && nregions > 0) ||
        (blobs == NULL && nblobs > 0)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: snapshot: NULL handle, or NULL or "
                                                       "negative regions or blobs");
    }
    if (s->op != WEFT__SSD_IDLE) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "ssd: snapshot of step %llu: an "
                                 "operation is running on %s",
                                 (unsigned long long)step, s->dir);
    }
    for (int i = 0; i < nregions; i++) {
        uint64_t bytes;
        weft_status_t status = check_region(&regions[i], i, &bytes);
        if (status != WEFT_OK) {
            return status;
        }
    }
    weft_status_t status = check_items(regions, nregions, blobs, nblobs);
    if (status != WEFT_OK) {
        return status;
    }
    memset(&s->w, 0, sizeof(s->w));
    s->w.m.step = step;
    s->w.m.chunk_bytes = s->chunk_bytes;
    if ((status = plan_entries(s, regions, nregions, blobs, nblobs)) != WEFT_OK) {
        weft__ssd_write_end(s);
        return status;
    }
    memset(&s->stats, 0, sizeof(s->stats));
    s->op = WEFT__SSD_SNAPSHOT;
    s->status = WEFT_OK;
    s->finished = false;
    s->w.phase = WEFT__SSD_CHUNKS;
    weft__ssd_kick(s); /* chunks start moving now; the result is reported by progress */
    return WEFT_INPROGRESS;
}

/* Whether a complete chunk file of @p h holding @p payload bytes is in place already.
 * Files appear under their final name only once written and synced, so one that is
 * there was complete; one too short to be (damaged since) is written again. */
static bool chunk_present(const weft__ssd_t *s, const weft__ssd_hash_t *h, uint64_t payload)
{
    char name[WEFT__SSD_NAME_MAX];
    struct stat st;
    weft__ssd_chunk_name(h, name);
    return fstatat(s->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           (uint64_t)st.st_size >= WEFT__SSD_HEADER_BYTES + payload;
}

/*
 * A write of @p len bytes from offset 0 came back short after @p done: the rest is written
 * now, so that the kernel says why it stops (ENOSPC, EDQUOT), or it completes. The new
 * result: @p len, or minus the errno. Guessing ENOSPC from the free space was wrong when
 * another process freed some meanwhile.
 */
static int finish_short_write(int fd, const void *buf, size_t len, int done)
{
    size_t at = (size_t)done;
    while (at < len) {
        ssize_t n = pwrite(fd, (const uint8_t *)buf + at, len - at, (off_t)at);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return n < 0 ? -errno : -EIO;
        }
        at += (size_t)n;
    }
    return (int)len;
}

static void chunk_fail(weft__ssd_t *s, const weft__ssd_slot_t *slot, const char *what, int err)
{
    char where[384], name[WEFT__SSD_NAME_MAX];
    weft__ssd_describe(&s->w.m.entries[slot->entry], slot->chunk, where, sizeof(where));
    weft__ssd_chunk_name(&slot->hash, name);
    weft__ssd_fail(s, WEFT_ERR_IO, "ssd: step %llu, %s: %s %s/%s: %s",
                   (unsigned long long)s->w.m.step, where, what, s->dir,
                   slot->tmp[0] != '\0' ? slot->tmp : name, err ? strerror(err) : "short write");
}

/* A new temporary file for the chunk in @p slot (its name in slot->tmp). */
static int open_chunk_tmp(weft__ssd_t *s, weft__ssd_slot_t *slot)
{
    char name[WEFT__SSD_NAME_MAX];
    weft__ssd_chunk_name(&slot->hash, name);
    return weft__ssd_create_tmp(s, name, slot->tmp, true);
}

/* Header and payload of chunk @p k of entry @p i into @p slot, and its write queued. */
static void write_chunk(weft__ssd_t *s, weft__ssd_slot_t *slot, size_t i, uint64_t k,
                        const uint8_t *data, uint64_t len)
{
    const weft__ssd_entry_t *e = &s->w.m.entries[i];
    weft__ssd_chunk_hdr_t h = {
        .hash = s->w.m.hashes[e->first_chunk + k],
        .step = s->w.m.step,
        .payload_bytes = len,
        .chunk_index = k,
        .region_offset = (uint64_t)(data - (const uint8_t *)s->w.src[i]),
        .kind = e->kind,
        .dtype = e->kind == WEFT__SSD_REGION ? (int)e->dtype : -1,
        .ndims = e->ndims,
        .box = e->box,
    };
    strcpy(h.name, e->name);
    slot->entry = i;
    slot->chunk = k;
    slot->hash = h.hash;
    slot->payload = len;
    slot->stage = WEFT__SSD_WRITE;
    slot->io_bytes = WEFT__SSD_HEADER_BYTES + WEFT__SSD_ROUND_UP(len);
    slot->tmp[0] = '\0';
    weft__ssd_chunk_hdr_encode(&h, slot->buf);
    memcpy(slot->buf + WEFT__SSD_HEADER_BYTES, data, len);
    memset(slot->buf + WEFT__SSD_HEADER_BYTES + len, 0,
           slot->io_bytes - WEFT__SSD_HEADER_BYTES - len);
    if (!weft__ssd_chunk_seal(s->key, slot->buf, len)) {
        chunk_fail(s, slot, "cannot compute the MAC of", 0);
        return;
    }
    slot->fd = open_chunk_tmp(s, slot);
    slot->direct = s->direct;
    if (slot->fd < 0) {
        int err = -slot->fd;
        slot->fd = -1;
        chunk_fail(s, slot, "cannot create", err);
        return;
    }
    weft__ssd_queue_rw(s, slot, true);
}

/* Hash chunks and queue the writes of those not on disk yet, while slots are free; at
 * most queue_depth chunks per call, so one call stays short. */
static void queue_chunks(weft__ssd_t *s)
{
    weft__ssd_manifest_t *m = &s->w.m;
    for (int budget = s->queue_depth; budget > 0 && s->w.entry < m->nentries;) {
        const weft__ssd_entry_t *e = &m->entries[s->w.entry];
        if (s->w.chunk >= e->nchunks) {
            s->w.entry++;
            s->w.chunk = 0;
            continue;
        }
        weft__ssd_slot_t *slot = weft__ssd_free_slot(s);
        if (slot == NULL) {
            return;
        }
        size_t elem = weft__ssd_entry_elem(e);
        uint64_t per = weft__ssd_chunk_elems(e, m->chunk_bytes), k = s->w.chunk;
        uint64_t elems = weft__ssd_entry_elems(e), lo = k * per;
        uint64_t len = ((elems - lo) < per ? elems - lo : per) * elem;
        const uint8_t *data = (const uint8_t *)s->w.src[s->w.entry] + lo * elem;
        XXH128_hash_t x = XXH3_128bits(data, (size_t)len);
        weft__ssd_hash_t *h = &m->hashes[e->first_chunk + k];
        *h = (weft__ssd_hash_t){x.low64, x.high64};
        budget--;
        if (!weft__ssd_hset_add(&s->w.queued, h) || chunk_present(s, h, len)) {
            s->stats.bytes_skipped += len;
            s->stats.chunks_skipped++;
        } else {
            write_chunk(s, slot, s->w.entry, k, data, len);
            if (s->status != WEFT_OK) {
                return;
            }
        }
        s->w.chunk++;
    }
}

static void manifest_fail(weft__ssd_t *s, const char *what, int err)
{
    char name[WEFT__SSD_NAME_MAX];
    weft__ssd_manifest_name(s->w.m.step, name);
    weft__ssd_fail(s, WEFT_ERR_IO, "ssd: step %llu: %s %s/%s: %s", (unsigned long long)s->w.m.step,
                   what, s->dir, name, err ? strerror(err) : "short write");
}

/* Write the manifest to its temporary file (buffered: it is small). */
static void queue_manifest(weft__ssd_t *s, weft__ssd_slot_t *ctl)
{
    char name[WEFT__SSD_NAME_MAX];
    s->w.man_len = weft__ssd_manifest_size(&s->w.m);
    s->w.man_buf = malloc(s->w.man_len);
    if (s->w.man_buf == NULL) {
        weft__ssd_fail(s, WEFT_ERR_NO_MEMORY, "ssd: step %llu: out of memory for the manifest",
                       (unsigned long long)s->w.m.step);
        return;
    }
    if (!weft__ssd_manifest_encode(&s->w.m, s->key, s->w.man_buf)) {
        manifest_fail(s, "cannot compute the MAC of", 0);
        return;
    }
    weft__ssd_manifest_name(s->w.m.step, name);
    ctl->fd = weft__ssd_create_tmp(s, name, ctl->tmp, false);
    if (ctl->fd < 0) {
        int err = -ctl->fd;
        ctl->fd = -1;
        manifest_fail(s, "cannot create the temporary file of", err);
        return;
    }
    ctl->buf = s->w.man_buf;
    ctl->io_bytes = s->w.man_len;
    s->w.phase = WEFT__SSD_MAN_WRITE;
    weft__ssd_queue_rw(s, ctl, true);
}

/* A request of the control slot completed: on to the next phase. */
static void control_done(weft__ssd_t *s, weft__ssd_slot_t *ctl, int res)
{
    ctl->busy = false;
    if (s->status != WEFT_OK) {
        return;
    }
    char name[WEFT__SSD_NAME_MAX];
    weft__ssd_manifest_name(s->w.m.step, name);
    switch (s->w.phase) {
    case WEFT__SSD_DIRSYNC:
        if (res < 0) {
            manifest_fail(s, "syncing the directory before", -res);
            return;
        }
        queue_manifest(s, ctl);
        return;
    case WEFT__SSD_MAN_WRITE:
        if (res >= 0 && (size_t)res < s->w.man_len) {
            res = finish_short_write(ctl->fd, s->w.man_buf, s->w.man_len, res);
        }
        if (res < 0 || (size_t)res != s->w.man_len) {
            manifest_fail(s, "writing the temporary file of", res < 0 ? -res : EIO);
            return;
        }
        s->w.phase = WEFT__SSD_MAN_SYNC;
        weft__ssd_queue_fsync(s, ctl, ctl->fd, false);
        return;
    case WEFT__SSD_MAN_SYNC:
        if (res < 0) {
            manifest_fail(s, "syncing the temporary file of", -res);
            return;
        }
        close(ctl->fd);
        ctl->fd = -1;
        weft__ssd_manifest_forget(s, s->w.m.step);
        if (renameat(s->dirfd, ctl->tmp, s->dirfd, name) != 0) {
            manifest_fail(s, "cannot rename into place", errno);
            unlinkat(s->dirfd, ctl->tmp, 0);
            return;
        }
        ctl->tmp[0] = '\0';
        s->w.phase = WEFT__SSD_COMMIT;
        weft__ssd_queue_fsync(s, ctl, s->dirfd, false);
        return;
    case WEFT__SSD_COMMIT:
        if (res < 0) {
            manifest_fail(s, "syncing the directory after renaming", -res);
            return;
        }
        s->w.phase = WEFT__SSD_DONE;
        weft__ssd_gc_run(s); /* a failure here leaves files for the next commit to remove */
        return;
    default:
        return;
    }
}

void weft__ssd_write_done(weft__ssd_t *s, weft__ssd_slot_t *slot, int res)
{
    if (slot == &s->slots[s->queue_depth]) {
        control_done(s, slot, res);
        return;
    }
    if (s->status == WEFT_OK && slot->stage == WEFT__SSD_WRITE && res == -EINVAL && slot->direct) {
        /* Opened with O_DIRECT, refused at the write: buffered from now on, in a file
         * created anew (O_EXCL), the other one removed. */
        s->direct = false;
        close(slot->fd);
        unlinkat(s->dirfd, slot->tmp, 0);
        slot->fd = open_chunk_tmp(s, slot);
        slot->direct = false;
        if (slot->fd >= 0) {
            weft__ssd_queue_rw(s, slot, true);
            return;
        }
        res = slot->fd;
        slot->fd = -1;
    }
    if (s->status == WEFT_OK && slot->stage == WEFT__SSD_WRITE) {
        if (res >= 0 && (size_t)res < slot->io_bytes) {
            res = finish_short_write(slot->fd, slot->buf, slot->io_bytes, res);
        }
        if (res < 0 || (size_t)res != slot->io_bytes) {
            chunk_fail(s, slot, "writing", res < 0 ? -res : EIO);
        } else {
            slot->stage = WEFT__SSD_SYNC;
            weft__ssd_queue_fsync(s, slot, slot->fd, true);
            return;
        }
    } else if (s->status == WEFT_OK && slot->stage == WEFT__SSD_SYNC) {
        char name[WEFT__SSD_NAME_MAX];
        weft__ssd_chunk_name(&slot->hash, name);
        if (res < 0) {
            chunk_fail(s, slot, "syncing", -res);
        } else {
            close(slot->fd);
            slot->fd = -1;
            if (renameat(s->dirfd, slot->tmp, s->dirfd, name) != 0) {
                chunk_fail(s, slot, "cannot rename", errno);
                unlinkat(s->dirfd, slot->tmp, 0);
            } else {
                s->stats.bytes_written += slot->payload;
                s->stats.chunks_written++;
            }
        }
    }
    /* Done with the slot, or failed: a file left half written is removed. */
    if (slot->fd >= 0) {
        close(slot->fd);
        slot->fd = -1;
        unlinkat(s->dirfd, slot->tmp, 0);
    }
    slot->tmp[0] = '\0';
    slot->busy = false;
}

void weft__ssd_write_advance(weft__ssd_t *s)
{
    if (s->status != WEFT_OK) {
        s->finished = s->inflight == 0;
        return;
    }
    if (s->w.phase == WEFT__SSD_CHUNKS) {
        queue_chunks(s);
        if (s->status == WEFT_OK && s->w.entry == s->w.m.nentries && !weft__ssd_slots_busy(s)) {
            s->w.phase = WEFT__SSD_DIRSYNC;
            weft__ssd_slot_t *ctl = &s->slots[s->queue_depth];
            weft__ssd_queue_fsync(s, ctl, s->dirfd, false);
        }
    }
    s->finished = s->w.phase == WEFT__SSD_DONE || (s->status != WEFT_OK && s->inflight == 0);
}

void weft__ssd_write_end(weft__ssd_t *s)
{
    weft__ssd_slot_t *ctl = &s->slots[s->queue_depth];
    if (ctl->fd >= 0) {
        close(ctl->fd);
        ctl->fd = -1;
        unlinkat(s->dirfd, ctl->tmp, 0);
    }
    ctl->tmp[0] = '\0';
    ctl->buf = NULL;
    weft__ssd_manifest_free(&s->w.m);
    free(s->w.src);
    free(s->w.man_buf);
    weft__ssd_hset_free(&s->w.queued);
    memset(&s->w, 0, sizeof(s->w));
}
