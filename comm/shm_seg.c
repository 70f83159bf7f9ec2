/*
 * The shared-memory segment of a group epoch. Its name is derived from the job (store
 * address, token, namespace), the group id and the epoch, so every member finds it
 * without a message: the first to arrive creates it exclusively, sizes it and then
 * publishes its geometry (a magic word written last); the others open it, wait for the
 * magic and adopt that geometry. The member that completes the attach count unlinks the
 * name, so a crash leaves nothing in /dev/shm once all had attached; members that
 * release a segment not everyone attached to unlink it too.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/coll.h"
#include "comm/shm.h"

#define SHM_MAGIC UINT64_C(0x77656674736d3031) /* "weftsm01" */
#define ATTACH_WAIT_MS 10000                   /* for a creator to publish the geometry */

/* The first cache line of a segment. */
typedef struct shm_header {
    uint64_t magic; /* written last by the creator */
    uint64_t small_max, chunk, size, len;
    uint64_t attached; /* members that mapped it */
} shm_header_t;

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static void layout(weft_shm_t *s, int size, size_t small_max, size_t chunk)
{
    s->size = size;
    s->small_max = small_max;
    s->chunk = chunk;
    s->slot_bytes = round64(WEFT_SHM_SLOT_HDR + small_max);
    s->slots_off = 64 + (size_t)size * WEFT_SHM_CTL_BYTES;
    s->stage_off = round64(s->slots_off + (size_t)size * 2 * s->slot_bytes);
    s->res_off = s->stage_off + (size_t)size * WEFT_SHM_NB * chunk;
    s->len = s->res_off + (size_t)size * WEFT_SHM_NB * chunk;
}

static void seg_free(weft_shm_t *s)
{
    if (s == NULL) {
        return;
    }
    if (!s->unlinked && s->base != NULL &&
        __atomic_load_n(&((shm_header_t *)s->base)->attached, __ATOMIC_ACQUIRE) <
            (uint64_t)s->size) {
        shm_unlink(s->name); /* someone never attached: the name must not outlive us */
    }
    if (s->base != NULL) {
        munmap(s->base, s->len);
    }
    free(s);
}

void weft__shm_release(weft_group_t *g)
{
    seg_free(g->shm);
    seg_free(g->shm_old);
    g->shm = g->shm_old = NULL;
}

static bool all_same_host(const weft_group_t *g)
{
    for (int i = 0; i < g->size; i++) {
        if (i != g->rank && !g->ctx->peers[g->members[i]].same_host) {
            return false;
        }
    }
    return true;
}

/* FNV-1a over the strings that make a job unique on this host. */
static uint64_t job_hash(const weft_ctx_t *ctx)
{
    const char *parts[] = {ctx->store_addr, ctx->token, ctx->cfg.ns};
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        for (const char *p = parts[i]; *p != '\0'; p++) {
            h = (h ^ (uint8_t)*p) * UINT64_C(0x100000001b3);
        }
        h = (h ^ 0xff) * UINT64_C(0x100000001b3);
    }
    return h;
}

/* The creator: size the file, map it, publish the geometry. */
static weft_status_t seg_create(weft_group_t *g, weft_shm_t *s, int fd)
{
    weft_ctx_t *ctx = g->ctx;
    size_t small = ctx->cfg.shm_small_max, chunk = round64(ctx->cfg.shm_chunk);
    small = small > ((size_t)1 << 20) ? (size_t)1 << 20 : small;
    chunk = chunk < 4096 ? 4096 : chunk > ((size_t)64 << 20) ? (size_t)64 << 20 : chunk;
    layout(s, g->size, small, chunk);
    if (ftruncate(fd, (off_t)s->len) != 0) {
        return weft__error(ctx, WEFT_ERR_IO, "shared memory %s: size %zu: %s", s->name, s->len,
                           strerror(errno));
    }
    void *p = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        return weft__error(ctx, WEFT_ERR_IO, "shared memory %s: mmap of %zu bytes: %s", s->name,
                           s->len, strerror(errno));
    }
    s->base = p;
    shm_header_t *h = p;
    h->small_max = small;
    h->chunk = chunk;
    h->size = (uint64_t)g->size;
    h->len = s->len;
    weft__shm_store(&h->magic, SHM_MAGIC);
    return WEFT_OK;
}

/* The others: wait for the creator to size the file, map it once, then wait for the
 * geometry it publishes (one mapping: every munmap costs a TLB shootdown). */
static weft_status_t seg_attach(weft_group_t *g, weft_shm_t *s, int fd)
{
    weft_ctx_t *ctx = g->ctx;
    uint64_t deadline = weft__now_ns() + weft__ms_to_ns(ATTACH_WAIT_MS);
    struct stat sb;
    for (;;) {
        if (fstat(fd, &sb) != 0) {
            return weft__error(ctx, WEFT_ERR_IO, "shared memory %s: %s", s->name,
                               strerror(errno));
        }
        if ((size_t)sb.st_size >= sizeof(shm_header_t)) {
            break; /* ftruncate sets the whole length at once */
        }
        if (weft__now_ns() > deadline) {
            return weft__error(ctx, WEFT_ERR_TIMEOUT, "shared memory %s: never sized",
                               s->name);
        }
        sched_yield(); /* the creator is between shm_open and ftruncate */
    }
    s->len = (size_t)sb.st_size;
    void *p = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        return weft__error(ctx, WEFT_ERR_IO, "shared memory %s: mmap of %zu bytes: %s", s->name,
                           s->len, strerror(errno));
    }
    s->base = p;
    shm_header_t *h = p;
    while (weft__shm_load(&h->magic) != SHM_MAGIC) {
        if (weft__now_ns() > deadline) {
            return weft__error(ctx, WEFT_ERR_TIMEOUT,
                               "shared memory %s: its creator never published it", s->name);
        }
        sched_yield();
    }
    size_t mapped = s->len;
    layout(s, g->size, (size_t)h->small_max, (size_t)h->chunk);
    if (h->size != (uint64_t)g->size || h->len != s->len || mapped != s->len) {
        weft_status_t st = weft__error(
            ctx, WEFT_ERR_PROTOCOL, "shared memory %s: made for %llu members and %llu bytes, "
            "this group has %d", s->name, (unsigned long long)h->size,
            (unsigned long long)h->len, g->size);
        s->len = mapped; /* what munmap must release */
        return st;
    }
    return WEFT_OK;
}

static weft_status_t seg_open(weft_group_t *g, weft_shm_t *s)
{
    weft_ctx_t *ctx = g->ctx;
    snprintf(s->name, sizeof(s->name), "/weft-%016llx-%u-%u",
             (unsigned long long)job_hash(ctx), g->id, g->epoch);
    bool creator = true;
    int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
        creator = false;
        fd = shm_open(s->name, O_RDWR, 0600);
    }
    if (fd < 0) {
        s->unlinked = true; /* not ours to remove */
        return weft__error(ctx, WEFT_ERR_IO,
                           "shared memory %s: %s (WEFT_COLL_SHM=off on every rank avoids it)",
                           s->name, strerror(errno));
    }
    weft_status_t st = creator ? seg_create(g, s, fd) : seg_attach(g, s, fd);
    close(fd);
    if (st != WEFT_OK) {
        if (creator) {
            shm_unlink(s->name);
        }
        s->unlinked = true;
        return st;
    }
    shm_header_t *h = (shm_header_t *)s->base;
    if (__atomic_add_fetch(&h->attached, 1, __ATOMIC_ACQ_REL) == (uint64_t)g->size) {
        shm_unlink(s->name); /* the last member is in: nothing left to find it by */
        s->unlinked = true;
    }
    return WEFT_OK;
}

weft_status_t weft__shm_ensure(weft_group_t *g)
{
    if (g->shm_epoch == g->epoch + 1) {
        if (g->shm_old != NULL && (g->shm == NULL || g->shm->turn > 0)) {
            seg_free(g->shm_old); /* the epoch's first collective is done: now it may cost */
            g->shm_old = NULL;
        }
        return WEFT_OK; /* decided for this epoch */
    }
    /* The previous epoch's segment is unmapped after this epoch's first collective: the
     * TLB shootdown of a munmap costs tens of microseconds, and the first collective
     * after a repair is on the job's critical path. */
    seg_free(g->shm_old);
    g->shm_old = g->shm;
    g->shm = NULL;
    weft_ctx_t *ctx = g->ctx;
    if (g->size < 2 || g->size > WEFT_SHM_MAX_RANKS || !ctx->cfg.coll_shm ||
        (ctx->store_addr[0] == '\0' && ctx->token[0] == '\0') || !all_same_host(g)) {
        g->shm_epoch = g->epoch + 1;
        return WEFT_OK;
    }
    weft_shm_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for shared-memory state");
    }
    s->rank = g->rank;
    s->epoch = g->epoch;
    g->shm = s;
    weft_status_t st = seg_open(g, s);
    if (st != WEFT_OK) {
        seg_free(s);
        g->shm = NULL;
        return st; /* undecided: the next collective tries again */
    }
    g->shm_epoch = g->epoch + 1;
    WEFT_LOG(&ctx->logger, WEFT_LOG_DEBUG, "group %u epoch %u: %zu-byte shared segment %s",
             g->id, g->epoch, s->len, s->name);
    return WEFT_OK;
}
