/*
 * weftrun_stop_parse (launcher/weftrun_stopmsg.c): the value of weftrun/stop comes from
 * another node through the store. Any whitespace may separate its fields (a tab once made
 * every other node's weftrun dereference NULL), a bad number is refused, and the reason
 * reaches the log with its control characters masked and cut to the buffer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "launcher/weftrun_stopmsg.h"

static void test_fields(void **state)
{
    (void)state;
    int code = -1, node = -1;
    char why[64];
    assert_true(weftrun_stop_parse("3 1 rank 2 failed", &code, &node, why, sizeof(why)));
    assert_int_equal(code, 3);
    assert_int_equal(node, 1);
    assert_string_equal(why, "rank 2 failed");
    /* Tabs, and more than one blank, between the fields. */
    assert_true(weftrun_stop_parse("1\t0\tkilled", &code, &node, why, sizeof(why)));
    assert_int_equal(code, 1);
    assert_int_equal(node, 0);
    assert_string_equal(why, "killed");
    assert_true(weftrun_stop_parse(" 2 \t 7  \t why ", &code, &node, why, sizeof(why)));
    assert_int_equal(node, 7);
    assert_string_equal(why, "why ");
    /* No reason, or only blanks after the node. */
    assert_true(weftrun_stop_parse("1\t0", &code, &node, why, sizeof(why)));
    assert_string_equal(why, "no reason given");
    assert_true(weftrun_stop_parse("1 0 \t", &code, &node, why, sizeof(why)));
    assert_string_equal(why, "no reason given");
}

static void test_refused(void **state)
{
    (void)state;
    int code = -1, node = -1;
    char why[64] = "untouched";
    const char *bad[] = {"", "1", "x 0 why", "1 x why", "256 0 why", "-1 0 why", "1 -2 why",
                         "1 99999999999 why", "1 0x1 why", "\t\t"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_false(weftrun_stop_parse(bad[i], &code, &node, why, sizeof(why)));
    }
    assert_false(weftrun_stop_parse(NULL, &code, &node, why, sizeof(why)));
    assert_false(weftrun_stop_parse("1 0 why", &code, &node, why, 0));
    assert_int_equal(code, -1); /* nothing written */
    assert_int_equal(node, -1);
    assert_string_equal(why, "untouched");
}

static void test_reason_masked(void **state)
{
    (void)state;
    int code, node;
    char why[16];
    assert_true(weftrun_stop_parse("1 0 a\033[2Jb\nc\xff", &code, &node, why, sizeof(why)));
    assert_string_equal(why, "a?[2Jb?c?");
    char longer[300];
    memset(longer, 'r', sizeof(longer));
    memcpy(longer, "1 0 ", 4);
    longer[sizeof(longer) - 1] = '\0';
    assert_true(weftrun_stop_parse(longer, &code, &node, why, sizeof(why)));
    assert_int_equal(strlen(why), sizeof(why) - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_reason_masked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
