/*
 * The capability tables are the only way to a transport: weft__transports lists every
 * built-in one, each table it fills complete, and a context reaches its message
 * transports through instances of their message tables, not by name.
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

/* Every entry of a message table, in table order. */
static int message_entries(const weft_tl_msg_ops_t *m)
{
    return (m->init != NULL) + (m->fini != NULL) + (m->address != NULL) + (m->connect != NULL) +
           (m->disconnect != NULL) + (m->isend != NULL) + (m->irecv != NULL) + (m->test != NULL) +
           (m->cancel != NULL) + (m->progress != NULL) + (m->discard != NULL);
}

/* Every entry of a device table but the optional pair comm_can_shrink/comm_shrink. */
static int device_entries(const weft_tl_dev_ops_t *d)
{
    return (d->comm_id != NULL) + (d->comm_create != NULL) + (d->comm_destroy != NULL) +
           (d->comm_abort != NULL) + (d->comm_poll != NULL) + (d->comm_error != NULL) +
           (d->coll != NULL) + (d->p2p != NULL) + (d->op_test != NULL) + (d->op_release != NULL);
}

static void test_tables(void **state)
{
    (void)state;
    int n = 0, loopback = 0, remote = 0, device = 0;
    for (size_t i = 0; weft__transports[i] != NULL; i++, n++) {
        const weft_transport_t *t = weft__transports[i];
        assert_int_equal(t->size, sizeof(weft_transport_t));
        assert_non_null(t->name);
        assert_non_null(t->available);
        assert_ptr_equal(weft__transport_find(t->name), t);
        /* At least one capability, each table with all of its entries. */
        assert_true(t->msg != NULL || t->dev != NULL);
        if (t->msg != NULL) {
            assert_int_equal(t->msg->size, sizeof(weft_tl_msg_ops_t));
            assert_int_equal(message_entries(t->msg), 11);
            if (t->msg->flags & WEFT_TL_LOOPBACK) {
                loopback++;
            } else {
                remote++;
            }
        }
        if (t->dev != NULL) {
            const weft_tl_dev_ops_t *d = t->dev;
            assert_int_equal(d->size, sizeof(weft_tl_dev_ops_t));
            assert_int_equal(device_entries(d), 10);
            assert_true((d->comm_shrink == NULL) == (d->comm_can_shrink == NULL));
            assert_true(d->comm_id_bytes > 0 && d->comm_id_bytes <= WEFT_TL_COMM_ID_MAX);
            assert_non_null(d->comm_error(NULL));
            device++;
        }
    }
    assert_true(loopback >= 1 && remote >= 1);
    assert_non_null(weft__transport_find("self"));
    assert_non_null(weft__transport_find("ucx"));
#ifdef WEFT_HAVE_NCCL
    assert_non_null(weft__transport_find("nccl"));
    assert_non_null(weft__transport_find("nccl")->dev);
    assert_null(weft__transport_find("nccl")->msg);
    assert_int_equal(device, 1);
    assert_int_equal(n, 3);
#else
    assert_null(weft__transport_find("nccl"));
    assert_int_equal(device, 0);
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
    assert_ptr_equal(ctx->tl_local->transport,
                     weft__transport_find(ctx->tl_local->transport->name));
    assert_ptr_equal(ctx->tl_local->ops, ctx->tl_local->transport->msg);
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
