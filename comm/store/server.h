/*
 * Inside the store server, shared by its two files: server.c (the poll loop, connections,
 * their input and output, the public calls) and server_req.c (the map, the requests, the
 * handshake and what each connection may write). Everything here runs with the server's
 * mutex held.
 */
#ifndef WEFT_STORE_SERVER_H
#define WEFT_STORE_SERVER_H

#include <poll.h>
#include <pthread.h>

#include "comm/store/proto.h"

#define ENTRY_OVERHEAD 64 /* bytes charged per key (and lease) besides its data */

typedef struct store_entry {
    struct store_entry *next;
    uint8_t *val;
    size_t vlen, klen;
    char key[]; /* klen bytes and a NUL */
} store_entry_t;

typedef enum { CONN_AUTH, CONN_READY, CONN_WATCH } conn_state_t;

typedef struct store_conn {
    int fd;
    conn_state_t state;
    bool dead;    /* close at the end of this loop turn */
    bool closing; /* close once the output is flushed */
    bool parked;  /* a GET waits for key[] to be set */
    char peer[64];
    char host[64]; /* the peer's address without its port: the unit of the per-address cap */
    uint64_t opened_ms;
    uint8_t nonce[WEFT__STORE_NONCE_LEN];
    /* Whom the connection speaks for, and its session (proto.h) once authenticated. */
    weft_store_role_t role;
    uint32_t id;
    bool sealed;
    weft_store_dir_t rx, tx;
    uint64_t deadline_ms; /* of the authentication, or of the parked GET */
    uint8_t hdr[WEFT__STORE_HDR_LEN];
    size_t hdr_fill;
    bool in_body;
    weft_store_msg_t in_type;
    uint32_t in_len;
    uint8_t *in;
    size_t in_fill, in_cap;
    weft_store_buf_t out;
    size_t out_off;
    size_t klen;
    char key[WEFT_STORE_MAX_KEY + 1]; /* parked GET's key, or the watch prefix */
    /* Lease: set lease_key = lease_val when this connection drops or is not renewed. */
    char *lease_key;
    uint8_t *lease_val;
    size_t lease_klen, lease_vlen;
    uint64_t lease_deadline_ms;
} store_conn_t;

struct weft_store_server {
    pthread_t thread;
    pthread_mutex_t lock;
    bool stop;
    int listen_fd, wake_rd, wake_wr;
    int port;
    char *token;
    const weft_logger_t *lg;
    void (*on_lapse)(void *arg, const char *key);
    void *on_lapse_arg;
    store_entry_t **buckets;
    size_t nbuckets, nentries, data_bytes;
    store_conn_t *conns[WEFT__STORE_MAX_CONNS + WEFT__STORE_MAX_UNAUTH];
    size_t nconns;
    size_t queued; /* output bytes queued to all connections */
    struct pollfd pfds[WEFT__STORE_MAX_CONNS + WEFT__STORE_MAX_UNAUTH + 2];
    uint64_t accept_resume_ms;
    uint64_t busy_logged_ms; /* last warning that the unauthenticated pool was full */
    /* Fake connections (weft__store_server_feed): the bytes they receive next. */
    const uint8_t *feed;
    size_t feed_len;
    bool feed_eof;
};

/* ---- server.c ---- */

/* Queue a RESP, or a watch EVENT of @p e, to @p c (sealed once it has authenticated). */
void weft__store_srv_resp(weft_store_server_t *s, store_conn_t *c, weft_status_t status,
                          const void *data, size_t len);
void weft__store_srv_event(weft_store_server_t *s, store_conn_t *c, const store_entry_t *e);
/* Drops the connection's lease, and its charge on the store's memory. */
void weft__store_srv_lease_clear(weft_store_server_t *s, store_conn_t *c);

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

#endif
