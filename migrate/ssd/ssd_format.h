/*
 * What the SSD tier puts on disk: chunk files (a 4 KiB header, then the payload padded to
 * 4 KiB) and manifests (one per step: every region and blob with its chunk hashes), each
 * with a checksum (integrity: XXH3) and a MAC (authenticity: HMAC-SHA256 under the
 * handle's key). Pure encoding and checking, no I/O; every integer is little-endian.
 */
#ifndef WEFT_MIGRATE_SSD_FORMAT_H
#define WEFT_MIGRATE_SSD_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/migrate.h"

/* O_DIRECT's alignment of offsets, lengths and buffers (the largest logical block size
 * in use); the chunk header takes exactly one such block. */
#define WEFT__SSD_ALIGN 4096u
#define WEFT__SSD_HEADER_BYTES WEFT__SSD_ALIGN
#define WEFT__SSD_VERSION 2u
/* "<32 hex digits>.chunk" and "step-<20 digits>.manifest"; while written, a temporary
 * name: the final one, a dot, 16 random hex digits and ".tmp". */
#define WEFT__SSD_NAME_MAX 64
/* The MAC key and the MAC (HMAC-SHA256) of every file. */
#define WEFT__SSD_KEY_BYTES 32
#define WEFT__SSD_MAC_BYTES 32

/* XXH3-128 of a chunk's payload: its name, and its checksum. */
typedef struct weft__ssd_hash {
    uint64_t lo, hi;
} weft__ssd_hash_t;

typedef enum weft__ssd_kind {
    WEFT__SSD_REGION = 1,
    WEFT__SSD_BLOB = 2,
} weft__ssd_kind_t;

/* A chunk file's header: where the chunk was first written (a later step that holds the
 * same bytes elsewhere shares the file), and what checks it. */
typedef struct weft__ssd_chunk_hdr {
    weft__ssd_hash_t hash; /* of the payload */
    uint64_t step;         /* first written at */
    uint64_t payload_bytes;
    uint64_t chunk_index;   /* inside the region or blob */
    uint64_t region_offset; /* bytes of the region or blob before the chunk */
    int kind;
    int dtype;      /* regions; -1 for blobs */
    int ndims;      /* regions; 0 for blobs */
    weft_box_t box; /* regions */
    char name[WEFT_LAYOUT_NAME_MAX + 1];
} weft__ssd_chunk_hdr_t;

/* A region or blob of a manifest; its chunk hashes are hashes[first_chunk ...]. */
typedef struct weft__ssd_entry {
    int kind;
    char name[WEFT_LAYOUT_NAME_MAX + 1];
    weft_dtype_t dtype; /* regions */
    int ndims;          /* regions; 0 for blobs */
    weft_box_t box;     /* regions */
    uint64_t bytes;
    uint64_t first_chunk;
    uint64_t nchunks;
} weft__ssd_entry_t;

typedef struct weft__ssd_manifest {
    uint64_t step;
    uint64_t chunk_bytes; /* payload of every chunk but the last of each entry */
    weft__ssd_entry_t *entries;
    size_t nentries;
    weft__ssd_hash_t *hashes;
    size_t nhashes;
} weft__ssd_manifest_t;

/* Elements of an entry (a blob's are bytes), their size, and how many go in a chunk. */
uint64_t weft__ssd_entry_elems(const weft__ssd_entry_t *e);
size_t weft__ssd_entry_elem(const weft__ssd_entry_t *e);
uint64_t weft__ssd_chunk_elems(const weft__ssd_entry_t *e, uint64_t chunk_bytes);
/* Chunks an entry of @p elems elements of @p elem bytes is cut into. */
uint64_t weft__ssd_nchunks(uint64_t elems, size_t elem, uint64_t chunk_bytes);

/* File names (buffers of WEFT__SSD_NAME_MAX bytes), and reading them back. */
void weft__ssd_chunk_name(const weft__ssd_hash_t *h, char *buf);
void weft__ssd_manifest_name(uint64_t step, char *buf);
bool weft__ssd_parse_chunk_name(const char *name, weft__ssd_hash_t *h);
bool weft__ssd_parse_manifest_name(const char *name, uint64_t *step);

/* Header of a chunk into @p out (WEFT__SSD_HEADER_BYTES, zero-padded; its MAC field
 * zero until weft__ssd_chunk_seal). */
void weft__ssd_chunk_hdr_encode(const weft__ssd_chunk_hdr_t *h, uint8_t *out);
/* Check and decode a header (magic, version, header checksum, sane fields); on failure
 * *why says what is wrong. The MAC is not checked here: weft__ssd_chunk_mac_ok. */
bool weft__ssd_chunk_hdr_decode(const uint8_t *in, weft__ssd_chunk_hdr_t *h, const char **why);
/* The MAC of a chunk file: HMAC-SHA256 under @p key of its whole header (the MAC field
 * taken as zeros) and its @p payload_bytes of payload, which follow the header in @p buf.
 * seal writes it into the header (false if OpenSSL fails); mac_ok checks it in constant
 * time (@p buf is restored before it returns). */
bool weft__ssd_chunk_seal(const uint8_t key[WEFT__SSD_KEY_BYTES], uint8_t *buf,
                          uint64_t payload_bytes);
bool weft__ssd_chunk_mac_ok(const uint8_t key[WEFT__SSD_KEY_BYTES], uint8_t *buf,
                            uint64_t payload_bytes);

/* Bytes of the encoded manifest, and the encoding (ends with an XXH3-64 of the rest,
 * then the HMAC-SHA256 under @p key of all before it); false if OpenSSL fails. */
size_t weft__ssd_manifest_size(const weft__ssd_manifest_t *m);
bool weft__ssd_manifest_encode(const weft__ssd_manifest_t *m,
                               const uint8_t key[WEFT__SSD_KEY_BYTES], uint8_t *out);
/* Check (checksum, then MAC under @p key: a manifest that fails it is refused before any
 * field is read) and decode @p len bytes into @p m (allocated; free with
 * weft__ssd_manifest_free). On failure *why says what is wrong and @p m holds nothing. */
bool weft__ssd_manifest_decode(const uint8_t *in, size_t len,
                               const uint8_t key[WEFT__SSD_KEY_BYTES], weft__ssd_manifest_t *m,
                               const char **why);
/* What a directory's "key-check" file holds: HMAC-SHA256 under @p key of a fixed label,
 * which tells whether its files were written under the same key without revealing it. */
bool weft__ssd_key_check(const uint8_t key[WEFT__SSD_KEY_BYTES], uint8_t out[WEFT__SSD_MAC_BYTES]);
void weft__ssd_manifest_free(weft__ssd_manifest_t *m);

#endif
