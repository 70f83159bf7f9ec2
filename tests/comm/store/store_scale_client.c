/*
 * weft-store-scale's worker process: a few thousand store clients, each a nonblocking
 * state machine, all driven by one epoll loop (no thread per client). The phases are in
 * store_scale.h.
 *
 * Every frame a client sends is built by frame_put and every frame it reads is taken by
 * frame_take: they alone know the header (comm/store/proto.h). Answers are matched to
 * requests by the request id they echo (the kind of request: a client has at most one of
 * each kind outstanding); an id of 0 stands for the oldest request not yet answered.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/store/proto.h"
#include "store_scale.h"
#include "util/clock.h"


#define IN_CAP 512      /* the largest frame a client takes, tag included */
#define PAUSE_MIN_MS 10 /* before trying a dropped handshake again, doubling up to */
#define PAUSE_MAX_MS 200
#define MAX_PENDING 4      /* requests of one client awaiting their answer */
#define CMD_TAG UINT64_MAX /* the epoll tag of the parent's pipe */
#define GO_VALUE "go"
#define WATCH_PREFIX "bench/failed/"

/* What a client asked; the id its request carries once the store echoes ids. */
typedef enum req_kind {
    REQ_NONE = 0, /* the handshake's frames */
    REQ_SET_ADDR = 1,
    REQ_ADD = 2,
    REQ_SET_GO = 3,
    REQ_GET_GO = 4,
    REQ_WATCH = 5,
} req_kind_t;

typedef enum client_state {
    C_IDLE,       /* not told to connect yet */
    C_QUEUED,     /* waiting for a handshake slot (the window) */
    C_PAUSED,     /* dropped while the store was busy; tries again at retry_ms */
    C_CONNECTING, /* connect() under way */
    C_HELLO,      /* waiting for the store's HELLO */
    C_AUTH,       /* AUTH sent, waiting for the store's proof */
    C_READY,      /* a keyed session: requests, answers, events */
    C_FAILED,
} client_state_t;

typedef struct scale_client {
    int fd; /* -1 when none */
    uint32_t id;
    uint8_t state;
    bool sealed;  /* frames carry tags: the session is keyed */
    bool arm_out; /* EPOLLOUT is armed */
    bool got_go;
    uint8_t done;     /* bit p: done with phase p */
    uint8_t npending; /* pending[]: the requests awaiting their answer, oldest first */
    uint8_t pending[MAX_PENDING];
    uint16_t in_len;
    uint16_t pause_ms;
    uint32_t events; /* EVENTs of SCALE_FAILED_KEY received */
    uint64_t retry_ms;
    weft_store_dir_t tx, rx;
    uint8_t t[WEFT__STORE_TRANSCRIPT_LEN]; /* from HELLO until the store's proof */
    weft_store_buf_t out;
    size_t out_off; /* bytes of out already sent */
    uint8_t in[IN_CAP];
} scale_client_t;

typedef struct worker {
    const scale_opts_t *o;
    int count, ep, report_fd;
    scale_client_t *cl;
    int *queue; /* clients waiting for a handshake slot: a ring of count entries */
    int qhead, qlen, inflight;
    int done[SCALE_NPHASES], failed;
    scale_phase_t phase; /* under way; SCALE_QUIT between phases */
    uint64_t deadline_ms, next_retry_ms;
    unsigned rng;
    scale_report_t rep; /* counters kept across phases */
} worker_t;

static bool client_send(worker_t *w, scale_client_t *c, weft_store_msg_t type, req_kind_t kind,
                        const char *key, const void *rest, size_t rlen);

void scale_addr_value(uint32_t id, char out[SCALE_ADDR_LEN])
{
    memset(out, '.', SCALE_ADDR_LEN);
    char head[40];
    int n = snprintf(head, sizeof(head), "client %u of weft-store-scale ", id);
    memcpy(out, head, (size_t)n);
}

/* ---- the two places that know a frame's layout ---- */

/*
 * Appends one frame to @p c's output: a kv body (@p key, then @p rest) or, with @p key
 * NULL, the body @p rest alone (AUTH). Its request id is @p kind (0 for the handshake's);
 * it is sealed once the session is keyed. WEFT_OK or what building it returned.
 */
static weft_status_t frame_put(scale_client_t *c, weft_store_msg_t type, req_kind_t kind,
                               const char *key, const void *rest, size_t rlen)
{
    size_t start = c->out.len;
    weft_status_t st = key != NULL
                           ? weft__store_frame_kv(&c->out, type, key, strlen(key), rest, rlen)
                           : weft__store_frame_bytes(&c->out, type, rest, rlen);
    if (st != WEFT_OK) {
        return st;
    }
    weft__store_frame_set_id(&c->out, start, (uint32_t)kind);
    return c->sealed ? weft__store_seal(&c->out, start, &c->tx) : WEFT_OK;
}

/*
 * The frame at the start of @p c's input: 1 with its type, request id and body (its tag
 * checked once the session is keyed) and *size, the bytes it takes in the input; 0 while
 * it is incomplete; -1 for a frame this client refuses (*why says why).
 */
static int frame_take(scale_client_t *c, weft_store_msg_t *type, uint32_t *id, const uint8_t **body,
                      uint32_t *len, size_t *size, const char **why)
{
    if (c->in_len < WEFT__STORE_HDR_LEN) {
        return 0;
    }
    if (weft__store_hdr_decode(c->in, len, type) != WEFT_OK) {
        *why = "a malformed frame header";
        return -1;
    }
    *size = WEFT__STORE_HDR_LEN + (size_t)*len + (c->sealed ? WEFT__STORE_TAG_LEN : 0);
    if (*size > IN_CAP) {
        *why = "a frame larger than any answer of this benchmark";
        return -1;
    }
    if (c->in_len < *size) {
        return 0;
    }
    *body = c->in + WEFT__STORE_HDR_LEN;
    if (c->sealed && !weft__store_tag_check(&c->rx, c->in, *body, *len, *body + *len)) {
        *why = "a frame that failed its integrity check";
        return -1;
    }
    *id = weft__store_hdr_id(c->in);
    return 1;
}

/* ---- a client's connection ---- */

static void note_phase_done(worker_t *w, scale_client_t *c, scale_phase_t p)
{
    if (!(c->done & (1u << p))) {
        c->done |= (uint8_t)(1u << p);
        w->done[p]++;
    }
}

static bool in_handshake(const scale_client_t *c)
{
    return c->state == C_CONNECTING || c->state == C_HELLO || c->state == C_AUTH;
}

static void client_close(worker_t *w, scale_client_t *c)
{
    if (c->fd >= 0) {
        close(c->fd); /* leaves the epoll set with it */
        c->fd = -1;
    }
    if (in_handshake(c)) {
        w->inflight--;
    }
    c->in_len = 0;
    c->out.len = c->out_off = 0;
    c->sealed = c->arm_out = false;
    c->npending = 0;
}

/* Client @p c is out of the run; the first failure is what the report tells. */
__attribute__((format(printf, 3, 4))) static void client_fail(worker_t *w, scale_client_t *c,
                                                              const char *fmt, ...)
{
    if (c->state == C_FAILED) {
        return;
    }
    if (w->rep.why[0] == '\0') {
        int n = snprintf(w->rep.why, sizeof(w->rep.why), "client %u: ", c->id);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->rep.why + n, sizeof(w->rep.why) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    client_close(w, c);
    c->state = C_FAILED;
    w->failed++;
}

/* The store dropped the handshake (busy, or closed): try again after a pause. */
static void client_retry(worker_t *w, scale_client_t *c)
{
    client_close(w, c);
    c->state = C_PAUSED;
    uint64_t now = weft__now_ms();
    c->retry_ms = now + c->pause_ms / 2 + (uint64_t)rand_r(&w->rng) % (c->pause_ms / 2 + 1u);
    c->pause_ms = c->pause_ms < PAUSE_MAX_MS ? (uint16_t)(2 * c->pause_ms) : PAUSE_MAX_MS;
    if (w->next_retry_ms == 0 || c->retry_ms < w->next_retry_ms) {
        w->next_retry_ms = c->retry_ms;
    }
}

/* The connection broke (@p what): a dropped handshake, or a failure once in session. */
static void client_lost(worker_t *w, scale_client_t *c, const char *what)
{
    if (in_handshake(c)) {
        w->rep.dropped++;
        client_retry(w, c);
    } else {
        client_fail(w, c, "the connection broke (%s)", what);
    }
}

static void client_arm(worker_t *w, scale_client_t *c, bool out)
{
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0),
                             .data.u64 = (uint64_t)(c - w->cl)};
    if (c->arm_out != out && epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0) {
        c->arm_out = out;
    }
}

/* Sends what the socket takes of @p c's output; false when the connection broke. */
static bool client_flush(worker_t *w, scale_client_t *c)
{
    while (c->out_off < c->out.len) {
        ssize_t r = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (r > 0) {
            c->out_off += (size_t)r;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            client_arm(w, c, true);
            return true;
        } else if (!(r < 0 && errno == EINTR)) {
            client_lost(w, c, strerror(errno));
            return false;
        }
    }
    c->out.len = c->out_off = 0;
    client_arm(w, c, false);
    return true;
}

/* The source address of client @p id: 127.0.X.Y, SCALE_PER_HOST clients on each. */
static struct sockaddr_in client_source(uint32_t id)
{
    uint32_t host = id / SCALE_PER_HOST;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(0x7f000000u | (1 + host / 254) << 8 | (1 + host % 254));
    return sa;
}

/* Opens @p c's socket and starts connecting; one handshake slot is taken. */
static void client_connect(worker_t *w, scale_client_t *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        client_fail(w, c, "socket() failed: %s", strerror(errno));
        return;
    }
    c->state = C_CONNECTING;
    w->inflight++;
    int one = 1;
    struct sockaddr_in src = client_source(c->id);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)w->o->port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* The port is chosen at connect(), by the whole address pair: many sockets per source. */
    setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (bind(c->fd, (struct sockaddr *)&src, sizeof(src)) != 0) {
        client_fail(w, c, "bind() to 127.0.%u.%u failed: %s",
                    (ntohl(src.sin_addr.s_addr) >> 8) & 255, ntohl(src.sin_addr.s_addr) & 255,
                    strerror(errno));
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = (uint64_t)(c - w->cl)};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        client_fail(w, c, "epoll_ctl failed: %s", strerror(errno));
        return;
    }
    c->arm_out = true;
    if (connect(c->fd, (struct sockaddr *)&dst, sizeof(dst)) != 0 && errno != EINPROGRESS) {
        w->rep.refused++;
        client_retry(w, c);
    }
}

/* Starts the handshakes the window has room for. */
static void start_handshakes(worker_t *w)
{
    while (w->qlen > 0 && (w->o->window == 0 || w->inflight < w->o->window)) {
        scale_client_t *c = &w->cl[w->queue[w->qhead]];
        w->qhead = (w->qhead + 1) % w->count;
        w->qlen--;
        client_connect(w, c);
    }
}

static void enqueue(worker_t *w, int i)
{
    w->queue[(w->qhead + w->qlen++) % w->count] = i;
    w->cl[i].state = C_QUEUED;
}

/* Paused clients whose time has come go back to the queue. */
static void resume_paused(worker_t *w)
{
    uint64_t now = weft__now_ms();
    if (w->next_retry_ms == 0 || now < w->next_retry_ms) {
        return;
    }
    w->next_retry_ms = 0;
    for (int i = 0; i < w->count; i++) {
        scale_client_t *c = &w->cl[i];
        if (c->state != C_PAUSED) {
            continue;
        }
        if (c->retry_ms <= now) {
            enqueue(w, i);
        } else if (w->next_retry_ms == 0 || c->retry_ms < w->next_retry_ms) {
            w->next_retry_ms = c->retry_ms;
        }
    }
}

/* ---- the handshake (proto.h) ---- */

static void on_hello(worker_t *w, scale_client_t *c, const uint8_t *p, uint32_t len)
{
    if (len != WEFT__STORE_HELLO_LEN || p[0] != WEFT__STORE_VERSION) {
        client_fail(w, c, "a greeting of another protocol version or length");
        return;
    }
    uint8_t body[WEFT__STORE_AUTH_LEN], secret[WEFT__STORE_PROOF_LEN];
    uint8_t *cn = body;
    body[WEFT__STORE_NONCE_LEN] = WEFT__STORE_ROLE_MEMBER;
    uint32_t be = htonl(c->id);
    memcpy(body + WEFT__STORE_NONCE_LEN + 1, &be, 4);
    weft_status_t st = weft__store_random(cn, WEFT__STORE_NONCE_LEN);
    if (st == WEFT_OK) {
        weft__store_transcript(c->t, p + 1, cn, WEFT__STORE_ROLE_MEMBER, c->id);
        st = weft__store_session_secret(w->o->token, WEFT__STORE_ROLE_MEMBER, c->id, secret);
    }
    if (st == WEFT_OK) {
        st = weft__store_derive(secret, WEFT__STORE_CLIENT_PROOF, c->t,
                                body + WEFT__STORE_NONCE_LEN + 5);
    }
    if (st != WEFT_OK) {
        client_fail(w, c, "computing the token proof failed: %s", weft_status_str(st));
        return;
    }
    c->state = C_AUTH;
    client_send(w, c, WEFT__STORE_AUTH, REQ_NONE, NULL, body, sizeof(body));
}

static void on_auth_answer(worker_t *w, scale_client_t *c, const uint8_t *p, uint32_t len)
{
    weft_status_t status;
    const uint8_t *proof;
    size_t plen;
    uint8_t secret[WEFT__STORE_PROOF_LEN];
    if (weft__store_resp_decode(p, len, &status, &proof, &plen) != WEFT_OK) {
        client_fail(w, c, "a malformed answer to AUTH");
        return;
    }
    if (status == WEFT_ERR_NO_MEMORY) {
        w->rep.busy++;
        client_retry(w, c);
        return;
    }
    bool ok = status == WEFT_OK &&
              weft__store_session_secret(w->o->token, WEFT__STORE_ROLE_MEMBER, c->id, secret) ==
                  WEFT_OK &&
              weft__store_proof_check(secret, WEFT__STORE_SERVER_PROOF, c->t, proof, plen) &&
              weft__store_derive(secret, WEFT__STORE_KEY_C2S, c->t, c->tx.key) == WEFT_OK &&
              weft__store_derive(secret, WEFT__STORE_KEY_S2C, c->t, c->rx.key) == WEFT_OK;
    if (!ok) {
        client_fail(w, c, "the handshake failed (%s)",
                    status != WEFT_OK ? weft_status_str(status) : "the store's proof is wrong");
        return;
    }
    c->tx.seq = c->rx.seq = 0;
    c->sealed = true;
    c->state = C_READY;
    c->pause_ms = PAUSE_MIN_MS;
    w->inflight--;
    note_phase_done(w, c, SCALE_CONNECT);
}

/* ---- requests, answers and events ---- */

/* Queues one frame (frame_put) and sends what the socket takes; false if the client is out. */
static bool client_send(worker_t *w, scale_client_t *c, weft_store_msg_t type, req_kind_t kind,
                        const char *key, const void *rest, size_t rlen)
{
    if (kind != REQ_NONE && c->npending == MAX_PENDING) {
        client_fail(w, c, "too many requests awaiting their answer");
        return false;
    }
    weft_status_t st = frame_put(c, type, kind, key, rest, rlen);
    if (st != WEFT_OK) {
        client_fail(w, c, "building a frame failed: %s", weft_status_str(st));
        return false;
    }
    if (kind != REQ_NONE) {
        c->pending[c->npending++] = (uint8_t)kind;
    }
    return client_flush(w, c);
}

/* The request an answer with @p id is for (taken off the pending ones); REQ_NONE if none. */
static req_kind_t pending_take(scale_client_t *c, uint32_t id)
{
    for (int i = 0; i < c->npending; i++) {
        if (id == 0 || c->pending[i] == id) { /* 0: answers come in order, oldest first */
            req_kind_t kind = (req_kind_t)c->pending[i];
            memmove(c->pending + i, c->pending + i + 1, (size_t)(c->npending - i - 1));
            c->npending--;
            return kind;
        }
    }
    return REQ_NONE;
}

static void rendezvous_step(worker_t *w, scale_client_t *c, req_kind_t kind, const uint8_t *data,
                            size_t dlen)
{
    int64_t n = w->o->clients;
    if (kind == REQ_SET_ADDR) {
        uint8_t one[8] = {0, 0, 0, 0, 0, 0, 0, 1};
        client_send(w, c, WEFT__STORE_ADD, REQ_ADD, "bench/arrived", one, sizeof(one));
    } else if (kind == REQ_ADD) {
        int64_t v = dlen == 8 ? (int64_t)weft__store_get_u64(data) : 0;
        if (v < 1 || v > n) {
            client_fail(w, c, "ADD bench/arrived returned %lld, not in 1..%lld", (long long)v,
                        (long long)n);
            return;
        }
        w->rep.add_sum += v;
        /* The last to arrive says go, before it parks its own GET: the store of this build
         * reads no more of a connection whose GET is parked. */
        if (v == n) {
            w->rep.winners++;
            if (!client_send(w, c, WEFT__STORE_SET, REQ_SET_GO, "bench/go", GO_VALUE,
                             strlen(GO_VALUE))) {
                return;
            }
        }
        uint32_t ms = (uint32_t)w->o->timeout_ms;
        uint8_t wait[4] = {(uint8_t)(ms >> 24), (uint8_t)(ms >> 16), (uint8_t)(ms >> 8),
                           (uint8_t)ms};
        client_send(w, c, WEFT__STORE_GET, REQ_GET_GO, "bench/go", wait, sizeof(wait));
    } else if (kind == REQ_GET_GO) {
        if (dlen != strlen(GO_VALUE) || memcmp(data, GO_VALUE, dlen) != 0) {
            client_fail(w, c, "GET bench/go returned %zu bytes other than \"%s\"", dlen, GO_VALUE);
            return;
        }
        c->got_go = true;
    }
    if (c->got_go && c->npending == 0) {
        note_phase_done(w, c, SCALE_RENDEZVOUS);
    }
}

static void on_answer(worker_t *w, scale_client_t *c, uint32_t id, const uint8_t *p, uint32_t len)
{
    weft_status_t status;
    const uint8_t *data;
    size_t dlen;
    req_kind_t kind = pending_take(c, id);
    if (kind == REQ_NONE) {
        client_fail(w, c, "an answer (id %u) to no request of ours", id);
    } else if (weft__store_resp_decode(p, len, &status, &data, &dlen) != WEFT_OK) {
        client_fail(w, c, "a malformed answer");
    } else if (status != WEFT_OK) {
        static const char *const names[] = {
            "", "SET bench/addr", "ADD bench/arrived", "SET bench/go", "GET bench/go", "WATCH"};
        client_fail(w, c, "%s failed: %s", names[kind], weft_status_str(status));
    } else if (kind == REQ_WATCH) {
        note_phase_done(w, c, SCALE_WATCH);
    } else {
        rendezvous_step(w, c, kind, data, dlen);
    }
}

static void on_event(worker_t *w, scale_client_t *c, const uint8_t *p, uint32_t len)
{
    const char *key;
    size_t klen, vlen;
    const uint8_t *val;
    if (weft__store_kv_decode(p, len, &key, &klen, &val, &vlen) != WEFT_OK) {
        client_fail(w, c, "a malformed event");
    } else if (klen == strlen(SCALE_FAILED_KEY) && memcmp(key, SCALE_FAILED_KEY, klen) == 0) {
        if (vlen != strlen(SCALE_FAILED_VALUE) || memcmp(val, SCALE_FAILED_VALUE, vlen) != 0) {
            client_fail(w, c, "the event of %s carries another value", SCALE_FAILED_KEY);
        } else if (++c->events == 1) {
            note_phase_done(w, c, SCALE_FANOUT);
        }
    } else if (klen == strlen(SCALE_END_KEY) && memcmp(key, SCALE_END_KEY, klen) == 0) {
        if (c->events != 1) {
            client_fail(w, c, "%u events of %s came before %s, not one", c->events,
                        SCALE_FAILED_KEY, SCALE_END_KEY);
        } else {
            note_phase_done(w, c, SCALE_CHECK);
        }
    } else {
        client_fail(w, c, "an event of a key it did not expect: %.*s", (int)klen, key);
    }
}

/* One frame for @p c; false when the client left its connection (dropped or failed). */
static bool on_frame(worker_t *w, scale_client_t *c, weft_store_msg_t type, uint32_t id,
                     const uint8_t *p, uint32_t len)
{
    if (c->state == C_HELLO && type == WEFT__STORE_HELLO) {
        on_hello(w, c, p, len);
    } else if ((c->state == C_HELLO || c->state == C_AUTH) && type == WEFT__STORE_RESP) {
        on_auth_answer(w, c, p, len); /* the proof, or "busy" (before or after our AUTH) */
    } else if (c->state == C_READY && type == WEFT__STORE_RESP) {
        on_answer(w, c, id, p, len);
    } else if (c->state == C_READY && type == WEFT__STORE_EVENT) {
        on_event(w, c, p, len);
    } else {
        client_fail(w, c, "a frame of type %d it did not expect", (int)type);
    }
    return c->fd >= 0;
}

static void client_readable(worker_t *w, scale_client_t *c)
{
    for (;;) {
        ssize_t r = recv(c->fd, c->in + c->in_len, IN_CAP - c->in_len, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            client_lost(w, c, r == 0 ? "closed by the store" : strerror(errno));
            return;
        }
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        c->in_len = (uint16_t)(c->in_len + r);
        weft_store_msg_t type;
        uint32_t id, len;
        const uint8_t *body;
        size_t size;
        const char *why;
        int got;
        while ((got = frame_take(c, &type, &id, &body, &len, &size, &why)) == 1) {
            if (!on_frame(w, c, type, id, body, len)) {
                return;
            }
            c->in_len = (uint16_t)(c->in_len - size);
            memmove(c->in, c->in + size, c->in_len);
        }
        if (got < 0) {
            client_fail(w, c, "the store sent %s", why);
            return;
        }
    }
}

static void client_writable(worker_t *w, scale_client_t *c)
{
    if (c->state != C_CONNECTING) {
        client_flush(w, c);
        return;
    }
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
        w->rep.refused++;
        client_retry(w, c);
        return;
    }
    c->state = C_HELLO;
    client_arm(w, c, false);
}

/* ---- phases ---- */

static void phase_begin(worker_t *w, scale_phase_t p)
{
    w->phase = p;
    w->deadline_ms = weft__now_ms() + (uint64_t)w->o->timeout_ms;
    char key[32], val[SCALE_ADDR_LEN];
    for (int i = 0; i < w->count; i++) {
        scale_client_t *c = &w->cl[i];
        if (p == SCALE_CONNECT && c->state == C_IDLE) {
            enqueue(w, i);
        } else if (p == SCALE_RENDEZVOUS && c->state == C_READY) {
            snprintf(key, sizeof(key), "bench/addr/%u", c->id);
            scale_addr_value(c->id, val);
            client_send(w, c, WEFT__STORE_SET, REQ_SET_ADDR, key, val, sizeof(val));
        } else if (p == SCALE_WATCH && c->state == C_READY) {
            client_send(w, c, WEFT__STORE_WATCH, REQ_WATCH, WATCH_PREFIX, NULL, 0);
        }
    }
}

/* Reports the phase under way once it is over: every client done, one failed, or late. */
static int phase_report_if_over(worker_t *w)
{
    bool late = weft__now_ms() >= w->deadline_ms;
    if (w->phase == SCALE_QUIT || (w->done[w->phase] < w->count && w->failed == 0 && !late)) {
        return 0;
    }
    w->rep.phase = w->phase;
    w->rep.count = w->count;
    w->rep.done = w->done[w->phase];
    w->rep.failed = w->failed;
    w->rep.timed_out = w->done[w->phase] < w->count && w->failed == 0;
    w->phase = SCALE_QUIT;
    return write(w->report_fd, &w->rep, sizeof(w->rep)) == (ssize_t)sizeof(w->rep) ? 0 : -1;
}

static int loop_timeout(const worker_t *w)
{
    uint64_t now = weft__now_ms(), next = UINT64_MAX;
    if (w->phase != SCALE_QUIT) {
        next = w->deadline_ms;
    }
    if (w->next_retry_ms != 0 && w->next_retry_ms < next) {
        next = w->next_retry_ms;
    }
    return next == UINT64_MAX ? -1 : next <= now ? 0 : (int)(next - now);
}

/* The epoll loop, until the parent says quit (0) or goes away (1). */
static int worker_loop(worker_t *w, int cmd_fd)
{
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(w->ep, evs, 256, loop_timeout(w));
        if (n < 0 && errno != EINTR) {
            perror("weft-store-scale: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == CMD_TAG) {
                uint8_t cmd;
                if (read(cmd_fd, &cmd, 1) != 1 || cmd >= SCALE_NPHASES) {
                    return 1;
                }
                if (cmd == SCALE_QUIT) {
                    return 0;
                }
                phase_begin(w, (scale_phase_t)cmd);
                continue;
            }
            scale_client_t *c = &w->cl[evs[i].data.u64];
            if (c->fd >= 0 && (evs[i].events & EPOLLOUT)) {
                client_writable(w, c);
            }
            if (c->fd >= 0 && c->state != C_CONNECTING &&
                (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
                client_readable(w, c);
            }
        }
        resume_paused(w);
        start_handshakes(w);
        if (phase_report_if_over(w) != 0) {
            return 1;
        }
    }
}

int scale_worker(const scale_opts_t *o, int first, int count, int cmd_fd, int report_fd)
{
    worker_t w = {.o = o, .count = count, .report_fd = report_fd, .rng = (unsigned)first + 1};
    w.cl = calloc((size_t)count, sizeof(*w.cl));
    w.queue = calloc((size_t)count, sizeof(*w.queue));
    w.ep = epoll_create1(EPOLL_CLOEXEC);
    if (w.cl == NULL || w.queue == NULL || w.ep < 0) {
        perror("weft-store-scale: worker set-up");
        return 1;
    }
    for (int i = 0; i < count; i++) {
        w.cl[i] = (scale_client_t){.fd = -1, .id = (uint32_t)(first + i), .pause_ms = PAUSE_MIN_MS};
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = CMD_TAG};
    int rc = epoll_ctl(w.ep, EPOLL_CTL_ADD, cmd_fd, &ev) == 0 ? worker_loop(&w, cmd_fd) : 1;
    for (int i = 0; i < count; i++) {
        if (w.cl[i].fd >= 0) {
            close(w.cl[i].fd);
        }
        weft__store_buf_free(&w.cl[i].out);
    }
    free(w.cl);
    free(w.queue);
    close(w.ep);
    return rc;
}
