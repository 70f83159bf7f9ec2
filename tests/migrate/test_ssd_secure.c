/*
 * The SSD tier (migrate/ssd*.c) against another user of the machine, or anyone who can
 * write its directory: symbolic links planted at the names it writes and reads, a
 * directory that is not its owner's alone, the modes of what it creates, and steps forged
 * with recomputed checksums or written under another key. Each attack must leave the
 * victim file unchanged, be refused with its reason, or fail the restore with an error
 * naming the MAC; a legitimate step still restores bit for bit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "scratch.h"

#include "migrate/engine/xxh.h"
#include "migrate/ssd/ssd.h"
#include "migrate/ssd/ssd_format.h"
#include "weft/core.h"
#include "weft/migrate.h"

#define CHUNK 8192
#define PATH_LEN 512
#define NOBODY 65534
#define VICTIM_TEXT "another user's file: must not change\n"

static char root[64];
static char dir[128];
static char victim[128];
static const uint8_t key_a[WEFT__SSD_KEY_BYTES] = "the job's key, 32 bytes long...";
static const uint8_t key_b[WEFT__SSD_KEY_BYTES] = "an attacker's key, not the job's";

static int setup(void **state)
{
    (void)state;
    umask(022);
    snprintf(root, sizeof(root), "/tmp/weft-ssd-secure-XXXXXX");
    if (mkdtemp(root) == NULL) {
        return -1;
    }
    snprintf(dir, sizeof(dir), "%s/rank0", root);
    snprintf(victim, sizeof(victim), "%s/victim", root);
    FILE *f = fopen(victim, "w");
    if (f == NULL) {
        return -1;
    }
    fputs(VICTIM_TEXT, f);
    fclose(f);
    if (geteuid() == 0 && chown(victim, NOBODY, NOBODY) != 0) { /* someone else's */
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return scratch_remove(root);
}

static weft_status_t open_with(const char *path, const uint8_t *key, bool read_only,
                               weft__ssd_t **s)
{
    weft__ssd_params_t p = {
        .chunk_bytes = CHUNK, .queue_depth = 4, .key = key, .read_only = read_only};
    *s = NULL;
    return weft__ssd_open(path, &p, s);
}

static weft__ssd_t *open_tier(const uint8_t *key)
{
    weft__ssd_t *s;
    weft_status_t st = open_with(dir, key, false, &s);
    if (st != WEFT_OK) {
        fail_msg("open %s: %s", dir, weft_last_error(NULL));
    }
    return s;
}

static void assert_victim_intact(void)
{
    char buf[256] = {0};
    FILE *f = fopen(victim, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    assert_int_equal(n, strlen(VICTIM_TEXT));
    assert_string_equal(buf, VICTIM_TEXT);
}

static void write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static uint8_t *read_file(const char *path, size_t *len)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    uint8_t *buf = malloc((size_t)st.st_size);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, buf, (size_t)st.st_size), st.st_size);
    close(fd);
    *len = (size_t)st.st_size;
    return buf;
}

static void in_dir(const char *name, char *path)
{
    snprintf(path, PATH_LEN, "%s/%s", dir, name);
}

/* ---- a step: a 2-D f32 tensor and a blob of three chunks ---- */

#define ROWS 24
#define COLS 100
#define BLOB (2 * CHUNK + 500)

typedef struct state {
    float w[ROWS * COLS];
    uint8_t blob[BLOB];
} state_t;

static void fill(state_t *m, unsigned seed)
{
    for (size_t i = 0; i < ROWS * COLS; i++) {
        m->w[i] = (float)i * 0.25f + (float)seed;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t i = 0; i < BLOB; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        m->blob[i] = (uint8_t)x;
    }
}

static weft_status_t snapshot(weft__ssd_t *s, uint64_t step, const state_t *m)
{
    weft__ssd_region_t r = {"w", WEFT_F32, 2, {{0, 0}, {ROWS, COLS}}, m->w};
    weft__ssd_blob_t b = {"opt", m->blob, BLOB};
    return weft__ssd_snapshot(s, step, &r, 1, &b, 1);
}

static weft_status_t restore(weft__ssd_t *s, uint64_t step, state_t *got)
{
    weft_box_t all = {{0, 0}, {ROWS, COLS}};
    weft_status_t st = weft__ssd_read(s, step, "w", &all, got->w);
    return st != WEFT_OK ? st : weft__ssd_blob_read(s, step, "opt", got->blob, BLOB);
}

static void check_restores(weft__ssd_t *s, uint64_t step, const state_t *want)
{
    state_t *got = malloc(sizeof(*got));
    memset(got, 0xee, sizeof(*got));
    assert_int_equal(restore(s, step, got), WEFT_OK);
    assert_memory_equal(got, want, sizeof(*got));
    free(got);
}

static weft__ssd_hash_t hash_of(const void *data, size_t len)
{
    XXH128_hash_t x = XXH3_128bits(data, len);
    return (weft__ssd_hash_t){x.low64, x.high64};
}

static void chunk_file(const weft__ssd_hash_t *h, char *path)
{
    char name[WEFT__SSD_NAME_MAX];
    weft__ssd_chunk_name(h, name);
    in_dir(name, path);
}

static void manifest_file(uint64_t step, char *path)
{
    char name[WEFT__SSD_NAME_MAX];
    weft__ssd_manifest_name(step, name);
    in_dir(name, path);
}

static void plant_link(const char *name_in_dir)
{
    char path[PATH_LEN];
    in_dir(name_in_dir, path);
    assert_int_equal(symlink(victim, path), 0);
}

/* ---- (1) symbolic links planted at the names the tier writes and reads ---- */

/* Links to the victim at every name a snapshot of step 1 writes (the temporary names an
 * attacker could predict before, the final names of its chunks and manifest): the write
 * goes elsewhere, the victim is unchanged, and the step restores. A link at the lock file
 * makes the open fail; a chunk file replaced by a link is not followed at a read. */
static void test_symlinks_planted(void **state)
{
    (void)state;
    state_t *m = malloc(sizeof(*m));
    fill(m, 1);
    weft__ssd_t *s = open_tier(key_a); /* it removes *.tmp: plant after */
    char name[WEFT__SSD_NAME_MAX + 8], path[PATH_LEN];
    weft__ssd_hash_t first = hash_of(m->blob, CHUNK);
    weft__ssd_chunk_name(&first, name);
    plant_link(name);
    strcat(name, ".tmp");
    plant_link(name);
    weft__ssd_manifest_name(1, name);
    plant_link(name);
    strcat(name, ".tmp");
    plant_link(name);

    weft_status_t st = snapshot(s, 1, m);
    assert_victim_intact();
    assert_int_equal(st, WEFT_OK);
    check_restores(s, 1, m);
    struct stat sb;
    chunk_file(&first, path);
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode)); /* the link was replaced, not followed */
    manifest_file(1, path);
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));

    /* A chunk file swapped for a link to a copy of itself outside the directory. */
    char copy[PATH_LEN];
    size_t len;
    chunk_file(&first, path);
    uint8_t *bytes = read_file(path, &len);
    snprintf(copy, sizeof(copy), "%s/copy", root);
    write_file(copy, bytes, len);
    free(bytes);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink(copy, path), 0);
    expect_error(weft__ssd_blob_read(s, 1, "opt", m->blob, BLOB), WEFT_ERR_IO, "cannot be opened");
    weft__ssd_close(s);

    /* A link at the lock file of a directory not opened yet. */
    snprintf(dir, sizeof(dir), "%s/rank1", root);
    assert_int_equal(mkdir(dir, 0700), 0);
    plant_link("lock");
    expect_error(open_with(dir, key_a, false, &s), WEFT_ERR_IO, "lock");
    assert_null(s);
    assert_victim_intact();
    free(m);
}

/* ---- (2) a directory that is not the owner's alone ---- */

static void expect_refused(const char *path, const char *why)
{
    weft__ssd_t *s;
    expect_error(open_with(path, key_a, false, &s), WEFT_ERR_INVALID_ARG, why);
    assert_null(s);
    assert_non_null(strstr(weft_last_error(NULL), path));
    expect_error(open_with(path, key_a, true, &s), WEFT_ERR_INVALID_ARG, why);
    assert_null(s);
}

static void test_directory_refused(void **state)
{
    (void)state;
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    expect_refused(dir, "mode 0777: the SSD tier keeps parameters and optimizer state, it must "
                        "be 0700 and yours");
    assert_int_equal(chmod(dir, 0750), 0); /* readable by the group */
    expect_refused(dir, "mode 0750");
    assert_int_equal(chmod(dir, 0701), 0);
    expect_refused(dir, "mode 0701");
    assert_int_equal(chmod(dir, 0700), 0);
    if (geteuid() == 0) {
        assert_int_equal(chown(dir, NOBODY, NOBODY), 0);
        expect_refused(dir, "owned by uid 65534");
        assert_int_equal(chown(dir, 0, 0), 0);
    } else {
        print_message("not root: a directory of another user not tried\n");
    }
    /* A symbolic link to a directory that would be accepted. */
    char link[PATH_LEN];
    snprintf(link, sizeof(link), "%s/link", root);
    assert_int_equal(symlink(dir, link), 0);
    expect_refused(link, "symbolic link");
    /* Put right, it opens. */
    weft__ssd_t *s = open_tier(key_a);
    weft__ssd_close(s);
}

/* ---- (3) modes of what the tier creates ---- */

static void assert_mode(const char *path, mode_t want)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    if ((st.st_mode & 07777) != want) {
        fail_msg("%s has mode %04o, not %04o", path, (unsigned)(st.st_mode & 07777),
                 (unsigned)want);
    }
}

static void test_modes(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "%s/a/b/rank0", root); /* three levels to create */
    state_t *m = malloc(sizeof(*m));
    fill(m, 3);
    weft__ssd_t *s = open_tier(key_a);
    assert_int_equal(snapshot(s, 1, m), WEFT_OK);
    m->w[0] = -1.0f;
    assert_int_equal(snapshot(s, 2, m), WEFT_OK);
    weft__ssd_close(s);
    char path[PATH_LEN];
    snprintf(path, sizeof(path), "%s/a", root);
    assert_mode(path, 0700);
    snprintf(path, sizeof(path), "%s/a/b", root);
    assert_mode(path, 0700);
    assert_mode(dir, 0700);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int files = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        if (de->d_name[0] == '.') {
            continue;
        }
        in_dir(de->d_name, path);
        assert_mode(path, 0600);
        files++;
    }
    closedir(d);
    assert_true(files >= 6); /* lock, key-check, two manifests, chunks */
    free(m);
}

/* ---- (4) forged steps ---- */

/* The manifest of @p step, decoded under @p key. */
static void load_manifest(uint64_t step, const uint8_t *key, weft__ssd_manifest_t *m)
{
    char path[PATH_LEN];
    size_t len;
    const char *why;
    manifest_file(step, path);
    uint8_t *bytes = read_file(path, &len);
    if (!weft__ssd_manifest_decode(bytes, len, key, m, &why)) {
        fail_msg("manifest of step %llu: %s", (unsigned long long)step, why);
    }
    free(bytes);
}

/* Replace the manifest of @p step by @p m sealed under @p key. */
static void store_manifest(uint64_t step, const weft__ssd_manifest_t *m, const uint8_t *key)
{
    char path[PATH_LEN];
    size_t len = weft__ssd_manifest_size(m);
    uint8_t *bytes = malloc(len);
    assert_true(weft__ssd_manifest_encode(m, key, bytes));
    manifest_file(step, path);
    write_file(path, bytes, len);
    free(bytes);
}

/* The blob's first chunk with one payload byte changed and every checksum recomputed (its
 * name, the hash its header names, the header's checksum, the manifest's hash and
 * checksum), sealed under @p chunk_key, the manifest sealed under @p manifest_key. */
static void forge_first_blob_chunk(const uint8_t *chunk_key, const uint8_t *manifest_key)
{
    weft__ssd_manifest_t m;
    load_manifest(1, key_a, &m);
    const weft__ssd_entry_t *e = &m.entries[1];
    assert_int_equal(e->kind, WEFT__SSD_BLOB);
    weft__ssd_hash_t *h = &m.hashes[e->first_chunk];
    char path[PATH_LEN];
    size_t len;
    chunk_file(h, path);
    uint8_t *file = read_file(path, &len);
    assert_int_equal(len, WEFT__SSD_HEADER_BYTES + CHUNK);
    uint8_t *payload = file + WEFT__SSD_HEADER_BYTES;
    payload[10] ^= 0x01; /* the forgery: one byte */
    weft__ssd_chunk_hdr_t hdr;
    const char *why;
    assert_true(weft__ssd_chunk_hdr_decode(file, &hdr, &why));
    *h = hdr.hash = hash_of(payload, CHUNK);
    weft__ssd_chunk_hdr_encode(&hdr, file);
    assert_true(weft__ssd_chunk_seal(chunk_key, file, CHUNK));
    chunk_file(h, path);
    write_file(path, file, len);
    store_manifest(1, &m, manifest_key);
    weft__ssd_manifest_free(&m);
    free(file);
}

/* A chunk forged with its checksums recomputed: refused for its MAC, naming the chunk;
 * what it does not touch still restores. */
static void test_forged_chunk(void **state)
{
    (void)state;
    state_t *m = malloc(sizeof(*m)), *got = malloc(sizeof(*got));
    fill(m, 4);
    weft__ssd_t *s = open_tier(key_a);
    assert_int_equal(snapshot(s, 1, m), WEFT_OK);
    weft__ssd_close(s);
    /* Only the chunk is forged (the manifest as if its forger held the key): the chunk's
     * own MAC must catch it. */
    forge_first_blob_chunk(key_b, key_a);
    s = open_tier(key_a);
    expect_error(weft__ssd_blob_read(s, 1, "opt", got->blob, BLOB), WEFT_ERR_IO, "fails its MAC");
    assert_non_null(strstr(weft_last_error(NULL), "blob opt, chunk 0"));
    weft_box_t all = {{0, 0}, {ROWS, COLS}};
    assert_int_equal(weft__ssd_read(s, 1, "w", &all, got->w), WEFT_OK);
    assert_memory_equal(got->w, m->w, sizeof(m->w));
    weft__ssd_close(s);
    free(m);
    free(got);
}

/* A manifest changed by the bytes of one hash (the blob's first chunk now names its
 * second, a real chunk file with a valid MAC), its checksum recomputed: without a MAC the
 * step would restore with the wrong bytes; it is refused, saying why. */
static void test_forged_manifest(void **state)
{
    (void)state;
    state_t *m = malloc(sizeof(*m)), *got = malloc(sizeof(*got));
    fill(m, 5);
    weft__ssd_t *s = open_tier(key_a);
    assert_int_equal(snapshot(s, 1, m), WEFT_OK);
    weft__ssd_close(s);

    weft__ssd_manifest_t man;
    load_manifest(1, key_a, &man);
    const weft__ssd_entry_t *e = &man.entries[1];
    man.hashes[e->first_chunk] = man.hashes[e->first_chunk + 1];
    store_manifest(1, &man, key_b); /* checksum right, MAC under the forger's key */
    weft__ssd_manifest_free(&man);

    s = open_tier(key_a);
    expect_error(restore(s, 1, got), WEFT_ERR_IO, "MAC");
    assert_non_null(strstr(weft_last_error(NULL), "manifest"));
    assert_non_null(strstr(weft_last_error(NULL), "step 1"));
    weft__ssd_close(s);
    free(m);
    free(got);
}

/* A step written under another key (another job's, or a forger's) is refused at restore
 * by a reader; a writer opening the directory with its own key removes it. */
static void test_other_key(void **state)
{
    (void)state;
    state_t *m = malloc(sizeof(*m)), *got = malloc(sizeof(*got));
    fill(m, 6);
    weft__ssd_t *s = open_tier(key_b);
    assert_int_equal(snapshot(s, 1, m), WEFT_OK);
    weft__ssd_close(s);

    weft__ssd_t *ro;
    assert_int_equal(open_with(dir, key_a, true, &ro), WEFT_OK);
    expect_error(restore(ro, 1, got), WEFT_ERR_IO, "written under another key");
    weft__ssd_close(ro);

    s = open_tier(key_a);
    uint64_t steps[2];
    size_t count;
    assert_int_equal(weft__ssd_steps(s, steps, 2, &count), WEFT_OK);
    assert_int_equal(count, 0);
    /* The same bytes again: had the other key's chunk files stayed, they would have been
     * taken as present and the step would not restore. */
    assert_int_equal(snapshot(s, 1, m), WEFT_OK);
    check_restores(s, 1, m);
    weft__ssd_close(s);
    free(m);
    free(got);
}

/* ---- (5) what is legitimate still restores ---- */

static void test_round_trip(void **state)
{
    (void)state;
    state_t *m = malloc(sizeof(*m));
    fill(m, 8);
    weft__ssd_t *s = open_tier(key_a);
    assert_int_equal(snapshot(s, 1, m), WEFT_OK);
    check_restores(s, 1, m);
    weft__ssd_close(s);
    /* Another handle of the same key: the owner again, and a reader. */
    s = open_tier(key_a);
    check_restores(s, 1, m);
    weft__ssd_t *ro;
    assert_int_equal(open_with(dir, key_a, true, &ro), WEFT_OK);
    check_restores(ro, 1, m);
    weft__ssd_close(ro);
    /* A second step sharing all but one chunk; both restore. */
    state_t *m2 = malloc(sizeof(*m2));
    memcpy(m2, m, sizeof(*m2));
    m2->blob[BLOB - 1] ^= 0xff;
    assert_int_equal(snapshot(s, 2, m2), WEFT_OK);
    weft__ssd_stats_t st;
    weft__ssd_stats(s, &st);
    assert_int_equal(st.chunks_written, 1);
    check_restores(s, 2, m2);
    check_restores(s, 1, m);
    weft__ssd_close(s);
    free(m);
    free(m2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_symlinks_planted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_modes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
