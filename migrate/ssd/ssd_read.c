/*
 * Reading from the SSD tier. A region read finds the stored regions of the tensor that
 * meet the box asked for and, in each, the chunks that hold some of its elements; each
 * chunk file is read whole (header and payload, O_DIRECT where allowed), queue_depth at a
 * time, checked (header checksum, the hash it names, length, payload hash, then its MAC
 * under the handle's key: integrity first, so that damage is called damage), and the
 * elements it holds are cut into the caller's buffer. A chunk is a flat range of its
 * region, which weft__box_tile_range turns into at most 2d-1 boxes, each contiguous.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/core.h"
#include "migrate/layout/box.h"
#include "migrate/ssd/ssd_impl.h"
#include "migrate/engine/xxh.h"
#include "util/array.h"

#define MAX_TILES (2 * WEFT_LAYOUT_MAX_DIMS - 1)

/* Chunk @p k of region entry @p e as boxes in tensor coordinates, in element order. */
static int chunk_tiles(const weft__ssd_entry_t *e, uint64_t chunk_bytes, uint64_t k,
                       weft_box_t *tiles)
{
    uint64_t per = weft__ssd_chunk_elems(e, chunk_bytes), elems = weft__ssd_entry_elems(e);
    uint64_t lo = k * per, hi = elems - lo < per ? elems : lo + per;
    int n = weft__box_tile_range(e->box.extent, e->ndims, lo, hi, tiles);
    for (int t = 0; t < n; t++) {
        for (int d = 0; d < e->ndims; d++) {
            tiles[t].offset[d] += e->box.offset[d];
        }
    }
    return n;
}

static bool chunk_meets(const weft__ssd_entry_t *e, uint64_t chunk_bytes, uint64_t k,
                        const weft_box_t *box)
{
    weft_box_t tiles[MAX_TILES];
    int n = chunk_tiles(e, chunk_bytes, k, tiles);
    for (int t = 0; t < n; t++) {
        if (weft__box_intersect(&tiles[t], box, e->ndims, NULL)) {
            return true;
        }
    }
    return false;
}

/* Row-major index, inside @p e's box, of the element at tensor coordinates @p at. */
static uint64_t flat_index(const weft__ssd_entry_t *e, const uint64_t *at)
{
    uint64_t i = 0;
    for (int d = 0; d < e->ndims; d++) {
        i = i * e->box.extent[d] + (at[d] - e->box.offset[d]);
    }
    return i;
}

static bool add_work(weft__ssd_t *s, size_t *cap, size_t entry, uint64_t chunk)
{
    if (!weft__array_reserve((void **)&s->r.work, cap, s->r.nwork + 1, sizeof(*s->r.work))) {
        return false;
    }
    s->r.work[s->r.nwork++] = (weft__ssd_work_t){entry, chunk};
    return true;
}

/* The chunks of every stored region of @p tensor that hold part of @p box, and how many
 * of the box's elements the stored regions hold. */
static weft_status_t plan_region_read(weft__ssd_t *s, const char *tensor, const weft_box_t *box,
                                      uint64_t *covered)
{
    const weft__ssd_manifest_t *m = s->r.m;
    size_t cap = 0;
    *covered = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        const weft__ssd_entry_t *e = &m->entries[i];
        weft_box_t in;
        if (e->kind != WEFT__SSD_REGION || strcmp(e->name, tensor) != 0) {
            continue;
        }
        if (!weft__box_intersect(&e->box, box, e->ndims, &in)) {
            continue;
        }
        *covered += weft__box_volume(&in, e->ndims);
        uint64_t last[WEFT_LAYOUT_MAX_DIMS];
        for (int d = 0; d < e->ndims; d++) {
            last[d] = in.offset[d] + in.extent[d] - 1;
        }
        uint64_t per = weft__ssd_chunk_elems(e, m->chunk_bytes);
        for (uint64_t k = flat_index(e, in.offset) / per; k <= flat_index(e, last) / per; k++) {
            if (chunk_meets(e, m->chunk_bytes, k, box) && !add_work(s, &cap, i, k)) {
                return weft__error_noctx(WEFT_ERR_NO_MEMORY, "ssd: read: out of memory");
            }
        }
    }
    return WEFT_OK;
}

static weft_status_t check_start(weft__ssd_t *s, const char *name, const void *dst,
                                 const char *what)
{
    if (s == NULL || name == NULL || dst == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: %s: NULL argument", what);
    }
    if (s->op != WEFT__SSD_IDLE) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "ssd: %s of %s: an operation is running "
                                 "on %s",
                                 what, name, s->dir);
    }
    return WEFT_OK;
}

static weft_status_t begin(weft__ssd_t *s, void *dst)
{
    s->r.dst = dst;
    s->r.next = 0;
    memset(&s->stats, 0, sizeof(s->stats));
    s->op = WEFT__SSD_READING;
    s->status = WEFT_OK;
    s->finished = false;
    weft__ssd_kick(s);
    return WEFT_INPROGRESS;
}

/* @p box has @p nd dimensions, none empty, and its elements can be counted: into *count. */
static weft_status_t check_box(const weft_box_t *box, int nd, const char *tensor, uint64_t *count)
{
    uint64_t n = 1;
    for (int d = 0; d < nd; d++) {
        uint64_t e = box->extent[d];
        if (e == 0 || box->offset[d] > UINT64_MAX - e || n > UINT64_MAX / e) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "ssd: read of tensor %s: dimension %d of the box is empty "
                                     "or too large",
                                     tensor, d);
        }
        n *= e;
    }
    *count = n;
    return WEFT_OK;
}

weft_status_t weft__ssd_read_start(weft__ssd_t *s, uint64_t step, const char *tensor,
                                   const weft_box_t *box, void *dst)
{
    int nd;
    uint64_t want = 0, covered = 0;
    weft_status_t status = check_start(s, tensor, dst, "read");
    if (status == WEFT_OK && box == NULL) {
        status = weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: read of %s: NULL box", tensor);
    }
    if (status != WEFT_OK ||
        (status = weft__ssd_tensor_info(s, step, tensor, NULL, &nd)) != WEFT_OK ||
        (status = check_box(box, nd, tensor, &want)) != WEFT_OK) {
        return status;
    }
    s->r.m = &s->cache; /* read by weft__ssd_tensor_info */
    s->r.nwork = 0;
    if ((status = plan_region_read(s, tensor, box, &covered)) != WEFT_OK) {
        goto err_free;
    }
    if (covered != want) {
        char text[256];
        weft__box_format(box, nd, text, sizeof(text));
        status = weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                   "ssd: step %llu in %s holds %llu of the %llu elements of "
                                   "tensor %s in %s",
                                   (unsigned long long)step, s->dir, (unsigned long long)covered,
                                   (unsigned long long)want, tensor, text);
        goto err_free;
    }
    s->r.box = *box;
    return begin(s, dst);

err_free:
    weft__ssd_read_end(s);
    return status;
}

weft_status_t weft__ssd_blob_read_start(weft__ssd_t *s, uint64_t step, const char *name, void *dst,
                                        size_t cap)
{
    size_t bytes, work_cap = 0;
    weft_status_t status = check_start(s, name, dst, "blob read");
    if (status != WEFT_OK || (status = weft__ssd_blob_bytes(s, step, name, &bytes)) != WEFT_OK) {
        return status;
    }
    if (cap < bytes) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "ssd: blob %s of step %llu has %zu bytes, "
                                 "more than the %zu given",
                                 name, (unsigned long long)step, bytes, cap);
    }
    s->r.m = &s->cache;
    s->r.nwork = 0;
    for (size_t i = 0; i < s->r.m->nentries; i++) {
        const weft__ssd_entry_t *e = &s->r.m->entries[i];
        if (e->kind != WEFT__SSD_BLOB || strcmp(e->name, name) != 0) {
            continue;
        }
        for (uint64_t k = 0; k < e->nchunks; k++) {
            if (!add_work(s, &work_cap, i, k)) {
                weft__ssd_read_end(s);
                return weft__error_noctx(WEFT_ERR_NO_MEMORY, "ssd: blob read: out of memory");
            }
        }
    }
    return begin(s, dst);
}

static void read_fail(weft__ssd_t *s, const weft__ssd_slot_t *slot, const char *fmt_what,
                      const char *detail)
{
    const weft__ssd_entry_t *e = &s->r.m->entries[slot->entry];
    char where[384], name[WEFT__SSD_NAME_MAX];
    weft__ssd_describe(e, slot->chunk, where, sizeof(where));
    weft__ssd_chunk_name(&slot->hash, name);
    weft__ssd_fail(s, WEFT_ERR_IO, "ssd: step %llu, %s: chunk file %s/%s %s%s",
                   (unsigned long long)s->r.m->step, where, s->dir, name, fmt_what, detail);
}

static void read_chunk(weft__ssd_t *s, weft__ssd_slot_t *slot, const weft__ssd_work_t *w)
{
    const weft__ssd_entry_t *e = &s->r.m->entries[w->entry];
    uint64_t per = weft__ssd_chunk_elems(e, s->r.m->chunk_bytes), elems = weft__ssd_entry_elems(e);
    uint64_t lo = w->chunk * per;
    char name[WEFT__SSD_NAME_MAX];
    slot->entry = w->entry;
    slot->chunk = w->chunk;
    slot->hash = s->r.m->hashes[e->first_chunk + w->chunk];
    slot->payload = (elems - lo < per ? elems - lo : per) * weft__ssd_entry_elem(e);
    slot->io_bytes = WEFT__SSD_HEADER_BYTES + WEFT__SSD_ROUND_UP(slot->payload);
    slot->stage = WEFT__SSD_READ;
    if (slot->payload > s->chunk_bytes) {
        read_fail(s, slot, "has chunks larger than this handle's buffers", "");
        return;
    }
    weft__ssd_chunk_name(&slot->hash, name);
    slot->fd = weft__ssd_open_file(s, name, O_RDONLY, true);
    slot->direct = s->direct;
    if (slot->fd < 0) {
        int err = -slot->fd;
        slot->fd = -1;
        read_fail(s, slot, err == ENOENT ? "is missing" : "cannot be opened: ",
                  err == ENOENT ? "" : strerror(err));
        return;
    }
    weft__ssd_queue_rw(s, slot, false);
}

/* Check the chunk in @p slot (@p got bytes read); NULL if it is sound, else why not. */
static const char *check_chunk(const weft__ssd_t *s, weft__ssd_slot_t *slot, int got, char *why,
                               size_t len)
{
    weft__ssd_chunk_hdr_t h;
    const char *bad;
    if (got < (int)WEFT__SSD_HEADER_BYTES) {
        snprintf(why, len, "%d bytes, shorter than its header (torn)", got);
    } else if (!weft__ssd_chunk_hdr_decode(slot->buf, &h, &bad)) {
        snprintf(why, len, "has a bad header: %s", bad);
    } else if (h.hash.lo != slot->hash.lo || h.hash.hi != slot->hash.hi) {
        snprintf(why, len, "has a header naming another chunk");
    } else if (h.payload_bytes != slot->payload) {
        snprintf(why, len, "has a header giving %llu payload bytes, not %llu",
                 (unsigned long long)h.payload_bytes, (unsigned long long)slot->payload);
    } else if ((uint64_t)got < WEFT__SSD_HEADER_BYTES + slot->payload) {
        snprintf(why, len, "holds %llu of its %llu payload bytes (torn)",
                 (unsigned long long)(got - (int)WEFT__SSD_HEADER_BYTES),
                 (unsigned long long)slot->payload);
    } else {
        XXH128_hash_t x = XXH3_128bits(slot->buf + WEFT__SSD_HEADER_BYTES, slot->payload);
        if (x.low64 != slot->hash.lo || x.high64 != slot->hash.hi) {
            snprintf(why, len, "fails its payload checksum");
        } else if (!weft__ssd_chunk_mac_ok(s->key, slot->buf, slot->payload)) {
            snprintf(why, len, "fails its MAC: written under another key, or modified");
        } else {
            return NULL;
        }
    }
    return why;
}

/* Cut the elements of a checked chunk into the caller's buffer. */
static void place_chunk(weft__ssd_t *s, const weft__ssd_slot_t *slot)
{
    const weft__ssd_entry_t *e = &s->r.m->entries[slot->entry];
    const uint8_t *payload = slot->buf + WEFT__SSD_HEADER_BYTES;
    if (e->kind == WEFT__SSD_BLOB) {
        memcpy(s->r.dst + slot->chunk * s->r.m->chunk_bytes, payload, slot->payload);
        return;
    }
    weft_box_t tiles[MAX_TILES], in;
    size_t elem = weft__ssd_entry_elem(e);
    int n = chunk_tiles(e, s->r.m->chunk_bytes, slot->chunk, tiles);
    for (int t = 0; t < n; t++) {
        if (weft__box_intersect(&tiles[t], &s->r.box, e->ndims, &in)) {
            weft_box_copy(s->r.dst, &s->r.box, payload, &tiles[t], &in, e->ndims, elem);
        }
        payload += weft__box_volume(&tiles[t], e->ndims) * elem;
    }
}

void weft__ssd_read_done(weft__ssd_t *s, weft__ssd_slot_t *slot, int res)
{
    if (s->status == WEFT_OK && res == -EINVAL && slot->direct) {
        /* Opened with O_DIRECT, refused at the read: buffered from now on. */
        char name[WEFT__SSD_NAME_MAX];
        s->direct = false;
        close(slot->fd);
        weft__ssd_chunk_name(&slot->hash, name);
        slot->fd = weft__ssd_open_file(s, name, O_RDONLY, false);
        slot->direct = false;
        if (slot->fd >= 0) {
            weft__ssd_queue_rw(s, slot, false);
            return;
        }
        res = slot->fd;
    }
    if (slot->fd >= 0) {
        close(slot->fd);
    }
    slot->fd = -1;
    slot->busy = false;
    if (s->status != WEFT_OK) {
        return;
    }
    char why[160];
    if (res < 0) {
        read_fail(s, slot, "cannot be read: ", strerror(-res));
    } else if (check_chunk(s, slot, res, why, sizeof(why)) != NULL) {
        read_fail(s, slot, why, "");
    } else {
        place_chunk(s, slot);
        s->stats.bytes_read += slot->payload;
        s->stats.chunks_read++;
    }
}

void weft__ssd_read_advance(weft__ssd_t *s)
{
    weft__ssd_slot_t *slot;
    while (s->status == WEFT_OK && s->r.next < s->r.nwork &&
           (slot = weft__ssd_free_slot(s)) != NULL) {
        read_chunk(s, slot, &s->r.work[s->r.next++]);
    }
    s->finished = s->inflight == 0 && (s->status != WEFT_OK || s->r.next == s->r.nwork);
}

void weft__ssd_read_end(weft__ssd_t *s)
{
    free(s->r.work);
    memset(&s->r, 0, sizeof(s->r));
}
