/*
 * The SSD tier's handle: the per-rank directory (created 0700, checked to be its owner's
 * alone, locked, cleared of what a crash left and of steps of another key), the io_uring
 * ring and its slots, and driving whichever operation runs.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/core.h"
#include "migrate/layout/box.h"
#include "migrate/ssd/ssd_impl.h"
#include "util/clock.h"
#include "util/private.h"

#define DEFAULT_CHUNK (1u << 20)
#define MAX_CHUNK (1u << 30)
#define DEFAULT_QUEUE_DEPTH 8
#define MAX_QUEUE_DEPTH 256
#define DEFAULT_KEEP 2

/* mkdir -p: every missing component of @p dir, 0700. */
static int make_dirs(const char *dir)
{
    char path[PATH_MAX];
    if (strlen(dir) >= sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(path, dir);
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(path, 0700) != 0 && errno != EEXIST) {
                return -1;
            }
            *p = c;
            if (c == '\0') {
                return 0;
            }
        }
    }
}

/* Remove the temporary files (chunks and manifests being written) a crash left. */
static int remove_temporaries(int dirfd)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n > 4 && strcmp(de->d_name + n - 4, ".tmp") == 0 &&
            unlinkat(dirfd, de->d_name, 0) != 0 && errno != ENOENT) {
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

static weft_status_t check_params(const weft__ssd_params_t *p)
{
    if (p->chunk_bytes % WEFT__SSD_ALIGN != 0 || p->chunk_bytes > MAX_CHUNK) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "ssd: chunk size %zu is not a multiple of %u up to %u",
                                 p->chunk_bytes, WEFT__SSD_ALIGN, MAX_CHUNK);
    }
    if (p->queue_depth < 0 || p->queue_depth > MAX_QUEUE_DEPTH || p->keep_steps < 0 ||
        (p->direct != WEFT__SSD_DIRECT_AUTO && p->direct != WEFT__SSD_DIRECT_OFF)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "ssd: queue depth %d (1..%d), steps kept %d or O_DIRECT "
                                 "mode %d out of range",
                                 p->queue_depth, MAX_QUEUE_DEPTH, p->keep_steps, (int)p->direct);
    }
    return WEFT_OK;
}

/* The directory opened as @p fd is a directory of the effective user's that gives group
 * and others no permission: checked on what was opened, so nothing can swap it after. */
static weft_status_t check_dir(int fd, const char *dir, const char *what, const char *keeps)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        return weft__error_noctx(WEFT_ERR_IO, "%s: cannot stat %s: %s", what, dir, strerror(errno));
    }
    uid_t me = geteuid();
    if (!weft__stat_private(&st, S_IFDIR)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "%s: directory %s is owned by uid %u / mode %04o: %s, it must "
                                 "be 0700 and yours (uid %u)",
                                 what, dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
                                 keeps, (unsigned)me);
    }
    return WEFT_OK;
}

weft_status_t weft__ssd_dir_open(const char *dir, bool create, const char *what, const char *keeps,
                                 int *fd)
{
    *fd = -1;
    if (create && make_dirs(dir) != 0) {
        return weft__error_noctx(WEFT_ERR_IO, "%s: cannot create %s: %s", what, dir,
                                 strerror(errno));
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "%s: %s is a symbolic link or not a directory: %s in a "
                                 "directory of its own, 0700 and yours",
                                 what, dir, keeps);
    }
    if (dfd < 0) {
        return weft__error_noctx(WEFT_ERR_IO, "%s: cannot open %s: %s", what, dir, strerror(errno));
    }
    weft_status_t status = check_dir(dfd, dir, what, keeps);
    if (status != WEFT_OK) {
        close(dfd);
        return status;
    }
    *fd = dfd;
    return WEFT_OK;
}

static weft_status_t open_dir(weft__ssd_t *s, const char *dir)
{
    weft_status_t status = weft__ssd_dir_open(
        dir, !s->read_only, "ssd", "the SSD tier keeps parameters and optimizer state", &s->dirfd);
    if (status != WEFT_OK || s->read_only) {
        return status;
    }
    struct stat st;
    s->lockfd = openat(s->dirfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (s->lockfd < 0 || fstat(s->lockfd, &st) != 0 || !S_ISREG(st.st_mode)) {
        return weft__error_noctx(WEFT_ERR_IO, "ssd: cannot create %s/lock: %s", dir,
                                 s->lockfd < 0 ? strerror(errno) : "not a regular file");
    }
    if (flock(s->lockfd, LOCK_EX | LOCK_NB) != 0) {
        return weft__error_noctx(errno == EWOULDBLOCK ? WEFT_ERR_INVALID_ARG : WEFT_ERR_IO,
                                 "ssd: %s is in use by another handle (%s/lock): %s", dir, dir,
                                 strerror(errno));
    }
    if (remove_temporaries(s->dirfd) != 0) {
        return weft__error_noctx(WEFT_ERR_IO, "ssd: cannot clear temporary files of %s: %s", dir,
                                 strerror(errno));
    }
    return weft__ssd_adopt_key(s);
}

weft_status_t weft__ssd_open(const char *dir, const weft__ssd_params_t *params, weft__ssd_t **out)
{
    if (dir == NULL || dir[0] == '\0' || out == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: open needs a directory and an "
                                                       "output handle");
    }
    weft__ssd_params_t p = params != NULL ? *params : (weft__ssd_params_t){0};
    weft_status_t status = check_params(&p);
    if (status != WEFT_OK) {
        return status;
    }
    weft__ssd_t *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->dir = strdup(dir)) == NULL) {
        free(s);
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "ssd: out of memory");
    }
    s->dirfd = s->lockfd = -1;
    s->chunk_bytes = p.chunk_bytes ? p.chunk_bytes : DEFAULT_CHUNK;
    s->queue_depth = p.queue_depth ? p.queue_depth : DEFAULT_QUEUE_DEPTH;
    s->keep_steps = p.keep_steps ? p.keep_steps : DEFAULT_KEEP;
    s->direct = p.direct == WEFT__SSD_DIRECT_AUTO;
    s->open_fn = p.open_fn;
    s->read_only = p.read_only;
    if (p.key != NULL) {
        memcpy(s->key, p.key, sizeof(s->key));
    } else if ((status = weft__ctx_derive_key(NULL, WEFT__SSD_KEY_LABEL, s->key)) != WEFT_OK) {
        goto err_close;
    }
    if ((status = open_dir(s, dir)) != WEFT_OK) {
        goto err_close;
    }
    int rc = io_uring_queue_init((unsigned)s->queue_depth + 1, &s->ring, 0);
    if (rc < 0) {
        status = weft__error_noctx(WEFT_ERR_UNSUPPORTED, "ssd: io_uring is not available: %s",
                                   strerror(-rc));
        goto err_close;
    }
    size_t slot_bytes = WEFT__SSD_HEADER_BYTES + s->chunk_bytes;
    s->slots = calloc((size_t)s->queue_depth + 1, sizeof(*s->slots));
    if (s->slots == NULL || posix_memalign((void **)&s->bufs, WEFT__SSD_ALIGN,
                                           slot_bytes * (size_t)s->queue_depth) != 0) {
        s->bufs = NULL;
        status = weft__error_noctx(WEFT_ERR_NO_MEMORY,
                                   "ssd: out of memory for %d buffers of "
                                   "%zu bytes",
                                   s->queue_depth, slot_bytes);
        io_uring_queue_exit(&s->ring);
        goto err_close;
    }
    for (int i = 0; i <= s->queue_depth; i++) {
        s->slots[i].fd = -1;
        s->slots[i].buf = i < s->queue_depth ? s->bufs + slot_bytes * (size_t)i : NULL;
    }
    *out = s;
    return WEFT_OK;

err_close:
    OPENSSL_cleanse(s->key, sizeof(s->key));
    if (s->lockfd >= 0) {
        close(s->lockfd);
    }
    if (s->dirfd >= 0) {
        close(s->dirfd);
    }
    free(s->slots);
    free(s->dir);
    free(s);
    return status;
}

/* Take every completion there is, and give it to the operation. */
static void reap(weft__ssd_t *s)
{
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&s->ring, &cqe) == 0) {
        weft__ssd_slot_t *slot = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&s->ring, cqe);
        if (slot == NULL || cqe->user_data == LIBURING_UDATA_TIMEOUT) {
            continue;
        }
        s->inflight--;
        if (s->op == WEFT__SSD_SNAPSHOT) {
            weft__ssd_write_done(s, slot, res);
        } else {
            weft__ssd_read_done(s, slot, res);
        }
    }
}

/* Reap, advance, submit: one pass of the running operation, never blocking. */
static void step(weft__ssd_t *s)
{
    reap(s);
    if (s->op == WEFT__SSD_SNAPSHOT) {
        weft__ssd_write_advance(s);
    } else {
        weft__ssd_read_advance(s);
    }
    if (io_uring_sq_ready(&s->ring) > 0) {
        int rc = io_uring_submit(&s->ring);
        /* What was not taken stays queued and goes with the next submit. */
        if (rc < 0 && rc != -EAGAIN && rc != -EBUSY && rc != -EINTR) {
            weft__ssd_fail(s, WEFT_ERR_IO, "ssd: io_uring_submit: %s", strerror(-rc));
        }
    }
}

void weft__ssd_kick(weft__ssd_t *s)
{
    step(s);
}

void weft__ssd_close(weft__ssd_t *s)
{
    if (s == NULL) {
        return;
    }
    if (s->op != WEFT__SSD_IDLE) {
        weft__ssd_fail(s, WEFT_ERR_IO, "ssd: handle closed during an operation");
        while (s->inflight > 0) {
            io_uring_submit_and_wait(&s->ring, 1);
            reap(s);
        }
        step(s);
        if (s->op == WEFT__SSD_SNAPSHOT) {
            weft__ssd_write_end(s);
        } else {
            weft__ssd_read_end(s);
        }
    }
    io_uring_queue_exit(&s->ring);
    if (s->cached) {
        weft__ssd_manifest_free(&s->cache);
    }
    if (s->lockfd >= 0) {
        close(s->lockfd);
    }
    close(s->dirfd);
    OPENSSL_cleanse(s->key, sizeof(s->key));
    free(s->bufs);
    free(s->slots);
    free(s->dir);
    free(s);
}

bool weft__ssd_is_direct(const weft__ssd_t *s)
{
    return s != NULL && s->direct;
}

weft_status_t weft__ssd_progress(weft__ssd_t *s)
{
    if (s == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: progress on a NULL handle");
    }
    if (s->op == WEFT__SSD_IDLE) {
        return WEFT_OK;
    }
    step(s);
    if (!s->finished) {
        return WEFT_INPROGRESS;
    }
    if (s->op == WEFT__SSD_SNAPSHOT) {
        weft__ssd_write_end(s);
    } else {
        weft__ssd_read_end(s);
    }
    s->op = WEFT__SSD_IDLE;
    if (s->status != WEFT_OK) {
        /* Steps run as jobs on any thread: the error's text goes to the one that ends it. */
        return weft__error_noctx(s->status, "%s", s->why);
    }
    return WEFT_OK;
}

weft_status_t weft__ssd_wait(weft__ssd_t *s, uint64_t timeout_ns)
{
    uint64_t start = weft__now_ns();
    for (;;) {
        weft_status_t status = weft__ssd_progress(s);
        if (status != WEFT_INPROGRESS) {
            return status;
        }
        uint64_t waited = weft__now_ns() - start;
        if (waited >= timeout_ns) {
            return weft__error_noctx(WEFT_ERR_TIMEOUT,
                                     "ssd: operation still running after "
                                     "%llu ms",
                                     (unsigned long long)(waited / 1000000));
        }
        if (s->inflight > 0) {
            uint64_t left = timeout_ns - waited;
            struct __kernel_timespec ts = {.tv_sec = (long long)(left / 1000000000u),
                                           .tv_nsec = (long long)(left % 1000000000u)};
            struct io_uring_cqe *cqe;
            io_uring_wait_cqe_timeout(&s->ring, &cqe, left > 10000000000ull ? NULL : &ts);
        }
    }
}

void weft__ssd_stats(const weft__ssd_t *s, weft__ssd_stats_t *stats)
{
    if (s != NULL && stats != NULL) {
        *stats = s->stats;
    }
}

weft_status_t weft__ssd_snapshot(weft__ssd_t *s, uint64_t step_no,
                                 const weft__ssd_region_t *regions, int nregions,
                                 const weft__ssd_blob_t *blobs, int nblobs)
{
    weft_status_t status = weft__ssd_snapshot_start(s, step_no, regions, nregions, blobs, nblobs);
    return status == WEFT_INPROGRESS ? weft__ssd_wait(s, UINT64_MAX) : status;
}

weft_status_t weft__ssd_read(weft__ssd_t *s, uint64_t step_no, const char *tensor,
                             const weft_box_t *box, void *dst)
{
    weft_status_t status = weft__ssd_read_start(s, step_no, tensor, box, dst);
    return status == WEFT_INPROGRESS ? weft__ssd_wait(s, UINT64_MAX) : status;
}

weft_status_t weft__ssd_blob_read(weft__ssd_t *s, uint64_t step_no, const char *name, void *dst,
                                  size_t cap)
{
    weft_status_t status = weft__ssd_blob_read_start(s, step_no, name, dst, cap);
    return status == WEFT_INPROGRESS ? weft__ssd_wait(s, UINT64_MAX) : status;
}

/* ---- helpers of the operations ---- */

void weft__ssd_path(const weft__ssd_t *s, const char *name, char *buf)
{
    snprintf(buf, PATH_MAX, "%s/%s", s->dir, name);
}

int weft__ssd_open_file(weft__ssd_t *s, const char *name, int flags, bool try_direct)
{
    flags |= O_NOFOLLOW | O_CLOEXEC;
    for (;;) {
        bool direct = try_direct && s->direct;
        int f = flags | (direct ? O_DIRECT : 0);
        int fd = s->open_fn ? s->open_fn(s->dirfd, name, f, 0600) : openat(s->dirfd, name, f, 0600);
        if (fd >= 0) {
            return fd;
        }
        if (!(direct && errno == EINVAL)) {
            return -errno;
        }
        if (flags & O_CREAT) {
            /* The kernel refuses O_DIRECT after creating the file: its (random) name is
             * ours, and O_EXCL would refuse it again. */
            unlinkat(s->dirfd, name, 0);
        }
        s->direct = false; /* this filesystem refuses O_DIRECT: buffered + fdatasync */
    }
}

bool weft__ssd_tmp_name(const char *final, char *tmp)
{
    uint64_t r;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        return false;
    }
    return (size_t)snprintf(tmp, WEFT__SSD_NAME_MAX, "%s.%016llx.tmp", final,
                            (unsigned long long)r) < WEFT__SSD_NAME_MAX;
}

int weft__ssd_create_tmp(weft__ssd_t *s, const char *final, char *tmp, bool try_direct)
{
    if (!weft__ssd_tmp_name(final, tmp)) {
        tmp[0] = '\0';
        return -EIO;
    }
    return weft__ssd_open_file(s, tmp, O_WRONLY | O_CREAT | O_EXCL, try_direct);
}

void weft__ssd_queue_rw(weft__ssd_t *s, weft__ssd_slot_t *slot, bool write)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring); /* never NULL: slots <= entries */
    if (write) {
        io_uring_prep_write(sqe, slot->fd, slot->buf, (unsigned)slot->io_bytes, 0);
    } else {
        io_uring_prep_read(sqe, slot->fd, slot->buf, (unsigned)slot->io_bytes, 0);
    }
    io_uring_sqe_set_data(sqe, slot);
    slot->busy = true;
    s->inflight++;
}

void weft__ssd_queue_fsync(weft__ssd_t *s, weft__ssd_slot_t *slot, int fd, bool datasync)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    io_uring_prep_fsync(sqe, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
    io_uring_sqe_set_data(sqe, slot);
    slot->busy = true;
    s->inflight++;
}

weft__ssd_slot_t *weft__ssd_free_slot(weft__ssd_t *s)
{
    for (int i = 0; i < s->queue_depth; i++) {
        if (!s->slots[i].busy) {
            return &s->slots[i];
        }
    }
    return NULL;
}

bool weft__ssd_slots_busy(const weft__ssd_t *s)
{
    for (int i = 0; i <= s->queue_depth; i++) {
        if (s->slots[i].busy) {
            return true;
        }
    }
    return false;
}

weft_status_t weft__ssd_fail(weft__ssd_t *s, weft_status_t status, const char *fmt, ...)
{
    if (s->status == WEFT_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, sizeof(s->why), fmt, ap);
        va_end(ap);
        s->status = weft__error_noctx(status, "%s", s->why);
    }
    return s->status;
}

void weft__ssd_describe(const weft__ssd_entry_t *e, uint64_t chunk, char *buf, size_t len)
{
    if (e->kind == WEFT__SSD_BLOB) {
        snprintf(buf, len, "blob %s, chunk %llu", e->name, (unsigned long long)chunk);
        return;
    }
    char box[256];
    weft__box_format(&e->box, e->ndims, box, sizeof(box));
    snprintf(buf, len, "tensor %s, region %s, chunk %llu", e->name, box, (unsigned long long)chunk);
}
