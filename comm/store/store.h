/*
 * The rendezvous store: a small TCP key-value service (set / get-wait / add / delete /
 * watch-a-prefix / scan-a-prefix). The server runs in weftrun (or any process) on its own thread;
 * ranks talk to it through the client. Every connection starts with a challenge-response in which
 * each side proves it holds the job token (HMAC-SHA256 keyed by the token), and every later frame
 * carries a MAC under a key of that session (comm/store/proto.h).
 *
 * Frames are length-prefixed with a hard cap (WEFT_STORE_MAX_FRAME); a malformed,
 * oversized or truncated frame closes that connection with a logged error.
 */
#ifndef WEFT_STORE_H
#define WEFT_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/ctx/log.h"
#include "weft/status.h"

#define WEFT_STORE_MAX_FRAME (1u << 20) /* bytes, header excluded */
#define WEFT_STORE_MAX_KEY 256

/* ---- client ---- */
typedef struct weft_store_client weft_store_client_t;

/*
 * What the connections of one process know about their store. Connections that share
 * one (weft__store_share_health) fail together: once one of them loses the store (it
 * closed the connection, a socket call failed, or it did not answer in time), every
 * later call on any of them fails at once with WEFT_ERR_IO, without touching the
 * network. Such connections do not log the loss themselves: their owner reports it once
 * (weft__store_claim_report). Thread-safe; zero-initialised it means "reachable".
 */
typedef struct weft_store_health {
    _Atomic uint64_t lost_ns; /* CLOCK_MONOTONIC time of the loss; 0 while reachable */
    _Atomic int recording;    /* 1 once a connection has begun to record the loss */
    _Atomic int reported;     /* 1 once a caller has claimed the report */
    char addr[128];           /* the store's address, from the first connection shared */
    char cause[192];          /* what failed, valid once lost_ns is nonzero */
} weft_store_health_t;

/* From now on @p c fails together with the other connections that share @p h. */
void weft__store_share_health(weft_store_client_t *c, weft_store_health_t *h);
/* CLOCK_MONOTONIC time (ns) at which the store was lost, or 0 while it is reachable. */
uint64_t weft__store_lost_ns(const weft_store_health_t *h);
/* What failed ("reading the answer failed: the store closed the connection"); "" while
 * the store is reachable. */
const char *weft__store_lost_cause(const weft_store_health_t *h);
/* True for exactly one caller, and only once the store is lost: that caller logs it. */
bool weft__store_claim_report(weft_store_health_t *h);

/* @p addr names an etcd cluster ("etcd://h1:2379,..."), not weft's own store. */
bool weft__store_addr_is_etcd(const char *addr);

/*
 * hostport: "host:port". Retries connecting until timeout_ms (the server may start late,
 * or be busy). The store must prove that it holds @p token too, or the call fails with
 * WEFT_ERR_AUTH and a logged error naming the address. This connection speaks as a
 * launcher, which the store lets write any key (docs/store-protocol.md, "Sessions").
 */
weft_status_t weft__store_connect(const char *hostport, const char *token, int timeout_ms,
                                  const weft_logger_t *lg, weft_store_client_t **client);
/* The same, speaking for member @p member (-1: a joiner whose id is not known yet): the
 * store refuses its writes to what other members own, and leases but on its own notice. */
weft_status_t weft__store_connect_member(const char *hostport, const char *token, int member,
                                         int timeout_ms, const weft_logger_t *lg,
                                         weft_store_client_t **client);
/*
 * What a rank that does not hold the job token proves: its own member secret (the session
 * secret of its id, weft__store_session_secret) and the job's data key (weft__store_data_key:
 * the etcd backend's root of keys, and every key derived for the job's data). weftrun hands
 * a rank these, never the token (docs/store-protocol.md, "Sessions").
 */
typedef struct weft_store_cred {
    uint32_t id;
    uint8_t secret[32];
    uint8_t data_key[32];
} weft_store_cred_t;
/* weft__store_connect_member for a rank holding @p cred instead of the token: it speaks for
 * cred->id only, and cannot speak as a launcher or another member. */
weft_status_t weft__store_connect_cred(const char *hostport, const weft_store_cred_t *cred,
                                       int timeout_ms, const weft_logger_t *lg,
                                       weft_store_client_t **client);
/*
 * What a rank that holds no token is handed, as one line: "weft-member-v1 <id> <member
 * secret> <data key>\n", both 64 lowercase hex digits (weftrun's secret pipe, the PMIx
 * bootstrap's sealed message; comm/ctx/bootstrap.h parses it). Returns its length, or -1
 * (line cleared) for a negative id or a failure of the crypto library.
 */
#define WEFT__STORE_MEMBER_LINE 200
int weft__store_member_line(const char *token, int id, char line[WEFT__STORE_MEMBER_LINE]);
/* The job's data key from its token: HMAC-SHA256(token, "weft-data-v1"). */
weft_status_t weft__store_data_key(const char *token, uint8_t out[32]);
/* The same in 64 lowercase hex digits: the key of the job's names in /dev/shm
 * (weft__shm_job_id), for the ranks and weftrun alike. */
weft_status_t weft__store_data_hex(const char *token, char out[65]);
void weft__store_close(weft_store_client_t *c);
weft_status_t weft__store_set(weft_store_client_t *c, const char *key, const void *val,
                              size_t len);
/* Waits until the key exists or timeout_ms passes (WEFT_ERR_TIMEOUT). *val is malloc'ed. */
weft_status_t weft__store_get(weft_store_client_t *c, const char *key, int timeout_ms,
                              void **val, size_t *len);
/* weft__store_get of a decimal integer; WEFT_ERR_PROTOCOL if the value is not one. */
weft_status_t weft__store_get_i64(weft_store_client_t *c, const char *key, int timeout_ms,
                                  int64_t *out);
/* Atomic add to a decimal counter (created at 0); *result is the new value (may be NULL). */
weft_status_t weft__store_add(weft_store_client_t *c, const char *key, int64_t delta,
                              int64_t *result);
weft_status_t weft__store_delete(weft_store_client_t *c, const char *key);
/*
 * Create @p key with @p val unless it exists. Either way *winner (malloc'ed) receives the
 * value the key holds afterwards, so every caller learns the one value that won: this is
 * how members agree on a group edit. *created (may be NULL) says whether ours won.
 */
weft_status_t weft__store_set_nx(weft_store_client_t *c, const char *key, const void *val,
                                 size_t len, void **winner, size_t *winner_len, int *created);
/*
 * A dead man's switch held by this connection: unless renewed within @p ttl_ms (by
 * calling again), or if the connection drops (the process died), the store sets
 * @p key = @p val, which watchers of its prefix learn at once. ttl_ms = 0 disarms it
 * (call that before closing a connection on purpose).
 */
weft_status_t weft__store_lease(weft_store_client_t *c, const char *key, const void *val,
                                size_t len, uint32_t ttl_ms);
/*
 * Turn this connection into a watch on @p prefix: every existing key with the prefix,
 * and every later set of one, is delivered as an event. After this only
 * weft__store_next_event() and weft__store_close() may be used on @p c. A set's event
 * is due to every watcher from the moment of the set: deleting the key afterwards does
 * not withdraw it (comm/group/edit.c deletes revocation notices right after setting them).
 */
weft_status_t weft__store_watch(weft_store_client_t *c, const char *prefix);
/*
 * Next watch event, waiting at most timeout_ms (0: poll). WEFT_INPROGRESS when none.
 * *key and *val are malloc'ed; the caller frees them.
 */
weft_status_t weft__store_next_event(weft_store_client_t *c, int timeout_ms, char **key,
                                     void **val, size_t *len);

/*
 * Scans: every key under a prefix and its value, in pages, in byte order of the keys (the
 * order and the paging of etcd's range requests, which a store on etcd would use). A scan
 * may first wait until at least a number of keys are under the prefix: weft_init reads
 * the addresses of all members with one request (docs/store-protocol.md, "Scans").
 */
typedef struct weft_store_scan_args {
    const char *prefix; /* "" scans every key */
    const char *after;  /* list the keys after this one; NULL or "": from the first */
    uint32_t min_count; /* wait until this many keys are under the prefix (0: none) */
    int timeout_ms;     /* for them, then WEFT_ERR_TIMEOUT */
    uint32_t max_bytes; /* of a page's entries (6 bytes each besides key and value); 0:
                         * the most a frame holds. A page holds at least one entry. */
} weft_store_scan_args_t;

/* One key of a page and its value; both NUL-terminated, the value @p len bytes before. */
typedef struct weft_store_kv {
    const char *key;
    const void *val;
    size_t len;
} weft_store_kv_t;

/* A page of a scan: @p n keys in byte order; @p more when keys under the prefix follow the
 * last of them (scan again after it). weft__store_page_free releases it. */
typedef struct weft_store_page {
    weft_store_kv_t *kv;
    size_t n;
    bool more;
    void *mem;
} weft_store_page_t;

void weft__store_page_free(weft_store_page_t *page);

/* A scan under way (weft__store_scan_start): finished by weft__store_scan_wait or
 * weft__store_scan_cancel, by one thread. */
typedef struct weft_store_scan weft_store_scan_t;

/*
 * Sends the scan and returns at once; its answer is collected with weft__store_scan_wait.
 * A connection has one scan waiting for its min_count in the store at most: the store
 * answers an earlier one WEFT_ERR_TIMEOUT when a later one waits. Returns WEFT_OK,
 * WEFT_ERR_INVALID_ARG (a prefix or resume key longer than WEFT_STORE_MAX_KEY, a negative
 * timeout), WEFT_ERR_NO_MEMORY, or WEFT_ERR_IO (the store is lost); *scan is set on
 * WEFT_OK only.
 */
weft_status_t weft__store_scan_start(weft_store_client_t *c, const weft_store_scan_args_t *args,
                                     weft_store_scan_t **scan);
/*
 * Waits up to @p wait_ms for the answer of @p scan. WEFT_INPROGRESS: not come yet, call
 * again (or cancel). Anything else finishes the scan, which is freed: WEFT_OK with *page
 * filled, WEFT_ERR_TIMEOUT (fewer than min_count keys within the timeout),
 * WEFT_ERR_NO_MEMORY (the store's memory, or a value too large for a page: read that key
 * with weft__store_get), or the errors of a lost or broken connection (WEFT_ERR_IO,
 * WEFT_ERR_PROTOCOL for a malformed page). The store's own wait is not cut short by this
 * one: the answer comes at the latest WEFT__STORE_IO_TIMEOUT_MS after the scan's timeout.
 */
weft_status_t weft__store_scan_wait(weft_store_scan_t *scan, int wait_ms, weft_store_page_t *page);
/* Gives up on @p scan and frees it; its answer, if it comes, is dropped. */
void weft__store_scan_cancel(weft_store_scan_t *scan);
/* weft__store_scan_start, then weft__store_scan_wait until the answer comes. */
weft_status_t weft__store_scan(weft_store_client_t *c, const weft_store_scan_args_t *args,
                               weft_store_page_t *page);
/* Requests sent on @p c since it connected, the handshake not counted (0 for NULL):
 * one per set, get, add, delete, set_nx, lease, watch and scan (one per page); events
 * and answers are not requests. Thread-safe. */
uint64_t weft__store_requests(const weft_store_client_t *c);

int weft__store_fd(const weft_store_client_t *c);
/*
 * For an exit handler, before OpenSSL's own runs: from now on no thread seals or checks a
 * frame on @p c (every call fails with WEFT_ERR_IO, logging nothing), and none is doing
 * so when this returns, unless one held a lock of @p c past @p deadline (CLOCK_REALTIME,
 * as pthread_mutex_timedlock takes it). The socket stays open: the kernel closes it when
 * the process ends, and a lease on it then fires as for any death.
 */
struct timespec;
void weft__store_fence(weft_store_client_t *c, const struct timespec *deadline);
/* Whether @p c was fenced (false for NULL). */
bool weft__store_fenced(weft_store_client_t *c);

/* ---- server ---- */
typedef struct weft_store_server weft_store_server_t;

typedef struct weft_store_server_params {
    size_t size;
    const char *bind_addr; /* NULL: "127.0.0.1" */
    int port;              /* 0: any free port */
    const char *token;     /* required, non-empty */
    const weft_logger_t *logger; /* may be NULL; must outlive the server */
    /*
     * May be NULL. Called when a lease lapses because its holder stopped renewing it
     * while its connection stayed open (a hung or stopped process), just before the
     * lease's value is published; not when the connection closes (the process is gone).
     * Runs on the server's thread with its lock held: it must not call the server and
     * should only note the key (write it to a pipe, say).
     */
    void (*on_lapse)(void *arg, const char *key);
    void *on_lapse_arg;
} weft_store_server_params_t;

/* Starts listening and serving on a thread of its own. */
weft_status_t weft__store_server_start(const weft_store_server_params_t *params,
                                       weft_store_server_t **server);
int weft__store_server_port(const weft_store_server_t *s);
/* Set a key from the hosting process (thread-safe); watchers are notified. */
weft_status_t weft__store_server_set(weft_store_server_t *s, const char *key, const void *val,
                                     size_t len);
/* Whether @p key is set (thread-safe). */
bool weft__store_server_has(weft_store_server_t *s, const char *key);
/* Connections that proved they hold the token and are still open (thread-safe). */
size_t weft__store_server_conns(weft_store_server_t *s);
void weft__store_server_stop(weft_store_server_t *s);

struct weft_store_buf; /* comm/store/proto.h */
/*
 * Fuzzing and tests: the server's frame reader and request handling without sockets or
 * thread. A fake server (stopped with weft__store_server_stop) holds fake connections,
 * numbered from 0; _fake_open greets one (HELLO, queued) and, when @p authenticated,
 * skips its challenge: it is then a connection whose frames carry no tags, so that
 * scripts reach the request path, speaking as a launcher (@p member < 0) or as member
 * @p member (the store's rules for members apply). Returns the number, or -1 when the
 * server is full.
 */
weft_status_t weft__store_server_fake(const char *token, const weft_logger_t *lg,
                                      weft_store_server_t **server);
int weft__store_server_fake_open(weft_store_server_t *s, bool authenticated, int member);
/*
 * Connection @p id receives the @p n bytes at @p p, then end of stream when @p eof: the
 * server reads them as from its socket (up to where it would stop reading: a parked GET,
 * a closed connection; *used says how many, may be NULL), answers, runs its timers and
 * closes what it would close. What the connection was sent since its last feed is
 * appended to @p out (may be NULL). False once the connection is closed (or unknown).
 */
bool weft__store_server_feed(weft_store_server_t *s, int id, const void *p, size_t n, bool eof,
                             struct weft_store_buf *out, size_t *used);

/* Random token of 32 hex characters from the OS entropy source. */
weft_status_t weft__store_make_token(char out[65]);

#endif
