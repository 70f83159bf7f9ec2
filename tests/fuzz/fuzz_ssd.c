/*
 * Fuzz target: the decoders of the SSD tier's files (migrate/ssd/ssd_format.c): chunk
 * headers, the MAC of a chunk file, manifests, and the names of the directory's files.
 * They read what is on disk, which a crash may have torn, a disk damaged, or someone who
 * could write the directory forged. The first byte of an input says what the rest is
 * (tests/fuzz/fuzz_ssd.h). Manifests come sealed under a key the fuzzer knows, or as a
 * body the target seals, so that the parser behind the MAC is reached.
 *
 * What is accepted must be safe to use: a header's fields in range and its name
 * terminated; a manifest's entries consistent (kinds, dimensions, boxes, bytes, chunk
 * counts that cover the bytes, hashes partitioned among the entries) and encoding it
 * again must give back the same bytes; a chunk file passes its MAC only if sealing it
 * again gives the same file; a name parses only if it is the name of what it parsed to.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "fuzz_ssd.h"
#include "migrate/engine/xxh.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HDR_CHECKED 336 /* the chunk header's checksum covers bytes 0..335 (ssd_format.c) */

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static void check_header(const uint8_t *hdr)
{
    weft__ssd_chunk_hdr_t h;
    const char *why = NULL;
    if (!weft__ssd_chunk_hdr_decode(hdr, &h, &why)) {
        if (why == NULL) {
            abort();
        }
        return;
    }
    if ((h.kind != WEFT__SSD_REGION && h.kind != WEFT__SSD_BLOB) || h.ndims < 0 ||
        h.ndims > WEFT_LAYOUT_MAX_DIMS || memchr(h.name, '\0', sizeof(h.name)) == NULL) {
        abort();
    }
}

static void fuzz_header(const uint8_t *data, size_t size, bool fix)
{
    static uint8_t hdr[WEFT__SSD_HEADER_BYTES];
    memset(hdr, 0, sizeof(hdr));
    memcpy(hdr, data, size < sizeof(hdr) ? size : sizeof(hdr));
    if (fix) {
        put64(hdr + HDR_CHECKED, XXH3_64bits(hdr, HDR_CHECKED));
    }
    check_header(hdr);
}

static void fuzz_chunk(const uint8_t *data, size_t size)
{
    size_t payload = size > WEFT__SSD_HEADER_BYTES ? size - WEFT__SSD_HEADER_BYTES : 0;
    size_t len = WEFT__SSD_HEADER_BYTES + payload;
    uint8_t *file = calloc(1, len), *again = malloc(len);
    if (file == NULL || again == NULL) {
        abort();
    }
    memcpy(file, data, size);
    memcpy(again, file, len);
    check_header(file);
    bool ok = weft__ssd_chunk_mac_ok(fuzz_ssd_key, file, payload);
    if (memcmp(file, again, len) != 0) { /* the check must leave the file as it was */
        abort();
    }
    if (!weft__ssd_chunk_seal(fuzz_ssd_key, again, payload)) {
        abort();
    }
    if (ok != (memcmp(file, again, len) == 0) ||
        !weft__ssd_chunk_mac_ok(fuzz_ssd_key, again, payload)) {
        abort();
    }
    free(file);
    free(again);
}

/* Everything a reader relies on in a manifest it accepted. */
static void check_manifest(const weft__ssd_manifest_t *m)
{
    uint64_t next = 0;
    if (m->chunk_bytes == 0 || m->chunk_bytes % WEFT__SSD_ALIGN != 0) {
        abort();
    }
    for (size_t i = 0; i < m->nentries; i++) {
        const weft__ssd_entry_t *e = &m->entries[i];
        size_t len = strnlen(e->name, sizeof(e->name));
        if (len == 0 || len > WEFT_LAYOUT_NAME_MAX || e->first_chunk != next) {
            abort();
        }
        if (e->kind == WEFT__SSD_BLOB
                ? e->ndims != 0
                : e->kind != WEFT__SSD_REGION || e->ndims < 1 || e->ndims > WEFT_LAYOUT_MAX_DIMS ||
                      weft_dtype_size(e->dtype) == 0) {
            abort();
        }
        for (int d = 0; d < e->ndims; d++) {
            if (e->box.extent[d] == 0 || e->box.offset[d] > UINT64_MAX - e->box.extent[d]) {
                abort();
            }
        }
        /* The chunks cover the entry's elements, and the last one holds some of them. */
        uint64_t elems = weft__ssd_entry_elems(e);
        uint64_t per = weft__ssd_chunk_elems(e, m->chunk_bytes);
        if (per == 0 || e->nchunks > UINT64_MAX / per || e->nchunks * per < elems ||
            (e->nchunks > 0 && (e->nchunks - 1) * per >= elems)) {
            abort();
        }
        if (e->kind == WEFT__SSD_REGION && e->bytes != elems * weft__ssd_entry_elem(e)) {
            abort();
        }
        next += e->nchunks;
    }
    if (next != m->nhashes) {
        abort();
    }
}

static void fuzz_manifest(const uint8_t *data, size_t size)
{
    weft__ssd_manifest_t m;
    const char *why = NULL;
    if (!weft__ssd_manifest_decode(data, size, fuzz_ssd_key, &m, &why)) {
        if (why == NULL || m.entries != NULL || m.hashes != NULL) {
            abort();
        }
        return;
    }
    check_manifest(&m);
    size_t len = weft__ssd_manifest_size(&m);
    uint8_t *again = malloc(len);
    if (again == NULL || len != size || !weft__ssd_manifest_encode(&m, fuzz_ssd_key, again) ||
        memcmp(again, data, size) != 0) {
        abort();
    }
    free(again);
    weft__ssd_manifest_free(&m);
}

/* The body given, then its XXH3-64 and HMAC-SHA256 under the fuzzer's key. */
static void fuzz_manifest_body(const uint8_t *data, size_t size)
{
    size_t len = size + 8 + WEFT__SSD_MAC_BYTES;
    uint8_t *file = malloc(len);
    unsigned int n = 0;
    if (file == NULL) {
        abort();
    }
    memcpy(file, data, size);
    put64(file + size, XXH3_64bits(data, size));
    if (HMAC(EVP_sha256(), fuzz_ssd_key, WEFT__SSD_KEY_BYTES, file, size + 8, file + size + 8,
             &n) == NULL) {
        abort();
    }
    fuzz_manifest(file, len);
    free(file);
}

static void fuzz_name(const uint8_t *data, size_t size)
{
    char name[WEFT__SSD_NAME_MAX], again[WEFT__SSD_NAME_MAX];
    size_t len = size < sizeof(name) - 1 ? size : sizeof(name) - 1;
    memcpy(name, data, len);
    name[len] = '\0';
    weft__ssd_hash_t h;
    uint64_t step;
    if (weft__ssd_parse_chunk_name(name, &h)) {
        weft__ssd_chunk_name(&h, again);
        if (strcmp(name, again) != 0) {
            abort();
        }
    }
    if (weft__ssd_parse_manifest_name(name, &step)) {
        weft__ssd_manifest_name(step, again);
        if (strcmp(name, again) != 0) {
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    switch (data[0] % FUZZ_SSD_MODES) {
    case FUZZ_SSD_HEADER:
        fuzz_header(rest, n, false);
        break;
    case FUZZ_SSD_HEADER_FIXED:
        fuzz_header(rest, n, true);
        break;
    case FUZZ_SSD_CHUNK:
        fuzz_chunk(rest, n);
        break;
    case FUZZ_SSD_MANIFEST:
        fuzz_manifest(rest, n);
        break;
    case FUZZ_SSD_MANIFEST_BODY:
        fuzz_manifest_body(rest, n);
        break;
    default:
        fuzz_name(rest, n);
        break;
    }
    return 0;
}
