/*
 * --tag-output: the ranks' stdout and stderr come through pipes and leave weftrun with
 * "[rank N] " in front of every line. Complete lines are written whole, so lines of
 * different ranks never mix; a line longer than WEFTRUN_LINE_MAX is passed on in
 * pieces rather than held without bound.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/weftrun.h"

#define WEFTRUN_LINE_MAX (64 * 1024)
#define WEFTRUN_CHUNK (64 * 1024)
_Static_assert(WEFTRUN_CHUNK <= WEFTRUN_LINE_MAX, "one read must fit in a line buffer");

/* Bytes on their way to stdout or stderr, written in large pieces. */
typedef struct outbuf {
    int fd;
    size_t len;
    char data[WEFTRUN_CHUNK];
} outbuf_t;

/*
 * Write everything, waiting while the reader is behind. A broken stdout (reader gone)
 * drops the output: the ranks must still be read so that they never block.
 */
static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            poll(&pfd, 1, -1);
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else {
            return;
        }
    }
}

static void ob_flush(outbuf_t *ob)
{
    write_all(ob->fd, ob->data, ob->len);
    ob->len = 0;
}

static void ob_put(outbuf_t *ob, const char *p, size_t n)
{
    if (ob->len + n > sizeof(ob->data)) {
        ob_flush(ob);
        if (n > sizeof(ob->data)) {
            write_all(ob->fd, p, n);
            return;
        }
    }
    memcpy(ob->data + ob->len, p, n);
    ob->len += n;
}

static void put_prefix(outbuf_t *ob, weftrun_stream_t *s, int rank)
{
    if (s->at_line_start) {
        char prefix[32];
        int n = snprintf(prefix, sizeof(prefix), "[rank %d] ", rank);
        ob_put(ob, prefix, (size_t)n);
        s->at_line_start = false;
    }
}

/* Hand the pending bytes of the current line to @p ob. */
static void put_pending(outbuf_t *ob, weftrun_stream_t *s, int rank)
{
    if (s->len > 0) {
        put_prefix(ob, s, rank);
        ob_put(ob, s->buf, s->len);
        s->len = 0;
    }
}

void weftrun_stream_init(weftrun_stream_t *s, int fd, int out_fd)
{
    *s = (weftrun_stream_t){.fd = fd, .out_fd = out_fd, .at_line_start = true};
}

/* Pass on the complete lines of @p p; keep an unfinished tail as pending. */
static void stream_feed(weftrun_stream_t *s, int rank, outbuf_t *ob, const char *p, size_t n)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        if (nl != NULL) {
            size_t k = (size_t)(nl - p) + 1;
            put_pending(ob, s, rank);
            put_prefix(ob, s, rank);
            ob_put(ob, p, k);
            s->at_line_start = true;
            p += k;
            n -= k;
            continue;
        }
        if (s->buf == NULL && (s->buf = malloc(WEFTRUN_LINE_MAX)) == NULL) {
            /* Without a buffer the tail goes out now: the bytes matter more than lines. */
            put_prefix(ob, s, rank);
            ob_put(ob, p, n);
            return;
        }
        /* n <= WEFTRUN_CHUNK <= WEFTRUN_LINE_MAX: after this the tail fits. */
        if (s->len + n > WEFTRUN_LINE_MAX) {
            put_pending(ob, s, rank);
        }
        memcpy(s->buf + s->len, p, n);
        s->len += n;
        return;
    }
}

/* One read; returns false when nothing more is available now (or the stream closed). */
static bool stream_read(weftrun_stream_t *s, int rank)
{
    char chunk[WEFTRUN_CHUNK];
    ssize_t n;
    do {
        n = read(s->fd, chunk, sizeof(chunk));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) {
        return false;
    }
    if (n <= 0) {
        weftrun_stream_close(s, rank);
        return false;
    }
    outbuf_t ob;
    ob.fd = s->out_fd;
    ob.len = 0;
    stream_feed(s, rank, &ob, chunk, (size_t)n);
    ob_flush(&ob);
    return true;
}

void weftrun_stream_pump(weftrun_stream_t *s, int rank)
{
    if (s->fd >= 0) {
        stream_read(s, rank);
    }
}

void weftrun_stream_drain(weftrun_stream_t *s, int rank)
{
    while (s->fd >= 0 && stream_read(s, rank)) {
    }
    weftrun_stream_close(s, rank);
}

void weftrun_stream_close(weftrun_stream_t *s, int rank)
{
    if (s->fd < 0 && s->buf == NULL) {
        return;
    }
    /* An unfinished last line is ended here so the next rank's line starts clean. */
    if (s->len > 0 || !s->at_line_start) {
        outbuf_t ob;
        ob.fd = s->out_fd;
        ob.len = 0;
        put_pending(&ob, s, rank);
        ob_put(&ob, "\n", 1);
        ob_flush(&ob);
        s->at_line_start = true;
    }
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    free(s->buf);
    s->buf = NULL;
}
