/*
 * The client of weft's own store (the native backend of store.h, see backend.h). A
 * connection multiplexes: any number of threads may call it at once (the heartbeat
 * renews its lease while a member waits in a GET), and watch
 * events arrive between the answers. Each request carries an id the answer echoes
 * (proto.h). The socket is read by one thread at a time, whichever is waiting for an
 * answer or an event (leader and followers): it hands each frame to the request it
 * answers, or queues an event, and wakes the others; when its own answer has come, another
 * waiter takes over the reading. Every wait is bounded by a deadline. A failure in the
 * middle of an exchange leaves the byte stream out of step, so the client is then marked
 * broken and later calls fail with WEFT_ERR_IO. A scan is a request whose answer its caller
 * collects later (weft__store_scan_start, _wait), in slices if it likes, doing other work
 * between them (weft_init reads the failure notices), or gives up on: its answer is then
 * dropped like any other nobody waits for. Connections that share a health record
 * are broken together when one of them loses the store. At process exit a connection is
 * fenced (weft__store_fence) before OpenSSL's own exit handler runs: no frame is sealed
 * or checked on it after that, whichever thread still calls it.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/store/backend.h"
#include "comm/store/proto.h"
#include "util/clock.h"
#include "util/parse.h"

#define RBUF_MIN 65536

/* A request waiting for its answer. */
typedef struct store_call {
    struct store_call *next;
    uint32_t id;
    bool done;
    weft_status_t status; /* the store's answer */
    uint8_t *data;        /* its data (malloc'ed, NUL-terminated), dlen bytes */
    size_t dlen;
} store_call_t;

/* A watch event not yet taken. */
typedef struct store_event {
    struct store_event *next;
    char *key;
    uint8_t *val;
    size_t vlen;
} store_event_t;

typedef struct native_client {
    weft_store_client_t base; /* first: the ops table, logger and address */
    int fd;
    pthread_mutex_t wlock; /* sending: frames leave whole, in the order of their tags */
    pthread_mutex_t lock;  /* everything below; the reader drops it while in poll/recv */
    pthread_cond_t cv;     /* an answer or event came, or the reader left */
    bool reading;          /* a thread is reading the socket */
    bool broken;
    bool watching;
    int err;                     /* errno of the last failed socket call; 0: the server closed */
    weft_store_health_t *health; /* shared with the process's other connections, or NULL */
    uint8_t *rbuf;               /* received bytes not yet consumed (the reader's) */
    size_t rlen, rcap;
    size_t frame; /* bytes of the frame last returned by read_frame() */
    weft_store_buf_t wbuf;
    uint32_t next_id;
    store_call_t *calls;
    store_event_t *ev_head, *ev_tail;
    /* After the handshake every frame carries a tag (proto.h): ours, and the store's. */
    bool sealed;
    bool forged; /* a frame from the store failed its tag check */
    weft_store_dir_t tx, rx;
    /* The process is exiting (weft__store_fence): OpenSSL may be torn down at any moment,
     * so no tag is made or checked any more. Set with both locks held where they could be
     * taken; read with one of them: seals under wlock, tag checks under lock. */
    atomic_bool fenced;
    _Atomic uint64_t requests; /* sent (weft__store_requests) */
} native_client_t;

/* A scan under way: its call stays on the connection's list until it is finished. */
typedef struct native_scan {
    weft_store_scan_t base; /* first: the client it was sent on */
    store_call_t call;
    uint64_t give_up_ms; /* the store's wait, plus WEFT__STORE_IO_TIMEOUT_MS */
    size_t plen, alen;
    char text[]; /* the prefix and a NUL, the key to resume after and a NUL: the page's
                  * keys are checked against them */
} native_scan_t;

/* Waits for @p events; WEFT_INPROGRESS once the deadline has passed. */
static weft_status_t wait_fd(native_client_t *c, short events, uint64_t deadline)
{
    for (;;) {
        uint64_t now = weft__now_ms();
        if (now >= deadline) {
            return WEFT_INPROGRESS;
        }
        uint64_t left = deadline - now;
        struct pollfd p = {.fd = c->fd, .events = events};
        int n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (n > 0) {
            return WEFT_OK; /* errors and hang-ups surface in the recv/send that follows */
        }
        if (n < 0 && errno != EINTR) {
            c->err = errno;
            return WEFT_ERR_IO;
        }
    }
}

static weft_status_t send_all(native_client_t *c, const uint8_t *p, size_t len, uint64_t deadline)
{
    while (len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) {
            p += n;
            len -= (size_t)n;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            weft_status_t st = wait_fd(c, POLLOUT, deadline);
            if (st != WEFT_OK) {
                return st == WEFT_INPROGRESS ? WEFT_ERR_TIMEOUT : st;
            }
        } else if (errno != EINTR) {
            c->err = errno;
            return WEFT_ERR_IO;
        }
    }
    return WEFT_OK;
}

/* One nonblocking recv() into rbuf, making room for @p need bytes in all. */
static weft_status_t recv_some(native_client_t *c, size_t need)
{
    need = need > RBUF_MIN ? need : RBUF_MIN;
    if (c->rcap < need) {
        uint8_t *b = realloc(c->rbuf, need);
        if (b == NULL) {
            return WEFT_ERR_NO_MEMORY;
        }
        c->rbuf = b;
        c->rcap = need;
    }
    ssize_t n;
    do {
        n = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        c->rlen += (size_t)n;
        return WEFT_OK;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return WEFT_INPROGRESS;
    }
    c->err = n == 0 ? 0 : errno;
    return WEFT_ERR_IO;
}

/* Drops the frame last returned by frame_ready() or read_frame(). */
static void consume(native_client_t *c)
{
    memmove(c->rbuf, c->rbuf + c->frame, c->rlen - c->frame);
    c->rlen -= c->frame;
    c->frame = 0;
}

/* Bytes rbuf must hold for the frame at its start: its header, then all of it. */
static size_t frame_need(const native_client_t *c)
{
    uint32_t len;
    weft_store_msg_t type;
    if (c->rlen < WEFT__STORE_HDR_LEN || weft__store_hdr_decode(c->rbuf, &len, &type) != WEFT_OK) {
        return WEFT__STORE_HDR_LEN;
    }
    return WEFT__STORE_HDR_LEN + len + (c->sealed ? WEFT__STORE_TAG_LEN : 0);
}

/*
 * The whole frame at the start of rbuf, its tag checked; *p points into rbuf until
 * consume(). WEFT_INPROGRESS while it has not all arrived.
 */
static weft_status_t frame_ready(native_client_t *c, weft_store_msg_t *type, const uint8_t **p,
                                 uint32_t *len)
{
    if (c->rlen < WEFT__STORE_HDR_LEN || atomic_load(&c->fenced)) {
        return WEFT_INPROGRESS;
    }
    if (weft__store_hdr_decode(c->rbuf, len, type) != WEFT_OK) {
        return WEFT_ERR_PROTOCOL;
    }
    size_t need = frame_need(c);
    if (c->rlen < need) {
        return WEFT_INPROGRESS;
    }
    if (c->sealed && !weft__store_tag_check(&c->rx, c->rbuf, c->rbuf + WEFT__STORE_HDR_LEN, *len,
                                            c->rbuf + need - WEFT__STORE_TAG_LEN)) {
        c->forged = true;
        return WEFT_ERR_PROTOCOL;
    }
    *p = c->rbuf + WEFT__STORE_HDR_LEN;
    c->frame = need;
    return WEFT_OK;
}

/* Receives what has arrived, waiting for some until the deadline (WEFT_INPROGRESS once
 * it has passed; a deadline already passed: one nonblocking try). */
static weft_status_t recv_wait(native_client_t *c, uint64_t deadline)
{
    for (;;) {
        weft_status_t st = recv_some(c, frame_need(c));
        if (st != WEFT_INPROGRESS) {
            return st;
        }
        st = wait_fd(c, POLLIN, deadline);
        if (st != WEFT_OK) {
            return st;
        }
    }
}

/* The next whole frame, read without other threads (the handshake). */
static weft_status_t read_frame(native_client_t *c, uint64_t deadline, weft_store_msg_t *type,
                                const uint8_t **p, uint32_t *len)
{
    for (;;) {
        weft_status_t st = frame_ready(c, type, p, len);
        if (st != WEFT_INPROGRESS) {
            return st;
        }
        st = recv_wait(c, deadline);
        if (st != WEFT_OK) {
            return st;
        }
    }
}

/* A malloc'ed copy of @p n bytes and a NUL (values are often text). */
static uint8_t *copy_z(const void *p, size_t n)
{
    uint8_t *q = malloc(n + 1);
    if (q != NULL) {
        memcpy(q, p, n);
        q[n] = '\0';
    }
    return q;
}

/* Hands each whole frame received to the call it answers, or queues it as an event. An
 * answer nobody waits for any more (its caller gave up) is dropped. Lock held. */
static weft_status_t dispatch(native_client_t *c)
{
    for (;;) {
        weft_store_msg_t type;
        const uint8_t *p, *rest, *data;
        const char *k;
        uint32_t len;
        size_t klen, vlen;
        weft_status_t st = frame_ready(c, &type, &p, &len), status;
        if (st != WEFT_OK) {
            return st == WEFT_INPROGRESS ? WEFT_OK : st;
        }
        if (type == WEFT__STORE_EVENT) {
            if (weft__store_kv_decode(p, len, &k, &klen, &rest, &vlen) != WEFT_OK) {
                return WEFT_ERR_PROTOCOL;
            }
            store_event_t *e = calloc(1, sizeof(*e));
            if (e == NULL || (e->key = (char *)copy_z(k, klen)) == NULL ||
                (e->val = copy_z(rest, vlen)) == NULL) {
                if (e != NULL) {
                    free(e->key);
                }
                free(e);
                return WEFT_ERR_NO_MEMORY;
            }
            e->vlen = vlen;
            if (c->ev_tail != NULL) {
                c->ev_tail->next = e;
            } else {
                c->ev_head = e;
            }
            c->ev_tail = e;
        } else if (type == WEFT__STORE_RESP) {
            if (weft__store_resp_decode(p, len, &status, &data, &vlen) != WEFT_OK) {
                return WEFT_ERR_PROTOCOL;
            }
            uint32_t id = weft__store_hdr_id(c->rbuf);
            store_call_t *call = c->calls;
            while (call != NULL && (call->id != id || call->done)) {
                call = call->next;
            }
            if (call != NULL) {
                call->data = copy_z(data, vlen);
                call->status = call->data != NULL ? status : WEFT_ERR_NO_MEMORY;
                call->dlen = vlen;
                call->done = true;
            }
        } else {
            return WEFT_ERR_PROTOCOL;
        }
        consume(c);
        pthread_cond_broadcast(&c->cv);
    }
}

/*
 * This thread reads the socket for every waiter until something arrives or @p deadline
 * passes, with the lock dropped meanwhile, then hands out what came. Lock held, and no
 * other thread reading. WEFT_INPROGRESS: nothing came by the deadline.
 */
static weft_status_t read_turn(native_client_t *c, uint64_t deadline)
{
    c->reading = true;
    pthread_mutex_unlock(&c->lock);
    weft_status_t st = recv_wait(c, deadline);
    pthread_mutex_lock(&c->lock);
    c->reading = false;
    if (st == WEFT_OK) {
        st = dispatch(c);
    }
    pthread_cond_broadcast(&c->cv); /* another waiter may read now */
    return st;
}

/* Sleeps on the condition until woken or the deadline passes. Lock held. */
static void cv_wait(native_client_t *c, uint64_t deadline_ms)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000),
                          .tv_nsec = (long)(deadline_ms % 1000) * 1000000};
    pthread_cond_timedwait(&c->cv, &c->lock, &ts);
}

/* Marks the connection unusable. A lost connection (the store closed it, a socket call
 * failed, no answer in time) loses the store for every connection sharing its health,
 * whose owner reports it; anything else, and a connection of its own, is logged here. */
static weft_status_t client_fail(native_client_t *c, weft_status_t st, const char *what)
{
    const char *why = st == WEFT_ERR_IO && c->err == 0 ? "the store closed the connection"
                      : st == WEFT_ERR_IO              ? strerror(c->err)
                      : c->forged ? "a frame failed its integrity check (altered, injected, "
                                    "replayed or reordered on the way)"
                                  : weft_status_str(st);
    if (c->health != NULL && (st == WEFT_ERR_IO || st == WEFT_ERR_TIMEOUT)) {
        weft__store_health_lost(c->health, what, why);
    } else {
        WEFT_ERROR(c->base.lg, "store %s: %s: %s", c->base.addr, what, why);
    }
    c->broken = true;
    pthread_cond_broadcast(&c->cv);
    return st;
}

/* Whether @p c may still be used: not broken, its store not lost by another, and the
 * process not exiting (a fenced connection fails its calls quietly). */
static bool usable(native_client_t *c)
{
    if (!c->broken && weft__store_lost_ns(c->health) != 0) {
        c->broken = true;
    }
    return !c->broken && !atomic_load(&c->fenced);
}

/*
 * Waits for @p me's answer until @p deadline, reading the socket whenever no other thread
 * does. Lock held. WEFT_INPROGRESS: no answer by the deadline; WEFT_ERR_IO: the
 * connection broke in another thread (which said why).
 */
static weft_status_t await(native_client_t *c, store_call_t *me, uint64_t deadline)
{
    while (!me->done) {
        if (!usable(c)) {
            return WEFT_ERR_IO;
        }
        if (weft__now_ms() >= deadline) {
            return WEFT_INPROGRESS;
        }
        if (c->reading) {
            cv_wait(c, deadline);
            continue;
        }
        weft_status_t st = read_turn(c, deadline);
        if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            return client_fail(c, st, "reading the answer failed");
        }
    }
    return WEFT_OK;
}

/*
 * Sends one request, whose answer @p me (registered on the connection before it is sent,
 * as the answer may come at once) then awaits: call_wait, and call_end to unregister it.
 * On failure nothing stays registered.
 */
static weft_status_t call_begin(native_client_t *c, weft_store_msg_t type, const char *key,
                                const void *rest, size_t rest_len, store_call_t *me)
{
    memset(me, 0, sizeof(*me));
    pthread_mutex_lock(&c->lock);
    if (!usable(c)) {
        pthread_mutex_unlock(&c->lock);
        return WEFT_ERR_IO;
    }
    c->next_id = c->next_id % WEFT__STORE_MAX_ID + 1;
    me->id = c->next_id;
    me->next = c->calls;
    c->calls = me;
    pthread_mutex_unlock(&c->lock);

    uint64_t deadline = weft__now_ms() + WEFT__STORE_IO_TIMEOUT_MS;
    pthread_mutex_lock(&c->wlock);
    c->wbuf.len = 0;
    weft_status_t st = weft__store_frame_kv(&c->wbuf, type, key, strlen(key), rest, rest_len);
    bool sent = false;
    if (st == WEFT_OK && atomic_load(&c->fenced)) {
        st = WEFT_ERR_IO; /* unsent: nothing to report, the process is exiting */
    } else if (st == WEFT_OK) {
        weft__store_frame_set_id(&c->wbuf, 0, me->id);
        st = weft__store_seal(&c->wbuf, 0, &c->tx);
    }
    if (st == WEFT_OK) {
        sent = true;
        atomic_fetch_add(&c->requests, 1);
        st = send_all(c, c->wbuf.data, c->wbuf.len, deadline);
    }
    pthread_mutex_unlock(&c->wlock);
    if (st == WEFT_OK) {
        return WEFT_OK;
    }
    pthread_mutex_lock(&c->lock);
    if (sent) {
        st = client_fail(c, st, "sending a request failed");
    }
    store_call_t **p = &c->calls;
    while (*p != me) {
        p = &(*p)->next;
    }
    *p = me->next;
    pthread_mutex_unlock(&c->lock);
    return st;
}

/*
 * Waits for @p me's answer until @p until. WEFT_INPROGRESS: not come by then, but
 * @p give_up has not passed either; past @p give_up the store is lost (WEFT_ERR_TIMEOUT).
 */
static weft_status_t call_wait(native_client_t *c, store_call_t *me, uint64_t until,
                               uint64_t give_up)
{
    pthread_mutex_lock(&c->lock);
    weft_status_t st = await(c, me, until < give_up ? until : give_up);
    if (st == WEFT_INPROGRESS && weft__now_ms() >= give_up) {
        st = client_fail(c, WEFT_ERR_TIMEOUT, "no answer");
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* Unregisters @p me; its answer, if it comes later, is dropped. */
static void call_end(native_client_t *c, store_call_t *me)
{
    pthread_mutex_lock(&c->lock);
    store_call_t **p = &c->calls;
    while (*p != me) {
        p = &(*p)->next;
    }
    *p = me->next;
    pthread_mutex_unlock(&c->lock);
}

/*
 * One request and its RESP. The server answers within @p wait_ms (a GET's own wait)
 * plus WEFT__STORE_IO_TIMEOUT_MS, or the call fails with WEFT_ERR_TIMEOUT. On WEFT_OK,
 * *status is the server's answer and *data (malloc'ed, NUL-terminated, the caller's) its
 * data.
 */
static weft_status_t call(native_client_t *c, weft_store_msg_t type, const char *key,
                          const void *rest, size_t rest_len, uint32_t wait_ms,
                          weft_status_t *status, uint8_t **data, size_t *dlen)
{
    store_call_t me;
    weft_status_t st = call_begin(c, type, key, rest, rest_len, &me);
    if (st != WEFT_OK) {
        return st;
    }
    uint64_t give_up = weft__now_ms() + WEFT__STORE_IO_TIMEOUT_MS + wait_ms;
    st = call_wait(c, &me, give_up, give_up);
    call_end(c, &me);
    if (st != WEFT_OK) {
        free(me.data);
        return st;
    }
    *status = me.status;
    *data = me.data;
    *dlen = me.dlen;
    return WEFT_OK;
}

/* A request whose answer carries no data: the store's status. */
static weft_status_t call_status(native_client_t *c, weft_store_msg_t type, const char *key,
                                 const void *rest, size_t rest_len)
{
    weft_status_t status;
    uint8_t *data;
    size_t dlen;
    weft_status_t st = call(c, type, key, rest, rest_len, 0, &status, &data, &dlen);
    if (st != WEFT_OK) {
        return st;
    }
    free(data);
    return status;
}

/* The native client behind a generic one (backend.h). */
static native_client_t *native(weft_store_client_t *c)
{
    return (native_client_t *)c;
}

static weft_status_t native_set(weft_store_client_t *bc, const char *key, const void *val,
                                size_t len)
{
    return call_status(native(bc), WEFT__STORE_SET, key, val, len);
}

static weft_status_t native_get(weft_store_client_t *bc, const char *key, int timeout_ms,
                                void **val, size_t *len)
{
    native_client_t *c = native(bc);
    weft_status_t status;
    uint8_t *data;
    size_t dlen;
    uint8_t wait[4] = {(uint8_t)(timeout_ms >> 24), (uint8_t)(timeout_ms >> 16),
                       (uint8_t)(timeout_ms >> 8), (uint8_t)timeout_ms};
    weft_status_t st = call(c, WEFT__STORE_GET, key, wait, sizeof(wait), (uint32_t)timeout_ms,
                            &status, &data, &dlen);
    if (st != WEFT_OK) {
        return st;
    }
    if (status == WEFT_OK) {
        *val = data; /* NUL-terminated for text values */
        *len = dlen;
    } else {
        free(data);
    }
    return status;
}

/* The connection broke the protocol in an answer: no later frame can be trusted. */
static weft_status_t malformed(native_client_t *c, uint8_t *data, const char *what)
{
    free(data);
    pthread_mutex_lock(&c->lock);
    weft_status_t st = client_fail(c, WEFT_ERR_PROTOCOL, what);
    pthread_mutex_unlock(&c->lock);
    return st;
}

static weft_status_t native_add(weft_store_client_t *bc, const char *key, int64_t delta,
                                int64_t *result)
{
    native_client_t *c = native(bc);
    weft_status_t status;
    uint8_t *data;
    size_t dlen;
    uint8_t be[8];
    weft__store_set_u64(be, (uint64_t)delta);
    weft_status_t st = call(c, WEFT__STORE_ADD, key, be, sizeof(be), 0, &status, &data, &dlen);
    if (st != WEFT_OK) {
        return st;
    }
    if (status == WEFT_OK && dlen != 8) {
        return malformed(c, data, "malformed add result");
    }
    if (status == WEFT_OK && result != NULL) {
        *result = (int64_t)weft__store_get_u64(data);
    }
    free(data);
    return status;
}

static weft_status_t native_set_nx(weft_store_client_t *bc, const char *key, const void *val,
                                   size_t len, void **winner, size_t *winner_len, int *created)
{
    native_client_t *c = native(bc);
    weft_status_t status;
    uint8_t *data;
    size_t dlen;
    weft_status_t st = call(c, WEFT__STORE_SET_NX, key, val, len, 0, &status, &data, &dlen);
    if (st != WEFT_OK) {
        return st;
    }
    if (status == WEFT_OK && dlen < 1) {
        return malformed(c, data, "malformed set_nx result");
    }
    if (status == WEFT_OK) {
        if (created != NULL) {
            *created = data[0] != 0;
        }
        memmove(data, data + 1, dlen); /* the value and its NUL, like get */
        *winner = data;
        *winner_len = dlen - 1;
    } else {
        free(data);
    }
    return status;
}

static weft_status_t native_lease(weft_store_client_t *bc, const char *key, const void *val,
                                  size_t len, uint32_t ttl_ms)
{
    uint8_t *rest = malloc(4 + len);
    if (rest == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    rest[0] = (uint8_t)(ttl_ms >> 24);
    rest[1] = (uint8_t)(ttl_ms >> 16);
    rest[2] = (uint8_t)(ttl_ms >> 8);
    rest[3] = (uint8_t)ttl_ms;
    if (len > 0) {
        memcpy(rest + 4, val, len);
    }
    weft_status_t st = call_status(native(bc), WEFT__STORE_LEASE, key, rest, 4 + len);
    free(rest);
    return st;
}

static weft_status_t native_delete(weft_store_client_t *bc, const char *key)
{
    return call_status(native(bc), WEFT__STORE_DELETE, key, NULL, 0);
}

static weft_status_t native_watch(weft_store_client_t *bc, const char *prefix)
{
    native_client_t *c = native(bc);
    weft_status_t st = call_status(c, WEFT__STORE_WATCH, prefix, NULL, 0);
    if (st == WEFT_OK) {
        pthread_mutex_lock(&c->lock);
        c->watching = true;
        pthread_mutex_unlock(&c->lock);
    }
    return st;
}

/* ---- scans ---- */

static weft_status_t native_scan_start(weft_store_client_t *bc, const weft_store_scan_args_t *args,
                                       weft_store_scan_t **scan)
{
    native_client_t *c = native(bc);
    const char *after = args->after != NULL ? args->after : "";
    size_t plen = strlen(args->prefix);
    size_t alen = strlen(after);
    native_scan_t *q = malloc(sizeof(*q) + plen + alen + 2);
    if (q == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    q->base.c = bc;
    q->plen = plen;
    q->alen = alen;
    memcpy(q->text, args->prefix, plen + 1);
    memcpy(q->text + plen + 1, after, alen + 1);
    uint8_t rest[WEFT__STORE_SCAN_ARGS_LEN + WEFT_STORE_MAX_KEY];
    uint32_t words[3] = {(uint32_t)args->timeout_ms, args->min_count, args->max_bytes};
    for (int w = 0; w < 3; w++) {
        for (int k = 0; k < 4; k++) {
            rest[4 * w + k] = (uint8_t)(words[w] >> (24 - 8 * k));
        }
    }
    memcpy(rest + WEFT__STORE_SCAN_ARGS_LEN, after, alen);
    weft_status_t st =
        call_begin(c, WEFT__STORE_SCAN, q->text, rest, WEFT__STORE_SCAN_ARGS_LEN + alen, &q->call);
    if (st != WEFT_OK) {
        free(q);
        return st;
    }
    q->give_up_ms = weft__now_ms() + (uint64_t)args->timeout_ms + WEFT__STORE_IO_TIMEOUT_MS;
    *scan = &q->base;
    return WEFT_OK;
}

/*
 * The page in @p data (malloc'ed, NUL-terminated, @p dlen bytes), checked against @p q:
 * every key under its prefix, after its resume key and after the one before. The keys
 * and values are NUL-terminated where they lie (each one's end is the next one's length,
 * read by then), so the page owns @p data.
 */
static weft_status_t page_take(const native_scan_t *q, uint8_t *data, size_t dlen,
                               weft_store_page_t *page)
{
    bool more;
    uint32_t count;
    const uint8_t *p;
    size_t left;
    if (weft__store_page_decode(data, dlen, &more, &count, &p, &left) != WEFT_OK ||
        count > left / WEFT__STORE_PAGE_ENTRY_LEN) {
        return WEFT_ERR_PROTOCOL;
    }
    weft_store_kv_t *kv = malloc(sizeof(*kv) * (count > 0 ? count : 1));
    if (kv == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    const char *prev = q->text + q->plen + 1;
    size_t prev_len = q->alen;
    for (uint32_t i = 0; i < count; i++) {
        const char *key;
        const uint8_t *val;
        size_t klen, vlen;
        if (weft__store_page_entry(&p, &left, &key, &klen, &val, &vlen) != WEFT_OK ||
            klen < q->plen || memcmp(key, q->text, q->plen) != 0 ||
            ((i > 0 || prev_len > 0) && weft__store_key_cmp(prev, prev_len, key, klen) >= 0)) {
            free(kv);
            return WEFT_ERR_PROTOCOL;
        }
        kv[i] = (weft_store_kv_t){.key = key, .val = val, .len = vlen};
        prev = key;
        prev_len = klen;
    }
    if (left != 0 || (count == 0 && more)) {
        free(kv);
        return WEFT_ERR_PROTOCOL;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint8_t *val = (uint8_t *)kv[i].val;
        val[-4] = '\0'; /* the key ends where its value's length begins */
        val[kv[i].len] = '\0';
    }
    *page = (weft_store_page_t){.kv = kv, .n = count, .more = more, .mem = data};
    return WEFT_OK;
}

static weft_status_t native_scan_wait(weft_store_scan_t *bq, int wait_ms, weft_store_page_t *page)
{
    native_scan_t *q = (native_scan_t *)bq;
    native_client_t *c = native(bq->c);
    weft_status_t st = call_wait(c, &q->call, weft__now_ms() + (uint64_t)wait_ms, q->give_up_ms);
    if (st == WEFT_INPROGRESS) {
        return st;
    }
    call_end(c, &q->call);
    uint8_t *data = q->call.data;
    if (st == WEFT_OK) {
        st = q->call.status;
    }
    if (st == WEFT_OK) {
        st = page_take(q, data, q->call.dlen, page);
        data = st == WEFT_OK ? NULL : data; /* the page's now */
        if (st == WEFT_ERR_PROTOCOL) {
            st = malformed(c, data, "malformed scan page");
            data = NULL;
        }
    }
    free(data);
    free(q);
    return st;
}

static void native_scan_cancel(weft_store_scan_t *bq)
{
    native_scan_t *q = (native_scan_t *)bq;
    call_end(native(bq->c), &q->call);
    free(q->call.data); /* when it came meanwhile */
    free(q);
}

static weft_status_t native_next_event(weft_store_client_t *bc, int timeout_ms, char **key,
                                       void **val, size_t *len)
{
    native_client_t *c = native(bc);
    pthread_mutex_lock(&c->lock);
    if (!c->watching) {
        pthread_mutex_unlock(&c->lock);
        return WEFT_ERR_INVALID_ARG;
    }
    uint64_t deadline = weft__now_ms() + (uint64_t)timeout_ms;
    weft_status_t st = WEFT_OK;
    bool tried = false;
    while (c->ev_head == NULL) {
        if (!usable(c)) {
            st = WEFT_ERR_IO;
            break;
        }
        if (tried && weft__now_ms() >= deadline) {
            st = WEFT_INPROGRESS;
            break;
        }
        tried = true;
        if (c->reading) { /* the reader queues what comes */
            if (timeout_ms == 0) {
                st = WEFT_INPROGRESS;
                break;
            }
            cv_wait(c, deadline);
            continue;
        }
        st = read_turn(c, deadline);
        if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            st = client_fail(c, st, "reading a watch event failed");
            break;
        }
        st = WEFT_OK;
    }
    store_event_t *e = c->ev_head;
    if (e != NULL) {
        c->ev_head = e->next;
        if (c->ev_head == NULL) {
            c->ev_tail = NULL;
        }
        st = WEFT_OK;
    }
    pthread_mutex_unlock(&c->lock);
    if (e == NULL) {
        return st;
    }
    *key = e->key;
    *val = e->val;
    *len = e->vlen;
    free(e);
    return WEFT_OK;
}

/* "host:port" or "[v6 address]:port". */
static bool split_hostport(const char *hp, char host[256], char port[16])
{
    const char *colon = strrchr(hp, ':');
    if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) >= 16) {
        return false;
    }
    const char *h = hp;
    size_t hlen = (size_t)(colon - hp);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= 256) {
        return false;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    strcpy(port, colon + 1);
    return true;
}

/* One TCP connection attempt, bounded by the deadline; c->err says why it failed. */
static weft_status_t try_connect(native_client_t *c, const struct addrinfo *ai, uint64_t deadline)
{
    c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (c->fd < 0) {
        c->err = errno;
        return WEFT_ERR_IO;
    }
    if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        int err = errno;
        if (err == EINPROGRESS) {
            weft_status_t st = wait_fd(c, POLLOUT, deadline);
            socklen_t len = sizeof(err);
            err = st == WEFT_INPROGRESS ? ETIMEDOUT : st != WEFT_OK ? c->err : 0;
            if (err == 0 && getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
                err = errno;
            }
        }
        if (err != 0) {
            c->err = err;
            close(c->fd);
            c->fd = -1;
            return WEFT_ERR_IO;
        }
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return WEFT_OK;
}

/* After this long without reaching the store, a connect says once that it still waits. */
#define STORE_WAIT_NOTICE_MS 1000

/* Connects, retrying with a growing pause until the deadline: the server may start late. */
static weft_status_t tcp_connect(native_client_t *c, const char *host, const char *port,
                                 int timeout_ms, uint64_t deadline)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    unsigned pause_ms = 10;
    uint64_t begin = weft__now_ms();
    bool told = false;
    for (;;) {
        struct addrinfo *res;
        int rc = getaddrinfo(host, port, &hints, &res);
        if (rc == 0) {
            for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
                if (try_connect(c, ai, deadline) == WEFT_OK) {
                    freeaddrinfo(res);
                    return WEFT_OK;
                }
            }
            freeaddrinfo(res);
        } else if (rc != EAI_AGAIN) {
            WEFT_ERROR(c->base.lg, "store %s: cannot resolve %s: %s", c->base.addr, host,
                       gai_strerror(rc));
            return WEFT_ERR_INVALID_ARG;
        }
        uint64_t now = weft__now_ms();
        if (now >= deadline) {
            WEFT_ERROR(c->base.lg, "store %s: cannot connect, tried for %llu ms: %s", c->base.addr,
                       (unsigned long long)(now - (deadline - (uint64_t)timeout_ms)),
                       rc != 0 ? gai_strerror(rc) : strerror(c->err));
            return WEFT_ERR_TIMEOUT;
        }
        if (!told && now - begin >= STORE_WAIT_NOTICE_MS) {
            /* A store that never comes would otherwise mean a silent wait of up to
             * WEFT_CONNECT_TIMEOUT_MS: say once what this process waits for, and until when. */
            WEFT_WARN(c->base.lg,
                      "store %s: not reachable yet (%s); still trying for %llu ms "
                      "(WEFT_CONNECT_TIMEOUT_MS)",
                      c->base.addr, rc != 0 ? gai_strerror(rc) : strerror(c->err),
                      (unsigned long long)(deadline - now));
            told = true;
        }
        uint64_t nap = deadline - now < pause_ms ? deadline - now : pause_ms;
        nanosleep(&(struct timespec){.tv_sec = (time_t)(nap / 1000),
                                     .tv_nsec = (long)(nap % 1000) * 1000000},
                  NULL);
        pause_ms = pause_ms < 200 ? pause_ms * 2 : 200;
    }
}

/*
 * Proves to the server that we hold the token (or the member key of @p id), checks its
 * proof that it holds it too, and derives the keys of the frames (proto.h).
 * WEFT_INPROGRESS: the server was busy with other handshakes (it said so, or closed the
 * connection before answering); try again.
 */
static weft_status_t handshake(native_client_t *c, const char *token, const weft_store_cred_t *cred,
                               weft_store_role_t role, uint32_t id, uint64_t deadline)
{
    weft_store_msg_t type;
    const uint8_t *p;
    uint32_t len;
    uint8_t secret[WEFT__STORE_PROOF_LEN], t[WEFT__STORE_TRANSCRIPT_LEN];
    uint8_t body[WEFT__STORE_AUTH_LEN], cn[WEFT__STORE_NONCE_LEN];
    weft_status_t st = read_frame(c, deadline, &type, &p, &len);
    st = st == WEFT_INPROGRESS ? WEFT_ERR_TIMEOUT : st;
    if (st == WEFT_OK && (type != WEFT__STORE_HELLO || len != WEFT__STORE_HELLO_LEN ||
                          p[0] != WEFT__STORE_VERSION)) {
        st = WEFT_ERR_PROTOCOL;
    }
    if (st == WEFT_ERR_IO) {
        return WEFT_INPROGRESS; /* dropped before we could speak */
    }
    if (st != WEFT_OK) {
        return client_fail(c, st, "no valid greeting");
    }
    st = weft__store_random(cn, sizeof(cn));
    if (st == WEFT_OK) {
        weft__store_transcript(t, p + 1, cn, role, id);
        if (token != NULL) {
            st = weft__store_session_secret(token, role, id, secret);
        } else if (role == WEFT__STORE_ROLE_MEMBER && id == cred->id) {
            memcpy(secret, cred->secret, sizeof(secret)); /* what it was given, nothing else */
        } else {
            st = WEFT_ERR_AUTH;
        }
    }
    consume(c);
    memcpy(body, cn, sizeof(cn));
    body[WEFT__STORE_NONCE_LEN] = (uint8_t)role;
    body[WEFT__STORE_NONCE_LEN + 1] = (uint8_t)(id >> 24);
    body[WEFT__STORE_NONCE_LEN + 2] = (uint8_t)(id >> 16);
    body[WEFT__STORE_NONCE_LEN + 3] = (uint8_t)(id >> 8);
    body[WEFT__STORE_NONCE_LEN + 4] = (uint8_t)id;
    if (st == WEFT_OK) {
        st = weft__store_derive(secret, WEFT__STORE_CLIENT_PROOF, t,
                                body + WEFT__STORE_NONCE_LEN + 5);
    }
    c->wbuf.len = 0;
    if (st == WEFT_OK) {
        st = weft__store_frame_bytes(&c->wbuf, WEFT__STORE_AUTH, body, sizeof(body));
    }
    if (st == WEFT_OK) {
        st = send_all(c, c->wbuf.data, c->wbuf.len, deadline);
    }
    if (st != WEFT_OK) {
        OPENSSL_cleanse(secret, sizeof(secret));
        return st == WEFT_ERR_IO ? WEFT_INPROGRESS
                                 : client_fail(c, st, "sending the token proof failed");
    }
    weft_status_t status = WEFT_ERR_PROTOCOL;
    const uint8_t *data = NULL;
    size_t dlen = 0;
    st = read_frame(c, deadline, &type, &p, &len);
    if (st == WEFT_OK && type == WEFT__STORE_RESP &&
        weft__store_resp_decode(p, len, &status, &data, &dlen) == WEFT_OK) {
        st = status == WEFT_OK || status == WEFT_ERR_AUTH || status == WEFT_ERR_NO_MEMORY
                 ? status
                 : WEFT_ERR_PROTOCOL;
        if (st == WEFT_OK &&
            !weft__store_proof_check(secret, WEFT__STORE_SERVER_PROOF, t, data, dlen)) {
            st = WEFT_ERR_AUTH;
            WEFT_ERROR(c->base.lg,
                       "store %s: refusing the store: it could not prove that it holds the job "
                       "token (not the job's store, or one in the middle)",
                       c->base.addr);
            c->broken = true;
            status = WEFT_ERR_AUTH;
        } else if (st == WEFT_ERR_AUTH) {
            WEFT_ERROR(c->base.lg, "store %s: the store refused our %s", c->base.addr,
                       token != NULL ? "job token" : "member secret (for another id?)");
            c->broken = true;
        }
        consume(c);
    } else if (st == WEFT_OK) {
        st = WEFT_ERR_PROTOCOL;
    } else if (st == WEFT_ERR_IO) {
        /* Closed without an answer: dropped while busy (a refusal comes with one). */
        st = WEFT_ERR_NO_MEMORY;
        status = WEFT_ERR_NO_MEMORY;
    }
    st = st == WEFT_INPROGRESS ? WEFT_ERR_TIMEOUT : st;
    if (st == WEFT_OK) {
        c->tx.seq = c->rx.seq = 0;
        st = weft__store_derive(secret, WEFT__STORE_KEY_C2S, t, c->tx.key);
        if (st == WEFT_OK) {
            st = weft__store_derive(secret, WEFT__STORE_KEY_S2C, t, c->rx.key);
        }
        c->sealed = st == WEFT_OK;
    }
    OPENSSL_cleanse(secret, sizeof(secret));
    if (st == WEFT_ERR_NO_MEMORY && status == WEFT_ERR_NO_MEMORY) {
        return WEFT_INPROGRESS; /* busy: the caller tries again */
    }
    if (st != WEFT_OK && st != WEFT_ERR_AUTH) {
        client_fail(c, st, "authentication failed");
    }
    return st;
}

static const weft_store_ops_t native_ops;
static void native_close(weft_store_client_t *bc);

static weft_status_t connect_as(const char *hostport, const char *token,
                                const weft_store_cred_t *cred, weft_store_role_t role, uint32_t id,
                                int timeout_ms, const weft_logger_t *lg,
                                weft_store_client_t **client)
{
    char host[256], port[16];
    if (hostport == NULL || (token == NULL && cred == NULL) ||
        (token != NULL && token[0] == '\0') || timeout_ms < 0 || client == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (!split_hostport(hostport, host, port)) {
        WEFT_ERROR(lg, "store: address '%s' is not host:port", hostport);
        return WEFT_ERR_INVALID_ARG;
    }
    native_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* cv_wait's deadlines are weft__now_ms */
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->wlock, NULL);
    c->base.ops = &native_ops;
    c->base.lg = lg;
    snprintf(c->base.addr, sizeof(c->base.addr), "%s", hostport);
    uint64_t begin = weft__now_ms(), deadline = begin + (uint64_t)timeout_ms;
    weft_status_t st;
    for (unsigned pause_ms = 10;; pause_ms = pause_ms < 200 ? pause_ms * 2 : 200) {
        c->fd = -1;
        st = tcp_connect(c, host, port, timeout_ms, deadline);
        if (st == WEFT_OK) {
            /* Connected at the last moment: still give the greeting a fair chance. */
            uint64_t min_deadline = weft__now_ms() + 1000;
            st = handshake(c, token, cred, role, id,
                           deadline > min_deadline ? deadline : min_deadline);
        }
        uint64_t now = weft__now_ms();
        if (st != WEFT_INPROGRESS) {
            break;
        }
        /* The store is busy with connections that have not authenticated: try again. */
        close(c->fd);
        c->rlen = c->frame = 0;
        if (now >= deadline) {
            WEFT_ERROR(lg,
                       "store %s: the store dropped our handshake each time (busy with "
                       "connections that have not authenticated), tried for %llu ms",
                       c->base.addr, (unsigned long long)(now - begin));
            st = WEFT_ERR_TIMEOUT;
            c->fd = -1;
            break;
        }
        uint64_t nap = deadline - now < pause_ms ? deadline - now : pause_ms;
        nanosleep(&(struct timespec){.tv_sec = (time_t)(nap / 1000),
                                     .tv_nsec = (long)(nap % 1000) * 1000000},
                  NULL);
    }
    if (st != WEFT_OK) {
        native_close(&c->base);
        return st;
    }
    *client = &c->base;
    return WEFT_OK;
}

static void native_fence(weft_store_client_t *bc, const struct timespec *deadline)
{
    native_client_t *c = native(bc);
    /* With both locks, no thread is sealing or checking a frame when the flag is set.
     * Neither is held for long but by a thread blocked in send() (wlock, its frame
     * sealed already): if one is not had by the deadline, the flag still keeps that
     * thread from its next OpenSSL call. */
    bool w = pthread_mutex_timedlock(&c->wlock, deadline) == 0;
    bool r = pthread_mutex_timedlock(&c->lock, deadline) == 0;
    atomic_store(&c->fenced, true);
    if (r) {
        pthread_cond_broadcast(&c->cv); /* waiters find it unusable now */
        pthread_mutex_unlock(&c->lock);
    }
    if (w) {
        pthread_mutex_unlock(&c->wlock);
    }
}

static bool native_fenced(weft_store_client_t *bc)
{
    return atomic_load(&native(bc)->fenced);
}

static uint64_t native_requests(const weft_store_client_t *bc)
{
    return atomic_load(&((native_client_t *)bc)->requests);
}

static int native_fd(const weft_store_client_t *bc)
{
    return ((const native_client_t *)bc)->fd;
}

static void native_close(weft_store_client_t *bc)
{
    native_client_t *c = native(bc);
    if (c->fd >= 0) {
        close(c->fd);
    }
    free(c->rbuf);
    weft__store_buf_free(&c->wbuf);
    while (c->ev_head != NULL) {
        store_event_t *e = c->ev_head;
        c->ev_head = e->next;
        free(e->key);
        free(e->val);
        free(e);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->wlock);
    OPENSSL_cleanse(c, sizeof(*c)); /* the session's keys */
    free(c);
}

static void native_share_health(weft_store_client_t *bc, weft_store_health_t *h)
{
    native(bc)->health = h;
}

static const weft_store_ops_t native_ops = {
    .size = sizeof(weft_store_ops_t),
    .set = native_set,
    .get = native_get,
    .add = native_add,
    .del = native_delete,
    .set_nx = native_set_nx,
    .lease = native_lease,
    .watch = native_watch,
    .next_event = native_next_event,
    .scan_start = native_scan_start,
    .scan_wait = native_scan_wait,
    .scan_cancel = native_scan_cancel,
    .requests = native_requests,
    .fd = native_fd,
    .fence = native_fence,
    .fenced = native_fenced,
    .close = native_close,
    .share_health = native_share_health,
};

weft_status_t weft__store_native_connect(const char *hostport, const char *token,
                                         const weft_store_cred_t *cred, int member, bool launcher,
                                         int timeout_ms, const weft_logger_t *lg,
                                         weft_store_client_t **client)
{
    uint32_t id = launcher ? 0 : member >= 0 ? (uint32_t)member : WEFT__STORE_NO_ID;
    return connect_as(hostport, token, cred,
                      launcher ? WEFT__STORE_ROLE_LAUNCHER : WEFT__STORE_ROLE_MEMBER, id,
                      timeout_ms, lg, client);
}
