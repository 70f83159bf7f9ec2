/*
 * Raw sockets that speak the store's protocol by hand (comm/store/proto.h), for tests
 * that misbehave where a client would not: frames sent plain, altered, replayed or
 * injected, handshakes left unfinished, proofs of other members.
 */
#ifndef WEFT_TEST_STORE_RAW_H
#define WEFT_TEST_STORE_RAW_H

#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "comm/store/proto.h"

/* An authenticated raw connection: its socket and both directions of its session. */
typedef struct raw_session {
    int fd;
    weft_store_dir_t tx, rx;
} raw_session_t;

static inline int raw_connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {.tv_sec = 20};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static inline void raw_recv(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);
        assert_true(r > 0);
        got += (size_t)r;
    }
}

static inline void raw_send(int fd, const void *p, size_t n)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static inline void raw_hello(int fd, uint8_t nonce[WEFT__STORE_NONCE_LEN])
{
    uint8_t frame[WEFT__STORE_HDR_LEN + WEFT__STORE_HELLO_LEN];
    uint32_t len;
    weft_store_msg_t type;
    raw_recv(fd, frame, sizeof(frame));
    assert_int_equal(weft__store_hdr_decode(frame, &len, &type), WEFT_OK);
    assert_int_equal(type, WEFT__STORE_HELLO);
    assert_int_equal(len, WEFT__STORE_HELLO_LEN);
    assert_int_equal(frame[WEFT__STORE_HDR_LEN], WEFT__STORE_VERSION);
    memcpy(nonce, frame + WEFT__STORE_HDR_LEN + 1, WEFT__STORE_NONCE_LEN);
}

/* Authenticates by hand as @p role / @p id with @p token, checking the server's proof. */
static inline raw_session_t raw_auth_as(int port, const char *token, weft_store_role_t role,
                                        uint32_t id)
{
    raw_session_t r = {.fd = raw_connect_port(port)};
    uint8_t sn[WEFT__STORE_NONCE_LEN], t[WEFT__STORE_TRANSCRIPT_LEN], secret[32];
    uint8_t frame[WEFT__STORE_HDR_LEN + WEFT__STORE_AUTH_LEN];
    uint8_t resp[WEFT__STORE_HDR_LEN + 4 + WEFT__STORE_PROOF_LEN];
    uint8_t *body = frame + WEFT__STORE_HDR_LEN;
    raw_hello(r.fd, sn);
    assert_int_equal(weft__store_random(body, WEFT__STORE_NONCE_LEN), WEFT_OK);
    body[WEFT__STORE_NONCE_LEN] = (uint8_t)role;
    uint32_t be = htonl(id);
    memcpy(body + WEFT__STORE_NONCE_LEN + 1, &be, 4);
    weft__store_transcript(t, sn, body, role, id);
    assert_int_equal(weft__store_session_secret(token, role, id, secret), WEFT_OK);
    assert_int_equal(
        weft__store_derive(secret, WEFT__STORE_CLIENT_PROOF, t, body + WEFT__STORE_NONCE_LEN + 5),
        WEFT_OK);
    weft__store_hdr_encode(frame, WEFT__STORE_AUTH_LEN, WEFT__STORE_AUTH);
    raw_send(r.fd, frame, sizeof(frame));
    raw_recv(r.fd, resp, sizeof(resp));
    assert_int_equal(resp[4], WEFT__STORE_RESP);
    assert_int_equal(weft__store_get_u32(resp + 8), WEFT_OK);
    assert_true(weft__store_proof_check(secret, WEFT__STORE_SERVER_PROOF, t, resp + 12, 32));
    assert_int_equal(weft__store_derive(secret, WEFT__STORE_KEY_C2S, t, r.tx.key), WEFT_OK);
    assert_int_equal(weft__store_derive(secret, WEFT__STORE_KEY_S2C, t, r.rx.key), WEFT_OK);
    return r;
}

/* Seals the frame that starts at @p start of @p b under @p r's next sending number. */
static inline void raw_seal(raw_session_t *r, weft_store_buf_t *b, size_t start)
{
    assert_int_equal(weft__store_seal(b, start, &r->tx), WEFT_OK);
}

/* Sends one sealed request frame. */
static inline void raw_request(raw_session_t *r, weft_store_msg_t type, const char *key,
                               const void *rest, size_t rlen)
{
    weft_store_buf_t b = {0};
    assert_int_equal(weft__store_frame_kv(&b, type, key, strlen(key), rest, rlen), WEFT_OK);
    raw_seal(r, &b, 0);
    raw_send(r->fd, b.data, b.len);
    weft__store_buf_free(&b);
}

/* Reads one sealed RESP and returns its status (its tag checked). */
static inline weft_status_t raw_response(raw_session_t *r)
{
    uint8_t hdr[WEFT__STORE_HDR_LEN], body[4096 + WEFT__STORE_TAG_LEN];
    uint32_t len;
    weft_store_msg_t type;
    raw_recv(r->fd, hdr, sizeof(hdr));
    assert_int_equal(weft__store_hdr_decode(hdr, &len, &type), WEFT_OK);
    assert_int_equal(type, WEFT__STORE_RESP);
    assert_true(len >= 4 && len <= 4096);
    raw_recv(r->fd, body, len + WEFT__STORE_TAG_LEN);
    assert_true(weft__store_tag_check(&r->rx, hdr, body, len, body + len));
    return (weft_status_t)(int32_t)weft__store_get_u32(body);
}

/* The server closes @p fd (whatever it sends before is skipped) within the receive timeout. */
static inline void raw_expect_closed(int fd)
{
    char buf[4096];
    for (int i = 0; i < 10000; i++) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) {
            close(fd);
            return;
        }
        assert_true(r > 0); /* EAGAIN here means the server kept the connection open */
    }
    fail_msg("the server kept sending instead of closing");
}

#endif
