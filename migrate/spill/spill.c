/*
 * A spill space's handle (include/weft/spill.h): the private directory and the unlinked
 * file, the worker's start and end, the block table's growth, and the counters. The calls
 * on blocks and their requests are spill_block.c; the worker that moves the bytes is
 * spill_io.c.
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

static weft_status_t check_params(weft_ctx_t *ctx, const weft_spill_params_t *p)
{
    if (p->size != 0 && p->size != sizeof(*p)) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "spill: params.size is %zu, this library's is %zu", p->size, sizeof(*p));
    }
    if (p->chunk_bytes % WEFT__SPILL_ALIGN != 0 || p->chunk_bytes > MAX_CHUNK ||
        p->queue_depth < 0 || p->queue_depth > MAX_QUEUE_DEPTH) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
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
    weft_ctx_t *ctx = sp->ctx;
    int dirfd;
    weft_status_t status =
        weft__ssd_dir_open(dir, true, "spill", "the spill space keeps a process's data", &dirfd);
    if (status != WEFT_OK) {
        return weft__error(ctx, status, "%s", weft_last_error(NULL));
    }
    sp->direct = !buffered;
    sp->fd = buffered ? -1 : open_file(dirfd, O_DIRECT);
    if (sp->fd < 0 && !buffered && errno != EINVAL) {
        status = weft__error(ctx, WEFT_ERR_IO, "spill: cannot create a file in %s: %s", dir,
                             strerror(errno));
    } else if (sp->fd < 0) {
        sp->direct = false; /* the filesystem refuses O_DIRECT (tmpfs) */
        sp->fd = open_file(dirfd, 0);
        if (sp->fd < 0) {
            status = weft__error(ctx, WEFT_ERR_IO, "spill: cannot create a file in %s: %s", dir,
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

weft_status_t weft_spill_create(weft_ctx_t *ctx, const char *dir, const weft_spill_params_t *params,
                                weft_spill_t **out)
{
    WEFT_API_LOCK(ctx);
    if (out != NULL) {
        *out = NULL;
    }
    if (ctx == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_spill_create: needs a context");
    }
    if (dir == NULL || dir[0] == '\0' || out == NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_spill_create: needs a directory and an output handle");
    }
    weft_spill_params_t p = params != NULL ? *params : (weft_spill_params_t){0};
    weft_status_t status = check_params(ctx, &p);
    if (status != WEFT_OK) {
        return status;
    }
    weft_spill_t *sp = calloc(1, sizeof(*sp));
    if (sp == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "spill: out of memory");
    }
    pthread_mutex_init(&sp->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sp->done, &ca);
    pthread_condattr_destroy(&ca);
    sp->ctx = ctx;
    sp->fd = sp->wake_fd = -1;
    sp->chunk_bytes = p.chunk_bytes ? p.chunk_bytes : DEFAULT_CHUNK;
    sp->queue_depth = p.queue_depth ? p.queue_depth : DEFAULT_QUEUE_DEPTH;
    sp->max_bytes = p.max_bytes;
    sp->rate = p.max_rate;
    sp->tokens = (double)sp->chunk_bytes;
    sp->refill_ns = weft__now_ns();
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
        return weft__error(ctx, WEFT_ERR_NO_MEMORY,
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
        status = weft__error(ctx, WEFT_ERR_IO, "spill: eventfd: %s", strerror(errno));
        destroy(sp);
        return status;
    }
    int rc = io_uring_queue_init((unsigned)sp->queue_depth + 1, &sp->ring, 0);
    if (rc < 0) {
        destroy(sp);
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED, "spill: io_uring is not available: %s",
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
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "spill: cannot start its thread: %s",
                           strerror(rc));
    }
    sp->worker_started = true;
    sp->stats.direct = sp->direct;
    *out = sp;
    return WEFT_OK;
}

weft_status_t weft_spill_free(weft_spill_t *sp)
{
    if (sp == NULL) {
        return WEFT_OK;
    }
    WEFT_API_LOCK(sp->ctx);
    pthread_mutex_lock(&sp->mu);
    weft__spill_detach_requests(sp);
    sp->stop = true;
    weft__spill_wake(sp);
    pthread_mutex_unlock(&sp->mu);
    pthread_join(sp->worker, NULL); /* it ends once nothing is in flight */
    io_uring_queue_exit(&sp->ring);
    destroy(sp);
    return WEFT_OK;
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
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_spill_stats: needs a space and an output");
    }
    WEFT_API_LOCK(sp->ctx);
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
