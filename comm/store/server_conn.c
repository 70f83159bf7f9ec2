/*
 * The store server's connections: queueing and flushing their output (sealed once
 * authenticated, within the caps on what each and all of them may hold), reading their
 * frames, and opening and closing them, with the small pool of those that have yet to
 * authenticate (weft__store_srv_open). Called from the loop of server.c with the
 * server's mutex held.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/store/server.h"
#include "util/array.h"
#include "util/clock.h"

#define OUT_HIGH_WATER (4 * WEFT_STORE_MAX_FRAME) /* stop reading requests above this */
#define FRAMES_PER_TURN 32                        /* fairness between busy clients */

void weft__store_srv_touch(weft_store_server_t *s, store_conn_t *c)
{
    if (!c->touched) {
        c->touched = true;
        c->touch_next = s->touched;
        s->touched = c;
    }
}

void weft__store_srv_kill(weft_store_server_t *s, store_conn_t *c)
{
    c->dead = true;
    weft__store_srv_touch(s, c);
}

void weft__store_srv_lease_armed(weft_store_server_t *s, const store_conn_t *c)
{
    if (c->lease_deadline_ms < s->leases_due_ms) {
        s->leases_due_ms = c->lease_deadline_ms;
    }
}

/* ---- connection output ---- */

size_t weft__store_srv_pending(const store_conn_t *c)
{
    return c->out.len - c->out_off;
}

/* Output buffers larger than this are given back once emptied: a burst of events (a
 * watcher's first pass over the keys, a large GET) would otherwise pin its peak for the
 * connection's life (six idle watchers held some 200 MB). */
#define OUT_KEEP (64u * 1024)

static void conn_compact(store_conn_t *c)
{
    if (c->out_off == c->out.len) {
        c->out.len = c->out_off = 0;
        if (c->out.cap > OUT_KEEP) {
            weft__store_buf_free(&c->out);
        }
    } else if (c->out_off > c->out.len / 2) {
        memmove(c->out.data, c->out.data + c->out_off, weft__store_srv_pending(c));
        c->out.len -= c->out_off;
        c->out_off = 0;
    }
}

/* Drops what a connection about to close still had to send. */
static void conn_drop_output(weft_store_server_t *s, store_conn_t *c)
{
    s->queued -= weft__store_srv_pending(c);
    c->out.len = c->out_off = 0;
}

/* The connection with the most output queued. */
static store_conn_t *largest_queue(weft_store_server_t *s)
{
    store_conn_t *big = NULL;
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (!c->dead && (big == NULL || weft__store_srv_pending(c) > weft__store_srv_pending(big))) {
            big = c;
        }
    }
    return big;
}

/*
 * A frame was appended (or failed to be, st) to a connection that had @p before bytes
 * pending: seal it once authenticated, and enforce the caps on its output and on all.
 */
static void conn_queued(weft_store_server_t *s, store_conn_t *c, weft_status_t st, size_t start,
                        size_t before)
{
    if (st == WEFT_OK && c->sealed) {
        st = weft__store_seal(&c->out, start, &c->tx);
    }
    s->queued += weft__store_srv_pending(c) - before;
    if (st == WEFT_OK && s->queued > WEFT__STORE_MAX_QUEUED) {
        /* The watchers that read slowest hold the most: close the worst of them. */
        store_conn_t *big = largest_queue(s);
        WEFT_WARN(s->lg,
                  "store: closing %s: the store's output queues are full (%zu bytes), "
                  "and it has the most of it (%zu bytes) unread",
                  big->peer, s->queued, weft__store_srv_pending(big));
        conn_drop_output(s, big);
        weft__store_srv_kill(s, big);
    }
    weft__store_srv_touch(s, c);
    if (c->dead) {
        return;
    }
    if (st != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: cannot queue a reply to %s: %s", c->peer, weft_status_str(st));
        weft__store_srv_kill(s, c);
    } else if (weft__store_srv_pending(c) > WEFT__STORE_MAX_OUT) {
        WEFT_WARN(s->lg, "store: closing %s: it does not read its events (%zu bytes pending)",
                  c->peer, weft__store_srv_pending(c));
        weft__store_srv_kill(s, c);
    }
}

void weft__store_srv_resp_id(weft_store_server_t *s, store_conn_t *c, uint32_t id,
                             weft_status_t status, const void *data, size_t len)
{
    conn_compact(c);
    size_t start = c->out.len, before = weft__store_srv_pending(c);
    weft_status_t st = weft__store_frame_resp(&c->out, status, data, len);
    if (st == WEFT_OK) {
        weft__store_frame_set_id(&c->out, start, id);
    }
    conn_queued(s, c, st, start, before);
}

void weft__store_srv_resp(weft_store_server_t *s, store_conn_t *c, weft_status_t status,
                          const void *data, size_t len)
{
    weft__store_srv_resp_id(s, c, c->in_id, status, data, len);
}

void weft__store_srv_event(weft_store_server_t *s, store_conn_t *c, const store_entry_t *e)
{
    conn_compact(c);
    size_t start = c->out.len, before = weft__store_srv_pending(c);
    conn_queued(s, c,
                weft__store_frame_kv(&c->out, WEFT__STORE_EVENT, e->key, e->klen, e->val, e->vlen),
                start, before);
}

void weft__store_srv_flush(weft_store_server_t *s, store_conn_t *c)
{
    while (!c->dead && weft__store_srv_pending(c) > 0 && c->fd >= 0) { /* a fake one's stays queued */
        ssize_t n =
            send(c->fd, c->out.data + c->out_off, weft__store_srv_pending(c), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                WEFT_DEBUG(s->lg, "store: send to %s failed: %m", c->peer);
                weft__store_srv_kill(s, c);
            }
            break;
        }
        c->out_off += (size_t)n;
        s->queued -= (size_t)n;
    }
    conn_compact(c);
    if (c->closing && weft__store_srv_pending(c) == 0) {
        weft__store_srv_kill(s, c);
    }
}

/* Drops the connection's lease, and its charge on the store's memory. */
void weft__store_srv_lease_clear(weft_store_server_t *s, store_conn_t *c)
{
    if (c->lease_key != NULL) {
        s->data_bytes -= c->lease_klen + c->lease_vlen + ENTRY_OVERHEAD;
        weft__store_srv_share_sub(s, weft__store_srv_owner(c),
                                  c->lease_klen + c->lease_vlen + ENTRY_OVERHEAD);
    }
    free(c->lease_key);
    free(c->lease_val);
    c->lease_key = NULL;
    c->lease_val = NULL;
}

/* ---- reading frames ---- */

/* recv() on the socket, or on a fake connection the bytes of weft__store_server_feed. */
static ssize_t conn_recv_some(weft_store_server_t *s, store_conn_t *c, void *p, size_t want)
{
    ssize_t n;
    if (c->fd < 0) {
        n = (ssize_t)(want < s->feed_len ? want : s->feed_len);
        if (n == 0) {
            errno = EAGAIN;
            return s->feed_eof ? 0 : -1;
        }
        memcpy(p, s->feed, (size_t)n);
        s->feed += n;
        s->feed_len -= (size_t)n;
        return n;
    }
    do {
        n = recv(c->fd, p, want, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
}

/* recv() into @p p; false when the connection should stop reading this turn. */
static bool conn_recv(weft_store_server_t *s, store_conn_t *c, void *p, size_t want, size_t *got)
{
    ssize_t n = conn_recv_some(s, c, p, want);
    if (n > 0) {
        *got += (size_t)n;
        return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return false;
    }
    if (n < 0) {
        WEFT_DEBUG(s->lg, "store: recv from %s failed: %m", c->peer);
    } else if (c->hdr_fill > 0 || c->in_body) {
        WEFT_ERROR(s->lg, "store: closing %s: truncated frame", c->peer);
    } else if (c->state == CONN_AUTH) {
        WEFT_WARN(s->lg, "store: refused %s: closed without authenticating", c->peer);
    } else {
        WEFT_DEBUG(s->lg, "store: %s disconnected", c->peer);
    }
    weft__store_srv_kill(s, c);
    return false;
}

/* A header arrived: check it and make room for the body. False closes the connection. */
static bool conn_start_body(weft_store_server_t *s, store_conn_t *c)
{
    if (weft__store_hdr_decode(c->hdr, &c->in_len, &c->in_type) != WEFT_OK) {
        if (c->state == CONN_AUTH) {
            WEFT_WARN(s->lg, "store: refused %s: not a weft store client", c->peer);
        } else {
            WEFT_ERROR(s->lg, "store: closing %s: malformed or oversized frame header", c->peer);
        }
        return false;
    }
    if (c->state == CONN_AUTH &&
        (c->in_type != WEFT__STORE_AUTH || c->in_len != WEFT__STORE_AUTH_LEN)) {
        WEFT_WARN(s->lg, "store: refused %s: request before authentication", c->peer);
        return false;
    }
    size_t want = c->in_len + (c->sealed ? WEFT__STORE_TAG_LEN : 0);
    if (c->in_cap < want) {
        uint8_t *in = realloc(c->in, want);
        if (in == NULL) {
            WEFT_ERROR(s->lg, "store: closing %s: no memory for a %u-byte frame", c->peer,
                       c->in_len);
            return false;
        }
        c->in = in;
        c->in_cap = want;
    }
    c->in_body = true;
    c->in_fill = 0;
    return true;
}

bool weft__store_srv_wants_input(const store_conn_t *c)
{
    return !c->dead && !c->closing && weft__store_srv_pending(c) <= OUT_HIGH_WATER;
}

void weft__store_srv_read(weft_store_server_t *s, store_conn_t *c)
{
    for (int frames = 0; frames < FRAMES_PER_TURN && weft__store_srv_wants_input(c);) {
        if (!c->in_body) {
            if (!conn_recv(s, c, c->hdr + c->hdr_fill, sizeof(c->hdr) - c->hdr_fill,
                           &c->hdr_fill)) {
                return;
            }
            if (c->hdr_fill < sizeof(c->hdr)) {
                continue;
            }
            if (!conn_start_body(s, c)) {
                weft__store_srv_kill(s, c);
                return;
            }
        }
        size_t want = c->in_len + (c->sealed ? WEFT__STORE_TAG_LEN : 0);
        if (c->in_fill < want) {
            if (!conn_recv(s, c, c->in + c->in_fill, want - c->in_fill, &c->in_fill)) {
                return;
            }
            if (c->in_fill < want) {
                continue;
            }
        }
        c->hdr_fill = 0;
        c->in_body = false;
        frames++;
        if (c->sealed &&
            !weft__store_tag_check(&c->rx, c->hdr, c->in, c->in_len, c->in + c->in_len)) {
            /* Nothing of the frame is applied: the store is as it was. */
            WEFT_ERROR(s->lg,
                       "store: closing %s: frame %llu failed its integrity check (altered, "
                       "injected, replayed or reordered on the way)",
                       c->peer, (unsigned long long)c->rx.seq);
            weft__store_srv_kill(s, c);
            return;
        }
        c->in_id = weft__store_hdr_id(c->hdr);
        if (c->state == CONN_AUTH) {
            weft__store_srv_auth(s, c);
        } else {
            s->writer = weft__store_srv_owner(c); /* whose share its writes take */
            weft__store_srv_request(s, c);
            s->writer = -1;
        }
        if (c->in_cap > 65536) { /* keep one big SET from pinning a megabyte per client */
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        }
    }
}

/* ---- opening and closing connections ---- */

/* Leaves the unauthenticated pool: authenticated, or closing. */
static void unauth_remove(weft_store_server_t *s, store_conn_t *c)
{
    if (c->unauth_prev == NULL && s->unauth_head != c) {
        return; /* not on it */
    }
    if (c->unauth_prev != NULL) {
        c->unauth_prev->unauth_next = c->unauth_next;
    } else {
        s->unauth_head = c->unauth_next;
    }
    if (c->unauth_next != NULL) {
        c->unauth_next->unauth_prev = c->unauth_prev;
    } else {
        s->unauth_tail = c->unauth_prev;
    }
    c->unauth_prev = c->unauth_next = NULL;
    s->nunauth--;
}

void weft__store_srv_authenticated(weft_store_server_t *s, store_conn_t *c)
{
    unauth_remove(s, c);
    s->nauth++;
}

void weft__store_srv_free(weft_store_server_t *s, store_conn_t *c)
{
    unauth_remove(s, c);
    if (c->state == CONN_READY) {
        s->nauth--;
    }
    weft__store_srv_unwatch(s, c);
    while (c->waits != NULL) {
        weft__store_srv_wait_free(s, c->waits);
    }
    weft__store_srv_scans_drop(s, c);
    weft__store_srv_lease_clear(s, c);
    s->queued -= weft__store_srv_pending(c);
    if (c->fd >= 0) {
        /* Taken out of the epoll set first: closing alone does not when another process
         * holds the socket too (a rank weftrun forked has it until its exec), and epoll
         * would then go on reporting a connection that is freed. */
        if (c->ev != 0) {
            (void)epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        }
        close(c->fd);
    }
    s->conns[c->slot] = s->conns[--s->nconns];
    s->conns[c->slot]->slot = c->slot;
    free(c->in);
    weft__store_buf_free(&c->out);
    OPENSSL_cleanse(c, sizeof(*c)); /* the session's keys */
    free(c);
}

bool weft__store_srv_busy_log_due(weft_store_server_t *s)
{
    uint64_t now = weft__now_ms();
    if (now < s->busy_logged_ms + 1000) {
        return false;
    }
    s->busy_logged_ms = now;
    return true;
}

/* Tells @p c that the store is busy (a client of the job tries again) and drops it. */
static void unauth_drop(weft_store_server_t *s, store_conn_t *c, const char *why)
{
    if (weft__store_srv_busy_log_due(s)) {
        WEFT_WARN(s->lg, "store: dropping %s: %s", c->peer, why);
    }
    unauth_remove(s, c);
    weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
    weft__store_srv_flush(s, c);
    conn_drop_output(s, c);
    weft__store_srv_kill(s, c);
}

/* Whether the oldest handshake in the pool is old enough to give way to a newcomer. */
static bool unauth_stale(const weft_store_server_t *s, uint64_t now)
{
    return s->unauth_head != NULL && now >= s->unauth_head->opened_ms + WEFT__STORE_UNAUTH_STALE_MS;
}

/* Whether a connection may be accepted now: the pool of those still authenticating has
 * room, or its oldest is stale and gives way (unauth_admit). */
bool weft__store_srv_accept_ready(const weft_store_server_t *s, uint64_t now)
{
    return now >= s->accept_resume_ms &&
           (s->nunauth < WEFT__STORE_MAX_UNAUTH || unauth_stale(s, now));
}

/*
 * Admits @p c (just accepted from @p host) to the pool of connections that have yet to
 * authenticate, or drops it. The pool (WEFT__STORE_MAX_UNAUTH) and one address's share of
 * it (WEFT__STORE_MAX_UNAUTH_PER_ADDR) are small, and a handshake has a short deadline:
 * strangers who open sockets and say nothing cannot take the slots of the job's
 * processes. A full pool stops accepting (the kernel's backlog holds the rest) until a
 * handshake ends or the oldest goes stale (WEFT__STORE_UNAUTH_STALE_MS), when it gives way. A full
 * share drops the address's oldest if stale, else the newcomer; either is told that
 * the store is busy, so that a client of the job tries again.
 */
static bool unauth_admit(weft_store_server_t *s, store_conn_t *c)
{
    uint64_t now = weft__now_ms();
    size_t same = 0;
    store_conn_t *oldest_same = NULL;
    for (store_conn_t *u = s->unauth_head; u != NULL; u = u->unauth_next) {
        if (!u->dead && strcmp(u->host, c->host) == 0) {
            same++;
            oldest_same = oldest_same == NULL ? u : oldest_same;
        }
    }
    if (same >= WEFT__STORE_MAX_UNAUTH_PER_ADDR) {
        if (now < oldest_same->opened_ms + WEFT__STORE_UNAUTH_STALE_MS) {
            return false;
        }
        unauth_drop(s, oldest_same, "too many connections from its address have not authenticated");
    }
    if (s->nunauth >= WEFT__STORE_MAX_UNAUTH && unauth_stale(s, now)) {
        unauth_drop(s, s->unauth_head, "too many connections have not authenticated");
    }
    if (s->nunauth >= WEFT__STORE_MAX_UNAUTH) {
        return false;
    }
    c->unauth_prev = s->unauth_tail;
    if (s->unauth_tail != NULL) {
        s->unauth_tail->unauth_next = c;
    } else {
        s->unauth_head = c;
    }
    s->unauth_tail = c;
    s->nunauth++;
    return true;
}

/*
 * The unit of the per-address cap for a peer at @p host: the address, but all of
 * 127.0.0.0/8 as one (every one of its 16 million addresses reaches this host, so a
 * local flood could otherwise take a share per address) and an IPv6 address's /64 (what
 * one machine is given). An IPv4 address in IPv6 form counts as the IPv4 one.
 */
void weft__store_srv_addr_unit(const char *host, char *out, size_t len)
{
    unsigned char a[16];
    if (inet_pton(AF_INET6, host, a) == 1) {
        static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, v4mapped, sizeof(v4mapped)) != 0) {
            snprintf(out, len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x::/64", a[0], a[1], a[2], a[3],
                     a[4], a[5], a[6], a[7]);
            return;
        }
        memmove(a, a + 12, 4);
    } else if (inet_pton(AF_INET, host, a) != 1) {
        snprintf(out, len, "%s", host); /* not an address (a test's fake peer): itself */
        return;
    }
    if (a[0] == 127) {
        snprintf(out, len, "127.0.0.0/8");
    } else {
        snprintf(out, len, "%u.%u.%u.%u", a[0], a[1], a[2], a[3]);
    }
}

/* A new connection: greet it with the nonce it must prove the token against. */
void weft__store_srv_open(weft_store_server_t *s, int fd, const char *peer, const char *host)
{
    store_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL ||
        !weft__array_reserve((void **)&s->conns, &s->cap_conns, s->nconns + 1, sizeof(*s->conns))) {
        WEFT_ERROR(s->lg, "store: no memory for a new connection");
        free(c);
        if (fd >= 0) {
            close(fd);
        }
        return;
    }
    c->fd = fd;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    weft__store_srv_addr_unit(host, c->host, sizeof(c->host));
    c->opened_ms = weft__now_ms();
    c->state = CONN_AUTH;
    c->deadline_ms = c->opened_ms + WEFT__STORE_AUTH_TIMEOUT_MS;
    c->slot = s->nconns;
    s->conns[s->nconns++] = c;
    weft__store_srv_touch(s, c);
    if (!unauth_admit(s, c)) {
        /* Closed before the greeting, which a client of the job takes for "busy, try
         * again"; the log says it once a second. */
        if (weft__store_srv_busy_log_due(s)) {
            WEFT_WARN(s->lg,
                      "store: dropping %s: too many connections from its address have not "
                      "authenticated (%zu in all)",
                      c->peer, s->nunauth);
        }
        weft__store_srv_kill(s, c);
        return;
    }
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            WEFT_ERROR(s->lg, "store: cannot watch the connection from %s: %m", c->peer);
            weft__store_srv_kill(s, c);
            return;
        }
        c->ev = ev.events;
    }
    uint8_t hello[WEFT__STORE_HELLO_LEN] = {WEFT__STORE_VERSION};
    if (weft__store_random(c->nonce, sizeof(c->nonce)) != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: getrandom failed: %m");
        weft__store_srv_kill(s, c);
        return;
    }
    memcpy(hello + 1, c->nonce, sizeof(c->nonce));
    if (weft__store_frame_bytes(&c->out, WEFT__STORE_HELLO, hello, sizeof(hello)) != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: no memory for a new connection");
        weft__store_srv_kill(s, c);
        return;
    }
    s->queued += weft__store_srv_pending(c);
    WEFT_DEBUG(s->lg, "store: connection from %s", c->peer);
}
