/*
 * A job's names in /dev/shm (comm/shm_job.c): what they depend on, and that they show
 * nothing of the token.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "comm/shm_job.h"

#define TOKEN "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void job(weft_shm_job_t *j, const char *store)
{
    assert_int_equal(weft__shm_job_init(j, store, TOKEN, "weft"), WEFT_OK);
}

static void test_names(void **state)
{
    (void)state;
    weft_shm_job_t a, b, c, d;
    char id[WEFT_SHM_ID_HEX + 1];
    job(&a, "127.0.0.1:5000");
    job(&b, "127.0.0.1:5001");
    assert_int_equal(weft__shm_job_init(&c, "127.0.0.1:5000", TOKEN, "other"), WEFT_OK);
    assert_int_equal(weft__shm_job_init(&d, "127.0.0.1:5000", "x" TOKEN, "weft"), WEFT_OK);
    assert_int_equal(weft__shm_job_id("127.0.0.1:5000", TOKEN, id), WEFT_OK);
    assert_string_equal(id, a.job); /* <job> alone comes out the same */
    assert_int_equal(strlen(a.job), WEFT_SHM_ID_HEX);
    assert_int_equal(strspn(a.job, "0123456789abcdef"), WEFT_SHM_ID_HEX);
    assert_string_not_equal(a.job, b.job); /* another store */
    assert_string_not_equal(a.job, d.job); /* another token */
    assert_string_equal(a.job, c.job);     /* the namespace is not part of <job> ... */
    assert_string_not_equal(a.ns, c.ns);   /* ... but of <ns> */
    assert_int_equal(weft__shm_job_init(&d, "", "", "weft"), WEFT_OK); /* no token: fine */
    char want[96];
    snprintf(want, sizeof(want), "/weft-%s-%s-7-3-data", a.job, a.ns);
    char name[96];
    weft__shm_seg_name(&a, 7, 3, "data", name, sizeof(name));
    assert_string_equal(name, want);
    assert_null(strstr(name, "0123456789abcdef0123")); /* nothing of the token shows */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
