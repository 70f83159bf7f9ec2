/*
 * The rendezvous store server: one thread runs a poll() loop over nonblocking sockets.
 * One mutex guards the key-value map and the connections; the loop drops it only while
 * it sleeps in poll(), so weft__store_server_set() from the hosting process applies its
 * change under the mutex and wakes the loop through a pipe to send what it queued.
 *
 * Each connection reads one frame at a time into a buffer of at most one frame (and its
 * tag), stops reading while a GET is parked or while its pending output is large, and is
 * closed when its pending output passes WEFT__STORE_MAX_OUT, or holds the most when all
 * of them pass WEFT__STORE_MAX_QUEUED. There are at most WEFT__STORE_MAX_CONNS
 * authenticated connections and WEFT__STORE_MAX_UNAUTH others (unauth_make_room).
 * What the requests do, and the handshake, are in server_req.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/store/server.h"
#include "util/clock.h"
#include "util/parse.h"
#define OUT_HIGH_WATER (4 * WEFT_STORE_MAX_FRAME) /* stop reading requests above this */
#define FRAMES_PER_TURN 32                        /* fairness between busy clients */
#define ACCEPT_PAUSE_MS 100                       /* after accept() ran out of descriptors */

static void reap(weft_store_server_t *s);

/* ---- connection output ---- */

static size_t conn_pending(const store_conn_t *c)
{
    return c->out.len - c->out_off;
}

static void conn_compact(store_conn_t *c)
{
    if (c->out_off == c->out.len) {
        c->out.len = c->out_off = 0;
    } else if (c->out_off > c->out.len / 2) {
        memmove(c->out.data, c->out.data + c->out_off, conn_pending(c));
        c->out.len -= c->out_off;
        c->out_off = 0;
    }
}

/* Drops what a connection about to close still had to send. */
static void conn_drop_output(weft_store_server_t *s, store_conn_t *c)
{
    s->queued -= conn_pending(c);
    c->out.len = c->out_off = 0;
}

/* The connection with the most output queued. */
static store_conn_t *largest_queue(weft_store_server_t *s)
{
    store_conn_t *big = NULL;
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (!c->dead && (big == NULL || conn_pending(c) > conn_pending(big))) {
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
    s->queued += conn_pending(c) - before;
    if (st == WEFT_OK && s->queued > WEFT__STORE_MAX_QUEUED) {
        /* The watchers that read slowest hold the most: close the worst of them. */
        store_conn_t *big = largest_queue(s);
        WEFT_WARN(s->lg,
                  "store: closing %s: the store's output queues are full (%zu bytes), "
                  "and it has the most of it (%zu bytes) unread",
                  big->peer, s->queued, conn_pending(big));
        conn_drop_output(s, big);
        big->dead = true;
    }
    if (c->dead) {
        return;
    }
    if (st != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: cannot queue a reply to %s: %s", c->peer, weft_status_str(st));
        c->dead = true;
    } else if (conn_pending(c) > WEFT__STORE_MAX_OUT) {
        WEFT_WARN(s->lg, "store: closing %s: it does not read its events (%zu bytes pending)",
                  c->peer, conn_pending(c));
        c->dead = true;
    }
}

void weft__store_srv_resp(weft_store_server_t *s, store_conn_t *c, weft_status_t status,
                          const void *data, size_t len)
{
    conn_compact(c);
    size_t start = c->out.len, before = conn_pending(c);
    conn_queued(s, c, weft__store_frame_resp(&c->out, status, data, len), start, before);
}

void weft__store_srv_event(weft_store_server_t *s, store_conn_t *c, const store_entry_t *e)
{
    conn_compact(c);
    size_t start = c->out.len, before = conn_pending(c);
    conn_queued(s, c,
                weft__store_frame_kv(&c->out, WEFT__STORE_EVENT, e->key, e->klen, e->val, e->vlen),
                start, before);
}

static void conn_flush(weft_store_server_t *s, store_conn_t *c)
{
    while (!c->dead && conn_pending(c) > 0 && c->fd >= 0) { /* a fake one's stays queued */
        ssize_t n =
            send(c->fd, c->out.data + c->out_off, conn_pending(c), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                WEFT_DEBUG(s->lg, "store: send to %s failed: %m", c->peer);
                c->dead = true;
            }
            break;
        }
        c->out_off += (size_t)n;
        s->queued -= (size_t)n;
    }
    conn_compact(c);
    if (c->closing && conn_pending(c) == 0) {
        c->dead = true;
    }
}

/* Drops the connection's lease, and its charge on the store's memory. */
void weft__store_srv_lease_clear(weft_store_server_t *s, store_conn_t *c)
{
    if (c->lease_key != NULL) {
        s->data_bytes -= c->lease_klen + c->lease_vlen + ENTRY_OVERHEAD;
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
    c->dead = true;
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
    if (c->state == CONN_WATCH) {
        WEFT_ERROR(s->lg, "store: closing %s: request on a watch connection", c->peer);
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

static bool conn_wants_input(const store_conn_t *c)
{
    return !c->dead && !c->closing && !c->parked && conn_pending(c) <= OUT_HIGH_WATER;
}

static void conn_read(weft_store_server_t *s, store_conn_t *c)
{
    for (int frames = 0; frames < FRAMES_PER_TURN && conn_wants_input(c);) {
        if (!c->in_body) {
            if (!conn_recv(s, c, c->hdr + c->hdr_fill, sizeof(c->hdr) - c->hdr_fill,
                           &c->hdr_fill)) {
                return;
            }
            if (c->hdr_fill < sizeof(c->hdr)) {
                continue;
            }
            if (!conn_start_body(s, c)) {
                c->dead = true;
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
            c->dead = true;
            return;
        }
        if (c->state == CONN_AUTH) {
            weft__store_srv_auth(s, c);
        } else {
            weft__store_srv_request(s, c);
        }
        if (c->in_cap > 65536) { /* keep one big SET from pinning a megabyte per client */
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        }
    }
}

/* ---- connections and the loop ---- */

/* "host:port" of a peer into @p out, and its host alone into @p hostout (64 bytes). */
static void format_peer(const struct sockaddr_storage *sa, socklen_t len, char *out, size_t n,
                        char *hostout)
{
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getnameinfo((const struct sockaddr *)sa, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, n, "unknown peer");
        snprintf(hostout, 64, "unknown");
    } else {
        snprintf(out, n, sa->ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
        snprintf(hostout, 64, "%.63s", host);
    }
}

static void conn_free(weft_store_server_t *s, store_conn_t *c)
{
    weft__store_srv_lease_clear(s, c);
    s->queued -= conn_pending(c);
    if (c->fd >= 0) {
        close(c->fd);
    }
    free(c->in);
    weft__store_buf_free(&c->out);
    OPENSSL_cleanse(c, sizeof(*c)); /* the session's keys */
    free(c);
}

/*
 * Makes room for one more connection that has yet to authenticate. They have a small
 * pool of their own (WEFT__STORE_MAX_UNAUTH), of which one address may hold only part
 * (WEFT__STORE_MAX_UNAUTH_PER_ADDR), and a short deadline: strangers who open sockets
 * and say nothing cannot take the slots of the job's processes. When the pool (or the
 * address's part) is full, its oldest goes, told that the store is busy, so that a
 * client of the job that was among them tries again.
 */
static void unauth_make_room(weft_store_server_t *s, const char *host)
{
    size_t total = 0, same = 0;
    store_conn_t *oldest = NULL, *oldest_same = NULL;
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (c->dead || c->state != CONN_AUTH) {
            continue;
        }
        total++;
        oldest = oldest == NULL || c->opened_ms < oldest->opened_ms ? c : oldest;
        if (strcmp(c->host, host) == 0) {
            same++;
            oldest_same =
                oldest_same == NULL || c->opened_ms < oldest_same->opened_ms ? c : oldest_same;
        }
    }
    store_conn_t *victim = same >= WEFT__STORE_MAX_UNAUTH_PER_ADDR ? oldest_same
                           : total >= WEFT__STORE_MAX_UNAUTH       ? oldest
                                                                   : NULL;
    if (victim == NULL) {
        return;
    }
    uint64_t now = weft__now_ms();
    if (now >= s->busy_logged_ms + 1000) { /* a flood would fill the log */
        s->busy_logged_ms = now;
        WEFT_WARN(s->lg,
                  "store: dropping %s: too many connections that have not authenticated (%zu, "
                  "%zu of them from %s)",
                  victim->peer, total, same, host);
    }
    weft__store_srv_resp(s, victim, WEFT_ERR_NO_MEMORY, NULL, 0);
    conn_flush(s, victim);
    conn_drop_output(s, victim);
    victim->dead = true;
}

/* A new connection: greet it with the nonce it must prove the token against. */
static void conn_open(weft_store_server_t *s, int fd, const char *peer, const char *host)
{
    store_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        WEFT_ERROR(s->lg, "store: no memory for a new connection");
        if (fd >= 0) {
            close(fd);
        }
        return;
    }
    c->fd = fd;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->opened_ms = weft__now_ms();
    unauth_make_room(s, host);
    size_t cap = sizeof(s->conns) / sizeof(s->conns[0]);
    if (s->nconns >= cap) {
        reap(s); /* dropped ones still hold their entries */
    }
    if (s->nconns >= cap) {
        WEFT_WARN(s->lg, "store: refused %s: too many connections (%zu)", c->peer, cap);
        conn_free(s, c);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint8_t hello[WEFT__STORE_HELLO_LEN] = {WEFT__STORE_VERSION};
    weft_status_t st = weft__store_random(c->nonce, sizeof(c->nonce));
    if (st != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: getrandom failed: %m");
        conn_free(s, c);
        return;
    }
    memcpy(hello + 1, c->nonce, sizeof(c->nonce));
    if (weft__store_frame_bytes(&c->out, WEFT__STORE_HELLO, hello, sizeof(hello)) != WEFT_OK) {
        WEFT_ERROR(s->lg, "store: no memory for a new connection");
        conn_free(s, c);
        return;
    }
    s->queued += conn_pending(c);
    c->state = CONN_AUTH;
    c->deadline_ms = weft__now_ms() + WEFT__STORE_AUTH_TIMEOUT_MS;
    s->conns[s->nconns++] = c;
    WEFT_DEBUG(s->lg, "store: connection from %s", c->peer);
}

static void accept_all(weft_store_server_t *s)
{
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof(sa);
        int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            char peer[64], host[64];
            format_peer(&sa, len, peer, sizeof(peer), host);
            conn_open(s, fd, peer, host);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) {
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            /* Out of descriptors or memory: poll() would report the listener forever. */
            WEFT_WARN(s->lg, "store: accept failed: %m; pausing %d ms", ACCEPT_PAUSE_MS);
            s->accept_resume_ms = weft__now_ms() + ACCEPT_PAUSE_MS;
        }
        return;
    }
}

/* Expire authentication deadlines and parked GETs; returns the poll() timeout. */
static int run_timers(weft_store_server_t *s)
{
    uint64_t now = weft__now_ms();
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (c->dead || !(c->state == CONN_AUTH || c->parked)) {
            continue;
        }
        if (now < c->deadline_ms) {
            next = c->deadline_ms < next ? c->deadline_ms : next;
        } else if (c->state == CONN_AUTH) {
            if (!c->closing) { /* a refused one that is not reading its refusal is no news */
                uint64_t waited = now - (c->deadline_ms - WEFT__STORE_AUTH_TIMEOUT_MS);
                WEFT_WARN(s->lg, "store: refused %s: no authentication after %llu ms", c->peer,
                          (unsigned long long)waited);
            }
            c->dead = true;
        } else {
            c->parked = false;
            weft__store_srv_resp(s, c, WEFT_ERR_TIMEOUT, NULL, 0);
        }
    }
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (c->dead || c->lease_key == NULL) {
            continue;
        }
        if (now < c->lease_deadline_ms) {
            next = c->lease_deadline_ms < next ? c->lease_deadline_ms : next;
        } else {
            WEFT_WARN(s->lg, "store: %s did not renew its lease: publishing %s", c->peer,
                      c->lease_key);
            if (s->on_lapse != NULL) {
                s->on_lapse(s->on_lapse_arg, c->lease_key);
            }
            c->dead = true; /* reap() fires the lease */
        }
    }
    if (s->accept_resume_ms > now) {
        next = s->accept_resume_ms < next ? s->accept_resume_ms : next;
    }
    if (next == UINT64_MAX) {
        return -1;
    }
    return next - now > INT32_MAX ? INT32_MAX : (int)(next - now);
}

static void reap(weft_store_server_t *s)
{
    /* Fire the leases of connections that went away first: watchers may be among the
     * survivors of this very turn. */
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        if (c->dead && c->lease_key != NULL) {
            WEFT_DEBUG(s->lg, "store: lease of %s fires: %s", c->peer, c->lease_key);
            /* Its charge goes before the notice is stored: a full store still takes it. */
            char *key = c->lease_key;
            uint8_t *val = c->lease_val;
            size_t klen = c->lease_klen, vlen = c->lease_vlen;
            s->data_bytes -= klen + vlen + ENTRY_OVERHEAD;
            c->lease_key = NULL;
            c->lease_val = NULL;
            (void)weft__store_srv_put(s, key, klen, val, vlen);
            free(key);
            free(val);
        }
    }
    for (size_t i = 0; i < s->nconns;) {
        if (s->conns[i]->dead) {
            conn_free(s, s->conns[i]);
            s->conns[i] = s->conns[--s->nconns];
        } else {
            i++;
        }
    }
}

static size_t build_pollfds(weft_store_server_t *s)
{
    s->pfds[0] = (struct pollfd){.fd = s->wake_rd, .events = POLLIN};
    s->pfds[1] = (struct pollfd){.fd = weft__now_ms() >= s->accept_resume_ms ? s->listen_fd : -1,
                                 .events = POLLIN};
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn_t *c = s->conns[i];
        short ev = POLLRDHUP;
        ev |= conn_wants_input(c) ? POLLIN : 0;
        ev |= conn_pending(c) > 0 ? POLLOUT : 0;
        s->pfds[2 + i] = (struct pollfd){.fd = c->fd, .events = ev};
    }
    return s->nconns;
}

static void handle_events(weft_store_server_t *s, size_t npolled)
{
    if (s->pfds[0].revents & POLLIN) {
        char drain[64];
        while (read(s->wake_rd, drain, sizeof(drain)) > 0) {
        }
    }
    for (size_t i = 0; i < npolled; i++) {
        store_conn_t *c = s->conns[i];
        short re = s->pfds[2 + i].revents;
        if (re & POLLOUT) {
            conn_flush(s, c);
        }
        if (re & POLLIN) {
            conn_read(s, c);
        }
        if ((re & (POLLERR | POLLHUP)) || ((re & POLLRDHUP) && !conn_wants_input(c))) {
            /* Gone, or half-closed while we are not reading: nobody will read a reply. */
            WEFT_DEBUG(s->lg, "store: %s hung up", c->peer);
            c->dead = true;
        }
    }
    if (s->pfds[1].revents & POLLIN) {
        accept_all(s);
    }
}

static void *server_main(void *arg)
{
    weft_store_server_t *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        int timeout = run_timers(s);
        for (size_t i = 0; i < s->nconns; i++) {
            conn_flush(s, s->conns[i]);
        }
        reap(s);
        size_t npolled = build_pollfds(s);
        pthread_mutex_unlock(&s->lock);
        int n = poll(s->pfds, npolled + 2, timeout);
        int err = errno;
        pthread_mutex_lock(&s->lock);
        if (n < 0 && err != EINTR) {
            errno = err;
            WEFT_ERROR(s->lg, "store: poll failed: %m; the store stops serving");
            break;
        }
        if (n > 0) {
            handle_events(s, npolled);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- public calls ---- */

static weft_status_t open_listener(weft_store_server_t *s, const char *addr, int port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(addr, portstr, &hints, &res);
    if (rc != 0) {
        WEFT_ERROR(s->lg, "store: cannot resolve bind address %s: %s", addr, gai_strerror(rc));
        return WEFT_ERR_INVALID_ARG;
    }
    int fd = -1, one = 1, err = 0;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        errno = err;
        WEFT_ERROR(s->lg, "store: cannot listen on %s port %d: %m", addr, port);
        return WEFT_ERR_IO;
    }
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                             : ((struct sockaddr_in *)&sa)->sin_port);
    s->listen_fd = fd;
    return WEFT_OK;
}

static void server_free(weft_store_server_t *s)
{
    for (size_t i = 0; i < s->nconns; i++) {
        conn_free(s, s->conns[i]);
    }
    for (size_t i = 0; s->buckets != NULL && i < s->nbuckets; i++) {
        while (s->buckets[i] != NULL) {
            weft__store_srv_remove(s, &s->buckets[i]);
        }
    }
    free(s->buckets);
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
    }
    if (s->wake_rd >= 0) {
        close(s->wake_rd);
        close(s->wake_wr);
    }
    if (s->token != NULL) {
        OPENSSL_cleanse(s->token, strlen(s->token));
    }
    free(s->token);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

weft_status_t weft__store_server_start(const weft_store_server_params_t *params,
                                       weft_store_server_t **server)
{
    if (params == NULL || server == NULL || params->size < sizeof(*params) ||
        params->token == NULL || params->token[0] == '\0' || params->port < 0 ||
        params->port > 65535) {
        WEFT_ERROR(params != NULL ? params->logger : NULL,
                   "store: invalid server parameters (size, token or port)");
        return WEFT_ERR_INVALID_ARG;
    }
    weft_store_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    weft_status_t status = WEFT_ERR_NO_MEMORY;
    pthread_mutex_init(&s->lock, NULL);
    s->lg = params->logger;
    s->on_lapse = params->on_lapse;
    s->on_lapse_arg = params->on_lapse_arg;
    s->listen_fd = s->wake_rd = s->wake_wr = -1;
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    s->token = strdup(params->token);
    if (s->buckets == NULL || s->token == NULL) {
        goto err_free_server;
    }
    int pipefd[2];
    if (pipe2(pipefd, O_NONBLOCK | O_CLOEXEC) != 0) {
        WEFT_ERROR(s->lg, "store: pipe2 failed: %m");
        status = WEFT_ERR_IO;
        goto err_free_server;
    }
    s->wake_rd = pipefd[0];
    s->wake_wr = pipefd[1];
    const char *addr = params->bind_addr != NULL ? params->bind_addr : "127.0.0.1";
    status = open_listener(s, addr, params->port);
    if (status != WEFT_OK) {
        goto err_free_server;
    }
    /* The hosting process (weftrun) handles its signals on its own threads, not here. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        WEFT_ERROR(s->lg, "store: cannot start the server thread: %m");
        status = WEFT_ERR_IO;
        goto err_free_server;
    }
    WEFT_INFO(s->lg, "store: listening on %s port %d", addr, s->port);
    *server = s;
    return WEFT_OK;

err_free_server:
    server_free(s);
    return status;
}

int weft__store_server_port(const weft_store_server_t *s)
{
    return s != NULL ? s->port : -1;
}

static void server_wake(weft_store_server_t *s)
{
    ssize_t n;
    if (s->wake_wr < 0) {
        return; /* a fake server: no loop to wake */
    }
    do {
        n = write(s->wake_wr, "w", 1);
    } while (n < 0 && errno == EINTR);
    /* EAGAIN: the pipe is full, so a wake-up is pending anyway. */
}

weft_status_t weft__store_server_set(weft_store_server_t *s, const char *key, const void *val,
                                     size_t len)
{
    if (s == NULL || key == NULL || (val == NULL && len > 0)) {
        return WEFT_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&s->lock);
    weft_status_t st = weft__store_srv_put(s, key, strnlen(key, WEFT_STORE_MAX_KEY + 1), val, len);
    pthread_mutex_unlock(&s->lock);
    if (st == WEFT_OK) {
        server_wake(s);
    }
    return st;
}

bool weft__store_server_has(weft_store_server_t *s, const char *key)
{
    if (s == NULL || key == NULL) {
        return false;
    }
    pthread_mutex_lock(&s->lock);
    bool has = *weft__store_srv_slot(s, key, strnlen(key, WEFT_STORE_MAX_KEY + 1)) != NULL;
    pthread_mutex_unlock(&s->lock);
    return has;
}

void weft__store_server_stop(weft_store_server_t *s)
{
    if (s == NULL) {
        return;
    }
    if (s->listen_fd >= 0) { /* not a fake one: a thread serves it */
        pthread_mutex_lock(&s->lock);
        s->stop = true;
        pthread_mutex_unlock(&s->lock);
        server_wake(s);
        pthread_join(s->thread, NULL);
    }
    server_free(s);
}

/* ---- fake connections: the request path without sockets or thread (fuzzing, tests) ---- */

weft_status_t weft__store_server_fake(const char *token, const weft_logger_t *lg,
                                      weft_store_server_t **server)
{
    weft_store_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->lg = lg;
    s->listen_fd = s->wake_rd = s->wake_wr = -1;
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    s->token = strdup(token);
    if (s->buckets == NULL || s->token == NULL) {
        server_free(s);
        return WEFT_ERR_NO_MEMORY;
    }
    *server = s;
    return WEFT_OK;
}

/* A fake connection's descriptor: negative, so that nothing closes or polls it. */
static int fake_fd(int id)
{
    return -2 - id;
}

int weft__store_server_fake_open(weft_store_server_t *s, bool authenticated)
{
    pthread_mutex_lock(&s->lock);
    int id = 0;
    for (size_t i = 0; i < s->nconns; i++) {
        int used = -2 - s->conns[i]->fd;
        id = used >= id ? used + 1 : id;
    }
    char peer[32];
    snprintf(peer, sizeof(peer), "fake connection %d", id);
    conn_open(s, fake_fd(id), peer, peer);
    store_conn_t *c = s->nconns > 0 ? s->conns[s->nconns - 1] : NULL;
    if (c == NULL || c->fd != fake_fd(id)) {
        id = -1;
    } else if (authenticated) {
        /* A launcher's connection without tags: the fuzzer drives the request path. */
        c->state = CONN_READY;
    }
    pthread_mutex_unlock(&s->lock);
    return id;
}

bool weft__store_server_feed(weft_store_server_t *s, int id, const void *p, size_t n, bool eof,
                             struct weft_store_buf *out, size_t *used)
{
    pthread_mutex_lock(&s->lock);
    store_conn_t *c = NULL;
    for (size_t i = 0; i < s->nconns && c == NULL; i++) {
        c = s->conns[i]->fd == fake_fd(id) ? s->conns[i] : NULL;
    }
    size_t taken = 0;
    if (c != NULL) {
        s->feed = p;
        s->feed_len = n;
        s->feed_eof = eof;
        /* As the loop does: read while it wants input, answer, expire, flush, reap. */
        while (conn_wants_input(c) && (s->feed_len > 0 || s->feed_eof)) {
            conn_read(s, c);
        }
        taken = n - s->feed_len;
        s->feed = NULL;
        s->feed_len = 0;
        s->feed_eof = false;
        (void)run_timers(s);
        if (out != NULL && !c->dead &&
            weft__store_buf_put(out, c->out.data + c->out_off, conn_pending(c)) == WEFT_OK) {
            s->queued -= conn_pending(c);
            c->out_off = c->out.len;
        }
        conn_flush(s, c);
    }
    bool open = c != NULL && !c->dead;
    reap(s);
    pthread_mutex_unlock(&s->lock);
    if (used != NULL) {
        *used = taken;
    }
    return open;
}
