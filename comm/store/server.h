/*
 * Inside the store server, shared by its files: server.c (the epoll loop, its timers, the
 * public calls), server_conn.c (connections: their input, output, opening and closing),
 * server_req.c (the map, the requests, the handshake and what each connection may write),
 * server_index.c (keys by directory, watchers by prefix), server_scan.c (SCANs: their
 * waits and their pages), server_quota.c (each member's share of the store's memory) and
 * server_epochs.c (what members may do to the agreement keys of a group's epochs).
 * Everything here runs with the server's mutex held.
 */
#ifndef WEFT_STORE_SERVER_H
#define WEFT_STORE_SERVER_H

#include <pthread.h>

#include "comm/store/proto.h"

#define ENTRY_OVERHEAD 64 /* bytes charged per key (and lease) besides its data */
/* A handshake this old may give its slot in the pool to a newcomer (server_conn.c). */
#define WEFT__STORE_UNAUTH_STALE_MS 250

typedef struct store_dir store_dir_t;

typedef struct store_entry {
    struct store_entry *next; /* in its bucket of the map */
    struct store_entry *dir_next, **dir_pprev;
    store_dir_t *dir; /* server_index.c */
    uint8_t *val;
    size_t vlen, klen;
    int64_t owner; /* member id charged for it (server_quota.c); -1: nobody's share */
    uint32_t *counted; /* under a decision's count: the members that counted themselves */
    uint32_t ncounted;
    bool deletable; /* an agreement key its epoch's finish lets members delete */
    char key[]; /* klen bytes and a NUL */
} store_entry_t;

/* A member's share of the store's memory in use (server_quota.c). */
typedef struct store_share {
    uint32_t id;
    bool used;
    size_t bytes;
} store_share_t;

/* The keys of one directory: the part of a key up to and including its last '/'. */
struct store_dir {
    store_dir_t *next; /* in its bucket of s->dirs */
    store_entry_t *entries;
    size_t nlen;
    char name[]; /* nlen bytes and a NUL */
};

typedef struct store_conn store_conn_t;
typedef struct store_scan_group store_scan_group_t;

/*
 * A SCAN not answered yet: parked in its group until enough keys are under its prefix (or
 * its deadline passes), then due: on the server's queue of pages to build, which are built
 * while the output queued to all connections has room (server_scan.c).
 */
typedef struct store_scan {
    struct store_scan *prev, *next; /* in its group (by min_count), or on s->due */
    struct store_scan *conn_next;   /* in its connection's list */
    store_scan_group_t *group;      /* NULL once due */
    store_conn_t *conn;
    uint32_t id; /* of the SCAN, for its RESP */
    uint32_t min_count, max_bytes;
    uint64_t deadline_ms;
    size_t plen, alen;
    char text[]; /* the prefix and a NUL, the key to resume after and a NUL */
} store_scan_t;

/* The parked SCANs of one prefix, and how many keys are under it now. */
struct store_scan_group {
    store_scan_group_t *next;
    store_scan_t *head, *tail; /* by min_count, smallest first */
    size_t count;
    size_t plen;
    char prefix[]; /* plen bytes and a NUL */
};

/* The connections that watch one prefix. */
typedef struct store_watch_group {
    struct store_watch_group *next;
    store_conn_t *conns; /* linked by watch_next */
    size_t plen;
    char prefix[]; /* plen bytes and a NUL */
} store_watch_group_t;

typedef enum { CONN_AUTH, CONN_READY } conn_state_t;

/* A GET waiting for its key to be set: in a bucket of the server's table of waits (by
 * key) and in its connection's list. */
typedef struct store_wait {
    struct store_wait *next, **pprev; /* in its bucket */
    struct store_wait *conn_next;
    store_conn_t *conn;
    uint32_t id; /* of the GET, for its RESP */
    uint64_t deadline_ms;
    size_t klen;
    char key[]; /* klen bytes and a NUL */
} store_wait_t;

struct store_conn {
    int fd;
    size_t slot; /* in s->conns */
    conn_state_t state;
    bool dead;    /* close at the end of this loop turn (weft__store_srv_kill) */
    bool closing; /* close once the output is flushed */
    bool touched; /* on s->touched: flush, re-arm or reap it at the end of the turn */
    store_conn_t *touch_next;
    uint32_t ev; /* epoll events registered */
    char peer[64];
    char host[64]; /* the unit of the per-address cap: weft__store_srv_addr_unit() */
    uint64_t opened_ms;
    store_conn_t *unauth_prev, *unauth_next; /* s->unauth, oldest first, while CONN_AUTH */
    uint8_t nonce[WEFT__STORE_NONCE_LEN];
    /* Whom the connection speaks for, and its session (proto.h) once authenticated. */
    weft_store_role_t role;
    uint32_t id;
    bool sealed;
    weft_store_dir_t rx, tx;
    uint64_t deadline_ms; /* of the authentication */
    uint8_t hdr[WEFT__STORE_HDR_LEN];
    size_t hdr_fill;
    bool in_body;
    weft_store_msg_t in_type;
    uint32_t in_id; /* of the request being served */
    uint32_t in_len;
    uint8_t *in;
    size_t in_fill, in_cap;
    weft_store_buf_t out;
    size_t out_off;
    store_wait_t *waits; /* its GETs waiting for their keys */
    store_scan_t *scans; /* its SCANs not answered yet */
    store_scan_t *parked; /* of them, the one waiting for its count; NULL if none */
    unsigned nwaits;      /* GETs and SCANs */
    /* The group of the prefix it watches, NULL if none. */
    store_watch_group_t *wgroup;
    store_conn_t *watch_prev, *watch_next;
    /* Lease: set lease_key = lease_val when this connection drops or is not renewed. */
    char *lease_key;
    uint8_t *lease_val;
    size_t lease_klen, lease_vlen;
    uint64_t lease_deadline_ms;
    uint32_t lease_ttl_ms; /* of its last renewal: renewed at deadline - ttl */
};

struct weft_store_server {
    pthread_t thread;
    pthread_mutex_t lock;
    bool stop;
    int epfd, listen_fd, wake_rd, wake_wr;
    bool listening; /* the listener is armed in epoll */
    int port;
    char *token;
    const weft_logger_t *lg;
    void (*on_lapse)(void *arg, const char *key);
    void *on_lapse_arg;
    store_entry_t **buckets;
    size_t nbuckets, nentries, data_bytes;
    struct {
        store_share_t *v; /* open addressing by member id */
        size_t cap, n;
    } shares;
    int64_t writer; /* member id the request being served writes for; -1: nobody's share */
    store_conn_t **conns; /* every connection, each at its slot */
    size_t nconns, cap_conns;
    size_t nauth;   /* authenticated ones, not dead */
    size_t nunauth; /* on s->unauth */
    store_conn_t *unauth_head, *unauth_tail;
    store_watch_group_t *watch_groups;
    store_dir_t **dirs; /* the map's keys by directory */
    size_t ndir_buckets, ndirs;
    store_conn_t *touched;
    store_wait_t **waits; /* by key */
    size_t nwait_buckets, nwaits;
    uint64_t waits_due_ms; /* no wait (GET or SCAN) expires before this */
    store_scan_group_t *scan_groups;
    store_scan_t *due_head, *due_tail; /* SCANs whose page is to be built */
    uint64_t keys_gen; /* counts keys created and removed: the sorted view below is stale
                        * once it has moved */
    struct {
        const store_entry_t **v; /* the keys under prefix, in byte order */
        size_t n, cap;
        uint64_t gen;
        bool valid;
        size_t plen;
        char prefix[WEFT_STORE_MAX_KEY + 1];
    } sorted;
    weft_store_buf_t page;  /* where a page is built */
    bool scans_more;        /* due SCANs may be served: the next turn comes at once */
    uint64_t leases_due_ms; /* no lease lapses before this */
    size_t queued; /* output bytes queued to all connections */
    uint64_t accept_resume_ms;
    uint64_t busy_logged_ms; /* last warning of refused or dropped connections */
    /* Fake connections (weft__store_server_feed): the bytes they receive next. */
    const uint8_t *feed;
    size_t feed_len;
    bool feed_eof;
};

/* ---- server_conn.c ---- */

/* Output queued to @p c and not yet sent. */
size_t weft__store_srv_pending(const store_conn_t *c);
/* Sends what it can of @p c's output without blocking. */
void weft__store_srv_flush(weft_store_server_t *s, store_conn_t *c);
/* Whether @p c reads requests now (not closing, its output not piled up). */
bool weft__store_srv_wants_input(const store_conn_t *c);
/* Reads and serves up to a turn's share of @p c's frames. */
void weft__store_srv_read(weft_store_server_t *s, store_conn_t *c);
/* A new connection (fd < 0: a fake one): admitted to the pool of those authenticating
 * and greeted, or dropped (the pool or its address's share is full). */
void weft__store_srv_open(weft_store_server_t *s, int fd, const char *peer, const char *host);
void weft__store_srv_free(weft_store_server_t *s, store_conn_t *c);
/* Whether a warning about refused or dropped connections may be logged now: once a
 * second, since the refused try again and a flood would fill the log. */
bool weft__store_srv_busy_log_due(weft_store_server_t *s);
/* Whether a connection may be accepted now (the pool of those authenticating has room). */
bool weft__store_srv_accept_ready(const weft_store_server_t *s, uint64_t now);

/* Queue the RESP to the request being served, to a request of id @p id, or a watch
 * EVENT of @p e, to @p c (sealed once it has authenticated). */
void weft__store_srv_resp(weft_store_server_t *s, store_conn_t *c, weft_status_t status,
                          const void *data, size_t len);
void weft__store_srv_resp_id(weft_store_server_t *s, store_conn_t *c, uint32_t id,
                             weft_status_t status, const void *data, size_t len);
void weft__store_srv_event(weft_store_server_t *s, store_conn_t *c, const store_entry_t *e);
/* Drops the connection's lease, and its charge on the store's memory. */
void weft__store_srv_lease_clear(weft_store_server_t *s, store_conn_t *c);
/* The connection closes at the end of this turn. */
void weft__store_srv_kill(weft_store_server_t *s, store_conn_t *c);
/* The connection's output, interest or life changed: see to it at the end of the turn. */
void weft__store_srv_touch(weft_store_server_t *s, store_conn_t *c);
/* @p c leaves the pool of connections still authenticating for the authenticated. */
void weft__store_srv_authenticated(weft_store_server_t *s, store_conn_t *c);
/* Arms a lease's timer. */
void weft__store_srv_lease_armed(weft_store_server_t *s, const store_conn_t *c);

/* ---- server_req.c ---- */

/* Where @p key is, or would go, in the map. */
store_entry_t **weft__store_srv_slot(weft_store_server_t *s, const char *key, size_t klen);
void weft__store_srv_remove(weft_store_server_t *s, store_entry_t **slot);
/* Sets a key and tells those waiting for it; WEFT_ERR_NO_MEMORY past the store's cap. */
weft_status_t weft__store_srv_put(weft_store_server_t *s, const char *key, size_t klen,
                                  const void *val, size_t vlen);
/* The AUTH frame in c->in (proto.h): check it, prove ours, key the session. */
void weft__store_srv_auth(weft_store_server_t *s, store_conn_t *c);
/* The request frame in c->in: authorise it, apply it, answer it. */
void weft__store_srv_request(weft_store_server_t *s, store_conn_t *c);
/* Waits: a GET parks on its key; answered by a put, expired by the timers, dropped with
 * its connection. */
void weft__store_srv_wait_free(weft_store_server_t *s, store_wait_t *w);
/* Expires the waits due by @p now; the next deadline of a wait (UINT64_MAX: none). */
uint64_t weft__store_srv_waits_expire(weft_store_server_t *s, uint64_t now);

/* ---- server_index.c ---- */

/* Files a new key of the map under its directory, and takes it out. */
weft_status_t weft__store_srv_dir_link(weft_store_server_t *s, store_entry_t *e);
void weft__store_srv_dir_unlink(weft_store_server_t *s, store_entry_t *e);
/* Calls @p fn on every key that begins with @p prefix (walks directories, not keys). */
void weft__store_srv_dir_scan(weft_store_server_t *s, const char *prefix, size_t plen,
                              void (*fn)(weft_store_server_t *s, const store_entry_t *e, void *arg),
                              void *arg);
void weft__store_srv_dirs_free(weft_store_server_t *s);
/* @p c watches @p prefix (instead of what it watched). */
weft_status_t weft__store_srv_watch(weft_store_server_t *s, store_conn_t *c, const char *prefix,
                                    size_t plen);
/* Stops @p c watching. */
void weft__store_srv_unwatch(weft_store_server_t *s, store_conn_t *c);
/* Sends the watchers of @p e's prefixes its event. */
void weft__store_srv_notify(weft_store_server_t *s, const store_entry_t *e);

/* ---- server_scan.c ---- */

/* The SCAN in c->in, its prefix and the rest of its body: parked, queued or answered.
 * False when its arguments are malformed (the caller closes the connection). */
bool weft__store_srv_scan(weft_store_server_t *s, store_conn_t *c, const char *prefix, size_t plen,
                          const uint8_t *rest, size_t rlen);
/* A key was created, or is about to be removed: the counts of the parked SCANs whose prefix
 * it has, and the sorted view of keys. */
void weft__store_srv_scan_key_added(weft_store_server_t *s, const store_entry_t *e);
void weft__store_srv_scan_key_removed(weft_store_server_t *s, const store_entry_t *e);
/* Builds the pages of due SCANs while the output queued to all connections is below
 * WEFT__STORE_SCAN_QUEUED; those of a connection whose own output piles up wait. Whether
 * one was answered. */
bool weft__store_srv_scans_serve(weft_store_server_t *s);
/* Answers the parked SCANs due by @p now with WEFT_ERR_TIMEOUT; the next deadline of one
 * (UINT64_MAX: none). */
uint64_t weft__store_srv_scans_expire(weft_store_server_t *s, uint64_t now);
/* Drops every SCAN of @p c (it closes). */
void weft__store_srv_scans_drop(weft_store_server_t *s, store_conn_t *c);
/* Frees the sorted view and the page buffer (the server stops; its connections are gone). */
void weft__store_srv_scans_free(weft_store_server_t *s);

/* ---- the agreement keys of groups' epochs (server_epochs.c) ---- */
/* Why a member may not make this write of an agreement key (g/<gid>/<e>/next|applied,
 * g/<gid>/join|admit/<n>), or NULL; *agreement: whether the key is one. A member deletes
 * one only once its epoch finished, and counts itself under a decision (an add of 1 to
 * its "applied" key) once, if the decision lists it. */
const char *weft__store_srv_epoch_refusal(weft_store_server_t *s, const store_conn_t *c,
                                          weft_store_msg_t type, const char *key, size_t klen,
                                          const uint8_t *rest, size_t rlen, bool *agreement);
/* After an add of @p c to @p key, now @p count: who counted, and the epoch's finish once
 * every member of its decision did. */
void weft__store_srv_epoch_added(weft_store_server_t *s, const store_conn_t *c, const char *key,
                                 size_t klen, int64_t count);

/* The unit of the per-address cap on handshakes for a peer at @p host (server_conn.c). */
void weft__store_srv_addr_unit(const char *host, char *out, size_t len);

/* ---- members' shares of the store (server_quota.c) ---- */
/* What a connection's writes are charged to: its member id (joiners without one share
 * one), or -1 for a launcher. */
static inline int64_t weft__store_srv_owner(const store_conn_t *c)
{
    return c->role == WEFT__STORE_ROLE_MEMBER ? (int64_t)c->id : -1;
}
size_t weft__store_srv_share_of(const weft_store_server_t *s, int64_t owner);
/* Whether @p owner may hold @p take bytes more once @p give_back of its own are freed. */
bool weft__store_srv_share_fits(const weft_store_server_t *s, int64_t owner, size_t give_back,
                                size_t take);
/* Charge (false: no memory for the table) or refund @p owner; -1 is charged nothing. */
bool weft__store_srv_share_add(weft_store_server_t *s, int64_t owner, size_t bytes);
void weft__store_srv_share_sub(weft_store_server_t *s, int64_t owner, size_t bytes);
void weft__store_srv_shares_free(weft_store_server_t *s);

#endif
