/*
 * The spill space (include/weft/spill.h, migrate/spill/), with small chunks so blocks
 * span many: round trips of blocks of every shape against copies kept aside, with the
 * sources overwritten once free; reads queued before the writes finish; deduplication
 * counted; blocks freed with I/O in flight and stale ids; an injected write error and a
 * full space failing only their blocks, with the reason; a chunk corrupted in the file
 * caught on read; the directory's rules; no file left behind, even by a process killed
 * while writing; bad arguments.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "scratch.h"

#include "weft/core.h"
#include "weft/spill.h"

#define CHUNK 8192
#define WAIT_NS 60000000000ull

static char root[64];
static char dir[128];
static weft_ctx_t *ctx; /* the spaces' context */

/* Poll block @p id until it has every bit of @p bits (or fails): the state, not a
 * request, so STORED can be waited for too. WEFT_ERR_TIMEOUT after a minute. */
static weft_status_t wait_state(weft_spill_t *sp, uint64_t id, unsigned bits)
{
    for (int i = 0; i < 600000; i++) {
        unsigned st = 0;
        weft_status_t status = weft_spill_state(sp, id, &st);
        if (status != WEFT_OK || (st & bits) == bits) {
            return status;
        }
        usleep(100);
    }
    return WEFT_ERR_TIMEOUT;
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/weft-spill-XXXXXX");
    if (mkdtemp(root) == NULL) {
        return -1;
    }
    snprintf(dir, sizeof(dir), "%s/space", root); /* the space creates it */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return scratch_remove(root);
}

static weft_spill_t *open_space(const weft_spill_params_t *extra)
{
    weft_spill_params_t p = {.size = sizeof(p), .chunk_bytes = CHUNK, .queue_depth = 4};
    if (extra != NULL) {
        p.max_bytes = extra->max_bytes;
        p.fail_write = extra->fail_write;
        p.buffered = extra->buffered;
    }
    weft_spill_t *sp = NULL;
    if (weft_spill_create(ctx, dir, &p, &sp) != WEFT_OK) {
        fail_msg("open: %s", weft_last_error(NULL));
    }
    return sp;
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

/* Entries in the space's directory. */
static int entries(void)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    }
    closedir(d);
    return n;
}

static const size_t sizes[] = {0, 1, 4095, 4096, CHUNK, CHUNK + 1, 3 * CHUNK + 100, 40 * CHUNK};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void round_trip(bool buffered)
{
    weft_spill_params_t extra = {.buffered = buffered};
    weft_spill_t *sp = open_space(&extra);
    uint8_t *src[NSIZES], *ref[NSIZES], *back[NSIZES];
    uint64_t id[NSIZES];
    for (size_t k = 0; k < NSIZES; k++) {
        src[k] = malloc(sizes[k] + 1);
        ref[k] = malloc(sizes[k] + 1);
        back[k] = malloc(sizes[k] + 1);
        fill_random(src[k], sizes[k], k);
        memcpy(ref[k], src[k], sizes[k]);
        assert_int_equal(weft_spill_write_start(sp, src[k], sizes[k], &id[k], NULL), WEFT_OK);
    }
    for (size_t k = 0; k < NSIZES; k++) {
        assert_int_equal(wait_state(sp, id[k], WEFT_SPILL_SOURCE_FREE), WEFT_OK);
        memset(src[k], 0xa5, sizes[k]); /* the source is free: nothing may read it now */
    }
    for (size_t k = NSIZES; k-- > 0;) {
        memset(back[k], 0x5a, sizes[k]);
        assert_int_equal(weft_spill_read_start(sp, id[k], back[k], sizes[k], NULL), WEFT_OK);
    }
    for (size_t k = 0; k < NSIZES; k++) {
        assert_int_equal(wait_state(sp, id[k], WEFT_SPILL_LOADED | WEFT_SPILL_STORED), WEFT_OK);
        assert_memory_equal(back[k], ref[k], sizes[k]);
        unsigned st = 0;
        assert_int_equal(weft_spill_state(sp, id[k], &st), WEFT_OK);
        assert_int_equal(st, WEFT_SPILL_SOURCE_FREE | WEFT_SPILL_STORED | WEFT_SPILL_LOADED);
    }
    weft_spill_stats_t s;
    assert_int_equal(weft_spill_stats(sp, &s), WEFT_OK);
    size_t total = 0;
    for (size_t k = 0; k < NSIZES; k++) {
        total += sizes[k];
    }
    assert_int_equal(s.bytes_submitted, total);
    assert_int_equal(s.bytes_written + s.bytes_deduplicated, total);
    assert_int_equal(s.bytes_read, total); /* every chunk of every block read back */
    assert_int_equal(s.blocks_held, NSIZES);
    assert_true(s.file_bytes >= s.bytes_written);
    if (buffered) {
        assert_int_equal(s.direct, 0);
    }
    for (size_t k = 0; k < NSIZES; k++) {
        assert_int_equal(weft_spill_drop(sp, id[k]), WEFT_OK);
        free(src[k]);
        free(ref[k]);
        free(back[k]);
    }
    assert_int_equal(weft_spill_stats(sp, &s), WEFT_OK);
    assert_int_equal(s.blocks_held, 0);
    assert_int_equal(s.file_bytes, 0); /* trimmed once nothing is held */
    assert_int_equal(entries(), 0);    /* the file never had a name */
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    weft_spill_free(sp);
}

static void test_round_trip(void **state)
{
    (void)state;
    round_trip(false);
}

static void test_round_trip_buffered(void **state)
{
    (void)state;
    round_trip(true);
}

/* A read queued at once, while the block's chunks are still being taken and written. */
static void test_read_before_stored(void **state)
{
    (void)state;
    weft_spill_t *sp = open_space(NULL);
    size_t n = 64 * CHUNK + 17;
    uint8_t *src = malloc(n), *back = malloc(n);
    fill_random(src, n, 7);
    uint64_t id;
    assert_int_equal(weft_spill_write_start(sp, src, n, &id, NULL), WEFT_OK);
    assert_int_equal(weft_spill_read_start(sp, id, back, n, NULL), WEFT_OK);
    expect_error_in(ctx, weft_spill_read_start(sp, id, back, n, NULL), WEFT_ERR_INVALID_ARG,
                    "being read");
    assert_int_equal(wait_state(sp, id, WEFT_SPILL_LOADED), WEFT_OK);
    assert_memory_equal(back, src, n);
    /* read again into another buffer */
    memset(back, 0, n);
    assert_int_equal(weft_spill_read_start(sp, id, back, n, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, id, WEFT_SPILL_LOADED), WEFT_OK);
    assert_memory_equal(back, src, n);
    weft_spill_free(sp); /* with the block still held */
    free(src);
    free(back);
}

static void test_dedup(void **state)
{
    (void)state;
    weft_spill_t *sp = open_space(NULL);
    size_t n = 10 * CHUNK;
    uint8_t *a = malloc(n), *b = malloc(n), *back = malloc(n);
    fill_random(a, n, 1);
    memcpy(b, a, n);
    memcpy(b + 4 * CHUNK, a, CHUNK); /* chunk 4 of b repeats chunk 0 */
    b[9 * CHUNK] ^= 1;               /* chunk 9 of b differs */
    uint64_t ia, ib;
    assert_int_equal(weft_spill_write_start(sp, a, n, &ia, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, ia, WEFT_SPILL_STORED), WEFT_OK);
    assert_int_equal(weft_spill_write_start(sp, b, n, &ib, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, ib, WEFT_SPILL_STORED), WEFT_OK);
    weft_spill_stats_t s;
    assert_int_equal(weft_spill_stats(sp, &s), WEFT_OK);
    assert_int_equal(s.bytes_written, 11 * CHUNK); /* a's 10, b's chunk 9 */
    assert_int_equal(s.bytes_deduplicated, 9 * CHUNK);
    /* a freed: b's chunks it shared stay readable */
    assert_int_equal(weft_spill_drop(sp, ia), WEFT_OK);
    expect_error_in(ctx, weft_spill_read_start(sp, ia, back, n, NULL), WEFT_ERR_INVALID_ARG,
                    "no block");
    assert_int_equal(weft_spill_read_start(sp, ib, back, n, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, ib, WEFT_SPILL_LOADED), WEFT_OK);
    assert_memory_equal(back, b, n);
    weft_spill_free(sp);
    free(a);
    free(b);
    free(back);
}

/* Blocks freed with writes and reads in flight; stale ids refused; no leak (ASan). */
static void test_free_in_flight(void **state)
{
    (void)state;
    weft_spill_t *sp = open_space(NULL);
    size_t n = 32 * CHUNK;
    uint8_t *src = malloc(n), *back = malloc(n);
    uint64_t first = 0;
    for (int round = 0; round < 20; round++) {
        fill_random(src, n, (uint64_t)round + 100);
        uint64_t id;
        assert_int_equal(weft_spill_write_start(sp, src, n, &id, NULL), WEFT_OK);
        if (round == 0) {
            first = id;
        }
        if (round % 2 == 1) {
            assert_int_equal(wait_state(sp, id, WEFT_SPILL_SOURCE_FREE), WEFT_OK);
            assert_int_equal(weft_spill_read_start(sp, id, back, n, NULL), WEFT_OK);
        }
        assert_int_equal(weft_spill_drop(sp, id), WEFT_OK);
        expect_error_in(ctx, weft_spill_drop(sp, id), WEFT_ERR_INVALID_ARG, "no block");
    }
    unsigned st;
    expect_error_in(ctx, weft_spill_state(sp, first, &st), WEFT_ERR_INVALID_ARG, "no block");
    /* the space still works, and its index was reused under another id */
    fill_random(src, n, 999);
    uint64_t id;
    assert_int_equal(weft_spill_write_start(sp, src, n, &id, NULL), WEFT_OK);
    assert_true(id != first);
    assert_int_equal(weft_spill_read_start(sp, id, back, n, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, id, WEFT_SPILL_LOADED), WEFT_OK);
    assert_memory_equal(back, src, n);
    weft_spill_free(sp);
    free(src);
    free(back);
}

static void test_write_error(void **state)
{
    (void)state;
    weft_spill_params_t extra = {.fail_write = 3};
    weft_spill_t *sp = open_space(&extra);
    size_t n = 2 * CHUNK;
    uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n), *back = malloc(n);
    fill_random(a, n, 1);
    fill_random(b, n, 2);
    fill_random(c, n, 3);
    uint64_t ia, ib, ic;
    assert_int_equal(weft_spill_write_start(sp, a, n, &ia, NULL), WEFT_OK); /* writes 1, 2 */
    assert_int_equal(weft_spill_write_start(sp, b, n, &ib, NULL), WEFT_OK); /* 3 fails, 4 */
    assert_int_equal(weft_spill_write_start(sp, c, n, &ic, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, ia, WEFT_SPILL_STORED), WEFT_OK);
    expect_error_in(ctx, wait_state(sp, ib, WEFT_SPILL_STORED), WEFT_ERR_IO, "Input/output error");
    expect_error_in(ctx, weft_spill_read_start(sp, ib, back, n, NULL), WEFT_ERR_IO, "chunk 0");
    unsigned st;
    expect_error_in(ctx, weft_spill_state(sp, ib, &st), WEFT_ERR_IO, "failed");
    assert_true(st & WEFT_SPILL_SOURCE_FREE);
    assert_int_equal(weft_spill_read_start(sp, ic, back, n, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, ic, WEFT_SPILL_LOADED), WEFT_OK);
    assert_memory_equal(back, c, n);
    /* the same content written again gets a chunk of its own, and is stored */
    uint64_t ib2;
    assert_int_equal(weft_spill_write_start(sp, b, n, &ib2, NULL), WEFT_OK);
    assert_int_equal(weft_spill_read_start(sp, ib2, back, n, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, ib2, WEFT_SPILL_LOADED), WEFT_OK);
    assert_memory_equal(back, b, n);
    assert_int_equal(weft_spill_drop(sp, ib), WEFT_OK);
    weft_spill_free(sp);
    free(a);
    free(b);
    free(c);
    free(back);
}

static void test_full(void **state)
{
    (void)state;
    weft_spill_params_t extra = {.max_bytes = 4 * CHUNK};
    weft_spill_t *sp = open_space(&extra);
    size_t n = 3 * CHUNK;
    uint8_t *a = malloc(n), *b = malloc(n);
    fill_random(a, n, 1);
    fill_random(b, n, 2);
    uint64_t ia, ib;
    assert_int_equal(weft_spill_write_start(sp, a, n, &ia, NULL), WEFT_OK);
    assert_int_equal(weft_spill_write_start(sp, b, n, &ib, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, ia, WEFT_SPILL_STORED), WEFT_OK);
    expect_error_in(ctx, wait_state(sp, ib, WEFT_SPILL_STORED), WEFT_ERR_IO, "max_bytes");
    /* freeing makes room again */
    assert_int_equal(weft_spill_drop(sp, ia), WEFT_OK);
    assert_int_equal(weft_spill_drop(sp, ib), WEFT_OK);
    assert_int_equal(weft_spill_write_start(sp, b, n, &ib, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, ib, WEFT_SPILL_STORED), WEFT_OK);
    weft_spill_free(sp);
    free(a);
    free(b);
}

/* The space's file, found through /proc/self/fd as the only deleted file in dir. */
static int open_space_file(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    struct dirent *de;
    int fd = -1;
    while ((de = readdir(d)) != NULL) {
        char link[300], target[512];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
        ssize_t len = readlink(link, target, sizeof(target) - 1);
        if (len <= 0) {
            continue;
        }
        target[len] = '\0';
        if (strncmp(target, dir, strlen(dir)) == 0 && strstr(target, "(deleted)") != NULL) {
            fd = open(link, O_RDWR);
            break;
        }
    }
    closedir(d);
    return fd;
}

static void test_corrupt_chunk(void **state)
{
    (void)state;
    weft_spill_params_t extra = {.buffered = 1};
    weft_spill_t *sp = open_space(&extra);
    size_t n = 4 * CHUNK;
    uint8_t *a = malloc(n), *back = malloc(n);
    fill_random(a, n, 5);
    uint64_t id;
    assert_int_equal(weft_spill_write_start(sp, a, n, &id, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, id, WEFT_SPILL_STORED), WEFT_OK);
    int fd = open_space_file();
    assert_true(fd >= 0);
    uint8_t byte;
    assert_int_equal(pread(fd, &byte, 1, 2 * CHUNK + 10), 1);
    byte ^= 0x40;
    assert_int_equal(pwrite(fd, &byte, 1, 2 * CHUNK + 10), 1);
    close(fd);
    assert_int_equal(weft_spill_read_start(sp, id, back, n, NULL), WEFT_OK);
    expect_error_in(ctx, wait_state(sp, id, WEFT_SPILL_LOADED), WEFT_ERR_IO, "corrupted");
    weft_spill_free(sp);
    free(a);
    free(back);
}

static void test_directory_rules(void **state)
{
    (void)state;
    weft_spill_t *sp = NULL;
    char path[256];
    snprintf(path, sizeof(path), "%s/open", root);
    assert_int_equal(mkdir(path, 0755), 0);
    expect_error_in(ctx, weft_spill_create(ctx, path, NULL, &sp), WEFT_ERR_INVALID_ARG,
                    "mode 0755");
    assert_null(sp);
    char link[256];
    snprintf(link, sizeof(link), "%s/link", root);
    assert_int_equal(chmod(path, 0700), 0);
    assert_int_equal(symlink(path, link), 0);
    expect_error_in(ctx, weft_spill_create(ctx, link, NULL, &sp), WEFT_ERR_INVALID_ARG,
                    "symbolic link");
    assert_int_equal(weft_spill_create(ctx, path, NULL, &sp), WEFT_OK);
    weft_spill_free(sp);
}

/* A process killed while its blocks are being written leaves no file. */
/* The writer of test_killed_leaves_nothing, in a process of its own (started by exec,
 * so with a context of its own): writes blocks to @p path, says so on @p fd after a few,
 * and goes on until killed. */
static int writer(const char *path, int fd)
{
    weft_ctx_t *wctx = NULL;
    if (weft_init(NULL, &wctx) != WEFT_OK) {
        return 2;
    }
    weft_spill_params_t p = {.size = sizeof(p), .chunk_bytes = CHUNK};
    weft_spill_t *sp = NULL;
    if (weft_spill_create(wctx, path, &p, &sp) != WEFT_OK) {
        return 3;
    }
    size_t n = 256 * CHUNK;
    uint8_t *a = malloc(n);
    fill_random(a, n, 3);
    for (int i = 0;; i++) {
        a[0] = (uint8_t)i;
        uint64_t id;
        weft_req_t *req = NULL;
        if (weft_spill_write_start(sp, a, n, &id, &req) != WEFT_OK ||
            weft_wait(req, WAIT_NS) != WEFT_OK) {
            return 4;
        }
        weft_req_free(req);
        if (i == 4) {
            (void)!write(fd, "x", 1);
        }
    }
}

/* A process killed while its blocks are being written leaves no file. */
static void test_killed_leaves_nothing(void **state)
{
    (void)state;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        char fd[16];
        snprintf(fd, sizeof(fd), "%d", ready[1]);
        execl("/proc/self/exe", "test_spill", "--writer", dir, fd, (char *)NULL);
        _exit(127);
    }
    close(ready[1]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    assert_true(entries() == 0); /* while it writes: the file has no name */
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(entries(), 0);
}

/* max_rate paces the chunks started: 24 chunks at 64 chunks a second take at least
 * (24 - 1) / 64 s, however fast the machine (a slow one only takes longer). */
static void test_paced(void **state)
{
    (void)state;
    weft_spill_params_t p = {.size = sizeof(p), .chunk_bytes = CHUNK, .max_rate = 64 * CHUNK};
    weft_spill_t *sp = NULL;
    assert_int_equal(weft_spill_create(ctx, dir, &p, &sp), WEFT_OK);
    size_t n = 24 * CHUNK;
    uint8_t *a = malloc(n), *back = malloc(n);
    fill_random(a, n, 21);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t id;
    assert_int_equal(weft_spill_write_start(sp, a, n, &id, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, id, WEFT_SPILL_STORED), WEFT_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (s < 23.0 / 64 * 0.95) {
        fail_msg("24 chunks stored in %.3f s at 64 chunks a second", s);
    }
    assert_int_equal(weft_spill_read_start(sp, id, back, n, NULL), WEFT_OK);
    assert_int_equal(wait_state(sp, id, WEFT_SPILL_LOADED), WEFT_OK);
    assert_memory_equal(back, a, n);
    weft_spill_free(sp);
    free(a);
    free(back);
}

/* Requests: a write's completes when its source is free, a read's when it has landed;
 * one on a dropped block, or on a space freed under it, fails. */
static void test_requests(void **state)
{
    (void)state;
    weft_spill_t *sp = open_space(NULL);
    size_t n = 20 * CHUNK + 3;
    uint8_t *a = malloc(n), *back = malloc(n);
    fill_random(a, n, 11);
    uint64_t id;
    weft_req_t *req = NULL;
    assert_int_equal(weft_spill_write_start(sp, a, n, &id, &req), WEFT_OK);
    assert_non_null(req);
    assert_int_equal(weft_wait(req, WAIT_NS), WEFT_OK);
    unsigned st;
    assert_int_equal(weft_spill_state(sp, id, &st), WEFT_OK);
    assert_true(st & WEFT_SPILL_SOURCE_FREE);
    assert_int_equal(weft_req_free(req), WEFT_OK);
    assert_int_equal(weft_spill_read_start(sp, id, back, n, &req), WEFT_OK);
    assert_int_equal(weft_wait(req, WAIT_NS), WEFT_OK);
    assert_memory_equal(back, a, n);
    assert_int_equal(weft_req_free(req), WEFT_OK);
    /* dropped in flight: the request fails, saying so */
    assert_int_equal(weft_spill_read_start(sp, id, back, n, &req), WEFT_OK);
    assert_int_equal(weft_spill_drop(sp, id), WEFT_OK);
    expect_error_in(ctx, weft_wait(req, WAIT_NS), WEFT_ERR_INVALID_ARG, "dropped");
    assert_int_equal(weft_req_free(req), WEFT_OK);
    /* a failed write fails its request */
    weft_spill_free(sp);
    weft_spill_params_t extra = {.fail_write = 1};
    sp = open_space(&extra);
    assert_int_equal(weft_spill_write_start(sp, a, n, &id, &req), WEFT_OK);
    weft_status_t got = weft_wait(req, WAIT_NS);
    if (got == WEFT_OK) { /* the source may be free before the write's end */
        assert_int_equal(weft_req_free(req), WEFT_OK);
        assert_int_equal(weft_spill_read_start(sp, id, back, n, &req), WEFT_ERR_IO);
    } else {
        assert_int_equal(got, WEFT_ERR_IO);
        assert_int_equal(weft_req_free(req), WEFT_OK);
    }
    /* the space freed with a request in flight */
    uint64_t id2;
    assert_int_equal(weft_spill_write_start(sp, a, n, &id2, NULL), WEFT_OK);
    req = NULL;
    if (weft_spill_read_start(sp, id2, back, n, &req) == WEFT_OK) {
        weft_spill_free(sp);
        expect_error_in(ctx, weft_wait(req, WAIT_NS), WEFT_ERR_INVALID_ARG, "freed");
        assert_int_equal(weft_req_free(req), WEFT_OK);
    } else {
        weft_spill_free(sp);
    }
    free(a);
    free(back);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    weft_spill_t *sp = NULL;
    weft_spill_params_t p = {.size = sizeof(p), .chunk_bytes = 1000};
    expect_error_in(ctx, weft_spill_create(ctx, dir, &p, &sp), WEFT_ERR_INVALID_ARG, "chunk size");
    p = (weft_spill_params_t){.size = sizeof(p), .queue_depth = 1000};
    expect_error_in(ctx, weft_spill_create(ctx, dir, &p, &sp), WEFT_ERR_INVALID_ARG, "queue depth");
    p = (weft_spill_params_t){.size = 3};
    expect_error_in(ctx, weft_spill_create(ctx, dir, &p, &sp), WEFT_ERR_INVALID_ARG, "size");
    expect_error_in(ctx, weft_spill_create(ctx, NULL, NULL, &sp), WEFT_ERR_INVALID_ARG, NULL);
    expect_error_in(ctx, weft_spill_create(ctx, "", NULL, &sp), WEFT_ERR_INVALID_ARG, NULL);
    expect_error(weft_spill_create(NULL, dir, NULL, &sp), WEFT_ERR_INVALID_ARG, "context");
    sp = open_space(NULL);
    uint8_t buf[100] = {0};
    uint64_t id;
    expect_error_in(ctx, weft_spill_write_start(sp, NULL, 10, &id, NULL), WEFT_ERR_INVALID_ARG,
                    NULL);
    expect_error_in(ctx, weft_spill_write_start(sp, buf, 10, NULL, NULL), WEFT_ERR_INVALID_ARG,
                    NULL);
    assert_int_equal(weft_spill_write_start(sp, buf, sizeof(buf), &id, NULL), WEFT_OK);
    expect_error_in(ctx, weft_spill_read_start(sp, id, buf, 99, NULL), WEFT_ERR_INVALID_ARG,
                    "holds 100");
    expect_error_in(ctx, weft_spill_read_start(sp, id ^ (1ull << 32), buf, 100, NULL),
                    WEFT_ERR_INVALID_ARG, "no block");
    expect_error_in(ctx, weft_spill_read_start(sp, 0, buf, 100, NULL), WEFT_ERR_INVALID_ARG,
                    "no block");
    weft_req_t *req = (weft_req_t *)buf; /* a refused call leaves no request (ASan: none leaked) */
    expect_error_in(ctx, weft_spill_read_start(sp, 0, buf, 100, &req), WEFT_ERR_INVALID_ARG,
                    "no block");
    assert_null(req);
    unsigned st;
    expect_error(weft_spill_state(sp, id, NULL), WEFT_ERR_INVALID_ARG, NULL);
    expect_error(weft_spill_state(NULL, id, &st), WEFT_ERR_INVALID_ARG, NULL);
    expect_error(weft_spill_stats(sp, NULL), WEFT_ERR_INVALID_ARG, NULL);
    expect_error(weft_spill_drop(NULL, id), WEFT_ERR_INVALID_ARG, NULL);
    weft_spill_free(sp);
    weft_spill_free(NULL);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--writer") == 0) {
        return writer(argv[2], atoi(argv[3]));
    }
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        fprintf(stderr, "weft_init: %s\n", weft_last_error(NULL));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_buffered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_before_stored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dedup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_leaves_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    weft_finalize(ctx);
    return failed;
}
