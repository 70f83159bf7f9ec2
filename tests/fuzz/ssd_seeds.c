/*
 * Writes the seed corpus of fuzz_ssd from real files:
 *
 *     ssd_seeds OUT_DIR
 *
 * Two steps of a small state (a 2-D and a 3-D tensor, three blobs, one empty) are
 * snapshotted by the SSD tier under the fuzzer's key into a scratch directory; each chunk
 * file and manifest it wrote becomes a seed, with the mode byte of fuzz_ssd.h in front
 * (a manifest also as a body without its checksum and MAC, a header also alone), and so
 * do the names of the files. Names are seed-<what>; what a campaign found sits beside.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_ssd.h"
#include "migrate/ssd/ssd.h"
#include "weft/core.h"

static const char *out_dir;
static int written;

static int seed(const char *what, int mode, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/seed-%s", out_dir, what);
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    uint8_t m = (uint8_t)mode;
    int bad = fwrite(&m, 1, 1, f) != 1 || fwrite(data, 1, len, f) != len;
    bad |= fclose(f) != 0;
    written += !bad;
    return bad;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    *len = buf != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
    fclose(f);
    return buf;
}

/* The payload bytes of a chunk file: its length is at byte 40 of the header. */
static size_t payload_of(const uint8_t *file)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | file[40 + i];
    }
    return (size_t)v;
}

static int seeds_of_file(const char *dir, const char *name)
{
    char path[4096], what[64];
    size_t len;
    weft__ssd_hash_t h;
    uint64_t step;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    uint8_t *bytes = slurp(path, &len);
    int bad = bytes == NULL;
    if (!bad && weft__ssd_parse_chunk_name(name, &h) && len >= WEFT__SSD_HEADER_BYTES) {
        size_t payload = payload_of(bytes);
        snprintf(what, sizeof(what), "chunk-%.8s", name);
        bad |= seed(what, FUZZ_SSD_CHUNK, bytes, WEFT__SSD_HEADER_BYTES + payload);
        snprintf(what, sizeof(what), "header-%.8s", name);
        bad |= seed(what, FUZZ_SSD_HEADER, bytes, 400);
        snprintf(what, sizeof(what), "header-fixed-%.8s", name);
        bad |= seed(what, FUZZ_SSD_HEADER_FIXED, bytes, 336);
        snprintf(what, sizeof(what), "name-chunk-%.8s", name);
        bad |= seed(what, FUZZ_SSD_NAME, name, strlen(name));
    } else if (!bad && weft__ssd_parse_manifest_name(name, &step)) {
        snprintf(what, sizeof(what), "manifest-%llu", (unsigned long long)step);
        bad |= seed(what, FUZZ_SSD_MANIFEST, bytes, len);
        snprintf(what, sizeof(what), "manifest-body-%llu", (unsigned long long)step);
        bad |= seed(what, FUZZ_SSD_MANIFEST_BODY, bytes, len - 8 - WEFT__SSD_MAC_BYTES);
        snprintf(what, sizeof(what), "name-manifest-%llu", (unsigned long long)step);
        bad |= seed(what, FUZZ_SSD_NAME, name, strlen(name));
    }
    free(bytes);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ssd_seeds OUT_DIR\n");
        return 2;
    }
    out_dir = argv[1];
    char scratch[] = "/tmp/weft-ssd-seeds-XXXXXX", dir[64];
    if (mkdtemp(scratch) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(dir, sizeof(dir), "%s/rank0", scratch);
    static float w[6 * 700];
    static double v[2 * 3 * 5];
    static uint8_t rng[5000];
    uint8_t pos[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        w[i] = (float)i;
    }
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        v[i] = (double)i / 3.0;
    }
    for (size_t i = 0; i < sizeof(rng); i++) {
        rng[i] = (uint8_t)(i * 131 + 7);
    }
    weft__ssd_params_t p = {.chunk_bytes = 4096, .queue_depth = 2, .key = fuzz_ssd_key};
    weft__ssd_t *s = NULL;
    weft__ssd_region_t r[3] = {
        {"layer.0.w", WEFT_F32, 2, {{0, 0}, {3, 700}}, w},
        {"layer.0.w", WEFT_F32, 2, {{3, 0}, {3, 700}}, w + 3 * 700},
        {"adam.v", WEFT_F64, 3, {{4, 0, 10}, {2, 3, 5}}, v},
    };
    weft__ssd_blob_t b[3] = {
        {"rng", rng, sizeof(rng)}, {"loader", pos, sizeof(pos)}, {"empty", NULL, 0}};
    int bad =
        weft__ssd_open(dir, &p, &s) != WEFT_OK || weft__ssd_snapshot(s, 1, r, 3, b, 3) != WEFT_OK;
    w[0] = -1.0f;
    bad = bad || weft__ssd_snapshot(s, 2, r, 2, b, 2) != WEFT_OK;
    weft__ssd_close(s);
    if (bad) {
        fprintf(stderr, "ssd_seeds: %s\n", weft_last_error(NULL));
        return 1;
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] != '.' && seeds_of_file(dir, de->d_name) != 0) {
            fprintf(stderr, "ssd_seeds: cannot make seeds of %s/%s\n", dir, de->d_name);
            bad = 1;
        }
    }
    if (d != NULL) {
        rewinddir(d);
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] != '.') {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                unlink(path);
            }
        }
        closedir(d);
    }
    rmdir(dir);
    rmdir(scratch);
    printf("%d seeds written to %s\n", written, out_dir);
    return bad;
}
