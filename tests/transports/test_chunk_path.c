/*
 * The path of a migration chunk (transports/select.h, weft__select_chunk_path): a table of
 * the facts a member has and the path the rule gives, case by case, with what each case
 * pins down; and what the stream mechanisms reach (weft__select_reach).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "transports/select.h"
#include "transports/stream.h"

enum { SEND = 0, RECV = 1 };
enum {
    MSG = WEFT_TL_PATH_MSG,
    CMA = WEFT_TL_PATH_CMA,
    RING = WEFT_TL_PATH_RING,
    NCCL = WEFT_TL_PATH_NCCL
};
enum {
    UNDECIDED = WEFT_CHUNK_RING_UNDECIDED,
    OFFER = WEFT_CHUNK_RING_OFFER,
    ON = WEFT_CHUNK_RING_ON,
    OFF = WEFT_CHUNK_RING_OFF
};

/* One row: the facts that differ from a same-host stream of host memory with both
 * settings on, a ring that fits and both mechanisms reaching the peer. */
typedef struct row {
    const char *why;
    int side;
    int ring;
    bool contiguous;
    bool other_host, shm_off, cma_off, oversubscribed, no_fit, no_ring_reach, no_cma_reach,
        nccl_round, ring_refused;
    int expect;
} row_t;

static const row_t rows[] = {
    /* NCCL: the first round when the group chose it, before anything else. */
    {"nccl round, sender", SEND, OFF, true, .nccl_round = true, .expect = NCCL},
    {"nccl round, receiver with a ring", RECV, ON, true, .nccl_round = true, .expect = NCCL},
    {"nccl round: no ring offered", SEND, UNDECIDED, false, .nccl_round = true, .expect = NCCL},
    {"nccl round, another host", SEND, OFF, true, .other_host = true, .nccl_round = true,
     .expect = NCCL},
    /* Another host: messages. */
    {"another host, contiguous", SEND, OFF, true, .other_host = true, .expect = MSG},
    {"another host: no ring offered", RECV, UNDECIDED, false, .other_host = true, .expect = MSG},
    /* Whether the members exchange an offer: shared facts only. */
    {"offer exchanged", SEND, UNDECIDED, false, .expect = RING},
    {"offer exchanged, receiver", RECV, UNDECIDED, false, .expect = RING},
    {"shm off: no offer", RECV, UNDECIDED, false, .shm_off = true, .expect = MSG},
    {"short stream: no offer", SEND, UNDECIDED, false, .no_fit = true, .expect = MSG},
    {"offer exchanged though oversubscribed", RECV, UNDECIDED, false, .oversubscribed = true,
     .expect = RING},
    {"offer exchanged though this side cannot use one", RECV, UNDECIDED, false,
     .no_ring_reach = true, .ring_refused = true, .expect = RING},
    /* The receiver makes a ring to offer. */
    {"receiver makes a ring", RECV, OFFER, false, .expect = RING},
    {"receiver oversubscribed: offers none", RECV, OFFER, false, .oversubscribed = true,
     .expect = MSG},
    {"receiver in device memory: offers none", RECV, OFFER, false, .no_ring_reach = true,
     .no_cma_reach = true, .expect = MSG},
    {"receiver refused by the hook: offers none", RECV, OFFER, false, .ring_refused = true,
     .expect = MSG},
    /* The sender maps the ring offered (an offer of none is OFF). */
    {"sender maps the offer", SEND, OFFER, false, .expect = RING},
    {"sender maps it though oversubscribed", SEND, OFFER, false, .oversubscribed = true,
     .expect = RING},
    {"sender in device memory: does not map", SEND, OFFER, false, .no_ring_reach = true,
     .expect = MSG},
    {"sender refused by the hook: does not map", SEND, OFFER, false, .ring_refused = true,
     .expect = MSG},
    /* A ring in use carries every chunk, contiguous or not. */
    {"ring on, contiguous", SEND, ON, true, .expect = RING},
    {"ring on, not contiguous", SEND, ON, false, .expect = RING},
    {"ring on, chunk in a slot", RECV, ON, false, .expect = RING},
    {"ring on, cma off", SEND, ON, false, .cma_off = true, .expect = RING},
    /* Refused by a verdict: neither mechanism reaches the peer, messages. */
    {"refused: ring no more", SEND, ON, true, .no_ring_reach = true, .no_cma_reach = true,
     .expect = MSG},
    {"refused: no read", RECV, OFF, true, .no_ring_reach = true, .no_cma_reach = true,
     .expect = MSG},
    /* No ring: CMA for contiguous chunks of host memory. */
    {"no ring, contiguous", SEND, OFF, true, .expect = CMA},
    {"no ring, header offers a read", RECV, OFF, true, .expect = CMA},
    {"no ring, not contiguous", SEND, OFF, false, .expect = MSG},
    {"no ring, header offers nothing", RECV, OFF, false, .expect = MSG},
    {"cma off", SEND, OFF, true, .cma_off = true, .expect = MSG},
    {"receiver in device memory refuses the read", RECV, OFF, true, .no_cma_reach = true,
     .expect = MSG},
    {"shm off, cma on", SEND, OFF, true, .shm_off = true, .expect = CMA},
    {"oversubscribed: cma", RECV, OFF, true, .oversubscribed = true, .expect = CMA},
    {"mapping failed, contiguous", SEND, OFF, true, .ring_refused = true, .expect = CMA},
};

static weft_chunk_path_query_t query_of(const row_t *r)
{
    return (weft_chunk_path_query_t){
        .size = sizeof(weft_chunk_path_query_t),
        .receiver = r->side == RECV,
        .same_host = !r->other_host,
        .migrate_shm = !r->shm_off,
        .migrate_cma = !r->cma_off,
        .oversubscribed = r->oversubscribed,
        .ring_fits = !r->no_fit,
        .ring_reach = !r->no_ring_reach && !r->other_host,
        .cma_reach = !r->no_cma_reach && !r->other_host,
        .nccl_round = r->nccl_round,
        .ring = (weft_chunk_ring_t)r->ring,
        .ring_refused = r->ring_refused,
        .contiguous = r->contiguous,
    };
}

static void test_table(void **state)
{
    (void)state;
    int wrong = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        weft_chunk_path_query_t q = query_of(&rows[i]);
        weft_tl_path_t got = weft__select_chunk_path(&q);
        if ((int)got != rows[i].expect) {
            print_error("%s: %s, expected %s\n", rows[i].why, weft__tl_path_name(got),
                        weft__tl_path_name((weft_tl_path_t)rows[i].expect));
            wrong++;
        }
    }
    assert_int_equal(wrong, 0);
}

/* Whatever the ring's state and the chunk, a peer on another host gets messages unless
 * the round is NCCL's; the sender and the receiver of one chunk get the same path. */
static void test_sides_agree(void **state)
{
    (void)state;
    for (int bits = 0; bits < (1 << 7); bits++) {
        row_t r = {"",
                   SEND,
                   OFF,
                   bits & 1,
                   .cma_off = bits & 2,
                   .oversubscribed = bits & 4,
                   .no_cma_reach = bits & 8,
                   .other_host = bits & 16,
                   .nccl_round = bits & 32,
                   .ring_refused = bits & 64};
        for (int ring = UNDECIDED; ring <= OFF; ring++) {
            r.ring = ring;
            r.side = SEND;
            weft_chunk_path_query_t qs = query_of(&r);
            r.side = RECV;
            weft_chunk_path_query_t qr = query_of(&r);
            weft_tl_path_t s = weft__select_chunk_path(&qs), v = weft__select_chunk_path(&qr);
            if (r.other_host) {
                assert_int_equal(s, r.nccl_round ? NCCL : MSG);
            }
            if (ring == UNDECIDED || ring == ON || ring == OFF) {
                assert_int_equal(s, v); /* OFFER differs by design: oversubscription */
            }
        }
    }
}

static weft_tl_stream_peer_t host_peer(void)
{
    return (weft_tl_stream_peer_t){
        .size = sizeof(weft_tl_stream_peer_t),
        .same_host = true,
        .pid = 0,
        .mem = WEFT_MEM_HOST,
        .peer_mem = WEFT_MEM_HOST,
        .refused = false,
    };
}

static void test_reach(void **state)
{
    (void)state;
    weft_chunk_path_query_t q = {.size = sizeof(q)};
    weft_tl_stream_peer_t p = host_peer();
    weft__select_reach(&p, &q);
    assert_true(q.cma_reach);
    assert_true(q.ring_reach); /* pidfd_getfd is built on every system weft runs on */
    p.refused = true;
    weft__select_reach(&p, &q);
    assert_false(q.cma_reach);
    assert_false(q.ring_reach);
    p = host_peer();
    p.mem = WEFT_MEM_CUDA;
    weft__select_reach(&p, &q);
    assert_false(q.cma_reach || q.ring_reach);
    p = host_peer();
    p.same_host = false;
    weft__select_reach(&p, &q);
    assert_false(q.cma_reach || q.ring_reach);
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(weft__tl_path_name(WEFT_TL_PATH_MSG), "msg");
    assert_string_equal(weft__tl_path_name(WEFT_TL_PATH_CMA), "cma");
    assert_string_equal(weft__tl_path_name(WEFT_TL_PATH_RING), "ring");
    assert_string_equal(weft__tl_path_name(WEFT_TL_PATH_NCCL), "nccl");
    assert_string_equal(weft__tl_path_name((weft_tl_path_t)42), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_sides_agree),
        cmocka_unit_test(test_reach),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
