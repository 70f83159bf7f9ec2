/*
 * Memory types, the CUDA state of contexts and groups, and the comm side of transport
 * selection: this rank's topology summary, its exchange through the store, and the
 * decisions per peer and per group.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#endif

#include "comm/device/memtype.h"
#ifdef WEFT_HAVE_NCCL
#include "comm/device/nccl_comm.h"
#endif
#include "weft/cuda.h"

#define TOPO_KEY_FMT "topo/%d"

/* ---- memory type ---- */

#ifdef WEFT_HAVE_CUDA
/* Process-wide facts about the machine, written once: not context state. */
static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static int device_count;
static atomic_int driver_seen;

static void probe_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        n = 0;
        (void)cudaGetLastError(); /* no driver or no device: every buffer is host memory */
    }
    device_count = n;
}

/*
 * Device memory can exist only once the CUDA driver library is mapped into the process.
 * Asking the dynamic loader costs no CUDA initialisation, so programs that never touch
 * CUDA never pay for it.
 */
static int driver_loaded(void)
{
    if (atomic_load_explicit(&driver_seen, memory_order_relaxed)) {
        return 1;
    }
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) {
        return 0;
    }
    dlclose(h);
    atomic_store_explicit(&driver_seen, 1, memory_order_relaxed);
    return 1;
}
#endif

int weft__cuda_device_count(void)
{
#ifdef WEFT_HAVE_CUDA
    pthread_once(&device_once, probe_devices);
    return device_count;
#else
    return 0;
#endif
}

weft_memtype_t weft__memtype(const void *ptr)
{
#ifdef WEFT_HAVE_CUDA
    struct cudaPointerAttributes attr;
    if (ptr == NULL || !driver_loaded() || weft__cuda_device_count() == 0) {
        return WEFT_MEM_HOST;
    }
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
        (void)cudaGetLastError();
        return WEFT_MEM_HOST;
    }
    /* Managed memory counts as device memory: NCCL moves it without staging. */
    return (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)
               ? WEFT_MEM_CUDA
               : WEFT_MEM_HOST;
#else
    (void)ptr;
    return WEFT_MEM_HOST;
#endif
}

weft_status_t weft_memory_is_cuda(const void *ptr, int *is_cuda)
{
    if (is_cuda == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    *is_cuda = weft__memtype(ptr) == WEFT_MEM_CUDA;
    return WEFT_OK;
}

/* ---- CUDA state of groups ---- */

weft_status_t weft__cuda_group_get(weft_group_t *g, struct weft_cuda_group **out)
{
    if (g->cuda == NULL) {
        g->cuda = calloc(1, sizeof(*g->cuda));
        if (g->cuda == NULL) {
            return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "cannot allocate CUDA group state");
        }
    }
    *out = g->cuda;
    return WEFT_OK;
}

void *weft__group_cuda_stream(const weft_group_t *g)
{
    return g->cuda != NULL ? g->cuda->stream : NULL;
}

weft_status_t weft_group_set_cuda_stream(weft_group_t *g, void *stream)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    struct weft_cuda_group *cg = NULL;
    if (g == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
#ifndef WEFT_HAVE_CUDA
    if (stream != NULL) {
        return weft__error(g->ctx, WEFT_ERR_UNSUPPORTED,
                           "weft_group_set_cuda_stream: this weft was built without CUDA");
    }
#endif
    weft_status_t st = weft__cuda_group_get(g, &cg);
    if (st == WEFT_OK) {
        cg->stream = stream;
    }
    return st;
}

weft_status_t weft_group_cuda_stream(const weft_group_t *g, void **stream)
{
    WEFT_API_LOCK(g != NULL ? g->ctx : NULL);
    if (g == NULL || stream == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    *stream = weft__group_cuda_stream(g);
    return WEFT_OK;
}

void weft__cuda_group_fini(weft_group_t *g)
{
    if (g == NULL || g->cuda == NULL) {
        return;
    }
#ifdef WEFT_HAVE_NCCL
    weft__nccl_group_release(g);
#endif
    free(g->cuda);
    g->cuda = NULL;
}

void weft__cuda_ctx_fini(weft_ctx_t *ctx)
{
    if (ctx == NULL || ctx->cuda == NULL) {
        return;
    }
    for (int i = 0; i < ctx->cuda->nmembers; i++) {
        free(ctx->cuda->members[i]);
    }
    free(ctx->cuda->members);
    free(ctx->cuda);
    ctx->cuda = NULL;
}

/* ---- this rank's topology ---- */

/* Collects the first error of weft__topo_load() for weft__error(); forwards the rest. */
typedef struct topo_capture {
    weft_ctx_t *ctx;
    char error[256];
} topo_capture_t;

static void capture_log(void *arg, int level, const char *fmt, va_list ap)
{
    topo_capture_t *c = arg;
    if (level == WEFT_LOG_ERROR && c->error[0] == '\0') {
        vsnprintf(c->error, sizeof(c->error), fmt, ap);
        return;
    }
    weft__log_tl(&c->ctx->logger, level, fmt, ap);
}

/* Index of the GPU this rank drives in @p s, or -1. */
static int pick_gpu(weft_ctx_t *ctx, const weft_topo_summary_t *s)
{
#ifdef WEFT_HAVE_CUDA
    int dev = -1;
    char busid[32];
    if (weft__cuda_device_count() > 0) {
        if (cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetPCIBusId(busid, (int)sizeof(busid), dev) == cudaSuccess) {
            int i = weft__topo_find_gpu(s, busid);
            if (i >= 0) {
                return i;
            }
            if (!(s->flags & WEFT_TOPO_FROM_XML)) {
                WEFT_WARN(&ctx->logger, "CUDA device %d (%s) is not in the hwloc topology of %s",
                          dev, busid, s->hostname);
            }
        } else {
            (void)cudaGetLastError();
        }
    }
#endif
    /* A topology read from a file stands for another machine: simulate one GPU per local
     * rank there, the usual placement. */
    if ((s->flags & WEFT_TOPO_FROM_XML) && s->ngpus > 0) {
        return (ctx->local_rank >= 0 ? ctx->local_rank : 0) % s->ngpus;
    }
    return -1;
}

static weft_status_t cuda_ctx_get(weft_ctx_t *ctx, struct weft_cuda_ctx **out)
{
    if (ctx->cuda != NULL) {
        *out = ctx->cuda;
        return WEFT_OK;
    }
    struct weft_cuda_ctx *cc = calloc(1, sizeof(*cc));
    if (cc == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "cannot allocate the topology state");
    }
    topo_capture_t cap = {.ctx = ctx};
    const char *xml = ctx->cfg.topo_xml[0] != '\0' ? ctx->cfg.topo_xml : NULL;
    weft_status_t st = weft__topo_load(xml, capture_log, &cap, &cc->local);
    if (st != WEFT_OK) {
        free(cc);
        return weft__error(ctx, st, "topology: %s",
                           cap.error[0] != '\0' ? cap.error : "cannot load it");
    }
    cc->local.my_gpu = pick_gpu(ctx, &cc->local);
    ctx->cuda = cc;
    *out = cc;
    return WEFT_OK;
}

weft_status_t weft__topo_local(weft_ctx_t *ctx, const weft_topo_summary_t **out)
{
    struct weft_cuda_ctx *cc;
    if (ctx == NULL || out == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = cuda_ctx_get(ctx, &cc);
    if (st == WEFT_OK) {
        *out = &cc->local;
    }
    return st;
}

static int store_timeout_ms(const weft_ctx_t *ctx)
{
    return ctx->cfg.connect_timeout_ms > INT_MAX ? INT_MAX : (int)ctx->cfg.connect_timeout_ms;
}

static weft_status_t publish_local(weft_ctx_t *ctx, struct weft_cuda_ctx *cc)
{
    uint8_t buf[WEFT_TOPO_PACKED_MAX];
    char key[WEFT_STORE_MAX_KEY];
    size_t len = 0;
    if (cc->published || ctx->store == NULL) {
        return WEFT_OK;
    }
    weft_status_t st = weft__topo_pack(&cc->local, buf, sizeof(buf), &len);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "cannot serialize the topology summary");
    }
    weft__key(ctx, key, sizeof(key), TOPO_KEY_FMT, ctx->rank);
    st = weft__store_set(ctx->store, key, buf, len);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "store: cannot publish the topology summary");
    }
    cc->published = 1;
    return WEFT_OK;
}

static weft_status_t grow_members(weft_ctx_t *ctx, struct weft_cuda_ctx *cc, int id)
{
    if (id < cc->nmembers) {
        return WEFT_OK;
    }
    int n = id + 1 > 2 * cc->nmembers ? id + 1 : 2 * cc->nmembers;
    weft_topo_summary_t **m = realloc(cc->members, sizeof(*m) * (size_t)n);
    if (m == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "cannot grow the topology table");
    }
    memset(m + cc->nmembers, 0, sizeof(*m) * (size_t)(n - cc->nmembers));
    cc->members = m;
    cc->nmembers = n;
    return WEFT_OK;
}

/* The summary of member @p id, from the store the first time. */
static weft_status_t member_summary(weft_ctx_t *ctx, struct weft_cuda_ctx *cc, int id,
                                    const weft_topo_summary_t **out)
{
    char key[WEFT_STORE_MAX_KEY];
    void *val = NULL;
    size_t len = 0;
    if (id == ctx->rank) {
        *out = &cc->local;
        return WEFT_OK;
    }
    weft_status_t st = grow_members(ctx, cc, id);
    if (st != WEFT_OK) {
        return st;
    }
    if (cc->members[id] != NULL) {
        *out = cc->members[id];
        return WEFT_OK;
    }
    if (ctx->store == NULL) {
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED,
                           "no store to learn the topology of member %d from", id);
    }
    weft_topo_summary_t *s = malloc(sizeof(*s));
    if (s == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "cannot allocate a topology summary");
    }
    weft__key(ctx, key, sizeof(key), TOPO_KEY_FMT, id);
    uint64_t start = weft__now_ns();
    st = weft__store_get(ctx->store, key, store_timeout_ms(ctx), &val, &len);
    if (st != WEFT_OK) {
        free(s);
        return weft__error(ctx, st,
                           "topology summary of member %d not published after %llu ms "
                           "(limit %d ms)",
                           id, (unsigned long long)((weft__now_ns() - start) / 1000000ull),
                           store_timeout_ms(ctx));
    }
    st = weft__topo_unpack(val, len, s);
    free(val);
    if (st != WEFT_OK) {
        free(s);
        return weft__error(ctx, st, "malformed topology summary from member %d", id);
    }
    cc->members[id] = s;
    *out = s;
    return WEFT_OK;
}

static weft_status_t current_override(weft_ctx_t *ctx, weft_tsel_override_t *ov)
{
    if (weft__tsel_parse_override(ctx->cfg.transport, ov) != WEFT_OK) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "WEFT_TRANSPORT=%s is not auto, ucx or nccl",
                           ctx->cfg.transport);
    }
    return WEFT_OK;
}

/* ---- decisions ---- */

weft_status_t weft__select_peer(weft_group_t *g, int peer, weft_memtype_t mt, weft_tsel_t *out)
{
    struct weft_cuda_ctx *cc;
    const weft_topo_summary_t *ps;
    weft_tsel_override_t ov;
    if (g == NULL || out == NULL || peer < 0 || peer >= g->size) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = g->ctx;
    int id = g->members[peer];
    weft_status_t st = current_override(ctx, &ov);
    if (st == WEFT_OK) {
        st = cuda_ctx_get(ctx, &cc);
    }
    if (st == WEFT_OK && id != ctx->rank) {
        st = publish_local(ctx, cc);
    }
    if (st == WEFT_OK) {
        st = member_summary(ctx, cc, id, &ps);
    }
    if (st == WEFT_OK) {
        st = weft__tsel_decide(&cc->local, ps, id == ctx->rank, mt, ov, out);
    }
    return st;
}

weft_status_t weft__select_group(weft_group_t *g, weft_memtype_t mt, weft_tsel_t *out)
{
    struct weft_cuda_group *cg = NULL;
    struct weft_cuda_ctx *cc;
    weft_tsel_override_t ov;
    if (g == NULL || out == NULL || (mt != WEFT_MEM_HOST && mt != WEFT_MEM_CUDA)) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = g->ctx;
    weft_status_t st = weft__group_status(g);
    if (st != WEFT_OK) {
        return st;
    }
    if ((st = weft__cuda_group_get(g, &cg)) != WEFT_OK) {
        return st;
    }
    if (cg->sel_valid[mt] && cg->sel_epoch == g->epoch) {
        *out = cg->sel[mt];
        return WEFT_OK;
    }
    if ((st = current_override(ctx, &ov)) != WEFT_OK || (st = cuda_ctx_get(ctx, &cc)) != WEFT_OK) {
        return st;
    }
    if (g->size > 1 && (st = publish_local(ctx, cc)) != WEFT_OK) {
        return st;
    }
    const weft_topo_summary_t **m = malloc(sizeof(*m) * (size_t)g->size);
    if (m == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "cannot allocate %d summaries", g->size);
    }
    for (int i = 0; i < g->size && st == WEFT_OK; i++) {
        st = member_summary(ctx, cc, g->members[i], &m[i]);
    }
    weft_tsel_t d;
    if (st == WEFT_OK) {
        st = weft__tsel_decide_group(m, g->size, mt, ov, &d);
    }
    free(m);
    if (st != WEFT_OK) {
        return st;
    }
    if (cg->sel_epoch != g->epoch) {
        cg->sel_valid[0] = cg->sel_valid[1] = 0;
        cg->sel_epoch = g->epoch;
    }
    cg->sel[mt] = d;
    cg->sel_valid[mt] = 1;
    *out = d;
    return WEFT_OK;
}

weft_status_t weft__transport_check(weft_ctx_t *ctx)
{
    const weft_topo_summary_t *me;
    weft_topo_summary_t *blank = NULL;
    weft_tsel_override_t ov;
    char why[256];
    weft_status_t st = current_override(ctx, &ov);
    if (st != WEFT_OK || ov == WEFT_TSEL_AUTO) {
        return st;
    }
    if (ov == WEFT_TSEL_FORCE_NCCL) {
        st = weft__topo_local(ctx, &me); /* a GPU must be there: look */
    } else {
        /* UCX needs no topology; the check only reads the build flags. */
        me = blank = calloc(1, sizeof(*blank));
        st = blank != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
    }
    if (st == WEFT_OK) {
        const weft_transport_t *ucx = weft__transport_find("ucx");
        st = weft__tsel_check_override(me, ov, ucx != NULL && ucx->available(), why,
                                       sizeof(why));
        if (st != WEFT_OK) {
            st = weft__error(ctx, st, "%s", why);
        }
    }
    free(blank);
    return st;
}
