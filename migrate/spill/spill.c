/*
 * A spill space's handle and calls (include/weft/spill.h): the private directory and the
 * unlinked file, the block table, chunk records and their reuse. The worker that moves
 * the bytes is spill_io.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "comm/core.h"
#include "migrate/spill/spill_impl.h"
#include "migrate/ssd/ssd.h"
#include "util/clock.h"

#define DEFAULT_CHUNK (1u << 20)
#define MAX_CHUNK (1u << 30)
#define DEFAULT_QUEUE_DEPTH 8
#define MAX_QUEUE_DEPTH 256
#define DEFAULT_TIMEOUT_MS 300000u
#define MAX_BLOCKS (1u << 30)

static weft_status_t check_params(const weft_spill_params_t *p)
{
    if (p->size != 0 && p->size != sizeof(*p)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "spill: params.size is %zu, this library's is %zu", p->size,
                                 sizeof(*p));
    }
    if (p->chunk_bytes % WEFT__SPILL_ALIGN != 0 || p->chunk_bytes > MAX_CHUNK ||
        p->queue_depth < 0 || p->queue_depth > MAX_QUEUE_DEPTH) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "spill: chunk size %zu (a multiple of %u up to %u) or queue "
                                 "depth %d (1..%d) out of range",
                                 p->chunk_bytes, WEFT__SPILL_ALIGN, MAX_CHUNK, p->queue_depth,
                                 MAX_QUEUE_DEPTH);
    }
    return WEFT_OK;
}

/* A file nobody else can open: O_TMPFILE, else a random name created with O_EXCL and
 * unlinked at once. */
static int open_file(int dirfd, int extra)
{
    int base = O_RDWR | O_CLOEXEC | extra;
    int fd = openat(dirfd, ".", base | O_TMPFILE | O_EXCL, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != ENOENT)) {
        return fd;
    }
    for (int tries = 0; tries < 8; tries++) {
        uint64_t r;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
            return -1;
        }
        char name[40];
        snprintf(name, sizeof(name), "spill.%016llx.tmp", (unsigned long long)r);
        fd = openat(dirfd, name, base | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
        if (fd >= 0) {
            if (unlinkat(dirfd, name, 0) != 0) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
            }
            return fd;
        }
        if (errno != EEXIST) {
            return -1;
        }
    }
    return -1;
}

static weft_status_t open_space(weft_spill_t *sp, const char *dir, bool buffered)
{
    int dirfd;
    weft_status_t status =
        weft__ssd_dir_open(dir, true, "spill", "the spill space keeps a process's data", &dirfd);
    if (status != WEFT_OK) {
        return status;
    }
    sp->direct = !buffered;
    sp->fd = buffered ? -1 : open_file(dirfd, O_DIRECT);
    if (sp->fd < 0 && !buffered && errno != EINVAL) {
        status = weft__error_noctx(WEFT_ERR_IO, "spill: cannot create a file in %s: %s", dir,
                                   strerror(errno));
    } else if (sp->fd < 0) {
        sp->direct = false; /* the filesystem refuses O_DIRECT (tmpfs) */
        sp->fd = open_file(dirfd, 0);
        if (sp->fd < 0) {
            status = weft__error_noctx(WEFT_ERR_IO, "spill: cannot create a file in %s: %s", dir,
                                       strerror(errno));
        }
    }
    close(dirfd);
    return status;
}

static void destroy(weft_spill_t *sp)
{
    for (uint32_t i = 0; i < sp->nblocks; i++) {
        if (sp->blocks[i] != NULL) {
            weft__spill_block_destroy(sp->blocks[i]);
        }
    }
    free(sp->blocks);
    free(sp->gens);
    free(sp->free_ids);
    free(sp->chunks);
    free(sp->buckets);
    free(sp->free_slots);
    free(sp->slots);
    free(sp->bufs);
    if (sp->fd >= 0) {
        close(sp->fd);
    }
    if (sp->wake_fd >= 0) {
        close(sp->wake_fd);
    }
    pthread_cond_destroy(&sp->done);
    pthread_mutex_destroy(&sp->mu);
    free(sp);
}

weft_status_t weft_spill_open(const char *dir, const weft_spill_params_t *params,
                              weft_spill_t **out)
{
    if (out != NULL) {
        *out = NULL;
    }
    if (dir == NULL || dir[0] == '\0' || out == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "spill: open needs a directory and an output handle");
    }
    weft_spill_params_t p = params != NULL ? *params : (weft_spill_params_t){0};
    weft_status_t status = check_params(&p);
    if (status != WEFT_OK) {
        return status;
    }
    weft_spill_t *sp = calloc(1, sizeof(*sp));
    if (sp == NULL) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "spill: out of memory");
    }
    pthread_mutex_init(&sp->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sp->done, &ca);
    pthread_condattr_destroy(&ca);
    sp->fd = sp->wake_fd = -1;
    sp->chunk_bytes = p.chunk_bytes ? p.chunk_bytes : DEFAULT_CHUNK;
    sp->queue_depth = p.queue_depth ? p.queue_depth : DEFAULT_QUEUE_DEPTH;
    sp->max_bytes = p.max_bytes;
    sp->timeout_ms = p.timeout_ms ? p.timeout_ms : DEFAULT_TIMEOUT_MS;
    sp->fail_write = p.fail_write;
    sp->free_chunk = WEFT__SPILL_NONE;
    if ((status = open_space(sp, dir, p.buffered != 0)) != WEFT_OK) {
        destroy(sp);
        return status;
    }
    sp->nbuckets = 1024;
    sp->buckets = malloc(sp->nbuckets * sizeof(*sp->buckets));
    sp->slots = calloc((size_t)sp->queue_depth, sizeof(*sp->slots));
    if (sp->buckets == NULL || sp->slots == NULL ||
        posix_memalign((void **)&sp->bufs, WEFT__SPILL_ALIGN,
                       sp->chunk_bytes * (size_t)sp->queue_depth) != 0) {
        sp->bufs = NULL;
        destroy(sp);
        return weft__error_noctx(WEFT_ERR_NO_MEMORY,
                                 "spill: out of memory for %d buffers of %zu "
                                 "bytes",
                                 sp->queue_depth, sp->chunk_bytes);
    }
    memset(sp->buckets, 0xff, sp->nbuckets * sizeof(*sp->buckets));
    for (int i = 0; i < sp->queue_depth; i++) {
        sp->slots[i].buf = sp->bufs + sp->chunk_bytes * (size_t)i;
    }
    sp->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sp->wake_fd < 0) {
        status = weft__error_noctx(WEFT_ERR_IO, "spill: eventfd: %s", strerror(errno));
        destroy(sp);
        return status;
    }
    int rc = io_uring_queue_init((unsigned)sp->queue_depth + 1, &sp->ring, 0);
    if (rc < 0) {
        destroy(sp);
        return weft__error_noctx(WEFT_ERR_UNSUPPORTED, "spill: io_uring is not available: %s",
                                 strerror(-rc));
    }
    struct iovec *iov = calloc((size_t)sp->queue_depth, sizeof(*iov));
    if (iov != NULL) { /* registered buffers: optional, plain requests work without */
        for (int i = 0; i < sp->queue_depth; i++) {
            iov[i] = (struct iovec){.iov_base = sp->slots[i].buf, .iov_len = sp->chunk_bytes};
        }
        sp->fixed = io_uring_register_buffers(&sp->ring, iov, (unsigned)sp->queue_depth) == 0;
        free(iov);
    }
    if ((rc = pthread_create(&sp->worker, NULL, weft__spill_worker, sp)) != 0) {
        io_uring_queue_exit(&sp->ring);
        destroy(sp);
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "spill: cannot start its thread: %s",
                                 strerror(rc));
    }
    sp->worker_started = true;
    sp->stats.direct = sp->direct;
    *out = sp;
    return WEFT_OK;
}

void weft_spill_close(weft_spill_t *sp)
{
    if (sp == NULL) {
        return;
    }
    pthread_mutex_lock(&sp->mu);
    sp->stop = true;
    weft__spill_wake(sp);
    pthread_mutex_unlock(&sp->mu);
    pthread_join(sp->worker, NULL); /* it ends once nothing is in flight */
    io_uring_queue_exit(&sp->ring);
    destroy(sp);
}

weft__spill_block_t *weft__spill_block(weft_spill_t *sp, uint64_t id)
{
    uint64_t index = (id & 0xffffffffu);
    if (index == 0 || index > sp->nblocks) {
        return NULL;
    }
    weft__spill_block_t *b = sp->blocks[index - 1];
    return b != NULL && !b->freed && b->gen == (uint32_t)(id >> 32) ? b : NULL;
}

void weft__spill_block_destroy(weft__spill_block_t *b)
{
    free(b->chunks);
    free(b->read_why);
    free(b);
}

static weft_status_t unknown(uint64_t id)
{
    return weft__error_noctx(WEFT_ERR_INVALID_ARG, "spill: no block has id %#llx",
                             (unsigned long long)id);
}

/* A free index in the block table (growing it), or false. */
static bool take_index(weft_spill_t *sp, uint32_t *index)
{
    if (sp->nfree_ids > 0) {
        *index = sp->free_ids[--sp->nfree_ids];
        return true;
    }
    if (sp->nblocks == sp->cap_blocks) {
        uint32_t cap = sp->cap_blocks ? sp->cap_blocks * 2 : 64;
        if (cap > MAX_BLOCKS) {
            return false;
        }
        weft__spill_block_t **blocks = realloc(sp->blocks, cap * sizeof(*blocks));
        if (blocks != NULL) {
            sp->blocks = blocks;
        }
        uint32_t *gens = realloc(sp->gens, cap * sizeof(*gens));
        if (gens != NULL) {
            sp->gens = gens;
        }
        uint32_t *ids = realloc(sp->free_ids, cap * sizeof(*ids));
        if (ids != NULL) {
            sp->free_ids = ids;
        }
        if (blocks == NULL || gens == NULL || ids == NULL) {
            return false;
        }
        sp->cap_blocks = cap;
    }
    *index = sp->nblocks++;
    sp->gens[*index] = 0;
    return true;
}

weft_status_t weft_spill_write(weft_spill_t *sp, const void *src, size_t bytes, uint64_t *id)
{
    if (sp == NULL || id == NULL || (src == NULL && bytes > 0)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "spill: write needs a space, an id and a source");
    }
    weft__spill_block_t *b = calloc(1, sizeof(*b));
    size_t n = (bytes + sp->chunk_bytes - 1) / sp->chunk_bytes;
    if (b == NULL || (n > 0 && (b->chunks = malloc(n * sizeof(*b->chunks))) == NULL)) {
        free(b);
        return weft__error_noctx(WEFT_ERR_NO_MEMORY,
                                 "spill: out of memory for a block of %zu "
                                 "bytes",
                                 bytes);
    }
    for (size_t i = 0; i < n; i++) {
        b->chunks[i] = WEFT__SPILL_NONE;
    }
    b->src = src;
    b->bytes = bytes;
    b->nchunks = n;
    pthread_mutex_lock(&sp->mu);
    uint32_t index;
    if (!take_index(sp, &index)) {
        pthread_mutex_unlock(&sp->mu);
        weft__spill_block_destroy(b);
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "spill: out of memory for the block table");
    }
    b->gen = ++sp->gens[index];
    sp->blocks[index] = b;
    sp->stats.blocks_held++;
    sp->stats.bytes_submitted += bytes;
    if (n > 0) {
        b->wqueued = true;
        if (sp->wq_tail != NULL) {
            sp->wq_tail->wnext = b;
        } else {
            sp->wq_head = b;
        }
        sp->wq_tail = b;
        weft__spill_wake(sp);
    }
    pthread_mutex_unlock(&sp->mu);
    *id = ((uint64_t)b->gen << 32) | (index + 1);
    return WEFT_OK;
}

/* The block's error, if any of its chunks failed to be written or its read failed, as
 * weft_last_error(NULL) of this thread. */
static weft_status_t write_error(weft_spill_t *sp, const weft__spill_block_t *b)
{
    if (b->oom) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY,
                                 "spill: out of memory for the chunks of a block of %zu bytes",
                                 b->bytes);
    }
    for (size_t i = 0; i < b->next_copy; i++) {
        const weft__spill_chunk_t *c = &sp->chunks[b->chunks[i]];
        if (c->state == WEFT__SPILL_C_FAILED) {
            return weft__error_noctx(WEFT_ERR_IO,
                                     "spill: writing chunk %zu of a block of %zu bytes (file "
                                     "offset %llu) failed: %s",
                                     i, b->bytes, (unsigned long long)(c->slot * sp->chunk_bytes),
                                     c->err == EFBIG ? "the space's max_bytes reached"
                                                     : strerror(c->err));
        }
    }
    return WEFT_OK;
}

static weft_status_t block_error(weft_spill_t *sp, const weft__spill_block_t *b)
{
    weft_status_t status = write_error(sp, b);
    if (status != WEFT_OK) {
        return status;
    }
    if (b->read_status != WEFT_OK) {
        return weft__error_noctx(b->read_status, "%s",
                                 b->read_why ? b->read_why
                                             : "spill: read "
                                               "failed");
    }
    return WEFT_OK;
}

static unsigned block_state(const weft_spill_t *sp, const weft__spill_block_t *b)
{
    unsigned st = 0;
    if (b->next_copy == b->nchunks || b->oom) {
        st |= WEFT_SPILL_SOURCE_FREE;
    }
    if (b->next_copy == b->nchunks) {
        bool stored = true;
        for (size_t i = 0; i < b->nchunks && stored; i++) {
            stored = sp->chunks[b->chunks[i]].state == WEFT__SPILL_C_STORED;
        }
        if (stored) {
            st |= WEFT_SPILL_STORED;
        }
    }
    if (b->dst != NULL && b->reads_left == 0 && b->read_status == WEFT_OK) {
        st |= WEFT_SPILL_LOADED;
    }
    return st;
}

weft_status_t weft_spill_read(weft_spill_t *sp, uint64_t id, void *dst, size_t bytes)
{
    if (sp == NULL || (dst == NULL && bytes > 0)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "spill: read needs a space and a "
                                                       "destination");
    }
    pthread_mutex_lock(&sp->mu);
    weft__spill_block_t *b = weft__spill_block(sp, id);
    weft_status_t status = WEFT_OK;
    if (b == NULL) {
        status = unknown(id);
    } else if (bytes != b->bytes) {
        status =
            weft__error_noctx(WEFT_ERR_INVALID_ARG, "spill: block %#llx holds %zu bytes, not %zu",
                              (unsigned long long)id, b->bytes, bytes);
    } else if (b->rqueued || b->inflight > 0) {
        status = weft__error_noctx(WEFT_ERR_INVALID_ARG, "spill: block %#llx is being read already",
                                   (unsigned long long)id);
    } else if ((status = write_error(sp, b)) == WEFT_OK) { /* a failed read may be retried */
        b->dst = dst != NULL ? dst : (uint8_t *)b;         /* any non-NULL marks a read */
        b->next_read = 0;
        b->reads_left = b->nchunks;
        b->read_status = WEFT_OK;
        free(b->read_why);
        b->read_why = NULL;
        if (b->nchunks > 0) {
            b->rqueued = true;
            b->rnext = NULL;
            if (sp->rq_tail != NULL) {
                sp->rq_tail->rnext = b;
            } else {
                sp->rq_head = b;
            }
            sp->rq_tail = b;
            weft__spill_wake(sp);
        }
    }
    pthread_mutex_unlock(&sp->mu);
    return status;
}

weft_status_t weft_spill_state(weft_spill_t *sp, uint64_t id, unsigned *state)
{
    if (sp == NULL || state == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "spill: state needs a space and an "
                                                       "output");
    }
    pthread_mutex_lock(&sp->mu);
    weft__spill_block_t *b = weft__spill_block(sp, id);
    weft_status_t status = b == NULL ? unknown(id) : block_error(sp, b);
    *state = b != NULL ? block_state(sp, b) : 0;
    pthread_mutex_unlock(&sp->mu);
    return status;
}

weft_status_t weft_spill_wait(weft_spill_t *sp, uint64_t id, unsigned state, uint64_t timeout_ns)
{
    if (sp == NULL || (state & ~(unsigned)(WEFT_SPILL_SOURCE_FREE | WEFT_SPILL_STORED |
                                           WEFT_SPILL_LOADED)) != 0) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "spill: wait needs a space and "
                                                       "WEFT_SPILL_* bits");
    }
    if (timeout_ns == WEFT_TIMEOUT_DEFAULT) {
        timeout_ns = sp->timeout_ms * 1000000ull;
    }
    uint64_t deadline = weft__now_ns() + timeout_ns;
    if (deadline < timeout_ns) {
        deadline = UINT64_MAX;
    }
    pthread_mutex_lock(&sp->mu);
    weft_status_t status;
    for (;;) {
        weft__spill_block_t *b = weft__spill_block(sp, id);
        if (b == NULL) {
            status = unknown(id);
            break;
        }
        if ((status = block_error(sp, b)) != WEFT_OK) {
            break;
        }
        if ((state & WEFT_SPILL_LOADED) && b->dst == NULL) {
            status = weft__error_noctx(WEFT_ERR_INVALID_ARG, "spill: block %#llx is not being read",
                                       (unsigned long long)id);
            break;
        }
        if ((block_state(sp, b) & state) == state) {
            break;
        }
        uint64_t now = weft__now_ns();
        if (now >= deadline) {
            status = weft__error_noctx(
                WEFT_ERR_TIMEOUT, "spill: block %#llx did not reach state %#x in %llu ms",
                (unsigned long long)id, state, (unsigned long long)(timeout_ns / 1000000ull));
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t step = deadline - now < 100000000ull ? deadline - now : 100000000ull;
        uint64_t ns = (uint64_t)ts.tv_nsec + step;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&sp->done, &sp->mu, &ts);
    }
    pthread_mutex_unlock(&sp->mu);
    return status;
}

static void unlink_queue(weft__spill_block_t **head, weft__spill_block_t **tail,
                         weft__spill_block_t *b, bool write)
{
    weft__spill_block_t *prev = NULL;
    for (weft__spill_block_t *q = *head; q != NULL; q = write ? q->wnext : q->rnext) {
        if (q == b) {
            weft__spill_block_t *next = write ? q->wnext : q->rnext;
            if (prev == NULL) {
                *head = next;
            } else if (write) {
                prev->wnext = next;
            } else {
                prev->rnext = next;
            }
            if (*tail == b) {
                *tail = prev;
            }
            return;
        }
        prev = q;
    }
}

weft_status_t weft_spill_free(weft_spill_t *sp, uint64_t id)
{
    if (sp == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "spill: free needs a space");
    }
    pthread_mutex_lock(&sp->mu);
    weft__spill_block_t *b;
    while ((b = weft__spill_block(sp, id)) != NULL && b->busy) {
        pthread_cond_wait(&sp->done, &sp->mu); /* a chunk of it is being copied */
    }
    if (b == NULL) {
        pthread_mutex_unlock(&sp->mu);
        return unknown(id);
    }
    if (b->wqueued) {
        unlink_queue(&sp->wq_head, &sp->wq_tail, b, true);
        b->wqueued = false;
    }
    if (b->rqueued) {
        unlink_queue(&sp->rq_head, &sp->rq_tail, b, false);
        b->rqueued = false;
    }
    for (size_t i = 0; i < b->next_copy; i++) {
        weft__spill_chunk_unref(sp, b->chunks[i]);
    }
    b->next_copy = 0;
    uint32_t index = (uint32_t)(id & 0xffffffffu) - 1;
    sp->free_ids[sp->nfree_ids++] = index;
    sp->stats.blocks_held--;
    if (b->inflight > 0) {
        b->freed = true; /* the worker destroys it when its last read lands */
        sp->blocks[index] = NULL;
    } else {
        sp->blocks[index] = NULL;
        weft__spill_block_destroy(b);
    }
    weft__spill_trim(sp);
    pthread_mutex_unlock(&sp->mu);
    return WEFT_OK;
}

void weft__spill_trim(weft_spill_t *sp)
{
    if (sp->chunks_live > 0 || sp->file_slots == 0) {
        return;
    }
    if (ftruncate(sp->fd, 0) == 0) {
        sp->file_slots = 0;
        sp->nfree_slots = 0;
        sp->stats.file_bytes = 0;
    }
}

weft_status_t weft_spill_stats(weft_spill_t *sp, weft_spill_stats_t *stats)
{
    if (sp == NULL || stats == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "spill: stats needs a space and an "
                                                       "output");
    }
    pthread_mutex_lock(&sp->mu);
    *stats = sp->stats;
    uint64_t now = weft__now_ns();
    if (sp->write_since != 0) {
        stats->write_ns += now - sp->write_since;
    }
    if (sp->read_since != 0) {
        stats->read_ns += now - sp->read_since;
    }
    pthread_mutex_unlock(&sp->mu);
    return WEFT_OK;
}
