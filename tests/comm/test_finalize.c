/*
 * Finalize with work still in flight: rank 0 abandons a large nonblocking allreduce on a
 * subgroup (its ring has child requests posted) and a receive nobody will match; every
 * rank then finalizes. Finalize must free everything exactly once (the sanitizer build
 * checks) and must not hang (WEFT_FINALIZE_TIMEOUT_MS bounds the leave-together wait).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "weft/group.h"
#include "weft/weft.h"

static void test_finalize_with_outstanding_work(void **state)
{
    (void)state;
    setenv("WEFT_FINALIZE_TIMEOUT_MS", "300", 1);
    weft_ctx_t *ctx;
    weft_group_t *w;
    assert_int_equal(weft_init(NULL, &ctx), WEFT_OK);
    assert_int_equal(weft_ctx_world(ctx, &w), WEFT_OK);
    int rank, size;
    weft_group_rank(w, &rank);
    weft_group_size(w, &size);
    enum { N = 1 << 20 };
    float *buf = calloc(N, sizeof(float));
    assert_non_null(buf);
    weft_req_t *coll = NULL, *recv = NULL;
    weft_group_t *sub;
    char byte = 0;
    assert_int_equal(weft_group_split(w, 0, rank, &sub), WEFT_OK);
    if (rank == 0 && size > 1) {
        weft_status_t st = weft_iallreduce(sub, buf, buf, N, WEFT_F32, WEFT_SUM, &coll);
        assert_int_equal(st, WEFT_INPROGRESS);
        assert_int_equal(weft_irecv(w, &byte, 1, 1, 77, &recv), WEFT_INPROGRESS);
        assert_int_equal(weft_test(coll), WEFT_INPROGRESS);
        assert_int_equal(weft_send(w, &byte, 1, 1, 78), WEFT_OK); /* go ahead */
    } else if (rank == 1) {
        assert_int_equal(weft_recv(w, &byte, 1, 0, 78, NULL), WEFT_OK);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(weft_finalize(ctx), WEFT_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* Bounded by the setting (plus slack for a loaded machine), not the 300 s default. */
    assert_true(t1.tv_sec - t0.tv_sec < 30);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finalize_with_outstanding_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
