/*
 * util/log_escape.h: what members write (keys, reasons) reaches the log as one line of
 * printable ASCII, escapes and all, cut with a mark when too long.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "util/log_escape.h"

static void test_plain_and_escaped(void **state)
{
    (void)state;
    char out[128];
    assert_string_equal(weft__log_escape("exit 3", 6, out, sizeof(out)), "exit 3");
    /* An ANSI sequence, a line end, a NUL inside, a backslash and a byte above 0x7e. */
    static const char evil[] = "a\x1b[31mb\nc\0d\\e\xff";
    assert_string_equal(weft__log_escape(evil, sizeof(evil) - 1, out, sizeof(out)),
                        "a\\x1b[31mb\\x0ac\\x00d\\\\e\\xff");
    assert_string_equal(weft__log_escape("", 0, out, sizeof(out)), "");
}

/* Every output length: never past the buffer, always terminated, a cut always marked
 * when there is room for the mark, and never a half escape. */
static void test_cut(void **state)
{
    (void)state;
    static const char in[] = "\x01xyz\x02\x03";
    const char *full = "\\x01xyz\\x02\\x03";
    for (size_t len = 1; len <= strlen(full) + 1; len++) {
        char out[64];
        memset(out, '#', sizeof(out));
        weft__log_escape(in, sizeof(in) - 1, out, len);
        size_t n = strlen(out);
        assert_true(n < len);
        assert_int_equal(out[len], '#'); /* nothing written past the buffer */
        if (len == strlen(full) + 1) {
            assert_string_equal(out, full);
        } else if (len >= 4) {
            assert_true(n >= 3 && strcmp(out + n - 3, "...") == 0);
            assert_memory_equal(out, full, n - 3); /* a prefix of whole escapes */
            /* Where an escape of the full text ends: never within one. */
            size_t cut = n - 3;
            assert_true(cut == 0 || cut == 4 || cut == 5 || cut == 6 || cut == 7 || cut == 11);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_and_escaped),
        cmocka_unit_test(test_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
