/*
 * The shared-memory segment of a group: created by group rank 0, mapped by the others,
 * unlinked as soon as all have it (so a crash leaves nothing behind in /dev/shm), and
 * agreed on by every member with two collectives over messages.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/coll.h"
#include "comm/shm.h"

/* What rank 0 tells the others: whether it has a segment, its name and its geometry
 * (rank 0's settings win, so ranks with different settings still agree). */
typedef struct shm_offer {
    int32_t ok;
    uint32_t pad;
    uint64_t small_max, chunk, len;
    char name[64];
} shm_offer_t;

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
    s->slots_off = (size_t)size * WEFT_SHM_CTL_BYTES;
    s->stage_off = round64(s->slots_off + (size_t)size * 2 * s->slot_bytes);
    s->res_off = s->stage_off + (size_t)size * WEFT_SHM_NB * chunk;
    s->len = s->res_off + (size_t)size * WEFT_SHM_NB * chunk;
}

static void seg_free(weft_shm_t *s)
{
    if (s != NULL) {
        if (s->base != NULL) {
            munmap(s->base, s->len);
        }
        free(s);
    }
}

void weft__shm_release(weft_group_t *g)
{
    seg_free(g->shm);
    g->shm = NULL;
}

/* Map an open segment file of s->len bytes. */
static bool seg_map(weft_ctx_t *ctx, weft_shm_t *s, int fd, const char *name)
{
    void *p = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        weft__error(ctx, WEFT_ERR_IO, "shared memory %s: mmap of %zu bytes: %s", name, s->len,
                    strerror(errno));
        return false;
    }
    s->base = p;
    return true;
}

/* Rank 0: create, size and map the segment; fills @p o (o->ok = 0 on failure). */
static void seg_create(weft_group_t *g, weft_shm_t *s, shm_offer_t *o)
{
    weft_ctx_t *ctx = g->ctx;
    size_t small = ctx->cfg.shm_small_max, chunk = round64(ctx->cfg.shm_chunk);
    small = small > ((size_t)1 << 20) ? (size_t)1 << 20 : small;
    chunk = chunk < 4096 ? 4096 : chunk > ((size_t)64 << 20) ? (size_t)64 << 20 : chunk;
    layout(s, g->size, small, chunk);
    snprintf(o->name, sizeof(o->name), "/weft-%ld-%u-%u-%lx", (long)getpid(), g->id, g->epoch,
             (unsigned long)(weft__now_ns() & 0xffffffffu));
    o->small_max = small;
    o->chunk = chunk;
    o->len = s->len;
    int fd = shm_open(o->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        weft__error(ctx, WEFT_ERR_IO, "shared memory %s: %s", o->name, strerror(errno));
        return;
    }
    if (ftruncate(fd, (off_t)s->len) != 0) {
        weft__error(ctx, WEFT_ERR_IO, "shared memory %s: size %zu: %s", o->name, s->len,
                    strerror(errno));
    } else if (seg_map(ctx, s, fd, o->name)) {
        o->ok = 1;
    }
    close(fd);
    if (!o->ok) {
        shm_unlink(o->name);
    }
}

/* Other ranks: map the segment rank 0 offered; false on failure (logged). */
static bool seg_attach(weft_group_t *g, weft_shm_t *s, const shm_offer_t *o)
{
    weft_ctx_t *ctx = g->ctx;
    layout(s, g->size, o->small_max, o->chunk);
    if (s->len != o->len) {
        weft__error(ctx, WEFT_ERR_PROTOCOL, "shared memory %s: %zu bytes offered, %zu expected",
                    o->name, (size_t)o->len, s->len);
        return false;
    }
    int fd = shm_open(o->name, O_RDWR, 0600);
    if (fd < 0) {
        weft__error(ctx, WEFT_ERR_IO, "shared memory %s: %s", o->name, strerror(errno));
        return false;
    }
    bool ok = seg_map(ctx, s, fd, o->name);
    close(fd);
    return ok;
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

/* The two agreeing collectives (over messages: g->shm is NULL meanwhile). */
static weft_status_t agree(weft_group_t *g, weft_shm_t *s, bool *ok)
{
    shm_offer_t o;
    memset(&o, 0, sizeof(o));
    if (g->rank == 0) {
        seg_create(g, s, &o);
    }
    weft_coll_args_t bc = {.kind = WEFT_COLL_BROADCAST, .name = "broadcast (shm set-up)",
                           .sendbuf = &o, .recvbuf = &o, .count = sizeof(o),
                           .dtype = WEFT_U8, .op = -1, .root = 0};
    weft_status_t st = weft__coll_run(g, &bc);
    if (st != WEFT_OK) {
        if (g->rank == 0 && o.ok) {
            shm_unlink(o.name);
        }
        return st;
    }
    int32_t mine = o.ok != 0, all = 0;
    if (g->rank != 0 && mine) {
        o.name[sizeof(o.name) - 1] = '\0';
        mine = seg_attach(g, s, &o);
    }
    weft_coll_args_t ar = {.kind = WEFT_COLL_ALLREDUCE, .name = "allreduce (shm set-up)",
                           .sendbuf = &mine, .recvbuf = &all, .count = 1,
                           .dtype = WEFT_I32, .op = WEFT_MIN, .root = -1};
    st = weft__coll_run(g, &ar);
    if (g->rank == 0 && o.ok) {
        shm_unlink(o.name); /* everyone has it mapped, or nobody will use it */
    }
    *ok = st == WEFT_OK && all == 1;
    return st;
}

weft_status_t weft__shm_ensure(weft_group_t *g)
{
    if (g->shm_epoch == g->epoch + 1 || g->shm_setup) {
        return WEFT_OK; /* decided for this epoch, or these are the set-up's collectives */
    }
    weft__shm_release(g);
    weft_ctx_t *ctx = g->ctx;
    if (g->size < 2 || g->size > WEFT_SHM_MAX_RANKS || !ctx->cfg.coll_shm || !all_same_host(g)) {
        g->shm_epoch = g->epoch + 1;
        return WEFT_OK;
    }
    weft_shm_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for shared-memory state");
    }
    s->rank = g->rank;
    s->epoch = g->epoch;
    /* The set-up's collectives are the library's, not the caller's: they stay out of
     * weft_group_coll_count(). */
    uint64_t count = g->coll_count;
    g->shm_setup = true;
    bool ok = false;
    weft_status_t st = agree(g, s, &ok);
    g->shm_setup = false;
    g->coll_count = count;
    if (st != WEFT_OK) {
        seg_free(s);
        return st;
    }
    if (ok) {
        g->shm = s;
        WEFT_LOG(&ctx->logger, WEFT_LOG_DEBUG, "group %u epoch %u: %zu-byte shared segment",
                 g->id, g->epoch, s->len);
    } else {
        seg_free(s);
        WEFT_LOG(&ctx->logger, WEFT_LOG_INFO,
                 "group %u epoch %u: no shared segment, collectives use messages", g->id,
                 g->epoch);
    }
    g->shm_epoch = g->epoch + 1;
    return WEFT_OK;
}
