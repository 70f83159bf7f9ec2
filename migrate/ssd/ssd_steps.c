/*
 * The SSD tier's committed steps: listing them, reading their manifests (checked by their
 * MAC), garbage collection (keep the newest steps and the chunk files they reference,
 * nothing else), and removing the steps of another key when a directory is opened.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/core.h"
#include "migrate/ssd/ssd_impl.h"
#include "util/array.h"

#define MAX_MANIFEST_BYTES (1ull << 32)

/* Run @p fn on every name in the directory; -1 (errno set) if it cannot be read. */
static int each_name(const weft__ssd_t *s, void (*fn)(const char *name, void *arg), void *arg)
{
    int fd = dup(s->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    rewinddir(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        fn(de->d_name, arg);
    }
    closedir(d);
    return 0;
}

typedef struct step_list {
    uint64_t *steps;
    size_t n, cap;
    bool failed;
} step_list_t;

static void add_step(const char *name, void *arg)
{
    step_list_t *l = arg;
    uint64_t step;
    if (!weft__ssd_parse_manifest_name(name, &step)) {
        return;
    }
    if (!weft__array_reserve((void **)&l->steps, &l->cap, l->n + 1, sizeof(*l->steps))) {
        l->failed = true;
        return;
    }
    l->steps[l->n++] = step;
}

static int newest_first(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The committed steps (manifests under their final names), newest first. */
static weft_status_t list_steps(const weft__ssd_t *s, step_list_t *l)
{
    *l = (step_list_t){0};
    if (each_name(s, add_step, l) != 0) {
        free(l->steps);
        return weft__error_noctx(WEFT_ERR_IO, "ssd: cannot read %s: %s", s->dir, strerror(errno));
    }
    if (l->failed) {
        free(l->steps);
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "ssd: out of memory listing %s", s->dir);
    }
    if (l->n > 1) { /* none: steps is NULL, which qsort may not be given */
        qsort(l->steps, l->n, sizeof(*l->steps), newest_first);
    }
    return WEFT_OK;
}

weft_status_t weft__ssd_steps(weft__ssd_t *s, uint64_t *steps, size_t cap, size_t *count)
{
    if (s == NULL || count == NULL || (steps == NULL && cap > 0)) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: steps: NULL argument");
    }
    step_list_t l;
    weft_status_t status = list_steps(s, &l);
    if (status != WEFT_OK) {
        return status;
    }
    for (size_t i = 0; i < l.n && i < cap; i++) {
        steps[i] = l.steps[i];
    }
    *count = l.n;
    free(l.steps);
    return WEFT_OK;
}

/* Read and check the manifest of @p step into @p m. */
static weft_status_t load_manifest(weft__ssd_t *s, uint64_t step, weft__ssd_manifest_t *m)
{
    char name[WEFT__SSD_NAME_MAX], path[PATH_MAX];
    weft__ssd_manifest_name(step, name);
    weft__ssd_path(s, name, path);
    int fd = weft__ssd_open_file(s, name, O_RDONLY, false);
    if (fd == -ENOENT) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: step %llu is not committed in %s",
                                 (unsigned long long)step, s->dir);
    }
    if (fd < 0) {
        return weft__error_noctx(WEFT_ERR_IO, "ssd: step %llu: cannot open %s: %s",
                                 (unsigned long long)step, path, strerror(-fd));
    }
    weft_status_t status = WEFT_OK;
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > MAX_MANIFEST_BYTES) {
        status = weft__error_noctx(WEFT_ERR_IO,
                                   "ssd: step %llu: manifest %s is empty, "
                                   "unreadable or too large",
                                   (unsigned long long)step, path);
        goto out;
    }
    size_t len = (size_t)st.st_size, got = 0;
    buf = malloc(len);
    if (buf == NULL) {
        status = weft__error_noctx(WEFT_ERR_NO_MEMORY, "ssd: out of memory reading %s", path);
        goto out;
    }
    while (got < len) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t)got);
        if (n <= 0) {
            status = weft__error_noctx(WEFT_ERR_IO, "ssd: step %llu: reading manifest %s: %s",
                                       (unsigned long long)step, path,
                                       n == 0 ? "end of file" : strerror(errno));
            goto out;
        }
        got += (size_t)n;
    }
    const char *why;
    if (!weft__ssd_manifest_decode(buf, len, s->key, m, &why)) {
        status = weft__error_noctx(WEFT_ERR_IO, "ssd: step %llu: manifest %s is corrupted: %s",
                                   (unsigned long long)step, path, why);
    } else if (m->step != step) {
        weft__ssd_manifest_free(m);
        status = weft__error_noctx(WEFT_ERR_IO, "ssd: manifest %s names step %llu", path,
                                   (unsigned long long)m->step);
    }
out:
    free(buf);
    close(fd);
    return status;
}

weft_status_t weft__ssd_manifest_get(weft__ssd_t *s, uint64_t step, const weft__ssd_manifest_t **m)
{
    if (!s->cached || s->cache.step != step) {
        weft__ssd_manifest_forget(s, s->cache.step);
        weft_status_t status = load_manifest(s, step, &s->cache);
        if (status != WEFT_OK) {
            return status;
        }
        s->cached = true;
    }
    *m = &s->cache;
    return WEFT_OK;
}

void weft__ssd_manifest_forget(weft__ssd_t *s, uint64_t step)
{
    if (s->cached && s->cache.step == step) {
        weft__ssd_manifest_free(&s->cache);
        s->cached = false;
    }
}

/* The entry of @p kind called @p name in @p step. */
static weft_status_t find_entry(weft__ssd_t *s, uint64_t step, int kind, const char *name,
                                const weft__ssd_entry_t **out)
{
    if (s == NULL || name == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: NULL handle or name");
    }
    if (s->op != WEFT__SSD_IDLE) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: %s: an operation is running", s->dir);
    }
    const weft__ssd_manifest_t *m;
    weft_status_t status = weft__ssd_manifest_get(s, step, &m);
    if (status != WEFT_OK) {
        return status;
    }
    for (size_t i = 0; i < m->nentries; i++) {
        if (m->entries[i].kind == kind && strcmp(m->entries[i].name, name) == 0) {
            *out = &m->entries[i];
            return WEFT_OK;
        }
    }
    return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: step %llu in %s holds no %s %s",
                             (unsigned long long)step, s->dir,
                             kind == WEFT__SSD_BLOB ? "blob" : "tensor", name);
}

weft_status_t weft__ssd_tensor_info(weft__ssd_t *s, uint64_t step, const char *tensor,
                                    weft_dtype_t *dtype, int *ndims)
{
    const weft__ssd_entry_t *e;
    weft_status_t status = find_entry(s, step, WEFT__SSD_REGION, tensor, &e);
    if (status == WEFT_OK) {
        if (dtype != NULL) {
            *dtype = e->dtype;
        }
        if (ndims != NULL) {
            *ndims = e->ndims;
        }
    }
    return status;
}

weft_status_t weft__ssd_blob_bytes(weft__ssd_t *s, uint64_t step, const char *name, size_t *bytes)
{
    const weft__ssd_entry_t *e;
    weft_status_t status = find_entry(s, step, WEFT__SSD_BLOB, name, &e);
    if (status == WEFT_OK && bytes != NULL) {
        *bytes = (size_t)e->bytes;
    }
    return status;
}

/* ---- garbage collection ---- */

typedef struct sweep {
    weft__ssd_t *s;
    const weft__ssd_hset_t *keep;
    uint64_t removed;
    int err; /* the first errno of a failed unlink */
} sweep_t;

static void sweep_chunk(const char *name, void *arg)
{
    sweep_t *w = arg;
    weft__ssd_hash_t h;
    if (!weft__ssd_parse_chunk_name(name, &h) || weft__ssd_hset_has(w->keep, &h)) {
        return;
    }
    if (unlinkat(w->s->dirfd, name, 0) == 0) {
        w->removed++;
    } else if (errno != ENOENT && w->err == 0) {
        w->err = errno;
    }
}

weft_status_t weft__ssd_gc_run(weft__ssd_t *s)
{
    step_list_t l;
    weft_status_t status = list_steps(s, &l);
    if (status != WEFT_OK) {
        return status;
    }
    size_t kept = l.n < (size_t)s->keep_steps ? l.n : (size_t)s->keep_steps;
    for (size_t i = kept; s->pinned && i < l.n; i++) {
        if (l.steps[i] == s->pin) { /* kept too: moved among the kept ones */
            l.steps[i] = l.steps[kept];
            l.steps[kept++] = s->pin;
            break;
        }
    }
    weft__ssd_manifest_t *m = calloc(kept ? kept : 1, sizeof(*m));
    weft__ssd_hset_t keep = {0};
    size_t loaded = 0, hashes = 0;
    if (m == NULL) {
        status = weft__error_noctx(WEFT_ERR_NO_MEMORY, "ssd: gc: out of memory");
        goto out;
    }
    /* A kept step whose manifest cannot be read may still reference any chunk. */
    for (; loaded < kept; loaded++) {
        if ((status = load_manifest(s, l.steps[loaded], &m[loaded])) != WEFT_OK) {
            goto out;
        }
        hashes += m[loaded].nhashes;
    }
    if (!weft__ssd_hset_init(&keep, hashes)) {
        status = weft__error_noctx(WEFT_ERR_NO_MEMORY, "ssd: gc: out of memory");
        goto out;
    }
    for (size_t i = 0; i < kept; i++) {
        for (size_t k = 0; k < m[i].nhashes; k++) {
            weft__ssd_hset_add(&keep, &m[i].hashes[k]);
        }
    }
    /* Manifests first: a crash half way never leaves a step whose chunks are gone. */
    sweep_t w = {.s = s, .keep = &keep};
    for (size_t i = kept; i < l.n; i++) {
        char name[WEFT__SSD_NAME_MAX];
        weft__ssd_manifest_name(l.steps[i], name);
        weft__ssd_manifest_forget(s, l.steps[i]);
        if (unlinkat(s->dirfd, name, 0) == 0) {
            w.removed++;
        } else if (errno != ENOENT && w.err == 0) {
            w.err = errno;
        }
    }
    if (each_name(s, sweep_chunk, &w) != 0 && w.err == 0) {
        w.err = errno;
    }
    s->stats.files_removed += w.removed;
    if (w.err != 0) {
        status = weft__error_noctx(WEFT_ERR_IO, "ssd: gc: cannot remove files of %s: %s", s->dir,
                                   strerror(w.err));
    }
out:
    for (size_t i = 0; i < loaded; i++) {
        weft__ssd_manifest_free(&m[i]);
    }
    free(m);
    weft__ssd_hset_free(&keep);
    free(l.steps);
    return status;
}

void weft__ssd_pin(weft__ssd_t *s, uint64_t step)
{
    if (s != NULL) {
        s->pinned = true;
        s->pin = step;
    }
}

weft_status_t weft__ssd_gc(weft__ssd_t *s)
{
    if (s == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: gc on a NULL handle");
    }
    if (s->read_only) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: %s was opened read only", s->dir);
    }
    if (s->op != WEFT__SSD_IDLE) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "ssd: gc: an operation is running on %s",
                                 s->dir);
    }
    s->stats.files_removed = 0;
    return weft__ssd_gc_run(s);
}

/* ---- the directory's key ---- */

#define KEY_CHECK "key-check"

typedef struct clear {
    const weft__ssd_t *s;
    bool manifests; /* this pass removes manifests, the next one chunk files */
    int err;
} clear_t;

static void clear_name(const char *name, void *arg)
{
    clear_t *c = arg;
    weft__ssd_hash_t h;
    uint64_t step;
    bool match = c->manifests ? weft__ssd_parse_manifest_name(name, &step)
                              : weft__ssd_parse_chunk_name(name, &h);
    if (!match) {
        return;
    }
    if (unlinkat(c->s->dirfd, name, 0) != 0 && errno != ENOENT && c->err == 0) {
        c->err = errno;
    }
}

/* Whether the key-check file holds @p want; -1 (errno set) when it cannot be read. */
static int key_matches(const weft__ssd_t *s, const uint8_t want[WEFT__SSD_MAC_BYTES])
{
    uint8_t got[WEFT__SSD_MAC_BYTES + 1];
    struct stat st;
    int fd = openat(s->dirfd, KEY_CHECK, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT ? 0 : -1;
    }
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? pread(fd, got, sizeof(got), 0) : 0;
    close(fd);
    return n == WEFT__SSD_MAC_BYTES && CRYPTO_memcmp(got, want, WEFT__SSD_MAC_BYTES) == 0;
}

/* Write @p check as the key-check file: a new temporary file, synced, renamed, and the
 * directory synced. */
static int write_key_check(weft__ssd_t *s, const uint8_t check[WEFT__SSD_MAC_BYTES])
{
    char tmp[WEFT__SSD_NAME_MAX];
    if (!weft__ssd_tmp_name(KEY_CHECK, tmp)) {
        errno = EIO;
        return -1;
    }
    int fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -1;
    }
    int rc =
        pwrite(fd, check, WEFT__SSD_MAC_BYTES, 0) == WEFT__SSD_MAC_BYTES && fsync(fd) == 0 ? 0 : -1;
    int err = rc == 0 ? 0 : errno != 0 ? errno : EIO;
    close(fd);
    if (rc == 0 && renameat(s->dirfd, tmp, s->dirfd, KEY_CHECK) != 0) {
        rc = -1;
        err = errno;
    }
    if (rc != 0) {
        unlinkat(s->dirfd, tmp, 0);
        errno = err;
        return -1;
    }
    return fsync(s->dirfd);
}

weft_status_t weft__ssd_adopt_key(weft__ssd_t *s)
{
    uint8_t check[WEFT__SSD_MAC_BYTES];
    if (!weft__ssd_key_check(s->key, check)) {
        return weft__error_noctx(WEFT_ERR_IO, "ssd: %s: cannot compute the key check", s->dir);
    }
    int match = key_matches(s, check);
    if (match < 0) {
        return weft__error_noctx(WEFT_ERR_IO, "ssd: cannot read %s/%s: %s", s->dir, KEY_CHECK,
                                 strerror(errno));
    }
    if (match) {
        return WEFT_OK;
    }
    /* Steps of another key (another job's, or those of an older format): this key cannot
     * restore them. Manifests first, as garbage collection does. */
    clear_t c = {.s = s, .manifests = true};
    if (each_name(s, clear_name, &c) != 0 ||
        (c.manifests = false, each_name(s, clear_name, &c)) != 0) {
        c.err = c.err != 0 ? c.err : errno;
    }
    if (c.err != 0) {
        return weft__error_noctx(WEFT_ERR_IO,
                                 "ssd: cannot remove the steps of another key from "
                                 "%s: %s",
                                 s->dir, strerror(c.err));
    }
    if (write_key_check(s, check) != 0) {
        return weft__error_noctx(WEFT_ERR_IO, "ssd: cannot write %s/%s: %s", s->dir, KEY_CHECK,
                                 strerror(errno));
    }
    return WEFT_OK;
}
