/*
 * The on-disk format of the SSD tier: chunk headers and manifests, encoded and checked.
 *
 * Chunk header (one 4 KiB block; the payload follows at 4096):
 *   0 "WEFTCHNK", 8 version u32, 12 header bytes u32, 16 hash lo u64, 24 hash hi u64,
 *   32 step u64, 40 payload bytes u64, 48 chunk index u64, 56 region offset u64,
 *   64 kind u32, 68 dtype i32, 72 ndims u32, 76 name length u32, 80 offset[8] u64,
 *   144 extent[8] u64, 208 name[128], 336 XXH3-64 of bytes 0..335, 344 MAC[32]; zeros
 *   after. The MAC is HMAC-SHA256 under the key of the 4096 header bytes (the MAC field
 *   as zeros) followed by the payload (not its padding).
 * Manifest:
 *   "WEFTMANI", version u32, 0 u32, step u64, chunk bytes u64, entries u64, hashes u64;
 *   per entry: kind u32, dtype i32, ndims u32, name length u32, name, (offset u64,
 *   extent u64) per dimension, bytes u64, chunks u64; then every hash (lo u64, hi u64) in
 *   entry order; then XXH3-64 of everything before; then HMAC-SHA256 under the key of
 *   everything before.
 * The checksums tell damage (a torn write, a flipped bit) from forgery: they come first,
 * so damage is reported as such; anyone can recompute them, so only the MAC tells that a
 * holder of the key wrote the file.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "migrate/ssd/ssd_format.h"
#include "migrate/engine/xxh.h"

#define CHUNK_MAGIC "WEFTCHNK"
#define MANIFEST_MAGIC "WEFTMANI"
#define HDR_CHECKED 336 /* bytes of the chunk header its checksum covers */
#define HDR_MAC 344     /* where the chunk header's MAC is */
#define MANIFEST_HEAD 48
#define MANIFEST_TAIL (8 + WEFT__SSD_MAC_BYTES) /* checksum, MAC */
#define KEY_CHECK_LABEL "weft-ssd-key-check-v1"
#define ENTRY_MIN 33 /* fixed fields, a one-character name, the two counts */

static uint8_t *put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
    return p + 4;
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
    return p + 8;
}

static uint32_t load32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static uint64_t load64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* HMAC-SHA256 under @p key of @p len bytes at @p data into @p out. */
static bool mac(const uint8_t key[WEFT__SSD_KEY_BYTES], const uint8_t *data, size_t len,
                uint8_t out[WEFT__SSD_MAC_BYTES])
{
    unsigned int n = 0;
    return HMAC(EVP_sha256(), key, WEFT__SSD_KEY_BYTES, data, len, out, &n) != NULL &&
           n == WEFT__SSD_MAC_BYTES;
}

/* A bounds-checked cursor over bytes being decoded: reading past the end sets !ok. */
typedef struct reader {
    const uint8_t *p;
    size_t left;
    bool ok;
} reader_t;

static const uint8_t *take(reader_t *r, size_t n)
{
    if (!r->ok || r->left < n) {
        r->ok = false;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

static uint32_t get32(reader_t *r)
{
    const uint8_t *p = take(r, 4);
    return p ? load32(p) : 0;
}

static uint64_t get64(reader_t *r)
{
    const uint8_t *p = take(r, 8);
    return p ? load64(p) : 0;
}

uint64_t weft__ssd_entry_elems(const weft__ssd_entry_t *e)
{
    if (e->kind == WEFT__SSD_BLOB) {
        return e->bytes;
    }
    uint64_t n = 1;
    for (int d = 0; d < e->ndims; d++) {
        n *= e->box.extent[d];
    }
    return n;
}

size_t weft__ssd_entry_elem(const weft__ssd_entry_t *e)
{
    return e->kind == WEFT__SSD_BLOB ? 1 : weft_dtype_size(e->dtype);
}

uint64_t weft__ssd_chunk_elems(const weft__ssd_entry_t *e, uint64_t chunk_bytes)
{
    return chunk_bytes / weft__ssd_entry_elem(e);
}

uint64_t weft__ssd_nchunks(uint64_t elems, size_t elem, uint64_t chunk_bytes)
{
    uint64_t per = chunk_bytes / elem;
    return per == 0 ? 0 : elems / per + (elems % per != 0); /* no overflow near UINT64_MAX */
}

void weft__ssd_chunk_name(const weft__ssd_hash_t *h, char *buf)
{
    snprintf(buf, WEFT__SSD_NAME_MAX, "%016" PRIx64 "%016" PRIx64 ".chunk", h->hi, h->lo);
}

void weft__ssd_manifest_name(uint64_t step, char *buf)
{
    snprintf(buf, WEFT__SSD_NAME_MAX, "step-%020" PRIu64 ".manifest", step);
}

static bool parse_hex64(const char *s, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) {
            return false;
        }
        x = (x << 4) | (uint64_t)d;
    }
    *v = x;
    return true;
}

bool weft__ssd_parse_chunk_name(const char *name, weft__ssd_hash_t *h)
{
    return strlen(name) == 38 && strcmp(name + 32, ".chunk") == 0 && parse_hex64(name, &h->hi) &&
           parse_hex64(name + 16, &h->lo);
}

bool weft__ssd_parse_manifest_name(const char *name, uint64_t *step)
{
    if (strlen(name) != 34 || strncmp(name, "step-", 5) != 0 ||
        strcmp(name + 25, ".manifest") != 0) {
        return false;
    }
    uint64_t v = 0;
    for (int i = 5; i < 25; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (UINT64_MAX - 9) / 10) {
            return false;
        }
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    *step = v;
    return true;
}

void weft__ssd_chunk_hdr_encode(const weft__ssd_chunk_hdr_t *h, uint8_t *out)
{
    memset(out, 0, WEFT__SSD_HEADER_BYTES);
    memcpy(out, CHUNK_MAGIC, 8);
    uint8_t *p = put32(out + 8, WEFT__SSD_VERSION);
    p = put32(p, WEFT__SSD_HEADER_BYTES);
    p = put64(p, h->hash.lo);
    p = put64(p, h->hash.hi);
    p = put64(p, h->step);
    p = put64(p, h->payload_bytes);
    p = put64(p, h->chunk_index);
    p = put64(p, h->region_offset);
    p = put32(p, (uint32_t)h->kind);
    p = put32(p, (uint32_t)h->dtype);
    p = put32(p, (uint32_t)h->ndims);
    size_t len = strnlen(h->name, WEFT_LAYOUT_NAME_MAX);
    p = put32(p, (uint32_t)len);
    for (int d = 0; d < WEFT_LAYOUT_MAX_DIMS; d++) {
        p = put64(p, d < h->ndims ? h->box.offset[d] : 0);
    }
    for (int d = 0; d < WEFT_LAYOUT_MAX_DIMS; d++) {
        p = put64(p, d < h->ndims ? h->box.extent[d] : 0);
    }
    memcpy(p, h->name, len);
    put64(out + HDR_CHECKED, XXH3_64bits(out, HDR_CHECKED));
}

bool weft__ssd_chunk_seal(const uint8_t key[WEFT__SSD_KEY_BYTES], uint8_t *buf,
                          uint64_t payload_bytes)
{
    uint8_t m[WEFT__SSD_MAC_BYTES];
    memset(buf + HDR_MAC, 0, WEFT__SSD_MAC_BYTES);
    if (!mac(key, buf, WEFT__SSD_HEADER_BYTES + (size_t)payload_bytes, m)) {
        return false;
    }
    memcpy(buf + HDR_MAC, m, sizeof(m));
    return true;
}

bool weft__ssd_chunk_mac_ok(const uint8_t key[WEFT__SSD_KEY_BYTES], uint8_t *buf,
                            uint64_t payload_bytes)
{
    uint8_t got[WEFT__SSD_MAC_BYTES], want[WEFT__SSD_MAC_BYTES];
    memcpy(got, buf + HDR_MAC, sizeof(got));
    memset(buf + HDR_MAC, 0, sizeof(got));
    bool ok = mac(key, buf, WEFT__SSD_HEADER_BYTES + (size_t)payload_bytes, want) &&
              CRYPTO_memcmp(got, want, sizeof(got)) == 0;
    memcpy(buf + HDR_MAC, got, sizeof(got));
    return ok;
}

bool weft__ssd_key_check(const uint8_t key[WEFT__SSD_KEY_BYTES], uint8_t out[WEFT__SSD_MAC_BYTES])
{
    return mac(key, (const uint8_t *)KEY_CHECK_LABEL, strlen(KEY_CHECK_LABEL), out);
}

bool weft__ssd_chunk_hdr_decode(const uint8_t *in, weft__ssd_chunk_hdr_t *h, const char **why)
{
    *why = NULL;
    if (memcmp(in, CHUNK_MAGIC, 8) != 0) {
        *why = "not a chunk header (bad magic)";
    } else if (load32(in + 8) != WEFT__SSD_VERSION) {
        *why = "unknown format version";
    } else if (load32(in + 12) != WEFT__SSD_HEADER_BYTES) {
        *why = "bad header length";
    } else if (load64(in + HDR_CHECKED) != XXH3_64bits(in, HDR_CHECKED)) {
        *why = "header checksum mismatch";
    }
    if (*why != NULL) {
        return false;
    }
    memset(h, 0, sizeof(*h));
    h->hash.lo = load64(in + 16);
    h->hash.hi = load64(in + 24);
    h->step = load64(in + 32);
    h->payload_bytes = load64(in + 40);
    h->chunk_index = load64(in + 48);
    h->region_offset = load64(in + 56);
    h->kind = (int)load32(in + 64);
    h->dtype = (int)load32(in + 68);
    h->ndims = (int)load32(in + 72);
    uint32_t len = load32(in + 76);
    if ((h->kind != WEFT__SSD_REGION && h->kind != WEFT__SSD_BLOB) || h->ndims < 0 ||
        h->ndims > WEFT_LAYOUT_MAX_DIMS || len == 0 || len > WEFT_LAYOUT_NAME_MAX) {
        *why = "header fields out of range";
        return false;
    }
    for (int d = 0; d < h->ndims; d++) {
        h->box.offset[d] = load64(in + 80 + 8 * d);
        h->box.extent[d] = load64(in + 144 + 8 * d);
    }
    memcpy(h->name, in + 208, len);
    h->name[len] = '\0';
    return true;
}

size_t weft__ssd_manifest_size(const weft__ssd_manifest_t *m)
{
    size_t n = MANIFEST_HEAD + 16 * m->nhashes + MANIFEST_TAIL;
    for (size_t i = 0; i < m->nentries; i++) {
        const weft__ssd_entry_t *e = &m->entries[i];
        n += 16 + strlen(e->name) + 16 * (size_t)e->ndims + 16;
    }
    return n;
}

bool weft__ssd_manifest_encode(const weft__ssd_manifest_t *m,
                               const uint8_t key[WEFT__SSD_KEY_BYTES], uint8_t *out)
{
    memcpy(out, MANIFEST_MAGIC, 8);
    uint8_t *p = put32(out + 8, WEFT__SSD_VERSION);
    p = put32(p, 0);
    p = put64(p, m->step);
    p = put64(p, m->chunk_bytes);
    p = put64(p, m->nentries);
    p = put64(p, m->nhashes);
    for (size_t i = 0; i < m->nentries; i++) {
        const weft__ssd_entry_t *e = &m->entries[i];
        size_t len = strlen(e->name);
        p = put32(p, (uint32_t)e->kind);
        p = put32(p, (uint32_t)e->dtype);
        p = put32(p, (uint32_t)e->ndims);
        p = put32(p, (uint32_t)len);
        memcpy(p, e->name, len);
        p += len;
        for (int d = 0; d < e->ndims; d++) {
            p = put64(p, e->box.offset[d]);
            p = put64(p, e->box.extent[d]);
        }
        p = put64(p, e->bytes);
        p = put64(p, e->nchunks);
    }
    for (size_t i = 0; i < m->nhashes; i++) {
        p = put64(p, m->hashes[i].lo);
        p = put64(p, m->hashes[i].hi);
    }
    p = put64(p, XXH3_64bits(out, (size_t)(p - out)));
    return mac(key, out, (size_t)(p - out), p);
}

/* One entry at @p r; NULL when it is well formed, else what is wrong. */
static const char *decode_entry(reader_t *r, uint64_t chunk_bytes, weft__ssd_entry_t *e)
{
    memset(e, 0, sizeof(*e));
    e->kind = (int)get32(r);
    e->dtype = (weft_dtype_t)(int32_t)get32(r);
    e->ndims = (int)get32(r);
    uint32_t len = get32(r);
    const uint8_t *name = r->ok && len >= 1 && len <= WEFT_LAYOUT_NAME_MAX ? take(r, len) : NULL;
    if (name == NULL || memchr(name, '\0', len) != NULL) {
        return "bad name";
    }
    memcpy(e->name, name, len);
    if (e->kind == WEFT__SSD_BLOB
            ? e->ndims != 0
            : e->kind != WEFT__SSD_REGION || e->ndims < 1 || e->ndims > WEFT_LAYOUT_MAX_DIMS ||
                  weft_dtype_size(e->dtype) == 0) {
        return "bad kind, dtype or dimensions";
    }
    uint64_t elems = 1;
    for (int d = 0; d < e->ndims; d++) {
        e->box.offset[d] = get64(r);
        e->box.extent[d] = get64(r);
        if (e->box.extent[d] == 0 || e->box.offset[d] > UINT64_MAX - e->box.extent[d] ||
            elems > UINT64_MAX / 16 / e->box.extent[d]) {
            return "bad box";
        }
        elems *= e->box.extent[d];
    }
    e->bytes = get64(r);
    e->nchunks = get64(r);
    if (!r->ok) {
        return "truncated";
    }
    size_t elem = weft__ssd_entry_elem(e);
    if (e->kind == WEFT__SSD_REGION && e->bytes != elems * elem) {
        return "region bytes do not match its box";
    }
    if (e->nchunks != weft__ssd_nchunks(weft__ssd_entry_elems(e), elem, chunk_bytes)) {
        return "chunk count does not match the bytes";
    }
    return NULL;
}

bool weft__ssd_manifest_decode(const uint8_t *in, size_t len,
                               const uint8_t key[WEFT__SSD_KEY_BYTES], weft__ssd_manifest_t *m,
                               const char **why)
{
    memset(m, 0, sizeof(*m));
    if (len < MANIFEST_HEAD + MANIFEST_TAIL || memcmp(in, MANIFEST_MAGIC, 8) != 0) {
        *why = "not a manifest (bad magic or too short)";
        return false;
    }
    size_t body = len - MANIFEST_TAIL;
    if (load64(in + body) != XXH3_64bits(in, body)) {
        *why = "manifest checksum mismatch";
        return false;
    }
    uint8_t want[WEFT__SSD_MAC_BYTES];
    if (!mac(key, in, body + 8, want) ||
        CRYPTO_memcmp(want, in + body + 8, WEFT__SSD_MAC_BYTES) != 0) {
        *why = "MAC mismatch: written under another key, or modified";
        return false;
    }
    reader_t r = {in + 8, body - 8, true};
    uint32_t version = get32(&r);
    uint32_t reserved = get32(&r);
    m->step = get64(&r);
    m->chunk_bytes = get64(&r);
    uint64_t nentries = get64(&r), nhashes = get64(&r);
    *why = NULL;
    if (version != WEFT__SSD_VERSION) {
        *why = "unknown format version";
    } else if (reserved != 0) {
        *why = "reserved field not zero";
    } else if (m->chunk_bytes == 0 || m->chunk_bytes % WEFT__SSD_ALIGN != 0) {
        *why = "bad chunk size";
    } else if (nentries > r.left / ENTRY_MIN || nhashes > r.left / 16) {
        *why = "counts larger than the file";
    }
    if (*why != NULL) {
        return false;
    }
    m->entries = calloc(nentries ? nentries : 1, sizeof(*m->entries));
    m->hashes = calloc(nhashes ? nhashes : 1, sizeof(*m->hashes));
    if (m->entries == NULL || m->hashes == NULL) {
        *why = "out of memory";
        goto err_free;
    }
    uint64_t chunks = 0;
    for (uint64_t i = 0; i < nentries; i++) {
        weft__ssd_entry_t *e = &m->entries[i];
        if ((*why = decode_entry(&r, m->chunk_bytes, e)) != NULL) {
            goto err_free;
        }
        e->first_chunk = chunks;
        chunks += e->nchunks;
        if (chunks > nhashes) {
            *why = "more chunks than hashes";
            goto err_free;
        }
    }
    if (chunks != nhashes) {
        *why = "fewer chunks than hashes";
        goto err_free;
    }
    for (uint64_t i = 0; i < nhashes; i++) {
        m->hashes[i].lo = get64(&r);
        m->hashes[i].hi = get64(&r);
    }
    if (!r.ok || r.left != 0) {
        *why = r.ok ? "bytes after the last hash" : "truncated";
        goto err_free;
    }
    m->nentries = nentries;
    m->nhashes = nhashes;
    return true;

err_free:
    weft__ssd_manifest_free(m);
    return false;
}

void weft__ssd_manifest_free(weft__ssd_manifest_t *m)
{
    free(m->entries);
    free(m->hashes);
    memset(m, 0, sizeof(*m));
}
