/*
 * The SSD tier of snapshots (migrate/ssd*.c), in a scratch directory with small chunks:
 * round trips of tensors, boxes and blobs; reads of sub-boxes and across stored regions
 * against a reference tensor; dedup; each kind of damage detected while the older step
 * stays readable; a crash before the manifest is renamed; garbage collection; the
 * buffered fallback where O_DIRECT is refused; bad arguments.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <liburing.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "scratch.h"

#include "migrate/ssd/ssd.h"
#include "migrate/ssd/ssd_format.h"
#include "migrate/engine/xxh.h"
#include "weft/core.h"
#include "weft/migrate.h"

#define CHUNK 8192 /* small chunks: many per region */

static char root[64];
static char dir[128];

static int setup_in(const char *parent)
{
    snprintf(root, sizeof(root), "%s/weft-ssd-XXXXXX", parent);
    if (mkdtemp(root) == NULL) {
        return -1;
    }
    snprintf(dir, sizeof(dir), "%s/rank0", root); /* the tier creates it */
    return 0;
}

static int setup(void **state)
{
    (void)state;
    return setup_in("/tmp");
}

static int setup_shm(void **state)
{
    (void)state;
    return setup_in("/dev/shm");
}

static int teardown(void **state)
{
    (void)state;
    return scratch_remove(root);
}

static weft__ssd_t *open_tier(int keep, int (*open_fn)(int, const char *, int, mode_t))
{
    weft__ssd_params_t p = {
        .chunk_bytes = CHUNK, .queue_depth = 4, .keep_steps = keep, .open_fn = open_fn};
    weft__ssd_t *s = NULL;
    weft_status_t st = weft__ssd_open(dir, &p, &s);
    if (st != WEFT_OK) {
        fail_msg("open: %s", weft_last_error(NULL));
    }
    return s;
}

static weft_box_t box2(uint64_t o0, uint64_t e0, uint64_t o1, uint64_t e1)
{
    weft_box_t b = {{o0, o1}, {e0, e1}};
    return b;
}

static weft_box_t box3(const uint64_t *o, const uint64_t *e)
{
    weft_box_t b = {{o[0], o[1], o[2]}, {e[0], e[1], e[2]}};
    return b;
}

static uint64_t volume(const weft_box_t *b, int nd)
{
    uint64_t v = 1;
    for (int d = 0; d < nd; d++) {
        v *= b->extent[d];
    }
    return v;
}

/* ---- a small model: a 2-D f32 tensor in two regions, a f64 vector, two blobs ---- */

#define W_ROWS 48
#define W_COLS 100
#define B_LEN 3000
#define RNG_BYTES 20000

typedef struct model {
    float w[W_ROWS * W_COLS];
    double b[B_LEN];
    uint8_t rng[RNG_BYTES];
    uint8_t pos[8];
} model_t;

static void fill_model(model_t *m, unsigned seed)
{
    for (size_t i = 0; i < W_ROWS * W_COLS; i++) {
        m->w[i] = (float)(i * 0.5 + seed);
    }
    for (size_t i = 0; i < B_LEN; i++) {
        m->b[i] = (double)i * 1e-3 + seed * 7.0;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t i = 0; i < RNG_BYTES; i++) { /* xorshift: no two chunks alike */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        m->rng[i] = (uint8_t)x;
    }
    memcpy(m->pos, &seed, sizeof(seed));
    memset(m->pos + sizeof(seed), 0xab, sizeof(m->pos) - sizeof(seed));
}

static weft_status_t snapshot_model(weft__ssd_t *s, uint64_t step, const model_t *m)
{
    weft__ssd_region_t r[3] = {
        {"w", WEFT_F32, 2, box2(0, 30, 0, W_COLS), m->w},
        {"w", WEFT_F32, 2, box2(30, W_ROWS - 30, 0, W_COLS), m->w + 30 * W_COLS},
        {"b", WEFT_F64, 1, {{0}, {B_LEN}}, m->b},
    };
    weft__ssd_blob_t b[2] = {{"rng", m->rng, RNG_BYTES}, {"loader", m->pos, sizeof(m->pos)}};
    return weft__ssd_snapshot(s, step, r, 3, b, 2);
}

static void check_model(weft__ssd_t *s, uint64_t step, const model_t *m)
{
    model_t *got = calloc(1, sizeof(*got));
    weft_box_t w = box2(0, W_ROWS, 0, W_COLS), b = {{0}, {B_LEN}};
    assert_int_equal(weft__ssd_read(s, step, "w", &w, got->w), WEFT_OK);
    assert_int_equal(weft__ssd_read(s, step, "b", &b, got->b), WEFT_OK);
    size_t n;
    assert_int_equal(weft__ssd_blob_bytes(s, step, "rng", &n), WEFT_OK);
    assert_int_equal(n, RNG_BYTES);
    assert_int_equal(weft__ssd_blob_read(s, step, "rng", got->rng, n), WEFT_OK);
    assert_int_equal(weft__ssd_blob_read(s, step, "loader", got->pos, sizeof(got->pos)), WEFT_OK);
    assert_memory_equal(got, m, sizeof(*m));
    free(got);
}

static void test_round_trip(void **state)
{
    (void)state;
    weft__ssd_t *s = open_tier(0, NULL);
    model_t *m = malloc(sizeof(*m));
    fill_model(m, 1);
    assert_int_equal(snapshot_model(s, 7, m), WEFT_OK);
    weft__ssd_stats_t st;
    weft__ssd_stats(s, &st);
    size_t total = sizeof(m->w) + sizeof(m->b) + RNG_BYTES + sizeof(m->pos);
    assert_int_equal(st.bytes_written + st.bytes_skipped, total);
    check_model(s, 7, m);

    weft_dtype_t dt;
    int nd;
    assert_int_equal(weft__ssd_tensor_info(s, 7, "w", &dt, &nd), WEFT_OK);
    assert_int_equal(dt, WEFT_F32);
    assert_int_equal(nd, 2);
    uint64_t steps[4];
    size_t count;
    assert_int_equal(weft__ssd_steps(s, steps, 4, &count), WEFT_OK);
    assert_int_equal(count, 1);
    assert_int_equal(steps[0], 7);

    /* A blob of no bytes, and a second handle on a fresh open of the directory. */
    weft__ssd_blob_t empty = {"empty", NULL, 0};
    assert_int_equal(weft__ssd_snapshot(s, 8, NULL, 0, &empty, 1), WEFT_OK);
    weft__ssd_close(s);
    s = open_tier(0, NULL);
    assert_int_equal(weft__ssd_steps(s, steps, 4, &count), WEFT_OK);
    assert_int_equal(count, 2);
    assert_int_equal(steps[0], 8);
    assert_int_equal(steps[1], 7);
    assert_int_equal(weft__ssd_blob_bytes(s, 8, "empty", &count), WEFT_OK);
    assert_int_equal(count, 0);
    assert_int_equal(weft__ssd_blob_read(s, 8, "empty", m, 0), WEFT_OK);
    check_model(s, 7, m);
    weft__ssd_close(s);
    free(m);
}

/* A read-only handle on a directory another handle holds (the owner, as if it were
 * gone): it reads every step, takes no lock, removes nothing and writes nothing. */
static void test_read_only(void **state)
{
    (void)state;
    weft__ssd_t *s = open_tier(0, NULL);
    model_t *m = malloc(sizeof(*m));
    fill_model(m, 3);
    assert_int_equal(snapshot_model(s, 4, m), WEFT_OK);
    weft__ssd_params_t p = {.read_only = true};
    weft__ssd_t *ro = NULL;
    assert_int_equal(weft__ssd_open(dir, &p, &ro), WEFT_OK);
    check_model(ro, 4, m);
    expect_error(snapshot_model(ro, 5, m), WEFT_ERR_INVALID_ARG, "read only");
    expect_error(weft__ssd_gc(ro), WEFT_ERR_INVALID_ARG, "read only");
    weft__ssd_close(ro);
    check_model(s, 4, m); /* the owner's handle is untouched */
    weft__ssd_close(s);
    char missing[200];
    snprintf(missing, sizeof(missing), "%s/none", dir);
    expect_error(weft__ssd_open(missing, &p, &ro), WEFT_ERR_IO, "cannot open");
    free(m);
}

/* ---- boxes: a 3-D tensor in three regions, read by random boxes ---- */

static void test_sub_boxes(void **state)
{
    (void)state;
    const uint64_t shape[3] = {5, 37, 29};
    const uint64_t cut[4] = {0, 11, 25, 37}; /* regions along the middle dimension */
    size_t n = 5 * 37 * 29;
    float *ref = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        ref[i] = (float)i;
    }
    weft_box_t whole = box3((uint64_t[]){0, 0, 0}, shape);
    float *part[3];
    weft__ssd_region_t r[3];
    for (int k = 0; k < 3; k++) {
        uint64_t o[3] = {0, cut[k], 0}, e[3] = {5, cut[k + 1] - cut[k], 29};
        weft_box_t b = box3(o, e);
        part[k] = malloc(volume(&b, 3) * sizeof(float));
        assert_int_equal(weft_box_copy(part[k], &b, ref, &whole, &b, 3, sizeof(float)), WEFT_OK);
        r[k] = (weft__ssd_region_t){"act", WEFT_F32, 3, b, part[k]};
    }
    weft__ssd_t *s = open_tier(0, NULL);
    assert_int_equal(weft__ssd_snapshot(s, 1, r, 3, NULL, 0), WEFT_OK);

    srand(42);
    float *got = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    for (int iter = 0; iter < 60; iter++) {
        uint64_t o[3], e[3];
        for (int d = 0; d < 3; d++) {
            o[d] = (uint64_t)rand() % shape[d];
            e[d] = 1 + (uint64_t)rand() % (shape[d] - o[d]);
        }
        if (iter == 0) { /* exactly one stored region */
            o[0] = 0, o[1] = 11, o[2] = 0, e[0] = 5, e[1] = 14, e[2] = 29;
        } else if (iter == 1) { /* the whole tensor, across all three */
            o[0] = o[1] = o[2] = 0, e[0] = 5, e[1] = 37, e[2] = 29;
        }
        weft_box_t b = box3(o, e);
        assert_int_equal(weft_box_copy(want, &b, ref, &whole, &b, 3, sizeof(float)), WEFT_OK);
        memset(got, 0xff, n * sizeof(float));
        assert_int_equal(weft__ssd_read(s, 1, "act", &b, got), WEFT_OK);
        assert_memory_equal(got, want, volume(&b, 3) * sizeof(float));
    }
    /* Partly outside what is stored. */
    weft_box_t out = box3((uint64_t[]){0, 30, 0}, (uint64_t[]){5, 8, 29});
    expect_error(weft__ssd_read(s, 1, "act", &out, got), WEFT_ERR_INVALID_ARG, "act");
    weft__ssd_close(s);
    for (int k = 0; k < 3; k++) {
        free(part[k]);
    }
    free(ref);
    free(got);
    free(want);
}

/* ---- dedup ---- */

static void test_dedup(void **state)
{
    (void)state;
    weft__ssd_t *s = open_tier(3, NULL);
    model_t *m = malloc(sizeof(*m));
    fill_model(m, 3);
    size_t total = sizeof(m->w) + sizeof(m->b) + RNG_BYTES + sizeof(m->pos);
    weft__ssd_stats_t st;
    assert_int_equal(snapshot_model(s, 1, m), WEFT_OK);
    weft__ssd_stats(s, &st);
    assert_int_equal(st.bytes_written, total);
    assert_int_equal(st.bytes_skipped, 0);

    assert_int_equal(snapshot_model(s, 2, m), WEFT_OK); /* nothing changed */
    weft__ssd_stats(s, &st);
    assert_int_equal(st.bytes_written, 0);
    assert_int_equal(st.chunks_written, 0);
    assert_int_equal(st.bytes_skipped, total);

    m->b[1500] += 1.0; /* one element: one chunk of b (bytes 12000..) */
    assert_int_equal(snapshot_model(s, 3, m), WEFT_OK);
    weft__ssd_stats(s, &st);
    assert_int_equal(st.chunks_written, 1);
    assert_int_equal(st.bytes_written, CHUNK);
    assert_int_equal(st.bytes_skipped, total - CHUNK);
    check_model(s, 3, m);
    m->b[1500] -= 1.0;
    check_model(s, 2, m);

    /* Equal chunks inside one snapshot are written once. */
    static uint8_t zeros[3 * CHUNK + 100];
    weft__ssd_blob_t z = {"zeros", zeros, sizeof(zeros)};
    assert_int_equal(weft__ssd_snapshot(s, 4, NULL, 0, &z, 1), WEFT_OK);
    weft__ssd_stats(s, &st);
    assert_int_equal(st.chunks_written, 2);
    assert_int_equal(st.bytes_written, CHUNK + 100);
    assert_int_equal(st.bytes_skipped, 2 * CHUNK);
    memset(m, 1, sizeof(*m));
    assert_int_equal(weft__ssd_blob_read(s, 4, "zeros", m, sizeof(*m)), WEFT_OK);
    assert_memory_equal(m, zeros, sizeof(zeros));
    weft__ssd_close(s);
    free(m);
}

/* ---- damage ---- */

/* The path of the chunk file holding bytes [off, off + len) of @p data. */
static void chunk_path(const void *data, size_t off, size_t len, char *path)
{
    XXH128_hash_t x = XXH3_128bits((const uint8_t *)data + off, len);
    weft__ssd_hash_t h = {x.low64, x.high64};
    char name[WEFT__SSD_NAME_MAX];
    weft__ssd_chunk_name(&h, name);
    snprintf(path, 256, "%s/%s", dir, name);
}

static void flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t c;
    assert_int_equal(pread(fd, &c, 1, at), 1);
    c ^= 0x5a;
    assert_int_equal(pwrite(fd, &c, 1, at), 1);
    close(fd);
}

enum damage { PAYLOAD_BYTE, TRUNCATED, HEADER_BYTE, MISSING };

static void damage_then_read(enum damage how, const char *word)
{
    weft__ssd_t *s = open_tier(0, NULL);
    model_t *old = malloc(sizeof(*old)), *cur = malloc(sizeof(*cur));
    fill_model(old, 10);
    fill_model(cur, 11); /* every chunk differs from step 1's */
    assert_int_equal(snapshot_model(s, 1, old), WEFT_OK);
    assert_int_equal(snapshot_model(s, 2, cur), WEFT_OK);

    char path[256];
    chunk_path(cur->w, 0, CHUNK, path); /* the first chunk of w's first region */
    switch (how) {
    case PAYLOAD_BYTE:
        flip_byte(path, WEFT__SSD_HEADER_BYTES + 100);
        break;
    case TRUNCATED:
        assert_int_equal(truncate(path, WEFT__SSD_HEADER_BYTES + CHUNK / 2), 0);
        break;
    case HEADER_BYTE:
        flip_byte(path, 40); /* the payload length */
        break;
    case MISSING:
        assert_int_equal(unlink(path), 0);
        break;
    }
    float *w = malloc(sizeof(cur->w));
    weft_box_t all = box2(0, W_ROWS, 0, W_COLS);
    expect_error(weft__ssd_read(s, 2, "w", &all, w), WEFT_ERR_IO, word);
    const char *msg = weft_last_error(NULL);
    assert_non_null(strstr(msg, "step 2"));
    assert_non_null(strstr(msg, "tensor w"));
    assert_non_null(strstr(msg, "[0:30, 0:100]"));
    assert_non_null(strstr(msg, strrchr(path, '/') + 1));
    /* What the damage does not touch still reads, and the older step is intact. */
    weft_box_t b = {{0}, {B_LEN}};
    double *bv = malloc(sizeof(cur->b));
    assert_int_equal(weft__ssd_read(s, 2, "b", &b, bv), WEFT_OK);
    assert_memory_equal(bv, cur->b, sizeof(cur->b));
    check_model(s, 1, old);
    weft__ssd_close(s);
    free(bv);
    free(w);
    free(old);
    free(cur);
}

static void test_corrupt_payload(void **state)
{
    (void)state;
    damage_then_read(PAYLOAD_BYTE, "checksum");
}

static void test_truncated(void **state)
{
    (void)state;
    damage_then_read(TRUNCATED, "torn");
}

static void test_corrupt_header(void **state)
{
    (void)state;
    damage_then_read(HEADER_BYTE, "header");
}

static void test_missing_chunk(void **state)
{
    (void)state;
    damage_then_read(MISSING, "missing");
}

static void test_corrupt_manifest(void **state)
{
    (void)state;
    weft__ssd_t *s = open_tier(0, NULL);
    model_t *m = malloc(sizeof(*m));
    fill_model(m, 4);
    assert_int_equal(snapshot_model(s, 1, m), WEFT_OK);
    assert_int_equal(snapshot_model(s, 2, m), WEFT_OK);
    char path[256], name[WEFT__SSD_NAME_MAX];
    weft__ssd_manifest_name(2, name);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    flip_byte(path, 60);
    weft__ssd_close(s); /* drop the manifest it keeps */
    s = open_tier(0, NULL);
    weft_box_t b = {{0}, {B_LEN}};
    expect_error(weft__ssd_read(s, 2, "b", &b, m->b), WEFT_ERR_IO, "manifest");
    assert_non_null(strstr(weft_last_error(NULL), "step 2"));
    fill_model(m, 4);
    check_model(s, 1, m);
    /* Garbage collection deletes nothing while a kept manifest cannot be read. */
    expect_error(weft__ssd_gc(s), WEFT_ERR_IO, "manifest");
    weft__ssd_close(s);
    free(m);
}

/* ---- a crash before the manifest is renamed ---- */

static int crash_at; /* 0: at the manifest; n > 0: at the n-th chunk file */

/* openat(2) for a child that dies half way through a file, as a crash would leave it. */
static int crashing_open(int dirfd, const char *name, int flags, mode_t mode)
{
    static int chunks;
    bool tmp = strstr(name, ".tmp") != NULL;
    bool manifest = tmp && strstr(name, ".manifest.") != NULL;
    bool chunk = tmp && strstr(name, ".chunk.") != NULL;
    if ((manifest && crash_at == 0) || (chunk && ++chunks == crash_at)) {
        int fd = openat(dirfd, name, (flags & ~O_DIRECT), mode);
        if (fd >= 0) {
            (void)!write(fd, "half", 4);
        }
        _exit(0);
    }
    return openat(dirfd, name, flags, mode);
}

static size_t count_names(const char *suffix)
{
    DIR *d = opendir(dir);
    size_t n = 0, len = strlen(suffix);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        n += l > len && strcmp(de->d_name + l - len, suffix) == 0;
    }
    closedir(d);
    return n;
}

static void crash_then_recover(int where)
{
    model_t *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    fill_model(a, 20);
    fill_model(b, 21);
    weft__ssd_t *s = open_tier(0, NULL);
    assert_int_equal(snapshot_model(s, 1, a), WEFT_OK);
    weft__ssd_close(s); /* the child takes the directory's lock */

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        crash_at = where;
        weft__ssd_t *c = open_tier(0, crashing_open);
        snapshot_model(c, 2, b);
        _exit(3); /* not reached: crashing_open exits first */
    }
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    assert_true(count_names(".tmp") >= 1);

    s = open_tier(0, NULL);
    assert_int_equal(count_names(".tmp"), 0);
    uint64_t steps[4];
    size_t count;
    assert_int_equal(weft__ssd_steps(s, steps, 4, &count), WEFT_OK);
    assert_int_equal(count, 1);
    assert_int_equal(steps[0], 1);
    check_model(s, 1, a);
    weft_box_t all = box2(0, W_ROWS, 0, W_COLS);
    expect_error(weft__ssd_read(s, 2, "w", &all, b->w), WEFT_ERR_INVALID_ARG, "not committed");
    /* Step 2 again: the chunk files the crash completed are complete and are kept. */
    fill_model(b, 21);
    assert_int_equal(snapshot_model(s, 2, b), WEFT_OK);
    weft__ssd_stats_t st;
    weft__ssd_stats(s, &st);
    if (where == 0) { /* every chunk file had been renamed into place */
        assert_int_equal(st.bytes_written, 0);
    }
    check_model(s, 2, b);
    check_model(s, 1, a);
    weft__ssd_close(s);
    free(a);
    free(b);
}

static void test_crash_before_manifest(void **state)
{
    (void)state;
    crash_then_recover(0);
}

static void test_crash_between_chunks(void **state)
{
    (void)state;
    crash_then_recover(3);
}

/* ---- garbage collection ---- */

/* Add the names of the chunk files of @p m to @p names (CHUNK-sized pieces of each
 * region and blob as snapshot_model cuts them). */
static size_t model_chunks(const model_t *m, char (*names)[256], size_t n)
{
    const struct {
        const void *p;
        size_t len;
    } parts[] = {
        {m->w, 30 * W_COLS * sizeof(float)},
        {m->w + 30 * W_COLS, (W_ROWS - 30) * W_COLS * sizeof(float)},
        {m->b, sizeof(m->b)},
        {m->rng, RNG_BYTES},
        {m->pos, sizeof(m->pos)},
    };
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        for (size_t off = 0; off < parts[i].len; off += CHUNK) {
            size_t len = parts[i].len - off < CHUNK ? parts[i].len - off : CHUNK;
            chunk_path(parts[i].p, off, len, names[n]);
            bool dup = false;
            for (size_t j = 0; j < n; j++) {
                dup = dup || strcmp(names[j], names[n]) == 0;
            }
            n += !dup;
        }
    }
    return n;
}

static void test_gc(void **state)
{
    (void)state;
    weft__ssd_t *s = open_tier(2, NULL);
    model_t *m = malloc(sizeof(*m));
    static char want[256][256];
    fill_model(m, 30);
    assert_int_equal(snapshot_model(s, 1, m), WEFT_OK);
    m->w[0] = -1.0f; /* step 2 shares all but one chunk with step 1 */
    assert_int_equal(snapshot_model(s, 2, m), WEFT_OK);
    size_t n = model_chunks(m, want, 0);
    fill_model(m, 31); /* step 3 shares nothing */
    assert_int_equal(snapshot_model(s, 3, m), WEFT_OK);
    n = model_chunks(m, want, n);
    weft__ssd_stats_t st;
    weft__ssd_stats(s, &st);
    assert_int_equal(st.files_removed, 2); /* step 1's manifest and its changed chunk */

    uint64_t steps[4];
    size_t count;
    assert_int_equal(weft__ssd_steps(s, steps, 4, &count), WEFT_OK);
    assert_int_equal(count, 2);
    assert_int_equal(steps[0], 3);
    assert_int_equal(steps[1], 2);
    assert_int_equal(count_names(".chunk"), n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(access(want[i], F_OK), 0);
    }
    weft_box_t b = {{0}, {B_LEN}};
    expect_error(weft__ssd_read(s, 1, "b", &b, m->b), WEFT_ERR_INVALID_ARG, "step 1");
    check_model(s, 3, m);

    /* A stray chunk file nothing references goes at the next collection. */
    char stray[256];
    snprintf(stray, sizeof(stray), "%s/%032d.chunk", dir, 0);
    int fd = open(stray, O_CREAT | O_WRONLY, 0644);
    close(fd);
    assert_int_equal(weft__ssd_gc(s), WEFT_OK);
    weft__ssd_stats(s, &st);
    assert_int_equal(st.files_removed, 1);
    assert_int_equal(access(stray, F_OK), -1);
    assert_int_equal(count_names(".chunk"), n);
    weft__ssd_close(s);
    free(m);
}

/* A pinned step outlives newer steps beyond keep_steps, and reads back; it goes once
 * another step is pinned. */
static void test_gc_pin(void **state)
{
    (void)state;
    weft__ssd_t *s = open_tier(2, NULL);
    model_t *m = malloc(sizeof(*m));
    fill_model(m, 40);
    assert_int_equal(snapshot_model(s, 1, m), WEFT_OK);
    weft__ssd_pin(s, 1);
    model_t *later = malloc(sizeof(*later));
    for (uint64_t step = 2; step <= 4; step++) {
        fill_model(later, 40 + (int)step); /* shares nothing with step 1 */
        assert_int_equal(snapshot_model(s, step, later), WEFT_OK);
    }
    uint64_t steps[4];
    size_t count;
    assert_int_equal(weft__ssd_steps(s, steps, 4, &count), WEFT_OK);
    assert_int_equal(count, 3);
    assert_int_equal(steps[0], 4);
    assert_int_equal(steps[1], 3);
    assert_int_equal(steps[2], 1);
    check_model(s, 1, m);
    weft__ssd_pin(s, 4);
    fill_model(later, 50);
    assert_int_equal(snapshot_model(s, 5, later), WEFT_OK);
    assert_int_equal(weft__ssd_steps(s, steps, 4, &count), WEFT_OK);
    assert_int_equal(count, 2);
    assert_int_equal(steps[0], 5);
    assert_int_equal(steps[1], 4);
    weft__ssd_close(s);
    free(m);
    free(later);
}

/* ---- O_DIRECT refused ---- */

static int refuse_direct(int dirfd, const char *name, int flags, mode_t mode)
{
    if (flags & O_DIRECT) {
        errno = EINVAL;
        return -1;
    }
    return openat(dirfd, name, flags, mode);
}

/* A filesystem that takes O_DIRECT at open and refuses it at the write: an eventfd
 * answers a write of more than 8 bytes with EINVAL. */
static int refuse_direct_writes(int dirfd, const char *name, int flags, mode_t mode)
{
    if ((flags & O_DIRECT) && (flags & O_WRONLY)) {
        return eventfd(0, EFD_CLOEXEC);
    }
    return openat(dirfd, name, flags, mode);
}

/* Whether io_uring refuses a write to an eventfd with EINVAL, as on Linux 6.x, where an
 * eventfd has no write_iter (otherwise the case above cannot be simulated this way). */
static bool eventfd_write_refused(void)
{
    struct io_uring ring;
    struct io_uring_cqe *cqe;
    static char buf[8192];
    int fd = eventfd(0, EFD_CLOEXEC), res = 0;
    if (fd >= 0 && io_uring_queue_init(1, &ring, 0) == 0) {
        io_uring_prep_write(io_uring_get_sqe(&ring), fd, buf, sizeof(buf), 0);
        io_uring_submit_and_wait(&ring, 1);
        if (io_uring_peek_cqe(&ring, &cqe) == 0) {
            res = cqe->res;
        }
        io_uring_queue_exit(&ring);
    }
    close(fd);
    return res == -EINVAL;
}

static void test_direct_fallback(void **state)
{
    (void)state;
    model_t *m = malloc(sizeof(*m));
    fill_model(m, 40);
    weft__ssd_t *s = open_tier(0, refuse_direct);
    assert_true(weft__ssd_is_direct(s));
    assert_int_equal(snapshot_model(s, 1, m), WEFT_OK);
    assert_false(weft__ssd_is_direct(s));
    check_model(s, 1, m);
    weft__ssd_close(s);
    if (eventfd_write_refused()) {
        s = open_tier(0, refuse_direct_writes);
        fill_model(m, 41); /* new chunks: queue_depth writes refused at once */
        assert_int_equal(snapshot_model(s, 3, m), WEFT_OK);
        assert_false(weft__ssd_is_direct(s));
        check_model(s, 3, m);
        weft__ssd_close(s);
        fill_model(m, 40);
    } else {
        print_message("io_uring writes to an eventfd here: refusal at write not simulated\n");
    }
    /* The same directory on tmpfs with the real open(2), whatever it allows. */
    s = open_tier(0, NULL);
    check_model(s, 1, m);
    m->b[0] = 99.0;
    assert_int_equal(snapshot_model(s, 2, m), WEFT_OK);
    check_model(s, 2, m);
    weft__ssd_close(s);
    free(m);
}

/* ---- nonblocking use, closing midway, bad arguments ---- */

static void test_nonblocking(void **state)
{
    (void)state;
    weft__ssd_t *s = open_tier(0, NULL);
    model_t *m = malloc(sizeof(*m));
    fill_model(m, 50);
    weft__ssd_region_t r = {"w", WEFT_F32, 2, box2(0, W_ROWS, 0, W_COLS), m->w};
    assert_int_equal(weft__ssd_snapshot_start(s, 1, &r, 1, NULL, 0), WEFT_INPROGRESS);
    expect_error(weft__ssd_snapshot_start(s, 2, &r, 1, NULL, 0), WEFT_ERR_INVALID_ARG, "running");
    weft_box_t all = r.box;
    expect_error(weft__ssd_read_start(s, 1, "w", &all, m), WEFT_ERR_INVALID_ARG, "running");
    expect_error(weft__ssd_gc(s), WEFT_ERR_INVALID_ARG, "running");
    weft_status_t st;
    while ((st = weft__ssd_progress(s)) == WEFT_INPROGRESS) {
        /* a trainer computes here */
    }
    assert_int_equal(st, WEFT_OK);
    assert_int_equal(weft__ssd_progress(s), WEFT_OK); /* idle */

    /* Closed with a snapshot in flight: no step, no temporary file. */
    m->w[0] = 5.0f;
    assert_int_equal(weft__ssd_snapshot_start(s, 2, &r, 1, NULL, 0), WEFT_INPROGRESS);
    weft__ssd_close(s);
    assert_int_equal(count_names(".tmp"), 0);
    s = open_tier(0, NULL);
    uint64_t steps[2];
    size_t count;
    assert_int_equal(weft__ssd_steps(s, steps, 2, &count), WEFT_OK);
    assert_int_equal(count, 1);
    assert_int_equal(weft__ssd_read_start(s, 1, "w", &all, m->w), WEFT_INPROGRESS);
    assert_int_equal(weft__ssd_wait(s, 10ull * 1000000000ull), WEFT_OK);
    assert_true(m->w[0] != 5.0f);
    weft__ssd_close(s);
    free(m);
}

/* Chunk files cannot be created: the disk is full. */
static int full_disk(int dirfd, const char *name, int flags, mode_t mode)
{
    if ((flags & O_CREAT) != 0 && strstr(name, ".chunk") != NULL) {
        errno = ENOSPC;
        return -1;
    }
    return openat(dirfd, name, flags, mode);
}

typedef struct {
    weft__ssd_t *s;
    weft_status_t st;
    char why[512];
} step_arg_t;

static void *one_step(void *arg)
{
    step_arg_t *a = arg;
    a->st = weft__ssd_progress(a->s);
    snprintf(a->why, sizeof(a->why), "%s", weft_last_error(NULL));
    return NULL;
}

/* Steps of an operation run as jobs on whatever thread is free: each step here runs on a
 * thread of its own, and the one that ends a failed write still reports why it failed
 * (its own thread recorded nothing). */
static void test_error_on_another_thread(void **state)
{
    (void)state;
    weft__ssd_t *s = open_tier(0, full_disk);
    model_t *m = malloc(sizeof(*m));
    fill_model(m, 60);
    weft__ssd_region_t r = {"w", WEFT_F32, 2, box2(0, W_ROWS, 0, W_COLS), m->w};
    assert_int_equal(weft__ssd_snapshot_start(s, 1, &r, 1, NULL, 0), WEFT_INPROGRESS);
    step_arg_t a = {.s = s, .st = WEFT_INPROGRESS};
    for (int i = 0; i < 100000 && a.st == WEFT_INPROGRESS; i++) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, one_step, &a), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
    }
    assert_int_equal(a.st, WEFT_ERR_IO);
    if (strstr(a.why, "No space") == NULL) {
        fail_msg("the failed write's text on the thread that ended it: \"%s\"", a.why);
    }
    weft__ssd_close(s);
    free(m);
}

static void test_bad_args(void **state)
{
    (void)state;
    weft__ssd_t *s = NULL;
    expect_error(weft__ssd_open(NULL, NULL, &s), WEFT_ERR_INVALID_ARG, NULL);
    expect_error(weft__ssd_open("", NULL, &s), WEFT_ERR_INVALID_ARG, NULL);
    expect_error(weft__ssd_open(dir, NULL, NULL), WEFT_ERR_INVALID_ARG, NULL);
    weft__ssd_params_t p = {.chunk_bytes = 1000};
    expect_error(weft__ssd_open(dir, &p, &s), WEFT_ERR_INVALID_ARG, "chunk size");
    p = (weft__ssd_params_t){.queue_depth = 1000};
    expect_error(weft__ssd_open(dir, &p, &s), WEFT_ERR_INVALID_ARG, "queue depth");
    assert_null(s);

    s = open_tier(0, NULL);
    weft__ssd_t *second = NULL;
    expect_error(weft__ssd_open(dir, NULL, &second), WEFT_ERR_INVALID_ARG, "in use");
    float x[16] = {0};
    weft__ssd_region_t r[2] = {
        {"x", WEFT_F32, 1, {{0}, {16}}, x},
        {"x", WEFT_F32, 1, {{8}, {16}}, x},
    };
    expect_error(weft__ssd_snapshot(NULL, 1, r, 1, NULL, 0), WEFT_ERR_INVALID_ARG, NULL);
    expect_error(weft__ssd_snapshot(s, 1, NULL, 1, NULL, 0), WEFT_ERR_INVALID_ARG, NULL);
    expect_error(weft__ssd_snapshot(s, 1, r, 2, NULL, 0), WEFT_ERR_INVALID_ARG, "overlap");
    r[1].box.offset[0] = 16;
    r[1].dtype = WEFT_F64;
    expect_error(weft__ssd_snapshot(s, 1, r, 2, NULL, 0), WEFT_ERR_INVALID_ARG, "differ");
    r[1].dtype = WEFT_DTYPE_USER;
    expect_error(weft__ssd_snapshot(s, 1, &r[1], 1, NULL, 0), WEFT_ERR_INVALID_ARG, "dtype");
    r[1] = (weft__ssd_region_t){"", WEFT_F32, 1, {{0}, {16}}, x};
    expect_error(weft__ssd_snapshot(s, 1, &r[1], 1, NULL, 0), WEFT_ERR_INVALID_ARG, "name");
    r[1] = (weft__ssd_region_t){"y", WEFT_F32, 1, {{0}, {0}}, x};
    expect_error(weft__ssd_snapshot(s, 1, &r[1], 1, NULL, 0), WEFT_ERR_INVALID_ARG, "empty");
    weft__ssd_blob_t bl[2] = {{"rng", x, 4}, {"rng", x, 4}};
    expect_error(weft__ssd_snapshot(s, 1, NULL, 0, bl, 2), WEFT_ERR_INVALID_ARG, "twice");

    assert_int_equal(weft__ssd_snapshot(s, 1, r, 1, bl, 1), WEFT_OK);
    weft_box_t b = {{0}, {16}};
    float y[16];
    expect_error(weft__ssd_read(s, 9, "x", &b, y), WEFT_ERR_INVALID_ARG, "step 9");
    expect_error(weft__ssd_read(s, 1, "nope", &b, y), WEFT_ERR_INVALID_ARG, "nope");
    expect_error(weft__ssd_read(s, 1, "x", NULL, y), WEFT_ERR_INVALID_ARG, NULL);
    expect_error(weft__ssd_read(s, 1, "x", &b, NULL), WEFT_ERR_INVALID_ARG, NULL);
    weft_box_t empty = {{0}, {0}};
    expect_error(weft__ssd_read(s, 1, "x", &empty, y), WEFT_ERR_INVALID_ARG, "empty");
    expect_error(weft__ssd_blob_read(s, 1, "rng", y, 2), WEFT_ERR_INVALID_ARG, "4 bytes");
    expect_error(weft__ssd_blob_read(s, 1, "x", y, 64), WEFT_ERR_INVALID_ARG, "no blob x");
    expect_error(weft__ssd_steps(s, NULL, 4, NULL), WEFT_ERR_INVALID_ARG, NULL);
    assert_int_equal(weft__ssd_read(s, 1, "x", &b, y), WEFT_OK);
    assert_memory_equal(y, x, sizeof(x));
    weft__ssd_close(s);
    weft__ssd_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sub_boxes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dedup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_payload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_before_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_between_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc_pin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_direct_fallback, setup_shm, teardown),
        cmocka_unit_test_setup_teardown(test_nonblocking, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_on_another_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_args, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
