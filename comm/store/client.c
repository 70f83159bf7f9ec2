/*
 * The rendezvous store client. One request at a time per connection, every wait bounded
 * by a deadline; a client is not thread-safe (use one per thread). A failure in the
 * middle of an exchange leaves the byte stream out of step, so the client is then marked
 * broken and later calls fail with WEFT_ERR_IO. Connections that share a health record
 * are broken together when one of them loses the store.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/store/proto.h"
#include "util/clock.h"
#include "util/parse.h"

#define RBUF_MIN 65536

struct weft_store_client {
    int fd;
    bool broken;
    bool watching;
    int err; /* errno of the last failed socket call; 0: the server closed */
    const weft_logger_t *lg;
    weft_store_health_t *health; /* shared with the process's other connections, or NULL */
    char addr[128];
    uint8_t *rbuf; /* received bytes not yet consumed */
    size_t rlen, rcap;
    size_t frame; /* bytes of the frame last returned by read_frame() */
    weft_store_buf_t wbuf;
    /* After the handshake every frame carries a tag (proto.h): ours, and the store's. */
    bool sealed;
    bool forged; /* a frame from the store failed its tag check */
    weft_store_dir_t tx, rx;
};

/* Waits for @p events; WEFT_INPROGRESS once the deadline has passed. */
static weft_status_t wait_fd(weft_store_client_t *c, short events, uint64_t deadline)
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

static weft_status_t send_all(weft_store_client_t *c, const uint8_t *p, size_t len,
                              uint64_t deadline)
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
static weft_status_t recv_some(weft_store_client_t *c, size_t need)
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

/* Drops the frame last returned by read_frame(). */
static void consume(weft_store_client_t *c)
{
    memmove(c->rbuf, c->rbuf + c->frame, c->rlen - c->frame);
    c->rlen -= c->frame;
    c->frame = 0;
}

/*
 * The next whole frame; *p points into rbuf until consume(). WEFT_INPROGRESS when none
 * has arrived by the deadline (a deadline already passed: one nonblocking try).
 */
static weft_status_t read_frame(weft_store_client_t *c, uint64_t deadline, weft_store_msg_t *type,
                                const uint8_t **p, uint32_t *len)
{
    for (;;) {
        size_t need = WEFT__STORE_HDR_LEN;
        if (c->rlen >= WEFT__STORE_HDR_LEN) {
            if (weft__store_hdr_decode(c->rbuf, len, type) != WEFT_OK) {
                return WEFT_ERR_PROTOCOL;
            }
            need += *len + (c->sealed ? WEFT__STORE_TAG_LEN : 0);
            if (c->rlen >= need) {
                if (c->sealed &&
                    !weft__store_tag_check(&c->rx, c->rbuf, c->rbuf + WEFT__STORE_HDR_LEN, *len,
                                           c->rbuf + need - WEFT__STORE_TAG_LEN)) {
                    c->forged = true;
                    return WEFT_ERR_PROTOCOL;
                }
                *p = c->rbuf + WEFT__STORE_HDR_LEN;
                c->frame = need;
                return WEFT_OK;
            }
        }
        weft_status_t st = recv_some(c, need);
        if (st == WEFT_INPROGRESS) {
            st = wait_fd(c, POLLIN, deadline);
        }
        if (st != WEFT_OK) {
            return st;
        }
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
    c->health = h;
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

/* The store is lost to every connection sharing @p h: the first to see it says why. */
static void health_lost(weft_store_health_t *h, const char *what, const char *why)
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

/* Marks the connection unusable. A lost connection (the store closed it, a socket call
 * failed, no answer in time) loses the store for every connection sharing its health,
 * whose owner reports it; anything else, and a connection of its own, is logged here. */
static weft_status_t client_fail(weft_store_client_t *c, weft_status_t st, const char *what)
{
    const char *why = st == WEFT_ERR_IO && c->err == 0 ? "the store closed the connection"
                      : st == WEFT_ERR_IO              ? strerror(c->err)
                      : c->forged ? "a frame failed its integrity check (altered, injected, "
                                    "replayed or reordered on the way)"
                                  : weft_status_str(st);
    if (c->health != NULL && (st == WEFT_ERR_IO || st == WEFT_ERR_TIMEOUT)) {
        health_lost(c->health, what, why);
    } else {
        WEFT_ERROR(c->lg, "store %s: %s: %s", c->addr, what, why);
    }
    c->broken = true;
    return st;
}

/* Whether @p c may still be used: not broken, and its store not lost by another. */
static bool usable(weft_store_client_t *c)
{
    if (!c->broken && weft__store_lost_ns(c->health) != 0) {
        c->broken = true;
    }
    return !c->broken;
}

/*
 * One request and its RESP. The server answers within @p wait_ms (a GET's own wait)
 * plus WEFT__STORE_IO_TIMEOUT_MS, or the call fails with WEFT_ERR_TIMEOUT. On WEFT_OK,
 * *status is the server's answer and *data (into rbuf) its data until consume().
 */
static weft_status_t call(weft_store_client_t *c, weft_store_msg_t type, const char *key,
                          const void *rest, size_t rest_len, uint32_t wait_ms,
                          weft_status_t *status, const uint8_t **data, size_t *dlen)
{
    uint64_t deadline = weft__now_ms() + WEFT__STORE_IO_TIMEOUT_MS;
    c->wbuf.len = 0;
    weft_status_t st = weft__store_frame_kv(&c->wbuf, type, key, strlen(key), rest, rest_len);
    if (st == WEFT_OK) {
        st = weft__store_seal(&c->wbuf, 0, &c->tx);
    }
    if (st != WEFT_OK) {
        return st;
    }
    st = send_all(c, c->wbuf.data, c->wbuf.len, deadline);
    if (st != WEFT_OK) {
        return client_fail(c, st, "sending a request failed");
    }
    weft_store_msg_t rtype;
    const uint8_t *p;
    uint32_t len;
    st = read_frame(c, deadline + wait_ms, &rtype, &p, &len);
    if (st == WEFT_INPROGRESS) {
        return client_fail(c, WEFT_ERR_TIMEOUT, "no answer");
    }
    if (st == WEFT_OK && (rtype != WEFT__STORE_RESP ||
                          weft__store_resp_decode(p, len, status, data, dlen) != WEFT_OK)) {
        st = WEFT_ERR_PROTOCOL;
    }
    return st == WEFT_OK ? WEFT_OK : client_fail(c, st, "reading the answer failed");
}

/* Common checks of a request call. */
static weft_status_t check_request(weft_store_client_t *c, const char *key)
{
    if (c == NULL || key == NULL || key[0] == '\0' ||
        strnlen(key, WEFT_STORE_MAX_KEY + 1) > WEFT_STORE_MAX_KEY || c->watching) {
        return WEFT_ERR_INVALID_ARG;
    }
    return usable(c) ? WEFT_OK : WEFT_ERR_IO;
}

weft_status_t weft__store_set(weft_store_client_t *c, const char *key, const void *val, size_t len)
{
    weft_status_t st = check_request(c, key), status;
    const uint8_t *data;
    size_t dlen;
    if (st == WEFT_OK && ((val == NULL && len > 0) || len > WEFT__STORE_MAX_VALUE)) {
        st = WEFT_ERR_INVALID_ARG;
    }
    if (st == WEFT_OK) {
        st = call(c, WEFT__STORE_SET, key, val, len, 0, &status, &data, &dlen);
    }
    if (st == WEFT_OK) {
        consume(c);
        st = status;
    }
    return st;
}

weft_status_t weft__store_get(weft_store_client_t *c, const char *key, int timeout_ms, void **val,
                              size_t *len)
{
    weft_status_t st = check_request(c, key), status;
    const uint8_t *data;
    size_t dlen;
    if (st != WEFT_OK || timeout_ms < 0 || val == NULL || len == NULL) {
        return st != WEFT_OK ? st : WEFT_ERR_INVALID_ARG;
    }
    uint8_t wait[4] = {(uint8_t)(timeout_ms >> 24), (uint8_t)(timeout_ms >> 16),
                       (uint8_t)(timeout_ms >> 8), (uint8_t)timeout_ms};
    st = call(c, WEFT__STORE_GET, key, wait, sizeof(wait), (uint32_t)timeout_ms, &status, &data,
              &dlen);
    if (st != WEFT_OK) {
        return st;
    }
    if (status == WEFT_OK) {
        uint8_t *copy = malloc(dlen + 1); /* NUL-terminated for text values */
        if (copy == NULL) {
            status = WEFT_ERR_NO_MEMORY;
        } else {
            memcpy(copy, data, dlen);
            copy[dlen] = '\0';
            *val = copy;
            *len = dlen;
        }
    }
    consume(c);
    return status;
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
    weft_status_t st = check_request(c, key), status;
    const uint8_t *data;
    size_t dlen;
    if (st != WEFT_OK) {
        return st;
    }
    uint8_t be[8];
    weft__store_set_u64(be, (uint64_t)delta);
    st = call(c, WEFT__STORE_ADD, key, be, sizeof(be), 0, &status, &data, &dlen);
    if (st != WEFT_OK) {
        return st;
    }
    if (status == WEFT_OK && dlen != 8) {
        consume(c);
        return client_fail(c, WEFT_ERR_PROTOCOL, "malformed add result");
    }
    if (status == WEFT_OK && result != NULL) {
        *result = (int64_t)weft__store_get_u64(data);
    }
    consume(c);
    return status;
}

weft_status_t weft__store_set_nx(weft_store_client_t *c, const char *key, const void *val,
                                 size_t len, void **winner, size_t *winner_len, int *created)
{
    weft_status_t st = check_request(c, key), status;
    const uint8_t *data;
    size_t dlen;
    if (st == WEFT_OK && ((val == NULL && len > 0) || len > WEFT__STORE_MAX_VALUE ||
                          winner == NULL || winner_len == NULL)) {
        st = WEFT_ERR_INVALID_ARG;
    }
    if (st == WEFT_OK) {
        st = call(c, WEFT__STORE_SET_NX, key, val, len, 0, &status, &data, &dlen);
    }
    if (st != WEFT_OK) {
        return st;
    }
    if (status == WEFT_OK && dlen < 1) {
        consume(c);
        return client_fail(c, WEFT_ERR_PROTOCOL, "malformed set_nx result");
    }
    if (status == WEFT_OK) {
        uint8_t *copy = malloc(dlen); /* value + NUL, like get */
        if (copy == NULL) {
            consume(c);
            return WEFT_ERR_NO_MEMORY;
        }
        memcpy(copy, data + 1, dlen - 1);
        copy[dlen - 1] = '\0';
        if (created != NULL) {
            *created = data[0] != 0;
        }
        *winner = copy;
        *winner_len = dlen - 1;
    }
    consume(c);
    return status;
}

weft_status_t weft__store_lease(weft_store_client_t *c, const char *key, const void *val,
                                size_t len, uint32_t ttl_ms)
{
    weft_status_t st = check_request(c, key), status;
    const uint8_t *data;
    size_t dlen;
    if (st == WEFT_OK && ((val == NULL && len > 0) || len > WEFT__STORE_MAX_VALUE)) {
        st = WEFT_ERR_INVALID_ARG;
    }
    uint8_t *rest = st == WEFT_OK ? malloc(4 + len) : NULL;
    if (st == WEFT_OK && rest == NULL) {
        st = WEFT_ERR_NO_MEMORY;
    }
    if (st == WEFT_OK) {
        rest[0] = (uint8_t)(ttl_ms >> 24);
        rest[1] = (uint8_t)(ttl_ms >> 16);
        rest[2] = (uint8_t)(ttl_ms >> 8);
        rest[3] = (uint8_t)ttl_ms;
        if (len > 0) {
            memcpy(rest + 4, val, len);
        }
        st = call(c, WEFT__STORE_LEASE, key, rest, 4 + len, 0, &status, &data, &dlen);
    }
    free(rest);
    if (st == WEFT_OK) {
        consume(c);
        st = status;
    }
    return st;
}

weft_status_t weft__store_delete(weft_store_client_t *c, const char *key)
{
    weft_status_t st = check_request(c, key), status;
    const uint8_t *data;
    size_t dlen;
    if (st == WEFT_OK) {
        st = call(c, WEFT__STORE_DELETE, key, NULL, 0, 0, &status, &data, &dlen);
    }
    if (st == WEFT_OK) {
        consume(c);
        st = status;
    }
    return st;
}

weft_status_t weft__store_watch(weft_store_client_t *c, const char *prefix)
{
    weft_status_t status;
    const uint8_t *data;
    size_t dlen;
    if (c == NULL || prefix == NULL ||
        strnlen(prefix, WEFT_STORE_MAX_KEY + 1) > WEFT_STORE_MAX_KEY || c->watching) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (!usable(c)) {
        return WEFT_ERR_IO;
    }
    weft_status_t st = call(c, WEFT__STORE_WATCH, prefix, NULL, 0, 0, &status, &data, &dlen);
    if (st != WEFT_OK) {
        return st;
    }
    consume(c);
    c->watching = status == WEFT_OK;
    return status;
}

weft_status_t weft__store_next_event(weft_store_client_t *c, int timeout_ms, char **key, void **val,
                                     size_t *len)
{
    if (c == NULL || !c->watching || timeout_ms < 0 || key == NULL || val == NULL || len == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (!usable(c)) {
        return WEFT_ERR_IO;
    }
    weft_store_msg_t type;
    const uint8_t *p, *rest;
    const char *k;
    uint32_t flen;
    size_t klen, vlen;
    weft_status_t st = read_frame(c, weft__now_ms() + (uint64_t)timeout_ms, &type, &p, &flen);
    if (st == WEFT_INPROGRESS) {
        return st;
    }
    if (st == WEFT_OK && (type != WEFT__STORE_EVENT ||
                          weft__store_kv_decode(p, flen, &k, &klen, &rest, &vlen) != WEFT_OK)) {
        st = WEFT_ERR_PROTOCOL;
    }
    if (st != WEFT_OK) {
        return client_fail(c, st, "reading a watch event failed");
    }
    char *kcopy = malloc(klen + 1);
    uint8_t *vcopy = malloc(vlen + 1);
    if (kcopy == NULL || vcopy == NULL) {
        free(kcopy);
        free(vcopy);
        return WEFT_ERR_NO_MEMORY; /* the event stays queued */
    }
    memcpy(kcopy, k, klen);
    kcopy[klen] = '\0';
    memcpy(vcopy, rest, vlen);
    vcopy[vlen] = '\0';
    consume(c);
    *key = kcopy;
    *val = vcopy;
    *len = vlen;
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
static weft_status_t try_connect(weft_store_client_t *c, const struct addrinfo *ai,
                                 uint64_t deadline)
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

/* Connects, retrying with a growing pause until the deadline: the server may start late. */
static weft_status_t tcp_connect(weft_store_client_t *c, const char *host, const char *port,
                                 int timeout_ms, uint64_t deadline)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    unsigned pause_ms = 10;
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
            WEFT_ERROR(c->lg, "store %s: cannot resolve %s: %s", c->addr, host, gai_strerror(rc));
            return WEFT_ERR_INVALID_ARG;
        }
        uint64_t now = weft__now_ms();
        if (now >= deadline) {
            WEFT_ERROR(c->lg, "store %s: cannot connect, tried for %llu ms: %s", c->addr,
                       (unsigned long long)(now - (deadline - (uint64_t)timeout_ms)),
                       rc != 0 ? gai_strerror(rc) : strerror(c->err));
            return WEFT_ERR_TIMEOUT;
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
static weft_status_t handshake(weft_store_client_t *c, const char *token, weft_store_role_t role,
                               uint32_t id, uint64_t deadline)
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
        st = weft__store_session_secret(token, role, id, secret);
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
            WEFT_ERROR(c->lg,
                       "store %s: refusing the store: it could not prove that it holds the job "
                       "token (not the job's store, or one in the middle)",
                       c->addr);
            c->broken = true;
            status = WEFT_ERR_AUTH;
        } else if (st == WEFT_ERR_AUTH) {
            WEFT_ERROR(c->lg, "store %s: the store refused our job token", c->addr);
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

static weft_status_t connect_as(const char *hostport, const char *token, weft_store_role_t role,
                                uint32_t id, int timeout_ms, const weft_logger_t *lg,
                                weft_store_client_t **client)
{
    char host[256], port[16];
    if (hostport == NULL || token == NULL || token[0] == '\0' || timeout_ms < 0 || client == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (!split_hostport(hostport, host, port)) {
        WEFT_ERROR(lg, "store: address '%s' is not host:port", hostport);
        return WEFT_ERR_INVALID_ARG;
    }
    weft_store_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    c->lg = lg;
    snprintf(c->addr, sizeof(c->addr), "%s", hostport);
    uint64_t begin = weft__now_ms(), deadline = begin + (uint64_t)timeout_ms;
    weft_status_t st;
    for (unsigned pause_ms = 10;; pause_ms = pause_ms < 200 ? pause_ms * 2 : 200) {
        c->fd = -1;
        st = tcp_connect(c, host, port, timeout_ms, deadline);
        if (st == WEFT_OK) {
            /* Connected at the last moment: still give the greeting a fair chance. */
            uint64_t min_deadline = weft__now_ms() + 1000;
            st = handshake(c, token, role, id, deadline > min_deadline ? deadline : min_deadline);
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
                       c->addr, (unsigned long long)(now - begin));
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
        weft__store_close(c);
        return st;
    }
    *client = c;
    return WEFT_OK;
}

weft_status_t weft__store_connect(const char *hostport, const char *token, int timeout_ms,
                                  const weft_logger_t *lg, weft_store_client_t **client)
{
    return connect_as(hostport, token, WEFT__STORE_ROLE_LAUNCHER, 0, timeout_ms, lg, client);
}

weft_status_t weft__store_connect_member(const char *hostport, const char *token, int member,
                                         int timeout_ms, const weft_logger_t *lg,
                                         weft_store_client_t **client)
{
    uint32_t id = member >= 0 ? (uint32_t)member : WEFT__STORE_NO_ID;
    return connect_as(hostport, token, WEFT__STORE_ROLE_MEMBER, id, timeout_ms, lg, client);
}

int weft__store_fd(const weft_store_client_t *c)
{
    return c != NULL ? c->fd : -1;
}

void weft__store_close(weft_store_client_t *c)
{
    if (c == NULL) {
        return;
    }
    if (c->fd >= 0) {
        close(c->fd);
    }
    free(c->rbuf);
    weft__store_buf_free(&c->wbuf);
    OPENSSL_cleanse(c, sizeof(*c)); /* the session's keys */
    free(c);
}
