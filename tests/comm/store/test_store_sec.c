/*
 * The store's security after the handshake (docs/store-protocol.md, "Sessions"):
 * frames injected, replayed, reordered or altered on an authenticated connection close
 * it and change nothing; a store that cannot prove the token is refused; a member cannot
 * write what another member owns (nor lease its notice, which would get it killed) and
 * deletes only the agreement keys of finished epochs; and sockets that never
 * authenticate do not keep the job's clients out.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "comm/group/edit.h" /* weft__decision_encode */
#include "comm/store/proto.h"
#include "comm/store/server.h" /* weft__store_srv_addr_unit */
#include "server_fixture.h"
#include "store_raw.h"

/* ---- fixture: a real server (server_fixture.h) ---- */

static weft_store_client_t *launcher(const fixture_t *f)
{
    weft_store_client_t *c = NULL;
    assert_int_equal(weft__store_connect(f->hostport, f->token, 10000, &test_logger, &c), WEFT_OK);
    return c;
}

static weft_store_client_t *member(const fixture_t *f, int id)
{
    weft_store_client_t *c = NULL;
    assert_int_equal(weft__store_connect_member(f->hostport, f->token, id, 10000, &test_logger, &c),
                     WEFT_OK);
    return c;
}

/* The value of @p key, or NULL when it is not set (malloc'ed). */
static char *value_of(const fixture_t *f, const char *key)
{
    weft_store_client_t *c = launcher(f);
    void *v = NULL;
    size_t len;
    weft_status_t st = weft__store_get(c, key, 0, &v, &len);
    assert_true(st == WEFT_OK || st == WEFT_ERR_TIMEOUT);
    weft__store_close(c);
    return st == WEFT_OK ? v : NULL;
}

/* ---- frames on an authenticated connection ---- */

/* A frame nobody sealed (plain, or under a key the sender made up) closes the connection. */
static void test_injected_frame(void **state)
{
    fixture_t *f = *state;
    raw_session_t r = raw_auth_as(f->port, f->token, WEFT__STORE_ROLE_MEMBER, 3);
    raw_request(&r, WEFT__STORE_SET, "weft/g/0/finished", "honest", 6);
    assert_int_equal(raw_response(&r), WEFT_OK);
    /* What someone on the path would add: a well-formed SET without a tag... */
    weft_store_buf_t b = {0};
    assert_int_equal(weft__store_frame_kv(&b, WEFT__STORE_SET, "weft/g/0/finished", 17, "forged", 6),
                     WEFT_OK);
    raw_send(r.fd, b.data, b.len);
    raw_send(r.fd, b.data, WEFT__STORE_TAG_LEN); /* bytes where the tag would be */
    raw_expect_closed(r.fd);
    assert_true(log_has(WEFT_LOG_ERROR, "(member 3)", "failed its integrity check"));
    char *v = value_of(f, "weft/g/0/finished");
    assert_string_equal(v, "honest");
    free(v);

    /* ...or one sealed under a key of its own at the right sequence number. */
    r = raw_auth_as(f->port, f->token, WEFT__STORE_ROLE_MEMBER, 3);
    weft_store_dir_t made_up = {.seq = 0};
    assert_int_equal(weft__store_random(made_up.key, sizeof(made_up.key)), WEFT_OK);
    b.len = 0;
    assert_int_equal(weft__store_frame_kv(&b, WEFT__STORE_SET, "weft/g/0/finished", 17, "forged", 6),
                     WEFT_OK);
    assert_int_equal(weft__store_seal(&b, 0, &made_up), WEFT_OK);
    raw_send(r.fd, b.data, b.len);
    raw_expect_closed(r.fd);
    v = value_of(f, "weft/g/0/finished");
    assert_string_equal(v, "honest");
    free(v);
    weft__store_buf_free(&b);
}

/* A frame sent again, or frames in another order, close the connection unapplied. */
static void test_replayed_and_reordered_frames(void **state)
{
    fixture_t *f = *state;
    raw_session_t r = raw_auth_as(f->port, f->token, WEFT__STORE_ROLE_MEMBER, 3);
    uint8_t one[8];
    weft__store_set_u64(one, 1);
    weft_store_buf_t b = {0};
    assert_int_equal(weft__store_frame_kv(&b, WEFT__STORE_ADD, "weft/joiner_ids", 15, one, 8),
                     WEFT_OK);
    raw_seal(&r, &b, 0);
    raw_send(r.fd, b.data, b.len);
    assert_int_equal(raw_response(&r), WEFT_OK);
    raw_send(r.fd, b.data, b.len); /* the very bytes again */
    raw_expect_closed(r.fd);
    assert_true(log_has(WEFT_LOG_ERROR, "(member 3)", "replayed"));
    char *v = value_of(f, "weft/joiner_ids");
    assert_string_equal(v, "1");
    free(v);

    /* Two frames sealed in order, sent the other way round: neither is applied. */
    r = raw_auth_as(f->port, f->token, WEFT__STORE_ROLE_MEMBER, 3);
    weft_store_buf_t first = {0}, second = {0};
    assert_int_equal(weft__store_frame_kv(&first, WEFT__STORE_SET, "weft/order/a", 12, "1", 1),
                     WEFT_OK);
    raw_seal(&r, &first, 0);
    assert_int_equal(weft__store_frame_kv(&second, WEFT__STORE_SET, "weft/order/b", 12, "2", 1),
                     WEFT_OK);
    raw_seal(&r, &second, 0);
    raw_send(r.fd, second.data, second.len);
    raw_send(r.fd, first.data, first.len);
    raw_expect_closed(r.fd);
    assert_null(value_of(f, "weft/order/a"));
    assert_null(value_of(f, "weft/order/b"));

    /* A frame of one connection replayed on another (of the same member): refused too. */
    r = raw_auth_as(f->port, f->token, WEFT__STORE_ROLE_MEMBER, 3);
    raw_send(r.fd, first.data, first.len);
    raw_expect_closed(r.fd);
    assert_null(value_of(f, "weft/order/a"));
    weft__store_buf_free(&b);
    weft__store_buf_free(&first);
    weft__store_buf_free(&second);
}

/* A bit changed anywhere in a sealed frame (header, key, value, tag) closes it unapplied. */
static void test_altered_frame(void **state)
{
    fixture_t *f = *state;
    weft_store_buf_t b = {0};
    assert_int_equal(weft__store_frame_kv(&b, WEFT__STORE_SET, "weft/g/1/0/next", 15, "AAAA", 4),
                     WEFT_OK);
    size_t frame_len = b.len;
    /* The length stays (a longer one would only wait for more bytes), so does the type. */
    const size_t spots[] = {6, WEFT__STORE_HDR_LEN + 3, frame_len - 1, frame_len + 5,
                            frame_len + WEFT__STORE_TAG_LEN - 1};
    for (size_t i = 0; i < sizeof(spots) / sizeof(spots[0]); i++) {
        raw_session_t r = raw_auth_as(f->port, f->token, WEFT__STORE_ROLE_MEMBER, 3);
        b.len = frame_len;
        raw_seal(&r, &b, 0);
        b.data[spots[i]] ^= 0x01;
        raw_send(r.fd, b.data, b.len);
        b.data[spots[i]] ^= 0x01;
        raw_expect_closed(r.fd);
        assert_null(value_of(f, "weft/g/1/0/next"));
        assert_null(value_of(f, "weft/g/1/0/nexu"));
    }
    assert_true(log_has(WEFT_LOG_ERROR, "closing 127.0.0.1:", "altered"));
    weft__store_buf_free(&b);
}

/* ---- stores that are not what they claim ---- */

typedef enum {
    FAKE_ANY_PROOF,  /* takes any proof and answers OK without one of its own */
    FAKE_BAD_PROOF,  /* answers OK with 32 random bytes for its proof */
    FAKE_BAD_TAG,    /* holds the token: a good handshake, then an answer with a bad tag */
    FAKE_REPLAY_RESP /* holds the token: answers the second request with the first answer */
} fake_mode_t;

typedef struct fake_store {
    int listen_fd, port;
    fake_mode_t mode;
    const char *token;
    pthread_t thread;
} fake_store_t;

/* Reads one frame of the client: its body (and tag) into @p body. */
static uint32_t fake_read(int fd, uint8_t hdr[WEFT__STORE_HDR_LEN], uint8_t *body, size_t extra)
{
    uint32_t len;
    weft_store_msg_t type;
    raw_recv(fd, hdr, WEFT__STORE_HDR_LEN);
    assert_int_equal(weft__store_hdr_decode(hdr, &len, &type), WEFT_OK);
    assert_true(len + extra <= 1024);
    raw_recv(fd, body, len + extra);
    return len;
}

static void *fake_main(void *arg)
{
    fake_store_t *fs = arg;
    int fd = accept(fs->listen_fd, NULL, NULL);
    assert_true(fd >= 0);
    uint8_t hello[1 + WEFT__STORE_NONCE_LEN] = {WEFT__STORE_VERSION};
    assert_int_equal(weft__store_random(hello + 1, WEFT__STORE_NONCE_LEN), WEFT_OK);
    weft_store_buf_t b = {0};
    assert_int_equal(weft__store_frame_bytes(&b, WEFT__STORE_HELLO, hello, sizeof(hello)), WEFT_OK);
    raw_send(fd, b.data, b.len);
    uint8_t hdr[WEFT__STORE_HDR_LEN], body[1024], proof[32];
    assert_int_equal(fake_read(fd, hdr, body, 0), WEFT__STORE_AUTH_LEN);
    weft_store_dir_t rx = {.seq = 0}, tx = {.seq = 0};
    if (fs->mode == FAKE_ANY_PROOF || fs->mode == FAKE_BAD_PROOF) {
        assert_int_equal(weft__store_random(proof, sizeof(proof)), WEFT_OK);
    } else {
        uint8_t t[WEFT__STORE_TRANSCRIPT_LEN], secret[32];
        weft_store_role_t role = (weft_store_role_t)body[WEFT__STORE_NONCE_LEN];
        uint32_t id = weft__store_get_u32(body + WEFT__STORE_NONCE_LEN + 1);
        weft__store_transcript(t, hello + 1, body, role, id);
        assert_int_equal(weft__store_session_secret(fs->token, role, id, secret), WEFT_OK);
        assert_int_equal(weft__store_derive(secret, WEFT__STORE_SERVER_PROOF, t, proof), WEFT_OK);
        assert_int_equal(weft__store_derive(secret, WEFT__STORE_KEY_C2S, t, rx.key), WEFT_OK);
        assert_int_equal(weft__store_derive(secret, WEFT__STORE_KEY_S2C, t, tx.key), WEFT_OK);
    }
    b.len = 0;
    assert_int_equal(
        weft__store_frame_resp(&b, WEFT_OK, proof, fs->mode == FAKE_ANY_PROOF ? 0 : sizeof(proof)),
        WEFT_OK);
    raw_send(fd, b.data, b.len);
    if (fs->mode == FAKE_BAD_TAG || fs->mode == FAKE_REPLAY_RESP) {
        /* First request: a proper answer. */
        uint32_t len = fake_read(fd, hdr, body, WEFT__STORE_TAG_LEN);
        assert_true(weft__store_tag_check(&rx, hdr, body, len, body + len));
        b.len = 0;
        assert_int_equal(weft__store_frame_resp(&b, WEFT_OK, NULL, 0), WEFT_OK);
        weft__store_frame_set_id(&b, 0, weft__store_hdr_id(hdr)); /* answers carry their id */
        assert_int_equal(weft__store_seal(&b, 0, &tx), WEFT_OK);
        raw_send(fd, b.data, b.len);
        /* Second request: a bad tag, or the first answer again. */
        len = fake_read(fd, hdr, body, WEFT__STORE_TAG_LEN);
        assert_true(weft__store_tag_check(&rx, hdr, body, len, body + len));
        if (fs->mode == FAKE_BAD_TAG) {
            b.data[b.len - 1] ^= 0x80;
        }
        raw_send(fd, b.data, b.len);
    }
    /* Hold the connection until the client has judged it. */
    char c;
    while (recv(fd, &c, 1, 0) > 0) {
    }
    close(fd);
    weft__store_buf_free(&b);
    return NULL;
}

static void fake_start(fake_store_t *fs, fake_mode_t mode, const char *token)
{
    fs->mode = mode;
    fs->token = token;
    fs->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fs->listen_fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    assert_int_equal(bind(fs->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fs->listen_fd, 4), 0);
    assert_int_equal(getsockname(fs->listen_fd, (struct sockaddr *)&sa, &len), 0);
    fs->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&fs->thread, NULL, fake_main, fs), 0);
}

static void fake_stop(fake_store_t *fs)
{
    pthread_join(fs->thread, NULL);
    close(fs->listen_fd);
}

/* A store that takes any proof but cannot prove the token itself is refused by name. */
static void test_fake_store_refused(void **state)
{
    (void)state;
    char token[65], addr[64];
    assert_int_equal(weft__store_make_token(token), WEFT_OK);
    const fake_mode_t modes[] = {FAKE_ANY_PROOF, FAKE_BAD_PROOF};
    for (size_t i = 0; i < 2; i++) {
        fake_store_t fs;
        fake_start(&fs, modes[i], token);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", fs.port);
        weft_store_client_t *c = (weft_store_client_t *)0x1;
        assert_int_equal(weft__store_connect_member(addr, token, 2, 5000, &test_logger, &c),
                         WEFT_ERR_AUTH);
        assert_ptr_equal(c, (weft_store_client_t *)0x1);
        assert_true(log_has(WEFT_LOG_ERROR, addr, "could not prove that it holds the job token"));
        fake_stop(&fs);
    }
}

/* Frames from the store are checked too: an altered or replayed answer breaks the client. */
static void test_client_checks_store_frames(void **state)
{
    (void)state;
    char token[65], addr[64];
    assert_int_equal(weft__store_make_token(token), WEFT_OK);
    const fake_mode_t modes[] = {FAKE_BAD_TAG, FAKE_REPLAY_RESP};
    for (size_t i = 0; i < 2; i++) {
        fake_store_t fs;
        fake_start(&fs, modes[i], token);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", fs.port);
        weft_store_client_t *c = NULL;
        assert_int_equal(weft__store_connect(addr, token, 5000, &test_logger, &c), WEFT_OK);
        assert_int_equal(weft__store_set(c, "k", "v", 1), WEFT_OK);
        assert_int_equal(weft__store_set(c, "k", "w", 1), WEFT_ERR_PROTOCOL);
        assert_int_equal(weft__store_set(c, "k", "x", 1), WEFT_ERR_IO); /* broken for good */
        assert_true(log_has(WEFT_LOG_ERROR, addr, "failed its integrity check"));
        weft__store_close(c);
        fake_stop(&fs);
    }
}

/* ---- authorisation ---- */

static void expect_refused(weft_status_t st)
{
    assert_int_equal(st, WEFT_ERR_AUTH);
}

/* A member writes what its id owns and the shared agreement keys; nothing of others'. */
static void test_member_writes_only_its_own(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *m3 = member(f, 3), *boss = launcher(f);
    void *won;
    size_t wlen;
    int64_t n;
    /* Its own keys, and the shared ones of the agreement protocols. */
    assert_int_equal(weft__store_set(m3, "weft/addr/3", "a3", 2), WEFT_OK);
    assert_int_equal(weft__store_set(m3, "weft/topo/3", "t3", 2), WEFT_OK);
    assert_int_equal(weft__store_add(m3, "weft/claim/3", 1, &n), WEFT_OK);
    assert_int_equal(weft__store_set_nx(m3, "weft/g/0/0/next", "d", 1, &won, &wlen, NULL), WEFT_OK);
    free(won);
    assert_int_equal(weft__store_set(m3, "weft/g/0/admit/9", "1", 1), WEFT_OK);
    assert_int_equal(weft__store_set(m3, "weft/failed/g0.0", "revoked", 7), WEFT_OK);
    assert_int_equal(weft__store_set(m3, "weft/failed/4", "reported by member 3: gone", 26),
                     WEFT_OK);
    /* Another member's keys, its lease, the launchers' keys, deleting: refused. */
    assert_int_equal(weft__store_set(boss, "weft/addr/4", "a4", 2), WEFT_OK);
    expect_refused(weft__store_set(m3, "weft/addr/4", "evil", 4));
    expect_refused(weft__store_set(m3, "other/ns/addr/4", "evil", 4));
    expect_refused(weft__store_set(m3, "weft/topo/4", "evil", 4));
    expect_refused(weft__store_add(m3, "weft/claim/4", 1, &n));
    expect_refused(weft__store_set_nx(m3, "weft/addr/5", "evil", 4, &won, &wlen, NULL));
    expect_refused(weft__store_set(m3, "weft/failed/5", "dead", 4));
    expect_refused(weft__store_set(m3, "weft/failed/5", "reported by member 4: x", 23));
    expect_refused(weft__store_set(m3, "weftrun/fence/4", "1", 1));
    expect_refused(weft__store_set(m3, "weftrun/stop", "1", 1));
    expect_refused(weft__store_delete(m3, "weft/addr/3"));
    expect_refused(weft__store_lease(m3, "weft/failed/4", "x", 1, 100000));
    expect_refused(weft__store_lease(m3, "weft/addr/3", "x", 1, 100000));
    /* An agreed decision and a join slot are created once: a plain SET that would replace
     * them (or make them first, racing SET_NX) is refused; SET_NX keeps the winner. */
    expect_refused(weft__store_set(m3, "weft/g/0/0/next", "other", 5));
    expect_refused(weft__store_set(m3, "weft/g/2/7/next", "first", 5));
    expect_refused(weft__store_set(m3, "weft/g/0/join/1", "6", 1));
    assert_int_equal(weft__store_set_nx(m3, "weft/g/0/0/next", "other", 5, &won, &wlen, NULL),
                     WEFT_OK);
    assert_int_equal(wlen, 1);
    assert_memory_equal(won, "d", 1);
    free(won);
    assert_true(log_has(WEFT_LOG_WARN, "weft/addr/4 by 127.0.0.1:", "(member 3)"));
    /* The connection still serves after a refusal. */
    char *v = value_of(f, "weft/addr/4");
    assert_string_equal(v, "a4");
    free(v);
    assert_null(value_of(f, "weft/addr/5"));
    assert_null(value_of(f, "weft/failed/5"));
    assert_null(value_of(f, "weftrun/stop"));
    v = value_of(f, "weft/addr/3");
    assert_string_equal(v, "a3");
    free(v);
    /* A launcher may do all of it. */
    assert_int_equal(weft__store_set(boss, "weftrun/stop", "1", 1), WEFT_OK);
    assert_int_equal(weft__store_delete(boss, "weft/addr/3"), WEFT_OK);
    weft__store_close(m3);
    weft__store_close(boss);
}

/*
 * One member's report does not evict a peer the store sees alive: while member 4 renews
 * the lease on its notice, member 3's signed report of it is refused; once 4's renewals
 * are a quarter of the lease's time late (4 hangs, or its host is gone) the report is
 * taken. A launcher's notice is taken either way, and a report about a member holding no
 * lease (it never armed one, or left) too.
 */
static void test_report_of_live_member(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *m3 = member(f, 3), *m4 = member(f, 4), *m5 = member(f, 5),
                        *boss = launcher(f);
    static const char report4[] = "reported by member 3: transport error";
    static const char report5[] = "reported by member 3: late";
    assert_int_equal(weft__store_lease(m4, "weft/failed/4", "lost", 4, 600000), WEFT_OK);
    expect_refused(weft__store_set(m3, "weft/failed/4", report4, sizeof(report4) - 1));
    assert_null(value_of(f, "weft/failed/4"));
    assert_true(log_has(WEFT_LOG_WARN, "weft/failed/4", "renews its lease"));
    /* Renewed: still alive. */
    assert_int_equal(weft__store_lease(m4, "weft/failed/4", "lost", 4, 600000), WEFT_OK);
    expect_refused(weft__store_set(m3, "weft/failed/4", report4, sizeof(report4) - 1));
    /* A launcher knows better (weftrun reaped the process). */
    assert_int_equal(weft__store_set(boss, "weft/failed/4", "exit 3", 6), WEFT_OK);
    /* Its renewals late: a lease of 400 ms last renewed more than 100 ms ago. */
    assert_int_equal(weft__store_lease(m5, "weft/failed/5", "lost", 4, 400), WEFT_OK);
    sleep_ms(150);
    assert_int_equal(weft__store_set(m3, "weft/failed/5", report5, sizeof(report5) - 1), WEFT_OK);
    char *v = value_of(f, "weft/failed/5");
    assert_non_null(v);
    assert_string_equal(v, report5);
    free(v);
    /* No lease on it at all. */
    assert_int_equal(weft__store_set(m3, "weft/failed/6", report5, sizeof(report5) - 1), WEFT_OK);
    weft__store_close(m3);
    weft__store_close(m4);
    weft__store_close(m5);
    weft__store_close(boss);
}

/* A member deletes the agreement keys of finished epochs, whoever wrote them
 * (comm/group/retire.c), and nothing else: not what members own, not failure notices, not
 * counters, not the launchers' keys. */
static void test_member_deletes_only_finished_epochs(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *m3 = member(f, 3), *boss = launcher(f);
    /* Read once, deleted by shape; the agreement keys proper: test_member_deletes_after_finish. */
    static const char *const finished[] = {"weft/split/0/7/3", "weft/failed/g5.2",
                                           "other/ns/split/1/2/0"};
    static const char *const kept[] = {
        /* what members own, its own included, and failure notices */
        "weft/addr/3",
        "weft/addr/4",
        "weft/claim/3",
        "weft/claim/4",
        "weft/topo/4",
        "weft/failed/3",
        "weft/failed/4",
        /* the launchers' keys, even of an agreement key's shape */
        "weftrun/fence/4",
        "weftrun/stop",
        "weftrun/g/0/7/next",
        /* counters and what a group keeps */
        "weft/g/0/joins",
        "weft/g/0/closed",
        "weft/g/0/finished",
        "weft/group_ids",
        "weft/joiner_ids",
        "weft/nccl/1/0/0/0",
        /* agreement keys of epochs the store has not seen finish */
        "weft/g/0/7/next",
        "weft/g/12/0/next",
        "weft/g/0/7/applied",
        "weft/g/0/join/4",
        "weft/g/0/admit/32768",
        "other/ns/g/1/2/next",
        /* near misses of the shapes */
        "weft/g/0/7/next/x",
        "weft/g/0/x/next",
        "weft/g/0/7/nextx",
        "weft/g//7/next",
        "weft/g/0/12345678901/next",
        "weft/failed/g5",
        "weft/failed/g5.",
        "weft/g/0/admit/",
        "weft/split/0/7",
        "g/0/7/next",
    };
    for (size_t i = 0; i < sizeof(finished) / sizeof(finished[0]); i++) {
        assert_int_equal(weft__store_set(boss, finished[i], "1", 1), WEFT_OK);
        assert_int_equal(weft__store_delete(m3, finished[i]), WEFT_OK);
        assert_null(value_of(f, finished[i]));
        assert_int_equal(weft__store_delete(m3, finished[i]), WEFT_OK); /* gone already */
    }
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
        assert_int_equal(weft__store_set(boss, kept[i], "1", 1), WEFT_OK);
        expect_refused(weft__store_delete(m3, kept[i]));
        char *v = value_of(f, kept[i]);
        assert_non_null(v);
        free(v);
    }
    assert_true(log_has(WEFT_LOG_WARN, "weft/failed/4 by 127.0.0.1:",
                        "deletes only the agreement keys of finished epochs"));
    weft__store_close(m3);
    weft__store_close(boss);
}

/* Sets @p key to a decision whose members are @p ids (and join_hi @p join_hi). */
static void set_decision(weft_store_client_t *c, const char *key, const int32_t *ids, uint32_t n,
                         uint32_t join_hi)
{
    weft_decision_t d = {.kind = WEFT_EDIT_REPAIR, .new_epoch = 1, .join_hi = join_hi,
                         .n_members = n, .members = (int32_t *)ids};
    void *v;
    size_t len;
    assert_int_equal(weft__decision_encode(&d, &v, &len), WEFT_OK);
    assert_int_equal(weft__store_set(c, key, v, len), WEFT_OK);
    free(v);
}

static void expect_present(const fixture_t *f, const char *key, bool present)
{
    char *v = value_of(f, key);
    if ((v != NULL) != present) {
        fail_msg("%s is %s", key, v != NULL ? "still there" : "gone");
    }
    free(v);
}

/*
 * The agreement keys of an epoch are deleted by members only once the store saw the epoch
 * finish: each member the decision lists counted itself once, with an add of 1. Then the
 * decision and its count, the unfinished decisions just below it, the join slots up to its
 * join_hi and their admissions go; nothing beyond them, and nothing before.
 */
static void test_member_deletes_after_finish(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *boss = launcher(f), *m3 = member(f, 3), *m4 = member(f, 4),
                        *m5 = member(f, 5);
    const int32_t ids[] = {3, 5}, below[] = {3, 4, 5};
    set_decision(boss, "weft/g/1/4/next", ids, 2, 2);
    set_decision(boss, "weft/g/1/3/next", below, 3, 0); /* unfinished: member 4 died */
    set_decision(boss, "weft/g/1/1/next", below, 3, 0); /* below a gap: an earlier finish's */
    assert_int_equal(weft__store_set(boss, "weft/g/1/join/3", "40000", 5), WEFT_OK);
    assert_int_equal(weft__store_set(boss, "weft/g/1/join/2", "32768", 5), WEFT_OK);
    assert_int_equal(weft__store_set(boss, "weft/g/1/join/1", "-1", 2), WEFT_OK);
    assert_int_equal(weft__store_set(boss, "weft/g/1/admit/32768", "1", 1), WEFT_OK);
    const char *const once_finished[] = {"weft/g/1/4/next", "weft/g/1/4/applied",
                                         "weft/g/1/3/next", "weft/g/1/join/2",
                                         "weft/g/1/join/1", "weft/g/1/admit/32768"};
    const char *const never[] = {"weft/g/1/1/next", "weft/g/1/join/3"};
    int64_t n = 0;

    /* Before anyone counted: nothing of the epoch may go. */
    expect_refused(weft__store_delete(m3, "weft/g/1/4/next"));
    expect_refused(weft__store_delete(m3, "weft/g/1/join/2"));
    /* Counting: a member of the decision, once, by 1; no set of the count. */
    expect_refused(weft__store_add(m4, "weft/g/1/4/applied", 1, &n)); /* not listed */
    expect_refused(weft__store_add(m3, "weft/g/1/4/applied", 2, &n));
    expect_refused(weft__store_set(m3, "weft/g/1/4/applied", "2", 1));
    expect_refused(weft__store_add(m3, "weft/g/1/9/applied", 1, &n)); /* no such decision */
    assert_int_equal(weft__store_add(m3, "weft/g/1/4/applied", 1, &n), WEFT_OK);
    assert_int_equal(n, 1);
    expect_refused(weft__store_add(m3, "weft/g/1/4/applied", 1, &n)); /* twice */
    /* Half counted is not finished. */
    expect_refused(weft__store_delete(m3, "weft/g/1/4/next"));
    expect_refused(weft__store_delete(m5, "weft/g/1/4/applied"));
    expect_present(f, "weft/g/1/4/next", true);
    /* The last member counts: the epoch finished. */
    assert_int_equal(weft__store_add(m5, "weft/g/1/4/applied", 1, &n), WEFT_OK);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
        expect_refused(weft__store_delete(m4, never[i]));
        expect_present(f, never[i], true);
    }
    for (size_t i = 0; i < sizeof(once_finished) / sizeof(once_finished[0]); i++) {
        assert_int_equal(weft__store_delete(m4, once_finished[i]), WEFT_OK);
        expect_present(f, once_finished[i], false);
    }
    weft__store_close(m3);
    weft__store_close(m4);
    weft__store_close(m5);
    weft__store_close(boss);
}

/* A member cannot get another killed: its lease on the other's notice is refused, so it
 * never lapses; its own lease lapses as before. */
static void test_member_cannot_fence_another(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *m3 = member(f, 3);
    expect_refused(weft__store_lease(m3, "weft/failed/4", "lost", 4, 1));
    sleep_ms(100);
    assert_int_equal(weft__store_set(m3, "weft/addr/3", "x", 1), WEFT_OK); /* runs the timers */
    pthread_mutex_lock(&f->lapse_lock);
    assert_string_equal(f->lapsed, "");
    pthread_mutex_unlock(&f->lapse_lock);
    assert_null(value_of(f, "weft/failed/4"));
    assert_int_equal(weft__store_lease(m3, "weft/failed/3", "lost", 4, 1), WEFT_OK);
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&f->lapse_lock);
        bool done = f->lapsed[0] != '\0';
        pthread_mutex_unlock(&f->lapse_lock);
        if (done) {
            break;
        }
        sleep_ms(10);
    }
    pthread_mutex_lock(&f->lapse_lock);
    assert_string_equal(f->lapsed, "weft/failed/3;");
    pthread_mutex_unlock(&f->lapse_lock);
    weft__store_close(m3);
}

/* A member's key proves its id only: the proof of member 3 does not pass for member 4,
 * and a member without an id yet owns nothing. */
static void test_member_identity_bound(void **state)
{
    fixture_t *f = *state;
    int fd = raw_connect_port(f->port);
    uint8_t sn[WEFT__STORE_NONCE_LEN], t[WEFT__STORE_TRANSCRIPT_LEN], secret3[32];
    uint8_t frame[WEFT__STORE_HDR_LEN + WEFT__STORE_AUTH_LEN];
    uint8_t *body = frame + WEFT__STORE_HDR_LEN;
    raw_hello(fd, sn);
    assert_int_equal(weft__store_random(body, WEFT__STORE_NONCE_LEN), WEFT_OK);
    body[WEFT__STORE_NONCE_LEN] = WEFT__STORE_ROLE_MEMBER;
    uint32_t be = htonl(4);
    memcpy(body + WEFT__STORE_NONCE_LEN + 1, &be, 4); /* claims 4... */
    weft__store_transcript(t, sn, body, WEFT__STORE_ROLE_MEMBER, 4);
    assert_int_equal(weft__store_session_secret(f->token, WEFT__STORE_ROLE_MEMBER, 3, secret3),
                     WEFT_OK); /* ...with the key of 3 */
    assert_int_equal(
        weft__store_derive(secret3, WEFT__STORE_CLIENT_PROOF, t, body + WEFT__STORE_NONCE_LEN + 5),
        WEFT_OK);
    weft__store_hdr_encode(frame, WEFT__STORE_AUTH_LEN, WEFT__STORE_AUTH);
    raw_send(fd, frame, sizeof(frame));
    raw_expect_closed(fd);
    assert_true(log_has(WEFT_LOG_WARN, "refused 127.0.0.1:", "wrong token proof"));

    weft_store_client_t *anon = member(f, -1);
    int64_t n;
    assert_int_equal(weft__store_add(anon, "weft/joiner_ids", 1, &n), WEFT_OK);
    expect_refused(weft__store_set(anon, "weft/addr/0", "x", 1));
    expect_refused(weft__store_lease(anon, "weft/failed/0", "x", 1, 1000));
    expect_refused(weft__store_set(anon, "weft/failed/0", "reported by member 4294967295: x", 32));
    weft__store_close(anon);
}

/* ---- denial of service ---- */

/* A socket to the store from source address 127.0.0.@p last (0: the kernel's choice). */
static int connect_from(int port, int last)
{
    if (last == 0) {
        return raw_connect_port(port);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)last - 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/*
 * Sockets that connect and never authenticate, more than the pool for them holds: a
 * client of the job still gets in, at once. @p spread: each from another address of
 * 127.0.0.0/8, which reaches this host all the same; the whole range is one address's
 * share, so the flood is held to it as from one address.
 */
static void flood(fixture_t *f, bool spread)
{
    enum { FLOOD = WEFT__STORE_MAX_UNAUTH + 72 };
    int fds[FLOOD];
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = connect_from(f->port, spread ? 2 + i : 0);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    weft_store_client_t *m = member(f, 1);
    assert_int_equal(weft__store_set(m, "weft/addr/1", "in", 2), WEFT_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    /* Well before the strangers' deadline would have freed their slots. */
    assert_true(ms < WEFT__STORE_AUTH_TIMEOUT_MS / 2);
    assert_true(log_has(WEFT_LOG_WARN, "dropping 127.0.0.", "not authenticated"));
    /* The oldest strangers were dropped, told the store was busy; at most the pool's
     * share of one address is still waiting. */
    int dropped = 0;
    for (int i = 0; i < FLOOD; i++) {
        struct timeval tv = {.tv_usec = 1000};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        uint8_t buf[256];
        ssize_t r;
        size_t got = 0;
        while ((r = recv(fds[i], buf, sizeof(buf), 0)) > 0) {
            got += (size_t)r;
        }
        dropped += r == 0;
        close(fds[i]);
    }
    assert_true(dropped >= FLOOD - WEFT__STORE_MAX_UNAUTH_PER_ADDR);
    weft__store_close(m);
}

static void test_unauthenticated_flood(void **state)
{
    flood(*state, false);
}

static void test_unauthenticated_flood_many_addresses(void **state)
{
    flood(*state, true);
}

/* The unit of the per-address share. */
static void test_addr_unit(void **state)
{
    (void)state;
    char u[64];
    weft__store_srv_addr_unit("127.0.0.1", u, sizeof(u));
    assert_string_equal(u, "127.0.0.0/8");
    weft__store_srv_addr_unit("127.45.6.7", u, sizeof(u));
    assert_string_equal(u, "127.0.0.0/8");
    weft__store_srv_addr_unit("::ffff:127.9.9.9", u, sizeof(u));
    assert_string_equal(u, "127.0.0.0/8");
    weft__store_srv_addr_unit("10.77.0.2", u, sizeof(u));
    assert_string_equal(u, "10.77.0.2");
    weft__store_srv_addr_unit("::ffff:10.77.0.2", u, sizeof(u));
    assert_string_equal(u, "10.77.0.2");
    weft__store_srv_addr_unit("fd00:1:2:3:4:5:6:7", u, sizeof(u));
    assert_string_equal(u, "fd00:0001:0002:0003::/64");
    weft__store_srv_addr_unit("fd00:1:2:3:ffff::1", u, sizeof(u));
    assert_string_equal(u, "fd00:0001:0002:0003::/64");
    weft__store_srv_addr_unit("fake connection 3", u, sizeof(u));
    assert_string_equal(u, "fake connection 3");
}

/* ---- members' shares ---- */

/* One member cannot fill the store: past its share its writes are refused, and the others
 * still publish their addresses and count; replacing its own key takes no more room; a
 * launcher is held to the store's cap alone. */
static void test_member_share(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *m3 = member(f, 3), *m4 = member(f, 4), *boss = launcher(f);
    static char big[60 * 1024];
    char key[64];
    weft_status_t st = WEFT_OK;
    int i;
    for (i = 0; i < 400 && st == WEFT_OK; i++) {
        snprintf(key, sizeof(key), "weft/fill/%d", i);
        st = weft__store_set(m3, key, big, sizeof(big));
    }
    assert_int_equal(st, WEFT_ERR_NO_MEMORY);
    int fitted = i - 1;
    assert_true((size_t)fitted * sizeof(big) <= WEFT__STORE_MEMBER_SHARE);
    assert_true((size_t)(fitted + 2) * sizeof(big) > WEFT__STORE_MEMBER_SHARE);
    assert_true(log_has(WEFT_LOG_WARN, "member 3's share of the store is full", "weft/fill/"));
    assert_int_equal(weft__store_set(m3, "weft/fill/0", big, sizeof(big)), WEFT_OK);
    assert_int_equal(weft__store_set(m3, "weft/fill/0", big, 10), WEFT_OK); /* smaller */
    int64_t n;
    assert_int_equal(weft__store_set(m4, "weft/addr/4", "a4", 2), WEFT_OK);
    assert_int_equal(weft__store_add(m4, "weft/joiner_ids", 1, &n), WEFT_OK);
    assert_int_equal(weft__store_lease(m4, "weft/failed/4", "x", 1, 100000), WEFT_OK);
    for (int j = 0; j < fitted + 8; j++) {
        snprintf(key, sizeof(key), "boss/fill/%d", j);
        assert_int_equal(weft__store_set(boss, key, big, sizeof(big)), WEFT_OK);
    }
    assert_int_equal(weft__store_lease(m4, "weft/failed/4", "x", 1, 0), WEFT_OK);
    weft__store_close(m3);
    weft__store_close(m4);
    weft__store_close(boss);
}

/* ---- memory ---- */

/* Leases count against the store's cap on what it holds. */
static void test_lease_counts_against_cap(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = launcher(f), *holder = launcher(f);
    size_t n = WEFT__STORE_MAX_VALUE;
    uint8_t *big = calloc(1, n);
    assert_non_null(big);
    char key[32];
    int i;
    weft_status_t st = WEFT_OK;
    for (i = 0; i < 200 && st == WEFT_OK; i++) {
        snprintf(key, sizeof(key), "fill/%d", i);
        st = weft__store_set(c, key, big, n);
    }
    assert_int_equal(st, WEFT_ERR_NO_MEMORY);
    /* Room for one more value: a lease of that size takes it. */
    assert_int_equal(weft__store_delete(c, "fill/0"), WEFT_OK);
    assert_int_equal(weft__store_lease(holder, "held", big, n, 60000), WEFT_OK);
    assert_int_equal(weft__store_set(c, "fill/0", big, n), WEFT_ERR_NO_MEMORY);
    /* Released, it gives the room back. */
    assert_int_equal(weft__store_lease(holder, "held", NULL, 0, 0), WEFT_OK);
    assert_int_equal(weft__store_set(c, "fill/0", big, n), WEFT_OK);
    free(big);
    weft__store_close(holder);
    weft__store_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_injected_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replayed_and_reordered_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_altered_frame, setup, teardown),
        cmocka_unit_test(test_fake_store_refused),
        cmocka_unit_test(test_client_checks_store_frames),
        cmocka_unit_test_setup_teardown(test_member_writes_only_its_own, setup, teardown),
        cmocka_unit_test_setup_teardown(test_member_deletes_only_finished_epochs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_member_deletes_after_finish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_member_cannot_fence_another, setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_of_live_member, setup, teardown),
        cmocka_unit_test_setup_teardown(test_member_identity_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unauthenticated_flood, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unauthenticated_flood_many_addresses, setup, teardown),
        cmocka_unit_test(test_addr_unit),
        cmocka_unit_test_setup_teardown(test_member_share, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_counts_against_cap, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
