/*
 * NCCL is loaded on first use. Run with WEFT_NCCL_LIBRARY naming a library that does not
 * exist: the transport must say it is unavailable and why, naming the library, and
 * refuse to make communicators, without crashing. Needs no GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "transports/nccl.h"
#include "transports/transport.h"

static void test_missing_library(void **state)
{
    (void)state;
    const char *name = getenv(WEFT_NCCL_LIBRARY_ENV);
    assert_non_null(name); /* set by the test's CTest entry */
    const weft_transport_t *nccl = weft__transport_find("nccl");
    assert_ptr_equal(nccl, &weft__tl_nccl);
    assert_int_equal(nccl->available(), 0);
    const weft_tl_dev_ops_t *t = nccl->dev;
    const char *why = t->comm_error(NULL);
    assert_non_null(strstr(why, "NCCL library not found"));
    assert_non_null(strstr(why, name));

    char buf[512];
    assert_ptr_equal(weft__nccl_status(buf, sizeof(buf)), buf);
    assert_non_null(strstr(buf, name));
    assert_string_equal(weft__nccl_repair_mode(), "rebuild");
    assert_int_equal(weft__nccl_version(), 0);

    uint8_t id[WEFT_TL_COMM_ID_MAX];
    weft_tl_comm_t *c = (weft_tl_comm_t *)0x1;
    weft_tl_comm_params_t p = {.size = sizeof(p), .nranks = 1, .rank = 0, .device = -1};
    assert_int_equal(t->comm_id(id), WEFT_ERR_UNSUPPORTED);
    assert_int_equal(t->comm_create(&p, id, &c), WEFT_ERR_UNSUPPORTED);
    assert_ptr_equal(c, (weft_tl_comm_t *)0x1); /* untouched */
    assert_int_equal(t->op_test(NULL), WEFT_OK);
    t->op_release(NULL);
    t->comm_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
