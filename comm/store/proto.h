/*
 * Wire protocol of the rendezvous store, shared by its server and client.
 *
 * Every message is a frame: an 8-byte header (32-bit payload length in network order,
 * one type byte, a 24-bit request id) and at most WEFT_STORE_MAX_FRAME payload bytes.
 * Integers on the wire are big-endian. A client numbers its requests; the RESP to one
 * carries its id, EVENT frames and the handshake's frames carry 0.
 *
 * Session (docs/store-protocol.md, "Sessions"): the server sends HELLO (version
 * byte, its 32-byte nonce sn); the client answers AUTH (its nonce cn, its role byte, a
 * u32 member id, its proof). With S the session's secret (weft__store_session_secret
 * below: derived from the job token for the role and id) and t = sn || cn || role || id:
 *   client proof  HMAC-SHA256(S, "weft-store-client-v2" || t)
 *   server proof  HMAC-SHA256(S, "weft-store-server-v2" || t)  (in the RESP to AUTH)
 *   frame keys    HMAC-SHA256(S, "weft-store-c2s-v2" || t), "...-s2c-v2" alike
 * The server answers RESP (OK with its proof, or WEFT_ERR_AUTH and then closes; a busy
 * server answers WEFT_ERR_NO_MEMORY and closes, and the client tries again). Every later
 * frame, both ways, carries a 32-byte tag after its payload: HMAC-SHA256(key of its
 * direction, u64 sequence number || header || payload), the sequence number counting the
 * frames of that direction from 0. A tag that does not match (altered, injected, replayed
 * or reordered frames) closes the connection. Each request is answered by one RESP (i32
 * status, then data) with its id. A connection multiplexes: the server reads its next
 * requests while a GET of it waits for its key (WEFT__STORE_MAX_WAITS at a time), so
 * answers may come out of order, and watch EVENTs come between them.
 *
 * Request payloads are "kv" bodies: u16 key length, key bytes, then the rest:
 *   SET    rest = value                    RESP data: none
 *   GET    rest = u32 timeout (ms)         RESP data: value (status TIMEOUT if absent)
 *   ADD    rest = i64 delta                RESP data: i64 new value
 *   DELETE rest = empty                    RESP data: none
 *   WATCH  key = prefix (may be empty)     RESP data: none; then EVENT frames (kv bodies)
 *          for the keys under the prefix, and for every later set of one; a second
 *          WATCH replaces the prefix. The connection goes on serving requests.
 *   SCAN   key = prefix (may be empty); rest = u32 timeout (ms), u32 min_count,
 *          u32 max_bytes, then the key to resume after (empty: from the first)
 *          RESP data: a page (below), once at least min_count keys are under the prefix
 *          (status TIMEOUT if they are not within the timeout). The page lists, in byte
 *          order, the keys under the prefix that come after the resume key, as many as
 *          fit in max_bytes (0, or more than WEFT__STORE_MAX_PAGE: that), and at least one:
 *            u8 more (keys follow the last one listed), u32 count,
 *            count x (u16 key length, key, u32 value length, value)
 *          A connection has one SCAN waiting for its count at most: a later one that
 *          waits answers the earlier with TIMEOUT. docs/store-protocol.md, "Scans".
 */
#ifndef WEFT_STORE_PROTO_H
#define WEFT_STORE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/store/store.h"
#include "weft/status.h"

#define WEFT__STORE_VERSION 4
#define WEFT__STORE_HDR_LEN 8
#define WEFT__STORE_NONCE_LEN 32
#define WEFT__STORE_PROOF_LEN 32 /* SHA-256 output */
#define WEFT__STORE_TAG_LEN 32   /* a frame's MAC: HMAC-SHA256 */
#define WEFT__STORE_HELLO_LEN (1 + WEFT__STORE_NONCE_LEN)
/* AUTH body: cn, role (u8), member id (u32), proof. */
#define WEFT__STORE_AUTH_LEN (WEFT__STORE_NONCE_LEN + 1 + 4 + WEFT__STORE_PROOF_LEN)
/* The transcript t both proofs and the keys are computed over. */
#define WEFT__STORE_TRANSCRIPT_LEN (2 * WEFT__STORE_NONCE_LEN + 1 + 4)
/* Largest value: a kv body with the longest key, or a RESP, still fits in one frame. */
#define WEFT__STORE_MAX_VALUE (WEFT_STORE_MAX_FRAME - 2 - WEFT_STORE_MAX_KEY - 8)

#define WEFT__STORE_MAX_ID 0xffffffu /* request ids are 24 bits; 0 is not one */

/* SCAN: its arguments after the prefix (without the resume key), a page's header (more,
 * count) and what an entry holds besides its key and value (the two lengths). */
#define WEFT__STORE_SCAN_ARGS_LEN 12
#define WEFT__STORE_PAGE_HDR_LEN 5
#define WEFT__STORE_PAGE_ENTRY_LEN 6
/* The entries of one page: what a RESP frame holds after its status and the page header.
 * An entry larger than that (only a key of 252 bytes or more with a value within a few
 * bytes of WEFT__STORE_MAX_VALUE) cannot be listed: a SCAN that reaches it answers
 * WEFT_ERR_NO_MEMORY (read that key with GET). */
#define WEFT__STORE_MAX_PAGE (WEFT_STORE_MAX_FRAME - 4 - WEFT__STORE_PAGE_HDR_LEN)

/* Server limits: what any one client (and all of them) can make the server hold. */
#define WEFT__STORE_MAX_CONNS 65536        /* authenticated connections */
#define WEFT__STORE_MAX_WAITS 64 /* GETs and SCANs of one connection waiting to be answered */
#define WEFT__STORE_MAX_UNAUTH 128         /* connections still authenticating */
#define WEFT__STORE_MAX_UNAUTH_PER_ADDR 64 /* of them from one address */
#define WEFT__STORE_MAX_DATA (64u << 20)   /* stored bytes: keys, values and leases */
#define WEFT__STORE_MEMBER_SHARE (WEFT__STORE_MAX_DATA / 16) /* of them, one member's */
#define WEFT__STORE_MAX_OUT (WEFT__STORE_MAX_DATA + 2 * WEFT_STORE_MAX_FRAME) /* per conn */
#define WEFT__STORE_MAX_QUEUED (4 * WEFT__STORE_MAX_OUT) /* output queued to all conns */
/* Pages of SCANs are built only while the output queued to all connections is below this
 * (the rest wait their turn): thousands of ranks answered at once stay within
 * WEFT__STORE_MAX_QUEUED rather than have the largest readers closed. */
#define WEFT__STORE_SCAN_QUEUED (WEFT__STORE_MAX_QUEUED / 2)
#define WEFT__STORE_AUTH_TIMEOUT_MS 5000
/* Client: bound on waiting for the server's answer beyond the request's own timeout. */
#define WEFT__STORE_IO_TIMEOUT_MS 30000

/* Who a connection speaks for (the AUTH role byte). The store authorises its writes by it
 * (docs/store-protocol.md): a launcher (weftrun, tools, tests) may write anything; a member only
 * what its id owns and what the agreement protocols share. */
typedef enum weft_store_role {
    WEFT__STORE_ROLE_LAUNCHER = 0,
    WEFT__STORE_ROLE_MEMBER = 1, /* with its member id, or WEFT__STORE_NO_ID */
    WEFT__STORE_ROLE_MAX = WEFT__STORE_ROLE_MEMBER,
} weft_store_role_t;

/* The id of a member that has none yet (a joiner before its id comes from the store). */
#define WEFT__STORE_NO_ID UINT32_MAX

/* One direction of an authenticated session: its key and the next sequence number. */
typedef struct weft_store_dir {
    uint8_t key[WEFT__STORE_PROOF_LEN];
    uint64_t seq;
} weft_store_dir_t;

typedef enum weft_store_msg {
    WEFT__STORE_HELLO = 1,
    WEFT__STORE_AUTH = 2,
    WEFT__STORE_SET = 3,
    WEFT__STORE_GET = 4,
    WEFT__STORE_ADD = 5,
    WEFT__STORE_DELETE = 6,
    WEFT__STORE_WATCH = 7,
    WEFT__STORE_RESP = 8,
    WEFT__STORE_EVENT = 9,
    WEFT__STORE_SET_NX = 10, /* kv; RESP data: created (1 byte) then the value that won */
    WEFT__STORE_LEASE = 11,  /* kv: notice key; rest: ttl_ms (u32), notice value */
    WEFT__STORE_SCAN = 12,   /* kv: prefix; rest: see above. RESP data: a page */
    WEFT__STORE_MSG_MAX = WEFT__STORE_SCAN,
} weft_store_msg_t;

/* A growable byte buffer for building frames. */
typedef struct weft_store_buf {
    uint8_t *data;
    size_t len, cap;
} weft_store_buf_t;

void weft__store_buf_free(weft_store_buf_t *b);
weft_status_t weft__store_buf_put(weft_store_buf_t *b, const void *p, size_t n);
weft_status_t weft__store_buf_put_u16(weft_store_buf_t *b, uint16_t v);
weft_status_t weft__store_buf_put_u32(weft_store_buf_t *b, uint32_t v);
weft_status_t weft__store_buf_put_u64(weft_store_buf_t *b, uint64_t v);

/*
 * Frame building: begin reserves the header at the end of @p b and returns its offset in
 * *start; end fills in the length. WEFT_ERR_INVALID_ARG (and @p b rolled back to
 * *start) when the payload exceeds WEFT_STORE_MAX_FRAME.
 */
weft_status_t weft__store_frame_begin(weft_store_buf_t *b, weft_store_msg_t type, size_t *start);
weft_status_t weft__store_frame_end(weft_store_buf_t *b, size_t start);
/* One whole frame with a kv body (see above) appended to @p b. */
weft_status_t weft__store_frame_kv(weft_store_buf_t *b, weft_store_msg_t type, const char *key,
                                   size_t klen, const void *rest, size_t rest_len);
/* One frame whose body is @p len bytes at @p p. */
weft_status_t weft__store_frame_bytes(weft_store_buf_t *b, weft_store_msg_t type, const void *p,
                                      size_t len);
/* One RESP frame: status, then @p data. */
weft_status_t weft__store_frame_resp(weft_store_buf_t *b, weft_status_t status, const void *data,
                                     size_t len);

/* Header bytes of a frame. */
void weft__store_hdr_encode(uint8_t hdr[WEFT__STORE_HDR_LEN], uint32_t len, weft_store_msg_t type);
/* WEFT_ERR_PROTOCOL for a length over the cap or an unknown type. */
weft_status_t weft__store_hdr_decode(const uint8_t hdr[WEFT__STORE_HDR_LEN], uint32_t *len,
                                     weft_store_msg_t *type);
/* The request id of a frame's header. */
uint32_t weft__store_hdr_id(const uint8_t hdr[WEFT__STORE_HDR_LEN]);
/* Sets the request id of the frame that starts at @p start of @p b (before sealing it). */
void weft__store_frame_set_id(weft_store_buf_t *b, size_t start, uint32_t id);

/*
 * Split a kv body. *key points into @p p and is not NUL-terminated. WEFT_ERR_PROTOCOL
 * when the key length runs past the body, exceeds WEFT_STORE_MAX_KEY or the key holds
 * a NUL byte. An empty key is accepted here (a watch prefix may be empty).
 */
weft_status_t weft__store_kv_decode(const uint8_t *p, size_t len, const char **key, size_t *klen,
                                    const uint8_t **rest, size_t *rest_len);
/* Split a RESP body; WEFT_ERR_PROTOCOL for a short body or a status the store never sends. */
weft_status_t weft__store_resp_decode(const uint8_t *p, size_t len, weft_status_t *status,
                                      const uint8_t **data, size_t *dlen);

/* The arguments of a SCAN (the rest of its kv body); *after points into @p p and is not
 * NUL-terminated. WEFT_ERR_PROTOCOL when the rest is short, or the resume key is longer
 * than WEFT_STORE_MAX_KEY or holds a NUL. */
typedef struct weft_store_scan_wire {
    uint32_t timeout_ms, min_count, max_bytes;
    const char *after;
    size_t alen;
} weft_store_scan_wire_t;
weft_status_t weft__store_scan_decode(const uint8_t *rest, size_t len, weft_store_scan_wire_t *out);
/* A page's header: WEFT_ERR_PROTOCOL when short or when more is neither 0 nor 1. */
weft_status_t weft__store_page_decode(const uint8_t *p, size_t len, bool *more, uint32_t *count,
                                      const uint8_t **entries, size_t *elen);
/* The entry at *p of a page, *p and *left then past it. WEFT_ERR_PROTOCOL when it runs past
 * the end, or its key is empty, longer than WEFT_STORE_MAX_KEY or holds a NUL. */
weft_status_t weft__store_page_entry(const uint8_t **p, size_t *left, const char **key,
                                     size_t *klen, const uint8_t **val, size_t *vlen);
/* Byte order of keys (the order of a page): <0, 0, >0 as memcmp, a prefix first. */
int weft__store_key_cmp(const char *a, size_t alen, const char *b, size_t blen);

uint32_t weft__store_get_u32(const uint8_t *p);
uint64_t weft__store_get_u64(const uint8_t *p);
void weft__store_set_u64(uint8_t *p, uint64_t v);

/* HMAC-SHA256 of @p data keyed by @p key. */
weft_status_t weft__store_hmac_sha256(const void *key, size_t klen, const void *data, size_t dlen,
                                      uint8_t out[WEFT__STORE_PROOF_LEN]);
/* The transcript t: sn || cn || role || id (big-endian). */
void weft__store_transcript(uint8_t t[WEFT__STORE_TRANSCRIPT_LEN],
                            const uint8_t sn[WEFT__STORE_NONCE_LEN],
                            const uint8_t cn[WEFT__STORE_NONCE_LEN], weft_store_role_t role,
                            uint32_t id);
/* What a session derives from the token: HMAC-SHA256(token, label || t). */
typedef enum weft_store_derive {
    WEFT__STORE_CLIENT_PROOF,
    WEFT__STORE_SERVER_PROOF,
    WEFT__STORE_KEY_C2S,
    WEFT__STORE_KEY_S2C,
} weft_store_derive_t;
weft_status_t weft__store_derive(const uint8_t key[WEFT__STORE_PROOF_LEN], weft_store_derive_t what,
                                 const uint8_t t[WEFT__STORE_TRANSCRIPT_LEN],
                                 uint8_t out[WEFT__STORE_PROOF_LEN]);
/* Constant-time check of a proof against what @p key derives; false on any mismatch. */
bool weft__store_proof_check(const uint8_t key[WEFT__STORE_PROOF_LEN], weft_store_derive_t what,
                             const uint8_t t[WEFT__STORE_TRANSCRIPT_LEN], const uint8_t *proof,
                             size_t len);
/*
 * The secret a session of @p role and @p id is keyed by: SHA-256 of the token for a
 * launcher, HMAC-SHA256(token, "weft-member-v1" || id) for a member. A member's key
 * proves that id only, so a process given its member key alone (rather than the token)
 * could speak for no other member.
 */
weft_status_t weft__store_session_secret(const char *token, weft_store_role_t role, uint32_t id,
                                         uint8_t out[WEFT__STORE_PROOF_LEN]);
/* Appends the tag of the frame that starts at @p start of @p b (and ends at its end) under
 * @p d, whose sequence number then advances. On failure @p b loses the frame. */
weft_status_t weft__store_seal(weft_store_buf_t *b, size_t start, weft_store_dir_t *d);
/* Whether @p tag is the tag under @p d of the frame @p hdr, then @p blen bytes of payload
 * at @p body (constant time); the sequence number advances only when it is. */
bool weft__store_tag_check(weft_store_dir_t *d, const uint8_t hdr[WEFT__STORE_HDR_LEN],
                           const uint8_t *body, size_t blen, const uint8_t *tag);
/* Bytes from the OS entropy source (getrandom). */
weft_status_t weft__store_random(void *buf, size_t len);

#endif
