/*
 * The program's key-value space (include/weft/kv.h) in the job's store: key K is kept as
 * "<ns>/kv/K'", where K' is K with each '/' written as the byte 0x1f, so that a program's
 * key is one part of the store's key and never takes the shape of weft's own keys (the
 * store's rules for what a member may write go by those shapes; keys under "<ns>/kv/"
 * are open to every member: docs/store-protocol.md, "Sessions").
 */
#include <stdlib.h>
#include <string.h>

#include "comm/core_impl.h"
#include "comm/store/store.h"
#include "util/clock.h"
#include "weft/kv.h"

#define KV_SLASH '\x1f'
/* A get that waits asks the store in slices this long, taking the context's lock for
 * each, so that other threads' calls go on meanwhile. */
#define KV_SLICE_MS 50

static weft_status_t store_key(weft_ctx_t *ctx, const char *key, char *out, size_t len)
{
    if (key == NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "weft_kv: the key is NULL");
    }
    size_t n = strnlen(key, WEFT_KV_MAX_KEY + 1);
    if (n == 0 || n > WEFT_KV_MAX_KEY) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "weft_kv: a key has 1 to %d bytes, not %s",
                           WEFT_KV_MAX_KEY, n == 0 ? "none" : "more");
    }
    char part[WEFT_KV_MAX_KEY + 1];
    for (size_t i = 0; i < n; i++) {
        if (key[i] < ' ' || key[i] > '~') {
            return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                               "weft_kv: byte %zu of the key is 0x%02x: keys are printable "
                               "ASCII",
                               i, (unsigned)(unsigned char)key[i]);
        }
        part[i] = key[i] == '/' ? KV_SLASH : key[i];
    }
    part[n] = '\0';
    weft__key(ctx, out, len, "kv/%s", part);
    return WEFT_OK;
}

/* The store of @p ctx, or NULL with the error recorded. */
static weft_store_client_t *kv_store(weft_ctx_t *ctx)
{
    if (ctx->store == NULL) {
        weft__error(ctx, WEFT_ERR_UNSUPPORTED,
                    "weft_kv: this process has no store (started without a launcher): there "
                    "is no space shared with other processes");
    }
    return ctx->store;
}

/* The store's key of @p key in @p k and the context's store in *s, or the error, recorded.
 * Call with the context's lock held (NULL context: WEFT_ERR_INVALID_ARG). */
static weft_status_t kv_open(weft_ctx_t *ctx, const char *key, char k[WEFT_STORE_MAX_KEY],
                             weft_store_client_t **s)
{
    if (ctx == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = store_key(ctx, key, k, WEFT_STORE_MAX_KEY);
    if (st != WEFT_OK) {
        return st;
    }
    *s = kv_store(ctx);
    return *s == NULL ? WEFT_ERR_UNSUPPORTED : WEFT_OK;
}

weft_status_t weft_kv_set(weft_ctx_t *ctx, const char *key, const void *val, size_t len)
{
    WEFT_API_LOCK(ctx);
    char k[WEFT_STORE_MAX_KEY];
    weft_store_client_t *s;
    weft_status_t st = kv_open(ctx, key, k, &s);
    if (st != WEFT_OK) {
        return st;
    }
    if ((val == NULL && len > 0) || len > WEFT_KV_MAX_VALUE) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_kv_set: a value has 0 to %u bytes at a non-NULL address, not "
                           "%zu",
                           WEFT_KV_MAX_VALUE, len);
    }
    st = weft__store_set(s, k, len > 0 ? val : "", len);
    return st == WEFT_OK ? st : weft__error(ctx, st, "weft_kv_set of '%s' failed", key);
}

/* One try of a get that waits at most @p wait_ms, under the context's lock. */
static weft_status_t get_slice(weft_ctx_t *ctx, const char *k, int wait_ms, void **val, size_t *len)
{
    WEFT_API_LOCK(ctx);
    weft_store_client_t *s = kv_store(ctx);
    return s == NULL ? WEFT_ERR_UNSUPPORTED : weft__store_get(s, k, wait_ms, val, len);
}

weft_status_t weft_kv_get(weft_ctx_t *ctx, const char *key, void *buf, size_t cap, size_t *len,
                          uint64_t timeout_ns)
{
    if (ctx == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    char k[WEFT_STORE_MAX_KEY];
    weft_status_t st;
    {
        WEFT_API_LOCK(ctx);
        st = store_key(ctx, key, k, sizeof(k));
        if (st == WEFT_OK && (len == NULL || (buf == NULL && cap > 0))) {
            st = weft__error(ctx, WEFT_ERR_INVALID_ARG,
                             "weft_kv_get: len is NULL, or buf is NULL with cap %zu", cap);
        }
        if (st != WEFT_OK) {
            return st;
        }
    }
    uint64_t wait_ms =
        timeout_ns == WEFT_TIMEOUT_DEFAULT ? ctx->cfg.timeout_ms : timeout_ns / 1000000u;
    uint64_t end = weft__now_ns() + wait_ms * 1000000u;
    void *val = NULL;
    size_t n = 0;
    for (;;) {
        uint64_t now = weft__now_ns();
        uint64_t left = now >= end ? 0 : (end - now + 999999u) / 1000000u;
        st = get_slice(ctx, k, left < KV_SLICE_MS ? (int)left : KV_SLICE_MS, &val, &n);
        if (st != WEFT_ERR_TIMEOUT || left == 0) {
            break;
        }
    }
    WEFT_API_LOCK(ctx);
    if (st == WEFT_ERR_TIMEOUT) {
        return weft__error_at(ctx, st, WEFT_LOG_DEBUG, "weft_kv_get: '%s' not set after %llu ms",
                              key, (unsigned long long)wait_ms);
    }
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "weft_kv_get of '%s' failed", key);
    }
    if (cap > 0) {
        memcpy(buf, val, n < cap ? n : cap);
    }
    free(val);
    *len = n;
    return WEFT_OK;
}

weft_status_t weft_kv_add(weft_ctx_t *ctx, const char *key, int64_t delta, int64_t *value)
{
    WEFT_API_LOCK(ctx);
    char k[WEFT_STORE_MAX_KEY];
    weft_store_client_t *s;
    weft_status_t st = kv_open(ctx, key, k, &s);
    if (st != WEFT_OK) {
        return st;
    }
    int64_t v = 0;
    st = weft__store_add(s, k, delta, &v);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "weft_kv_add to '%s' failed%s", key,
                           st == WEFT_ERR_INVALID_ARG ? ": it holds no decimal counter" : "");
    }
    if (value != NULL) {
        *value = v;
    }
    return WEFT_OK;
}

weft_status_t weft_kv_delete(weft_ctx_t *ctx, const char *key, int *existed)
{
    WEFT_API_LOCK(ctx);
    char k[WEFT_STORE_MAX_KEY];
    weft_store_client_t *s;
    weft_status_t st = kv_open(ctx, key, k, &s);
    if (st != WEFT_OK) {
        return st;
    }
    if (existed != NULL) {
        void *val = NULL;
        size_t n;
        st = weft__store_get(s, k, 0, &val, &n);
        free(val);
        if (st != WEFT_OK && st != WEFT_ERR_TIMEOUT) {
            return weft__error(ctx, st, "weft_kv_delete of '%s' failed", key);
        }
        *existed = st == WEFT_OK;
    }
    st = weft__store_delete(s, k);
    return st == WEFT_OK ? st : weft__error(ctx, st, "weft_kv_delete of '%s' failed", key);
}
