/*
 * The rendezvous store server: one thread runs an epoll loop over nonblocking sockets.
 * One mutex guards the key-value map and the connections; the loop drops it only while
 * it sleeps in epoll_wait(), so weft__store_server_set() from the hosting process applies
 * its change under the mutex and wakes the loop through a pipe to send what it queued.
 *
 * A turn costs what happened in it, not the number of connections: what a turn changes
 * about a connection (output queued, input paused, death) puts it on the touched list,
 * which the end of the turn flushes, re-arms and reaps; GETs waiting for a key sit in a
 * table by key, SCANs waiting for keys in groups by prefix, watchers on a list of their
 * own, and the timers of waits and leases are scanned only once the earliest of them is
 * due (a renewal only moves a deadline later). The end of a turn also builds a share of
 * the pages of due SCANs (server_scan.c), within a cap on the output queued to all.
 *
 * Each connection reads one frame at a time into a buffer of at most one frame (and its
 * tag), stops reading while its pending output is large, and is closed when its pending
 * output passes WEFT__STORE_MAX_OUT, or holds the most when all of them pass
 * WEFT__STORE_MAX_QUEUED. There are at most WEFT__STORE_MAX_CONNS authenticated
 * connections and WEFT__STORE_MAX_UNAUTH others (unauth_admit). What the requests do,
 * and the handshake, are in server_req.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/store/server.h"
#include "util/clock.h"
#include "util/log_escape.h"
#include "util/parse.h"
#define ACCEPT_PAUSE_MS 100 /* after accept() ran out of descriptors */
#define EPOLL_BATCH 256

/* epoll data of the two descriptors that are not connections */
static char wake_mark, listen_mark;

/* ---- the loop ---- */

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

static void accept_all(weft_store_server_t *s)
{
    while (weft__store_srv_accept_ready(s, weft__now_ms())) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof(sa);
        int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            char peer[64], host[64];
            format_peer(&sa, len, peer, sizeof(peer), host);
            weft__store_srv_open(s, fd, peer, host);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) {
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            /* Out of descriptors or memory: epoll would report the listener forever. */
            WEFT_WARN(s->lg, "store: accept failed: %m; pausing %d ms", ACCEPT_PAUSE_MS);
            s->accept_resume_ms = weft__now_ms() + ACCEPT_PAUSE_MS;
        }
        return;
    }
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* Expires handshakes, waits and leases that are due; returns the epoll_wait() timeout. */
static int run_timers(weft_store_server_t *s)
{
    uint64_t now = weft__now_ms();
    uint64_t next = UINT64_MAX;
    for (store_conn_t *c = s->unauth_head; c != NULL; c = c->unauth_next) {
        if (c->dead) {
            continue;
        }
        if (now < c->deadline_ms) {
            next = min_u64(next, c->deadline_ms);
        } else {
            WEFT_WARN(s->lg, "store: refused %s: no authentication after %llu ms", c->peer,
                      (unsigned long long)(now - c->opened_ms));
            weft__store_srv_kill(s, c);
        }
    }
    if (now >= s->waits_due_ms) {
        s->waits_due_ms = weft__store_srv_waits_expire(s, now);
    }
    next = min_u64(next, s->waits_due_ms);
    if (now >= s->leases_due_ms) {
        s->leases_due_ms = UINT64_MAX;
        for (size_t i = 0; i < s->nconns; i++) {
            store_conn_t *c = s->conns[i];
            if (c->dead || c->lease_key == NULL) {
                continue;
            }
            if (now < c->lease_deadline_ms) {
                s->leases_due_ms = min_u64(s->leases_due_ms, c->lease_deadline_ms);
            } else {
                WEFT_WARN(s->lg, "store: %s did not renew its lease: publishing %s", c->peer,
                          c->lease_key);
                if (s->on_lapse != NULL) {
                    s->on_lapse(s->on_lapse_arg, c->lease_key);
                }
                weft__store_srv_kill(s, c); /* the turn's end fires the lease */
            }
        }
    }
    next = min_u64(next, s->leases_due_ms);
    if (s->scans_more) {
        next = now; /* pages are due: the next turn builds more once requests are read */
    }
    if (s->accept_resume_ms > now) {
        next = min_u64(next, s->accept_resume_ms);
    } else if (s->nunauth >= WEFT__STORE_MAX_UNAUTH && s->unauth_head != NULL) {
        next = min_u64(next, s->unauth_head->opened_ms + WEFT__STORE_UNAUTH_STALE_MS);
    }
    if (next == UINT64_MAX) {
        return -1;
    }
    return next <= now ? 0 : next - now > INT32_MAX ? INT32_MAX : (int)(next - now);
}

/* Arms epoll for what @p c wants now: input unless paused, output while some is pending. */
static void conn_rearm(weft_store_server_t *s, store_conn_t *c)
{
    if (c->fd < 0 || c->dead) {
        return;
    }
    uint32_t ev = EPOLLRDHUP | (weft__store_srv_wants_input(c) ? EPOLLIN : 0) |
                  (weft__store_srv_pending(c) > 0 ? EPOLLOUT : 0);
    if (ev != c->ev) {
        struct epoll_event e = {.events = ev, .data.ptr = c};
        if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &e) != 0) {
            WEFT_ERROR(s->lg, "store: cannot watch the connection from %s: %m", c->peer);
            weft__store_srv_kill(s, c);
            return;
        }
        c->ev = ev;
    }
}

static void listener_rearm(weft_store_server_t *s)
{
    if (s->epfd < 0) {
        return;
    }
    bool want = weft__store_srv_accept_ready(s, weft__now_ms());
    if (want != s->listening) {
        struct epoll_event e = {.events = want ? EPOLLIN : 0, .data.ptr = &listen_mark};
        if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->listen_fd, &e) == 0) {
            s->listening = want;
        }
    }
}

/*
 * Flush what the touched connections were sent and arm epoll for them, then close the
 * dead, their leases firing first (watchers may be among the survivors of this very turn,
 * and are sent the notices with the next flush).
 */
static void reap(weft_store_server_t *s)
{
    while (s->touched != NULL) {
        store_conn_t *list = s->touched, *dead = NULL;
        s->touched = NULL;
        while (list != NULL) {
            store_conn_t *c = list;
            list = c->touch_next;
            weft__store_srv_flush(s, c); /* still marked touched: a death here does not list it again */
            conn_rearm(s, c);
            if (c->dead) {
                c->touch_next = dead; /* marked touched, off the list, until it is freed */
                dead = c;
            } else {
                c->touched = false;
            }
        }
        for (store_conn_t *c = dead; c != NULL; c = c->touch_next) {
            if (c->lease_key != NULL) {
                char text[WEFT_STORE_MAX_KEY + 16];
                WEFT_DEBUG(s->lg, "store: lease of %s fires: %s", c->peer,
                           weft__log_escape(c->lease_key, strlen(c->lease_key), text,
                                            sizeof(text)));
                /* Its charge goes before the notice is stored: a full store still takes it. */
                char *key = c->lease_key;
                uint8_t *val = c->lease_val;
                size_t klen = c->lease_klen, vlen = c->lease_vlen;
                s->data_bytes -= klen + vlen + ENTRY_OVERHEAD;
                weft__store_srv_share_sub(s, weft__store_srv_owner(c), klen + vlen + ENTRY_OVERHEAD);
                c->lease_key = NULL;
                c->lease_val = NULL;
                s->writer = weft__store_srv_owner(c); /* its own notice, in its own share */
                (void)weft__store_srv_put(s, key, klen, val, vlen);
                s->writer = -1;
                free(key);
                free(val);
            }
        }
        while (dead != NULL) {
            store_conn_t *c = dead;
            dead = c->touch_next;
            weft__store_srv_free(s, c);
        }
    }
}

/* The end of a turn: what the turn changed is flushed and reaped, then a share of the due
 * SCANs is answered (server_scan.c) and flushed in turn. */
static void turn_end(weft_store_server_t *s)
{
    reap(s);
    s->scans_more = weft__store_srv_scans_serve(s);
    reap(s);
    listener_rearm(s);
}

static void handle_event(weft_store_server_t *s, const struct epoll_event *e)
{
    if (e->data.ptr == &wake_mark) {
        char drain[64];
        while (read(s->wake_rd, drain, sizeof(drain)) > 0) {
        }
        return;
    }
    if (e->data.ptr == &listen_mark) {
        accept_all(s);
        return;
    }
    store_conn_t *c = e->data.ptr;
    if (c->dead) {
        return;
    }
    weft__store_srv_touch(s, c);
    if (e->events & EPOLLOUT) {
        weft__store_srv_flush(s, c);
    }
    if (e->events & EPOLLIN) {
        weft__store_srv_read(s, c);
    }
    if (!c->dead &&
        ((e->events & (EPOLLERR | EPOLLHUP)) || ((e->events & EPOLLRDHUP) && !weft__store_srv_wants_input(c)))) {
        /* Gone, or half-closed while we are not reading: nobody will read a reply. */
        WEFT_DEBUG(s->lg, "store: %s hung up", c->peer);
        weft__store_srv_kill(s, c);
    }
}

static void *server_main(void *arg)
{
    weft_store_server_t *s = arg;
    struct epoll_event evs[EPOLL_BATCH];
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        /* The last turn's answers go out before its timers run: a lease that lapses at
         * once kills its connection, and the answer to the LEASE itself must not die
         * with it (a 1 ms lease under load lost it). */
        turn_end(s);
        int timeout = run_timers(s);
        turn_end(s);
        pthread_mutex_unlock(&s->lock);
        int n = epoll_wait(s->epfd, evs, EPOLL_BATCH, timeout);
        int err = errno;
        pthread_mutex_lock(&s->lock);
        if (n < 0 && err != EINTR) {
            errno = err;
            WEFT_ERROR(s->lg, "store: epoll_wait failed: %m; the store stops serving");
            break;
        }
        for (int i = 0; i < n; i++) {
            handle_event(s, &evs[i]);
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
    while (s->nconns > 0) {
        weft__store_srv_free(s, s->conns[0]);
    }
    free(s->conns);
    for (size_t i = 0; s->buckets != NULL && i < s->nbuckets; i++) {
        while (s->buckets[i] != NULL) {
            weft__store_srv_remove(s, &s->buckets[i]);
        }
    }
    free(s->buckets);
    weft__store_srv_dirs_free(s);
    free(s->waits);
    weft__store_srv_scans_free(s);
    weft__store_srv_shares_free(s);
    if (s->epfd >= 0) {
        close(s->epfd);
    }
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

/* What a real server and a fake one share: the map, the table of waits, the token. */
static weft_status_t server_init(weft_store_server_t *s, const char *token,
                                 const weft_logger_t *lg)
{
    pthread_mutex_init(&s->lock, NULL);
    s->lg = lg;
    s->epfd = s->listen_fd = s->wake_rd = s->wake_wr = -1;
    s->waits_due_ms = s->leases_due_ms = UINT64_MAX;
    s->writer = -1;
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    s->nwait_buckets = 1024;
    s->waits = calloc(s->nwait_buckets, sizeof(*s->waits));
    s->token = strdup(token);
    return s->buckets == NULL || s->waits == NULL || s->token == NULL ? WEFT_ERR_NO_MEMORY
                                                                      : WEFT_OK;
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
    weft_status_t status = server_init(s, params->token, params->logger);
    if (status != WEFT_OK) {
        goto err_free_server;
    }
    s->on_lapse = params->on_lapse;
    s->on_lapse_arg = params->on_lapse_arg;
    int pipefd[2];
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0 || pipe2(pipefd, O_NONBLOCK | O_CLOEXEC) != 0) {
        WEFT_ERROR(s->lg, "store: %s failed: %m", s->epfd < 0 ? "epoll_create1" : "pipe2");
        status = WEFT_ERR_IO;
        goto err_free_server;
    }
    s->wake_rd = pipefd[0];
    s->wake_wr = pipefd[1];
    const char *addr = params->bind_addr != NULL ? params->bind_addr : "127.0.0.1";
    status = open_listener(s, addr, params->port);
    struct epoll_event wake = {.events = EPOLLIN, .data.ptr = &wake_mark};
    struct epoll_event listen = {.events = EPOLLIN, .data.ptr = &listen_mark};
    if (status == WEFT_OK && (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wake_rd, &wake) != 0 ||
                              epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->listen_fd, &listen) != 0)) {
        WEFT_ERROR(s->lg, "store: epoll_ctl failed: %m");
        status = WEFT_ERR_IO;
    }
    if (status != WEFT_OK) {
        goto err_free_server;
    }
    s->listening = true;
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

size_t weft__store_server_conns(weft_store_server_t *s)
{
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->nconns; i++) {
        n += s->conns[i]->state == CONN_READY && !s->conns[i]->dead;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
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
    if (server_init(s, token, lg) != WEFT_OK) {
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

int weft__store_server_fake_open(weft_store_server_t *s, bool authenticated, int member)
{
    pthread_mutex_lock(&s->lock);
    int id = 0;
    for (size_t i = 0; i < s->nconns; i++) {
        int used = -2 - s->conns[i]->fd;
        id = used >= id ? used + 1 : id;
    }
    char peer[32];
    snprintf(peer, sizeof(peer), "fake connection %d", id);
    weft__store_srv_open(s, fake_fd(id), peer, peer);
    store_conn_t *c = s->nconns > 0 ? s->conns[s->nconns - 1] : NULL;
    if (c == NULL || c->fd != fake_fd(id) || c->dead) {
        turn_end(s);
        id = -1;
    } else if (authenticated) {
        /* A connection without tags: the fuzzer drives the request path, as a launcher
         * or under the rules for members. */
        weft__store_srv_authenticated(s, c);
        if (member >= 0) {
            c->role = WEFT__STORE_ROLE_MEMBER;
            c->id = (uint32_t)member;
        }
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
        /* As the loop does: read while it wants input, answer, flush, expire, reap. */
        while (weft__store_srv_wants_input(c) && (s->feed_len > 0 || s->feed_eof)) {
            weft__store_srv_read(s, c);
        }
        while (weft__store_srv_scans_serve(s)) {
        }
        taken = n - s->feed_len;
        s->feed = NULL;
        s->feed_len = 0;
        s->feed_eof = false;
        if (out != NULL && !c->dead &&
            weft__store_buf_put(out, c->out.data + c->out_off, weft__store_srv_pending(c)) == WEFT_OK) {
            s->queued -= weft__store_srv_pending(c);
            c->out_off = c->out.len;
            weft__store_srv_flush(s, c); /* sent: compacted as after a real send */
        }
        (void)run_timers(s);
    }
    bool open = c != NULL && !c->dead;
    turn_end(s);
    pthread_mutex_unlock(&s->lock);
    if (used != NULL) {
        *used = taken;
    }
    return open;
}
