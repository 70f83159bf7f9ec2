/*
 * Store backends: what is behind a weft_store_client_t. The calls of store.h dispatch
 * through the ops table at the start of every client (comm/store/dispatch.c), so call
 * sites do not know which store they talk to. The backend is chosen once, when the client
 * connects, by the address: "etcd://h1:2379,h2:2379" is an etcd cluster
 * (comm/store/etcd_client.c), anything else ("host:port") weft's own store
 * (comm/store/client.c). A backend's calls get arguments the dispatch checked already
 * (non-NULL client; for the key calls a key of 1 to WEFT_STORE_MAX_KEY bytes; for a scan a
 * prefix and a resume key of at most WEFT_STORE_MAX_KEY bytes, a timeout >= 0). Calls added
 * after the first go at the end of the table: the dispatch checks the table's size before
 * it uses one (WEFT_ERR_UNSUPPORTED for a table without it).
 */
#ifndef WEFT_STORE_BACKEND_H
#define WEFT_STORE_BACKEND_H

#include "comm/store/store.h"

struct timespec;

typedef struct weft_store_ops {
    size_t size; /* sizeof(weft_store_ops_t): lets the table grow */
    weft_status_t (*set)(weft_store_client_t *c, const char *key, const void *val, size_t len);
    weft_status_t (*get)(weft_store_client_t *c, const char *key, int timeout_ms, void **val,
                         size_t *len);
    weft_status_t (*add)(weft_store_client_t *c, const char *key, int64_t delta, int64_t *result);
    weft_status_t (*del)(weft_store_client_t *c, const char *key);
    weft_status_t (*set_nx)(weft_store_client_t *c, const char *key, const void *val, size_t len,
                            void **winner, size_t *winner_len, int *created);
    weft_status_t (*lease)(weft_store_client_t *c, const char *key, const void *val, size_t len,
                           uint32_t ttl_ms);
    weft_status_t (*watch)(weft_store_client_t *c, const char *prefix);
    weft_status_t (*next_event)(weft_store_client_t *c, int timeout_ms, char **key, void **val,
                                size_t *len);
    int (*fd)(const weft_store_client_t *c);
    void (*fence)(weft_store_client_t *c, const struct timespec *deadline);
    bool (*fenced)(weft_store_client_t *c);
    void (*close)(weft_store_client_t *c);
    void (*share_health)(weft_store_client_t *c, weft_store_health_t *h);
    /* Scans (store.h): scan_start returns a scan whose head is a weft_store_scan_t;
     * scan_wait (wait_ms >= 0) and scan_cancel finish and free it as store.h says. */
    weft_status_t (*scan_start)(weft_store_client_t *c, const weft_store_scan_args_t *args,
                                weft_store_scan_t **scan);
    weft_status_t (*scan_wait)(weft_store_scan_t *scan, int wait_ms, weft_store_page_t *page);
    void (*scan_cancel)(weft_store_scan_t *scan);
    /* Requests sent since the client connected (weft__store_requests). */
    uint64_t (*requests)(const weft_store_client_t *c);
} weft_store_ops_t;

/* The head of every backend's client struct (its first member). */
struct weft_store_client {
    const weft_store_ops_t *ops;
    const weft_logger_t *lg;
    char addr[128]; /* as given to connect, for messages */
};

/* The head of every backend's scan (its first member): the client it runs on. */
struct weft_store_scan {
    weft_store_client_t *c;
};

/* The address names an etcd cluster. */
#define WEFT__STORE_ETCD_SCHEME "etcd://"

/* With @p token, or (token NULL) with @p cred: a member's own secret (store.h). */
weft_status_t weft__store_native_connect(const char *hostport, const char *token,
                                         const weft_store_cred_t *cred, int member, bool launcher,
                                         int timeout_ms, const weft_logger_t *lg,
                                         weft_store_client_t **client);
weft_status_t weft__store_etcd_connect(const char *url, const char *token,
                                       const weft_store_cred_t *cred, int member, bool launcher,
                                       int timeout_ms, const weft_logger_t *lg,
                                       weft_store_client_t **client);

/* The store is lost to every connection sharing @p h; the first to call says why
 * ("<what>: <why>"), later calls return once the first has recorded it. */
void weft__store_health_lost(weft_store_health_t *h, const char *what, const char *why);

#endif
