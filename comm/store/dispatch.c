/*
 * The store client's calls (store.h): argument checks, then the backend's ops table
 * (backend.h). The backend is chosen at connect by the address; the health record that
 * connections share is the same for every backend.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/store/backend.h"
#include "comm/store/proto.h"
#include "util/clock.h"
#include "util/parse.h"

bool weft__store_addr_is_etcd(const char *addr)
{
    return addr != NULL &&
           strncmp(addr, WEFT__STORE_ETCD_SCHEME, strlen(WEFT__STORE_ETCD_SCHEME)) == 0;
}

weft_status_t weft__store_connect(const char *hostport, const char *token, int timeout_ms,
                                  const weft_logger_t *lg, weft_store_client_t **client)
{
    return weft__store_addr_is_etcd(hostport)
               ? weft__store_etcd_connect(hostport, token, NULL, 0, true, timeout_ms, lg, client)
               : weft__store_native_connect(hostport, token, NULL, 0, true, timeout_ms, lg, client);
}

weft_status_t weft__store_connect_member(const char *hostport, const char *token, int member,
                                         int timeout_ms, const weft_logger_t *lg,
                                         weft_store_client_t **client)
{
    return weft__store_addr_is_etcd(hostport)
               ? weft__store_etcd_connect(hostport, token, NULL, member, false, timeout_ms, lg,
                                          client)
               : weft__store_native_connect(hostport, token, NULL, member, false, timeout_ms, lg,
                                            client);
}

weft_status_t weft__store_connect_cred(const char *hostport, const weft_store_cred_t *cred,
                                       int timeout_ms, const weft_logger_t *lg,
                                       weft_store_client_t **client)
{
    if (cred == NULL || cred->id > INT32_MAX) {
        return WEFT_ERR_INVALID_ARG;
    }
    int member = (int)cred->id;
    return weft__store_addr_is_etcd(hostport)
               ? weft__store_etcd_connect(hostport, NULL, cred, member, false, timeout_ms, lg,
                                          client)
               : weft__store_native_connect(hostport, NULL, cred, member, false, timeout_ms, lg,
                                            client);
}

/* Common checks of a request call. */
static weft_status_t check_request(const weft_store_client_t *c, const char *key)
{
    if (c == NULL || key == NULL || key[0] == '\0' ||
        strnlen(key, WEFT_STORE_MAX_KEY + 1) > WEFT_STORE_MAX_KEY) {
        return WEFT_ERR_INVALID_ARG;
    }
    return WEFT_OK;
}

/* ... and of one that carries a value. */
static weft_status_t check_value(const weft_store_client_t *c, const char *key, const void *val,
                                 size_t len)
{
    weft_status_t st = check_request(c, key);
    if (st == WEFT_OK && ((val == NULL && len > 0) || len > WEFT__STORE_MAX_VALUE)) {
        st = WEFT_ERR_INVALID_ARG;
    }
    return st;
}

weft_status_t weft__store_set(weft_store_client_t *c, const char *key, const void *val, size_t len)
{
    weft_status_t st = check_value(c, key, val, len);
    return st != WEFT_OK ? st : c->ops->set(c, key, val, len);
}

weft_status_t weft__store_get(weft_store_client_t *c, const char *key, int timeout_ms, void **val,
                              size_t *len)
{
    weft_status_t st = check_request(c, key);
    if (st != WEFT_OK || timeout_ms < 0 || val == NULL || len == NULL) {
        return st != WEFT_OK ? st : WEFT_ERR_INVALID_ARG;
    }
    return c->ops->get(c, key, timeout_ms, val, len);
}

weft_status_t weft__store_get_i64(weft_store_client_t *c, const char *key, int timeout_ms,
                                  int64_t *out)
{
    void *val;
    size_t len;
    weft_status_t st = weft__store_get(c, key, timeout_ms, &val, &len);
    if (st != WEFT_OK) {
        return st;
    }
    int64_t v;
    /* values arrive NUL-terminated; one with a NUL inside is no number either */
    bool ok = strlen(val) == len && weft__parse_i64(val, INT64_MIN, INT64_MAX, &v);
    free(val);
    if (!ok) {
        WEFT_ERROR(c->lg, "store %s: %s does not hold an integer", c->addr, key);
        return WEFT_ERR_PROTOCOL;
    }
    *out = v;
    return WEFT_OK;
}

weft_status_t weft__store_add(weft_store_client_t *c, const char *key, int64_t delta,
                              int64_t *result)
{
    weft_status_t st = check_request(c, key);
    return st != WEFT_OK ? st : c->ops->add(c, key, delta, result);
}

weft_status_t weft__store_set_nx(weft_store_client_t *c, const char *key, const void *val,
                                 size_t len, void **winner, size_t *winner_len, int *created)
{
    weft_status_t st = check_value(c, key, val, len);
    if (st == WEFT_OK && (winner == NULL || winner_len == NULL)) {
        st = WEFT_ERR_INVALID_ARG;
    }
    return st != WEFT_OK ? st : c->ops->set_nx(c, key, val, len, winner, winner_len, created);
}

weft_status_t weft__store_lease(weft_store_client_t *c, const char *key, const void *val,
                                size_t len, uint32_t ttl_ms)
{
    weft_status_t st = check_value(c, key, val, len);
    return st != WEFT_OK ? st : c->ops->lease(c, key, val, len, ttl_ms);
}

weft_status_t weft__store_delete(weft_store_client_t *c, const char *key)
{
    weft_status_t st = check_request(c, key);
    return st != WEFT_OK ? st : c->ops->del(c, key);
}

weft_status_t weft__store_watch(weft_store_client_t *c, const char *prefix)
{
    if (c == NULL || prefix == NULL ||
        strnlen(prefix, WEFT_STORE_MAX_KEY + 1) > WEFT_STORE_MAX_KEY) {
        return WEFT_ERR_INVALID_ARG;
    }
    return c->ops->watch(c, prefix);
}

weft_status_t weft__store_next_event(weft_store_client_t *c, int timeout_ms, char **key, void **val,
                                     size_t *len)
{
    if (c == NULL || timeout_ms < 0 || key == NULL || val == NULL || len == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    return c->ops->next_event(c, timeout_ms, key, val, len);
}

/* Whether @p c's table holds @p op (a call added after the first: backend.h). */
#define HAS_OP(c, op)                                                                              \
    ((c)->ops->size >= offsetof(weft_store_ops_t, op) + sizeof((c)->ops->op) &&                    \
     (c)->ops->op != NULL)

weft_status_t weft__store_scan_start(weft_store_client_t *c, const weft_store_scan_args_t *args,
                                     weft_store_scan_t **scan)
{
    if (c == NULL || args == NULL || args->prefix == NULL || args->timeout_ms < 0 || scan == NULL ||
        strnlen(args->prefix, WEFT_STORE_MAX_KEY + 1) > WEFT_STORE_MAX_KEY ||
        (args->after != NULL &&
         strnlen(args->after, WEFT_STORE_MAX_KEY + 1) > WEFT_STORE_MAX_KEY)) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (!HAS_OP(c, scan_start) || !HAS_OP(c, scan_wait) || !HAS_OP(c, scan_cancel)) {
        return WEFT_ERR_UNSUPPORTED;
    }
    return c->ops->scan_start(c, args, scan);
}

weft_status_t weft__store_scan_wait(weft_store_scan_t *scan, int wait_ms, weft_store_page_t *page)
{
    if (scan == NULL || wait_ms < 0 || page == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    return scan->c->ops->scan_wait(scan, wait_ms, page);
}

void weft__store_scan_cancel(weft_store_scan_t *scan)
{
    if (scan != NULL) {
        scan->c->ops->scan_cancel(scan);
    }
}

weft_status_t weft__store_scan(weft_store_client_t *c, const weft_store_scan_args_t *args,
                               weft_store_page_t *page)
{
    weft_store_scan_t *q;
    if (page == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_status_t st = weft__store_scan_start(c, args, &q);
    /* Past the scan's own bound the backend gives up: never WEFT_INPROGRESS. */
    return st != WEFT_OK ? st : weft__store_scan_wait(q, INT32_MAX, page);
}

void weft__store_page_free(weft_store_page_t *page)
{
    if (page == NULL) {
        return;
    }
    free(page->kv);
    free(page->mem);
    *page = (weft_store_page_t){0};
}

uint64_t weft__store_requests(const weft_store_client_t *c)
{
    return c != NULL && HAS_OP(c, requests) ? c->ops->requests(c) : 0;
}

int weft__store_fd(const weft_store_client_t *c)
{
    return c != NULL ? c->ops->fd(c) : -1;
}

void weft__store_fence(weft_store_client_t *c, const struct timespec *deadline)
{
    if (c != NULL) {
        c->ops->fence(c, deadline);
    }
}

bool weft__store_fenced(weft_store_client_t *c)
{
    return c != NULL && c->ops->fenced(c);
}

void weft__store_close(weft_store_client_t *c)
{
    if (c != NULL) {
        c->ops->close(c);
    }
}

void weft__store_share_health(weft_store_client_t *c, weft_store_health_t *h)
{
    if (c == NULL || h == NULL) {
        return;
    }
    if (h->addr[0] == '\0') {
        snprintf(h->addr, sizeof(h->addr), "%s", c->addr);
    }
    c->ops->share_health(c, h);
}

uint64_t weft__store_lost_ns(const weft_store_health_t *h)
{
    return h != NULL ? atomic_load_explicit(&h->lost_ns, memory_order_acquire) : 0;
}

const char *weft__store_lost_cause(const weft_store_health_t *h)
{
    return weft__store_lost_ns(h) != 0 ? h->cause : "";
}

bool weft__store_claim_report(weft_store_health_t *h)
{
    return weft__store_lost_ns(h) != 0 && atomic_exchange(&h->reported, 1) == 0;
}

void weft__store_health_lost(weft_store_health_t *h, const char *what, const char *why)
{
    if (atomic_exchange(&h->recording, 1) != 0) {
        while (weft__store_lost_ns(h) == 0) {
            /* another thread is writing the cause: a few instructions away */
        }
        return;
    }
    snprintf(h->cause, sizeof(h->cause), "%s: %s", what, why);
    uint64_t now = weft__now_ns();
    atomic_store_explicit(&h->lost_ns, now != 0 ? now : 1, memory_order_release);
}
