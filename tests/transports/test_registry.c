/*
 * The ops table is the only way to a transport: weft__transports lists every built-in
 * one with the entries its kind needs, and a context reaches its transports through
 * instances of those tables, not by name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/core_impl.h"
#include "transports/transport.h"
#include "weft/weft.h"

/* Every entry of a tagged-message transport, in table order. */
static int message_entries(const weft_transport_ops_t *t)
{
    return (t->init != NULL) + (t->fini != NULL) + (t->address != NULL) + (t->connect != NULL) +
           (t->disconnect != NULL) + (t->isend != NULL) + (t->irecv != NULL) + (t->test != NULL) +
           (t->cancel != NULL) + (t->progress != NULL);
}

static int group_entries(const weft_transport_ops_t *t)
{
    return (t->comm_id != NULL) + (t->comm_create != NULL) + (t->comm_destroy != NULL) +
           (t->comm_abort != NULL) + (t->comm_poll != NULL) + (t->comm_error != NULL) +
           (t->allreduce != NULL) + (t->broadcast != NULL) + (t->allgather != NULL) +
           (t->reduce_scatter != NULL) + (t->p2p != NULL) +
           (t->op_test != NULL) +
           (t->op_release != NULL);
}

static void test_tables(void **state)
{
    (void)state;
    int n = 0, loopback = 0, remote = 0;
    for (size_t i = 0; weft__transports[i] != NULL; i++, n++) {
        const weft_transport_ops_t *t = weft__transports[i];
        assert_int_equal(t->size, sizeof(weft_transport_ops_t));
        assert_non_null(t->name);
        assert_non_null(t->available);
        assert_ptr_equal(weft__transport_find(t->name), t);
        int msg = message_entries(t), grp = group_entries(t);
        /* One kind or the other, each with all of its entries. */
        assert_true((msg == 10 && grp == 0) || (msg == 0 && grp == 13));
        /* Optional pairs come together. */
        assert_true((t->comm_shrink == NULL) == (t->comm_can_shrink == NULL));
        if (grp != 0) {
            assert_true(t->comm_id_bytes > 0 && t->comm_id_bytes <= WEFT_TL_COMM_ID_MAX);
            assert_int_equal(t->flags & WEFT_TL_LOOPBACK, 0);
            assert_non_null(t->comm_error(NULL));
        } else if (t->flags & WEFT_TL_LOOPBACK) {
            loopback++;
        } else {
            remote++;
        }
    }
    assert_true(loopback >= 1 && remote >= 1);
    assert_non_null(weft__transport_find("self"));
    assert_non_null(weft__transport_find("ucx"));
#ifdef WEFT_HAVE_NCCL
    assert_non_null(weft__transport_find("nccl"));
    assert_int_equal(n, 3);
#else
    assert_null(weft__transport_find("nccl"));
    assert_int_equal(n, 2);
#endif
    assert_null(weft__transport_find("nonexistent"));
}

/* A singleton context (no store): one loopback instance, and the peer that is this
 * process points at it. */
static void test_singleton_context(void **state)
{
    (void)state;
    weft_ctx_t *ctx = NULL;
    assert_int_equal(weft_init(NULL, &ctx), WEFT_OK);
    assert_int_equal(ctx->ntls, 1);
    assert_non_null(ctx->tl_local);
    assert_null(ctx->tl_remote);
    assert_true(ctx->tl_local->ops->flags & WEFT_TL_LOOPBACK);
    assert_ptr_equal(ctx->tl_local->ops, weft__transport_find(ctx->tl_local->ops->name));
    assert_ptr_equal(ctx->peers[ctx->rank].ops, ctx->tl_local->ops);
    assert_ptr_equal(ctx->peers[ctx->rank].tl, ctx->tl_local->tl);
    assert_int_equal(weft_finalize(ctx), WEFT_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_singleton_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
