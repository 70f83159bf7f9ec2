#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "weft/weft.h"

static const weft_status_t all[] = {
    WEFT_OK, WEFT_INPROGRESS, WEFT_ERR_INVALID_ARG, WEFT_ERR_MISMATCH, WEFT_ERR_NO_MEMORY,
    WEFT_ERR_UNSUPPORTED, WEFT_ERR_PEER_FAILED, WEFT_ERR_REVOKED, WEFT_ERR_TIMEOUT,
    WEFT_ERR_TRANSPORT, WEFT_ERR_AUTH, WEFT_ERR_IO, WEFT_ERR_PROTOCOL,
};
#define N_ALL (sizeof(all) / sizeof(all[0]))

/* Every status has its own string that starts with the enumerator's name. */
static void test_names_unique(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ALL; i++) {
        const char *s = weft_status_str(all[i]);
        assert_non_null(s);
        assert_int_equal(strncmp(s, "WEFT_", 5), 0);
        for (size_t j = 0; j < i; j++) {
            assert_string_not_equal(s, weft_status_str(all[j]));
        }
    }
}

static void test_errors_negative_and_grouped(void **state)
{
    (void)state;
    assert_int_equal(WEFT_OK, 0);
    assert_int_equal(WEFT_INPROGRESS, 1);
    for (size_t i = 2; i < N_ALL; i++) {
        assert_true(all[i] < 0);
    }
    assert_true(WEFT_ERR_INVALID_ARG > WEFT_ERR_NO_MEMORY);
    assert_true(WEFT_ERR_NO_MEMORY > WEFT_ERR_PEER_FAILED);
    assert_true(WEFT_ERR_PEER_FAILED > WEFT_ERR_TRANSPORT);
}

static void test_unknown(void **state)
{
    (void)state;
    assert_string_equal(weft_status_str((weft_status_t)-999), "unknown status");
    assert_string_equal(weft_status_str((weft_status_t)42), "unknown status");
}

static void test_version(void **state)
{
    (void)state;
    int ma = -1, mi = -1, pa = -1;
    const char *v = weft_version(&ma, &mi, &pa);
    char buf[32];
    snprintf(buf, sizeof(buf), "%d.%d.%d", ma, mi, pa);
    assert_string_equal(v, buf);
    assert_int_equal(ma * 10000 + mi * 100 + pa, WEFT_VERSION_CODE);
    assert_non_null(weft_version(NULL, NULL, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_unique),
        cmocka_unit_test(test_errors_negative_and_grouped),
        cmocka_unit_test(test_unknown),
        cmocka_unit_test(test_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
