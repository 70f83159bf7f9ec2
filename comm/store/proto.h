/*
 * Wire protocol of the rendezvous store, shared by its server and client.
 *
 * Every message is a frame: an 8-byte header (32-bit payload length in network order,
 * one type byte, three reserved zero bytes) and at most WEFT_STORE_MAX_FRAME payload
 * bytes. Integers on the wire are big-endian.
 *
 * Session: the server sends HELLO (version byte, 32-byte nonce); the client answers AUTH
 * with HMAC-SHA256(token, nonce || WEFT__STORE_AUTH_CONTEXT); the server replies RESP
 * (status OK, or WEFT_ERR_AUTH and then closes). Only then are requests served, one at a
 * time per connection, each answered by one RESP (i32 status, then data).
 *
 * Request payloads are "kv" bodies: u16 key length, key bytes, then the rest:
 *   SET    rest = value                    RESP data: none
 *   GET    rest = u32 timeout (ms)         RESP data: value (status TIMEOUT if absent)
 *   ADD    rest = i64 delta                RESP data: i64 new value
 *   DELETE rest = empty                    RESP data: none
 *   WATCH  key = prefix (may be empty)     RESP data: none; then EVENT frames (kv bodies)
 */
#ifndef WEFT_STORE_PROTO_H
#define WEFT_STORE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/store/store.h"
#include "weft/status.h"

#define WEFT__STORE_VERSION 1
#define WEFT__STORE_HDR_LEN 8
#define WEFT__STORE_NONCE_LEN 32
#define WEFT__STORE_PROOF_LEN 32 /* SHA-256 output */
#define WEFT__STORE_HELLO_LEN (1 + WEFT__STORE_NONCE_LEN)
#define WEFT__STORE_AUTH_CONTEXT "weft-store-auth-v1"
/* Largest value: a kv body with the longest key, or a RESP, still fits in one frame. */
#define WEFT__STORE_MAX_VALUE (WEFT_STORE_MAX_FRAME - 2 - WEFT_STORE_MAX_KEY - 8)

/* Server limits: what any one client (and all of them) can make the server hold. */
#define WEFT__STORE_MAX_CONNS 1024
#define WEFT__STORE_MAX_DATA (64u << 20)                                      /* stored bytes */
#define WEFT__STORE_MAX_OUT (WEFT__STORE_MAX_DATA + 2 * WEFT_STORE_MAX_FRAME) /* per conn */
#define WEFT__STORE_AUTH_TIMEOUT_MS 5000
/* Client: bound on waiting for the server's answer beyond the request's own timeout. */
#define WEFT__STORE_IO_TIMEOUT_MS 30000

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
    WEFT__STORE_MSG_MAX = WEFT__STORE_LEASE,
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
/* WEFT_ERR_PROTOCOL for a length over the cap, an unknown type or non-zero reserved bytes. */
weft_status_t weft__store_hdr_decode(const uint8_t hdr[WEFT__STORE_HDR_LEN], uint32_t *len,
                                     weft_store_msg_t *type);

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

uint32_t weft__store_get_u32(const uint8_t *p);
uint64_t weft__store_get_u64(const uint8_t *p);
void weft__store_set_u64(uint8_t *p, uint64_t v);

/* HMAC-SHA256 of @p data keyed by @p key. */
weft_status_t weft__store_hmac_sha256(const void *key, size_t klen, const void *data, size_t dlen,
                                      uint8_t out[WEFT__STORE_PROOF_LEN]);
/* The client's proof: HMAC-SHA256(token, nonce || WEFT__STORE_AUTH_CONTEXT). */
weft_status_t weft__store_auth_proof(const char *token, const uint8_t nonce[WEFT__STORE_NONCE_LEN],
                                     uint8_t proof[WEFT__STORE_PROOF_LEN]);
/* Constant-time check of a proof; false on any mismatch or failure. */
bool weft__store_auth_check(const char *token, const uint8_t nonce[WEFT__STORE_NONCE_LEN],
                            const uint8_t *proof, size_t len);
/* Bytes from the OS entropy source (getrandom). */
weft_status_t weft__store_random(void *buf, size_t len);

#endif
