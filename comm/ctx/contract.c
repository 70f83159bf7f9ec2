/* The accessors of the core's contract (comm/core.h): what the layers above may read of
 * the context, its groups and requests, keys derived from the job token, and the
 * per-context extension slots. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "comm/core_impl.h"
#include "comm/store/proto.h"

const weft_config_t *weft__ctx_config(const weft_ctx_t *ctx)
{
    return &ctx->cfg;
}

const weft_logger_t *weft__ctx_logger(const weft_ctx_t *ctx)
{
    return ctx != NULL ? &ctx->logger : NULL;
}

bool weft__peer_same_host(const weft_ctx_t *ctx, int member)
{
    return member >= 0 && member < ctx->npeers && ctx->peers[member].same_host;
}

weft_status_t weft__peer_status(const weft_ctx_t *ctx, int member)
{
    return member >= 0 && member < ctx->npeers ? ctx->peers[member].failed : WEFT_OK;
}

bool weft__ctx_oversubscribed(const weft_ctx_t *ctx)
{
    return ctx->oversubscribed;
}

bool weft__ctx_caller_waiting(weft_ctx_t *ctx)
{
    return atomic_load_explicit(&ctx->api_waiting, memory_order_relaxed) > 0;
}

void weft__ctx_spin_until(weft_ctx_t *ctx, uint64_t until_ns)
{
    atomic_store(&ctx->spin_until_ns, until_ns);
}

/* The secret of a process without a job token: drawn once, kept until it exits (the one
 * thing of this file that is not the context's: it outlives every context, so that what
 * one context of a singleton keyed, the next one can read). */
static pthread_once_t process_secret_once = PTHREAD_ONCE_INIT;
static uint8_t process_secret[WEFT__CTX_KEY_BYTES];
static bool process_secret_ok;

static void draw_process_secret(void)
{
    process_secret_ok = weft__store_random(process_secret, sizeof(process_secret)) == WEFT_OK;
}

weft_status_t weft__ctx_derive_key(const weft_ctx_t *ctx, const char *label,
                                   uint8_t out[WEFT__CTX_KEY_BYTES])
{
    static const char prefix[] = "weft-ctx-key-v1:";
    char msg[256];
    if (label == NULL || out == NULL || strlen(label) >= sizeof(msg) - sizeof(prefix)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "derive key: no label, no output, or "
                                                       "a label too long");
    }
    size_t len = (size_t)snprintf(msg, sizeof(msg), "%s%s", prefix, label);
    weft_status_t st;
    if (ctx != NULL && ctx->data_hex[0] != '\0') {
        /* The job's data key, which every rank holds (the token or weftrun gave it). */
        st = weft__store_hmac_sha256(ctx->cred.data_key, sizeof(ctx->cred.data_key), msg, len, out);
    } else {
        pthread_once(&process_secret_once, draw_process_secret);
        if (!process_secret_ok) {
            return weft__error_noctx(WEFT_ERR_IO, "derive key: the OS gives no random bytes");
        }
        st = weft__store_hmac_sha256(process_secret, sizeof(process_secret), msg, len, out);
    }
    if (st != WEFT_OK) {
        OPENSSL_cleanse(out, WEFT__CTX_KEY_BYTES);
        return weft__error_noctx(st, "derive key: HMAC-SHA256 failed");
    }
    return WEFT_OK;
}

void *weft__ctx_ext(const weft_ctx_t *ctx, const void *key)
{
    for (int i = 0; i < WEFT__CTX_EXT_MAX; i++) {
        if (ctx->ext[i].key == key) {
            return ctx->ext[i].value;
        }
    }
    return NULL;
}

weft_status_t weft__ctx_ext_set(weft_ctx_t *ctx, const void *key, void *value,
                                weft__ctx_ext_fini_fn fini)
{
    int free_slot = -1;
    for (int i = 0; i < WEFT__CTX_EXT_MAX; i++) {
        if (ctx->ext[i].key == key) {
            free_slot = i;
            break;
        }
        if (ctx->ext[i].key == NULL && free_slot < 0) {
            free_slot = i;
        }
    }
    if (free_slot < 0) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no room for another per-context extension");
    }
    ctx->ext[free_slot] =
        (struct weft__ctx_ext){.key = value != NULL ? key : NULL, .value = value, .fini = fini};
    return WEFT_OK;
}

void weft__ctx_ext_fini_all(weft_ctx_t *ctx)
{
    for (int i = WEFT__CTX_EXT_MAX - 1; i >= 0; i--) {
        struct weft__ctx_ext e = ctx->ext[i];
        ctx->ext[i] = (struct weft__ctx_ext){0};
        if (e.key != NULL && e.fini != NULL) {
            e.fini(ctx, e.value);
        }
    }
}

weft_ctx_t *weft__group_ctx(const weft_group_t *g)
{
    return g->ctx;
}

int weft__group_rank(const weft_group_t *g)
{
    return g->rank;
}

int weft__group_size(const weft_group_t *g)
{
    return g->size;
}

const int *weft__group_members(const weft_group_t *g)
{
    return g->members;
}

uint32_t weft__group_id(const weft_group_t *g)
{
    return g->id;
}

uint32_t weft__group_epoch(const weft_group_t *g)
{
    return g->epoch;
}

uint32_t weft__group_coll_seq(const weft_group_t *g)
{
    return g->coll_seq;
}

uint64_t weft__group_coll_count(const weft_group_t *g)
{
    return g->coll_count;
}

void weft__req_set_ops(weft_req_t *req, weft__req_progress_fn progress,
                       weft__req_cleanup_fn cleanup, void *impl)
{
    req->progress = progress;
    req->cleanup = cleanup;
    req->impl = impl;
}

void *weft__req_impl(const weft_req_t *req)
{
    return req->impl;
}

void weft__req_set_impl(weft_req_t *req, void *impl)
{
    req->impl = impl;
}

weft__req_progress_fn weft__req_progress(const weft_req_t *req)
{
    return req->progress;
}

weft_ctx_t *weft__req_ctx(const weft_req_t *req)
{
    return req->ctx;
}

weft_status_t weft__req_status(const weft_req_t *req)
{
    return req->status;
}

void weft__req_set_runs_jobs(weft_req_t *req, bool runs_jobs)
{
    req->runs_jobs = runs_jobs;
}
