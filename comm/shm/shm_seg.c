/*
 * The shared-memory segments of a group epoch. A segment's name is derived from the job
 * (store address, the job's data key, namespace), the group id, the epoch and its kind ("ctl" or
 * "data"; comm/shm/shm_job.c), so every member finds it without a message. The first to
 * arrive creates it exclusively, allocates all of it, and then publishes its geometry
 * and status (a magic word written last). The others open it, wait for the magic, and
 * adopt the geometry, or the failure: when /dev/shm is too small every member sees the
 * same status and makes the same choice. The member that completes the attach count
 * unlinks the name. A member that releases a segment some member never attached to
 * unlinks it too. What members that die before everyone attached leave behind goes by
 * the rules of the job lock (comm/shm/shm_job.h), which each process takes before it makes
 * or opens its first segment.
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

#include "comm/core_impl.h"
#include "comm/shm/shm.h"
#include "comm/shm/shm_job.h"
#include "util/assert.h"
#include "util/private.h"

#define SHM_MAGIC UINT64_C(0x77656674736d3033) /* "weftsm03" */
#define ATTACH_WAIT_MS 10000                   /* for a creator to publish the geometry */
#define HEADER_PAGE 4096                       /* allocated first, whatever happens */
/* Collectives of an epoch before the next epoch's segment is made and mapped: not at
 * once, where it would take the cores from members still finishing a recovery. Members
 * other than group rank 0, its maker, look for it for SPARE_TRIES collectives. */
#define SPARE_AFTER 2
#define SPARE_TRIES 16

/* The first cache line of a segment. */
typedef struct shm_header {
    uint64_t magic;  /* written last by the creator */
    uint64_t status; /* 0, or the errno that kept the creator from allocating it */
    uint64_t param;  /* ctl: small_max; data: chunk */
    uint64_t size, len;
    uint64_t attached; /* members that opened it */
    /* ctl: 0, or 1 + the group rank of the first member that abandoned a collective on
     * this segment: every member's next step on it fails (weft__shm_abandoned). */
    uint64_t abandoned;
} shm_header_t;

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static size_t ctl_len(weft_shm_t *s, int size, size_t small_max)
{
    s->size = size;
    s->small_max = small_max;
    s->slot_bytes = round64(WEFT_SHM_SLOT_HDR + small_max);
    s->depth = WEFT_SHM_DEPTH;
    while (s->depth > 2 && s->depth * (uint64_t)size > WEFT_SHM_SLOTS) {
        s->depth /= 2;
    }
    s->slots_off = 64 + (size_t)size * WEFT_SHM_CTL_BYTES;
    return s->slots_off + (size_t)size * s->depth * s->slot_bytes;
}

/* The largest control segment any membership needs with @p small_max bytes per slot:
 * the counters of WEFT_SHM_MAX_RANKS members and WEFT_SHM_SLOTS slots (a group of 4 or
 * more has exactly that many; fewer members have fewer). */
static size_t ctl_len_max(size_t small_max)
{
    return 64 + (size_t)WEFT_SHM_MAX_RANKS * WEFT_SHM_CTL_BYTES +
           (size_t)WEFT_SHM_SLOTS * round64(WEFT_SHM_SLOT_HDR + small_max);
}

static size_t data_len(weft_shm_t *s, size_t chunk)
{
    s->chunk = chunk;
    s->stage_off = 64;
    s->res_off = s->stage_off + (size_t)s->size * WEFT_SHM_NB * chunk;
    return s->res_off + (size_t)s->size * WEFT_SHM_NB * chunk;
}

static void region_free(weft_shm_region_t *r, int size)
{
    if (r->base != NULL) {
        const shm_header_t *h = (const shm_header_t *)r->base;
        if (!r->unlinked && __atomic_load_n(&h->attached, __ATOMIC_ACQUIRE) < (uint64_t)size) {
            shm_unlink(r->name); /* someone never attached: the name must not outlive us */
        }
        munmap(r->base, r->len);
    }
    r->base = NULL;
}

static void seg_free(weft_shm_t *s)
{
    if (s != NULL) {
        if (s->next.base != NULL || s->next_made) {
            /* Made for an epoch that did not use it (skipped, over messages, the group
             * freed): nobody maps it, so the name goes with its maker. */
            if (s->next_made) {
                shm_unlink(s->next.name);
            }
            if (s->next.base != NULL) {
                munmap(s->next.base, s->next.len);
            }
        }
        region_free(&s->ctl, s->size);
        region_free(&s->data, s->size);
        free(s);
    }
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

static weft_status_t map_fd(weft_ctx_t *ctx, weft_shm_region_t *r, int fd, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        return weft__error(ctx, WEFT_ERR_IO, "shared memory %s: mmap of %zu bytes: %s", r->name,
                           len, strerror(errno));
    }
    r->base = p;
    r->len = len;
    return WEFT_OK;
}

/* The creator: allocate the header page, then the rest; publish the outcome. */
static weft_status_t region_create(weft_group_t *g, weft_shm_region_t *r, int fd, size_t len,
                                   uint64_t param)
{
    weft_ctx_t *ctx = g->ctx;
    int rc = ftruncate(fd, (off_t)len) == 0 ? 0 : errno;
    if (rc == 0) {
        rc = posix_fallocate(fd, 0, HEADER_PAGE < len ? HEADER_PAGE : len);
    }
    if (rc != 0) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "shared memory %s: %s", r->name,
                           strerror(rc)); /* the others time out waiting for it */
    }
    int status = posix_fallocate(fd, 0, (off_t)len);
    weft_status_t st = map_fd(ctx, r, fd, len);
    if (st != WEFT_OK) {
        return st;
    }
    shm_header_t *h = (shm_header_t *)r->base;
    h->status = (uint64_t)status;
    h->param = param;
    h->size = (uint64_t)g->size;
    h->len = len;
    weft__shm_store(&h->magic, SHM_MAGIC);
    return WEFT_OK;
}

/* While waiting for the creator: WEFT_OK, or the group's failure (the creator may be the
 * member that died, between creating the name and publishing the header). */
static weft_status_t attach_wait(weft_group_t *g, const weft_shm_region_t *r)
{
    sched_yield();
    weft__progress(g->ctx); /* failure notices are polled there */
    weft_status_t st = weft__group_status(g);
    if (st != WEFT_OK) {
        return weft__error(g->ctx, st, "shared memory %s: a member of group %u failed while "
                           "it was being set up", r->name, g->id);
    }
    return WEFT_OK;
}

bool weft__shm_fd_private(int fd, char *why, size_t why_len)
{
    struct stat sb;
    char dummy[8];
    if (why == NULL) {
        why = dummy;
        why_len = sizeof(dummy);
    }
    if (fstat(fd, &sb) != 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        return false;
    }
    if (!weft__stat_private(&sb, S_IFREG)) {
        snprintf(why, why_len,
                 "it is owned by uid %u with mode %04o, not this user's alone (another user "
                 "made it first?)",
                 (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777));
        return false;
    }
    return true;
}

/* The others: wait for the creator to size the file, map it once, wait for the header
 * (one mapping: every munmap costs a TLB shootdown). */
static weft_status_t region_attach(weft_group_t *g, weft_shm_region_t *r, int fd, size_t need)
{
    weft_ctx_t *ctx = g->ctx;
    uint64_t start = weft__now_ns(), timeout = weft__ms_to_ns(ATTACH_WAIT_MS);
    char what[160];
    struct stat sb;
    for (;;) {
        if (fstat(fd, &sb) != 0) {
            return weft__error(ctx, WEFT_ERR_IO, "shared memory %s: %s", r->name,
                               strerror(errno));
        }
        if ((size_t)sb.st_size >= sizeof(shm_header_t)) {
            break; /* ftruncate sets the whole length at once */
        }
        if (weft__now_ns() - start > weft__wait_limit(ctx, start, timeout)) {
            snprintf(what, sizeof(what), "shared memory %s: waiting for its creator to size it",
                     r->name);
            return weft__wait_timeout(ctx, start, timeout, what);
        }
        weft_status_t st = attach_wait(g, r); /* the creator is between shm_open and ftruncate */
        if (st != WEFT_OK) {
            return st;
        }
    }
    weft_status_t st = map_fd(ctx, r, fd, (size_t)sb.st_size);
    if (st != WEFT_OK) {
        return st;
    }
    const shm_header_t *h = (const shm_header_t *)r->base;
    while (weft__shm_load(&h->magic) != SHM_MAGIC) {
        if (weft__now_ns() - start > weft__wait_limit(ctx, start, timeout)) {
            snprintf(what, sizeof(what), "shared memory %s: waiting for its creator to publish it",
                     r->name);
            return weft__wait_timeout(ctx, start, timeout, what);
        }
        st = attach_wait(g, r);
        if (st != WEFT_OK) {
            return st;
        }
    }
    /* A segment made ahead of time for the epoch (weft__shm_ensure) may be larger than
     * this membership needs: the geometry is the group's, the bytes only have to fit. */
    if (h->len != r->len || h->len < need) {
        return weft__error(ctx, WEFT_ERR_PROTOCOL,
                           "shared memory %s: made for %llu members and %llu bytes, this "
                           "group has %d and needs %zu",
                           r->name, (unsigned long long)h->size, (unsigned long long)h->len,
                           g->size, need);
    }
    return WEFT_OK;
}

/*
 * Create or attach to segment @p kind of @p g's epoch, of @p len bytes carrying @p param
 * when created here. WEFT_OK: mapped, *param_out the creator's parameter. *refused: the
 * creator could not allocate it (every member gets the same answer); WEFT_OK is then
 * returned with nothing mapped. Other errors concern this rank alone.
 */
static weft_status_t region_join(weft_group_t *g, weft_shm_region_t *r, const char *kind,
                                 uint64_t *param_out, bool *refused);

static weft_status_t region_open(weft_group_t *g, weft_shm_region_t *r, const char *kind,
                                 size_t len, uint64_t param, uint64_t *param_out,
                                 bool *refused)
{
    weft_ctx_t *ctx = g->ctx;
    *refused = false;
    weft__shm_seg_name(&ctx->shm_job, g->id, g->epoch, kind, r->name, sizeof(r->name));
    bool creator = true;
    int fd = shm_open(r->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
        creator = false;
        fd = shm_open(r->name, O_RDWR, 0600);
    }
    if (fd < 0) {
        r->unlinked = true; /* not ours to remove */
        return weft__error(ctx, WEFT_ERR_IO,
                           "shared memory %s: %s (WEFT_COLL_SHM=off on every rank avoids it)",
                           r->name, strerror(errno));
    }
    char why[160];
    if (!creator && !weft__shm_fd_private(fd, why, sizeof(why))) {
        close(fd);
        r->unlinked = true; /* not ours to remove */
        return weft__error_at(ctx, WEFT_ERR_IO, WEFT_LOG_ERROR,
                              "shared memory %s: refused: %s", r->name, why);
    }
    weft_status_t st = creator ? region_create(g, r, fd, len, param) : region_attach(g, r, fd, len);
    close(fd);
    if (st != WEFT_OK) {
        /* A member failed meanwhile, maybe its creator: nobody will use this epoch's
         * segment, and a dead creator would leave the name behind. */
        if (creator || st == WEFT_ERR_PEER_FAILED || st == WEFT_ERR_REVOKED) {
            shm_unlink(r->name);
        }
        r->unlinked = true;
        region_free(r, g->size);
        return st;
    }
    return region_join(g, r, kind, param_out, refused);
}

/* Count this member in on mapped region @p r and read what its creator published. */
static weft_status_t region_join(weft_group_t *g, weft_shm_region_t *r, const char *kind,
                                 uint64_t *param_out, bool *refused)
{
    weft_ctx_t *ctx = g->ctx;
    shm_header_t *h = (shm_header_t *)r->base;
    if (__atomic_add_fetch(&h->attached, 1, __ATOMIC_ACQ_REL) == (uint64_t)g->size) {
        shm_unlink(r->name); /* the last member is in: nothing left to find it by */
        r->unlinked = true;
    }
    *param_out = h->param;
    if (h->status != 0) {
        *refused = true;
        WEFT_LOG(&ctx->logger, WEFT_LOG_WARN,
                 "shared memory %s: %zu bytes could not be allocated (%s; /dev/shm too "
                 "small? docker --shm-size): %s of group %u use messages instead",
                 r->name, r->len, strerror((int)h->status),
                 strcmp(kind, "ctl") == 0 ? "all collectives" : "large collectives", g->id);
        r->unlinked = r->unlinked || h->attached >= (uint64_t)g->size;
        munmap(r->base, r->len);
        r->base = NULL;
    }
    return WEFT_OK;
}

static weft_status_t shm_decide(weft_group_t *g);

/*
 * Make and map the control segment of epoch + 1 now, while nothing waits for it, so that
 * the first collective after a repair or an admission finds it mapped: no creator to wait
 * for, no system call on the recovery path (with more ranks than cores, every member's
 * open and mmap there waited for the others to be scheduled). At the epoch's
 * SPARE_AFTER-th collective group rank 0 makes it; the others map it at their next
 * collectives, which rank 0 has entered, so it is there by then (an eager broadcast
 * from another root may run ahead: they look for SPARE_TRIES collectives). It is
 * sized for the largest membership (ctl_len_max), so any next membership fits, and counts
 * nobody as attached: the next epoch's members do when they take it over (shm_decide);
 * members that joined meanwhile open it by name as usual.
 */
/* Make the spare under a name of this process's own, publish its header, and only then
 * link it under @p name (link(2) is atomic: a member that finds @p name finds it whole,
 * and a maker that dies half way leaves only its own name, which the job's lock sweeps).
 * The mapping, or NULL: none made, or another member's came first (*lost). */
static void *spare_make(const char *name, size_t len, const weft_shm_t *s, bool *lost)
{
    char tmp[96], from[128], to[128];
    snprintf(tmp, sizeof(tmp), "%s.%d", name, (int)getpid());
    *lost = false;
    int fd = shm_open(tmp, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        return NULL;
    }
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) == 0 && posix_fallocate(fd, 0, (off_t)len) == 0) {
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    }
    close(fd);
    int rc = -1;
    if (p != MAP_FAILED) {
        shm_header_t *h = p;
        h->param = s->small_max;
        h->size = (uint64_t)s->size;
        h->len = len;
        weft__shm_store(&h->magic, SHM_MAGIC);
        snprintf(from, sizeof(from), "%s%s", WEFT_SHM_DIR, tmp);
        snprintf(to, sizeof(to), "%s%s", WEFT_SHM_DIR, name);
        rc = link(from, to);
        *lost = rc != 0 && errno == EEXIST;
    }
    shm_unlink(tmp);
    if (rc != 0 && p != MAP_FAILED) {
        munmap(p, len);
    }
    return rc == 0 ? p : NULL;
}

static void spare_prepare(weft_group_t *g, weft_shm_t *s)
{
    weft_shm_region_t *r = &s->next;
    size_t len = ctl_len_max(s->small_max);
    if (r->name[0] == '\0') {
        weft__shm_seg_name(&g->ctx->shm_job, g->id, g->epoch + 1, "ctl", r->name,
                           sizeof(r->name));
    }
    void *p = MAP_FAILED;
    bool lost = false;
    if (s->rank == 0) {
        p = spare_make(r->name, len, s, &lost);
        s->next_made = p != NULL;
        p = p != NULL ? p : MAP_FAILED;
    }
    if (s->rank != 0 || lost) {
        int fd = shm_open(r->name, O_RDWR, 0600);
        struct stat sb;
        if (fd >= 0 && weft__shm_fd_private(fd, NULL, 0) && fstat(fd, &sb) == 0 &&
            (size_t)sb.st_size == len) {
            p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        }
        if (fd >= 0) {
            close(fd);
        }
        if (fd < 0 && errno == ENOENT && s->turn < SPARE_AFTER + SPARE_TRIES) {
            return; /* not made yet (its maker is behind in an eager broadcast): next time */
        }
    }
    s->next_done = true; /* mapped, or not to be had: the next epoch maps its own */
    if (p != MAP_FAILED && weft__shm_load(&((shm_header_t *)p)->magic) != SHM_MAGIC) {
        munmap(p, len); /* not a spare: made by the usual path meanwhile */
        p = MAP_FAILED;
    }
    if (p != MAP_FAILED) {
        r->base = p;
        r->len = len;
    }
}

/* Take over the segment the previous epoch mapped for this one, if there is one: the
 * same as region_open finding it, without a system call. WEFT_OK with nothing taken when
 * there is none. */
static weft_status_t spare_take(weft_group_t *g, weft_shm_t *s, bool *taken, uint64_t *theirs,
                                bool *refused)
{
    weft_shm_t *prev = g->shm_old;
    *taken = false;
    if (prev == NULL || prev->next.base == NULL || prev->epoch + 1 != g->epoch) {
        return WEFT_OK;
    }
    WEFT_ASSERT(prev->next.len == ctl_len_max(prev->small_max));
    s->ctl = prev->next;
    memset(&prev->next, 0, sizeof(prev->next));
    prev->next_made = false; /* the name is this epoch's now: its last member removes it */
    *taken = true;
    return region_join(g, &s->ctl, "ctl", theirs, refused);
}

weft_status_t weft__shm_ensure(weft_group_t *g)
{
    if (g->shm_epoch == g->epoch + 1) {
        if (g->shm_old != NULL && (g->shm == NULL || g->shm->turn > 0)) {
            seg_free(g->shm_old); /* the epoch's first collective is done: now it may cost */
            g->shm_old = NULL;
        }
        weft_shm_t *s = g->shm;
        if (s != NULL && !s->next_done && s->turn >= SPARE_AFTER) {
            spare_prepare(g, s);
        }
        return WEFT_OK; /* decided for this epoch */
    }
    /* The previous epoch's segments are unmapped after this epoch's first collective: the
     * TLB shootdown of a munmap costs tens of microseconds, and the first collective
     * after a repair is on the job's critical path. */
    seg_free(g->shm_old);
    g->shm_old = g->shm;
    g->shm = NULL;
    return shm_decide(g);
}

/* The slow path of weft__shm_ensure: map this epoch's segment, or decide to go without. */
static weft_status_t shm_decide(weft_group_t *g)
{
    weft_ctx_t *ctx = g->ctx;
    if (g->size < 2 || g->size > WEFT_SHM_MAX_RANKS || !ctx->cfg.coll_shm ||
        (ctx->store_addr[0] == '\0' && ctx->data_hex[0] == '\0') || !all_same_host(g)) {
        g->shm_epoch = g->epoch + 1;
        return WEFT_OK;
    }
    int err = weft__shm_job_lock(&ctx->shm_job, WEFT_SHM_DIR);
    if (err != 0) {
        return weft__error(ctx, WEFT_ERR_IO,
                           "shared memory: cannot hold the job lock in %s: %s (WEFT_COLL_SHM=off "
                           "on every rank avoids it)",
                           WEFT_SHM_DIR, strerror(err));
    }
    weft_shm_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for shared-memory state");
    }
    s->rank = g->rank;
    s->epoch = g->epoch;
    size_t small = ctx->cfg.shm_small_max;
    small = small > ((size_t)1 << 20) ? (size_t)1 << 20 : small;
    uint64_t theirs = small;
    bool refused = false;
    bool taken;
    weft_status_t st = spare_take(g, s, &taken, &theirs, &refused);
    if (st == WEFT_OK && !taken) {
        st = region_open(g, &s->ctl, "ctl", ctl_len(s, g->size, small), small, &theirs,
                         &refused);
    }
    if (st != WEFT_OK) {
        seg_free(s);
        return st; /* undecided: the next collective tries again */
    }
    if (refused) {
        seg_free(s); /* every member saw the same: this epoch collects over messages */
        g->shm_epoch = g->epoch + 1;
        return WEFT_OK;
    }
    WEFT_ASSERT(s->ctl.base != NULL && s->ctl.len > 0);
    if (ctl_len(s, g->size, (size_t)theirs) > s->ctl.len) {
        seg_free(s);
        return weft__error(ctx, WEFT_ERR_PROTOCOL, "shared memory: inconsistent geometry");
    }
    g->shm = s;
    g->shm_epoch = g->epoch + 1;
    WEFT_LOG(&ctx->logger, WEFT_LOG_DEBUG, "group %u epoch %u: %zu-byte shared segment %s",
             g->id, g->epoch, s->ctl.len, s->ctl.name);
    return WEFT_OK;
}

weft_status_t weft__shm_data(weft_group_t *g)
{
    weft_shm_t *s = g->shm;
    if (s->data_state != 0) {
        return WEFT_OK;
    }
    size_t chunk = round64(g->ctx->cfg.shm_chunk);
    chunk = chunk < 4096 ? 4096 : chunk > ((size_t)64 << 20) ? (size_t)64 << 20 : chunk;
    uint64_t theirs = chunk;
    bool refused = false;
    weft_status_t st = region_open(g, &s->data, "data", data_len(s, chunk), chunk, &theirs,
                                   &refused);
    if (st != WEFT_OK) {
        return st;
    }
    if (refused) {
        s->data_state = -1;
        return WEFT_OK;
    }
    if (data_len(s, (size_t)theirs) > s->data.len) {
        return weft__error(g->ctx, WEFT_ERR_PROTOCOL, "shared memory: inconsistent geometry");
    }
    s->data_state = 1;
    return WEFT_OK;
}

const char *weft__shm_ctx_job(const weft_ctx_t *ctx)
{
    return ctx->shm_job.job;
}

weft_status_t weft__shm_ctx_init(weft_ctx_t *ctx)
{
    weft_status_t st =
        weft__shm_job_init(&ctx->shm_job, ctx->store_addr, ctx->data_hex, ctx->cfg.ns);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "cannot derive the names of shared-memory segments");
    }
    /* One process per host is enough to clear what dead jobs left: whatever launched it,
     * every host of a job has a local rank 0. */
    if (ctx->cfg.coll_shm && ctx->store_addr[0] != '\0' && ctx->local_rank == 0) {
        weft__shm_sweep(WEFT_SHM_DIR, &ctx->logger);
    }
    return WEFT_OK;
}

void weft__shm_ctx_fini(weft_ctx_t *ctx)
{
    weft__shm_job_unlock(&ctx->shm_job, WEFT_SHM_DIR, &ctx->logger);
}

void weft__shm_mark_abandoned(weft_group_t *g, uint32_t epoch)
{
    weft_shm_t *s = g->shm;
    if (s == NULL || s->epoch != epoch || g->shm_epoch != epoch + 1) {
        return; /* this epoch collects over messages: the store's notice tells the others */
    }
    s->broken = true;
    uint64_t none = 0;
    shm_header_t *h = (shm_header_t *)s->ctl.base;
    (void)__atomic_compare_exchange_n(&h->abandoned, &none, (uint64_t)s->rank + 1, false,
                                      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

int weft__shm_abandoned(const weft_shm_t *s)
{
    const shm_header_t *h = (const shm_header_t *)s->ctl.base;
    return (int)__atomic_load_n(&h->abandoned, __ATOMIC_SEQ_CST) - 1;
}
