/*
 * Scans of the rendezvous store end to end (an in-process server, real clients): every key
 * under a prefix in byte order and only those, pages cut by the byte budget and resumed
 * after their last key, a scan that waits for a count of keys (released by the set that
 * makes it, a lease that fires among them, or answered WEFT_ERR_TIMEOUT), one such wait
 * per connection, scans given up by their caller, and the count of requests a connection
 * sent.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/store/proto.h"
#include "server_fixture.h"
#include "store_raw.h"

static weft_store_client_t *client(const fixture_t *f)
{
    weft_store_client_t *c = NULL;
    assert_int_equal(weft__store_connect(f->hostport, f->token, 10000, NULL, &c), WEFT_OK);
    return c;
}

/* Every key under @p prefix, page after page of at most @p max_bytes, joined as
 * "key=value;" in the order they came; the number of pages in *pages. */
static void scan_all(weft_store_client_t *c, const char *prefix, uint32_t max_bytes, char *out,
                     size_t cap, int *pages)
{
    char after[WEFT_STORE_MAX_KEY + 1] = "";
    size_t used = 0;
    *pages = 0;
    out[0] = '\0';
    for (;;) {
        weft_store_page_t page;
        weft_store_scan_args_t a = {.prefix = prefix, .after = after, .max_bytes = max_bytes};
        assert_int_equal(weft__store_scan(c, &a, &page), WEFT_OK);
        (*pages)++;
        for (size_t i = 0; i < page.n; i++) {
            int n = snprintf(out + used, cap - used, "%s=%s;", page.kv[i].key,
                             (const char *)page.kv[i].val);
            assert_true(n > 0 && (size_t)n < cap - used);
            used += (size_t)n;
            assert_int_equal(strlen(page.kv[i].val), page.kv[i].len);
        }
        bool more = page.more;
        if (page.n > 0) {
            snprintf(after, sizeof(after), "%s", page.kv[page.n - 1].key);
        }
        weft__store_page_free(&page);
        if (!more) {
            return;
        }
    }
}

static void test_scan_order_and_prefix(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    const char *keys[] = {"a/2", "a/10", "a/1", "a/b/x", "ab", "a", "b/1"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        assert_int_equal(weft__store_set(c, keys[i], keys[i], strlen(keys[i])), WEFT_OK);
    }
    char got[512];
    int pages;
    /* Byte order, not numeric: a/10 before a/2; a key shorter than the prefix is not under it. */
    scan_all(c, "a/", 0, got, sizeof(got), &pages);
    assert_string_equal(got, "a/1=a/1;a/10=a/10;a/2=a/2;a/b/x=a/b/x;");
    assert_int_equal(pages, 1);
    /* A prefix that ends inside a key's part, and the empty prefix: every key. */
    scan_all(c, "a", 0, got, sizeof(got), &pages);
    assert_string_equal(got, "a=a;a/1=a/1;a/10=a/10;a/2=a/2;a/b/x=a/b/x;ab=ab;");
    scan_all(c, "", 0, got, sizeof(got), &pages);
    assert_string_equal(got, "a=a;a/1=a/1;a/10=a/10;a/2=a/2;a/b/x=a/b/x;ab=ab;b/1=b/1;");
    /* Nothing under it: one empty page. */
    scan_all(c, "zz", 0, got, sizeof(got), &pages);
    assert_string_equal(got, "");
    assert_int_equal(pages, 1);
    /* Deleted keys are gone, changed values are read as they are now. */
    assert_int_equal(weft__store_delete(c, "a/10"), WEFT_OK);
    assert_int_equal(weft__store_set(c, "a/1", "new", 3), WEFT_OK);
    scan_all(c, "a/", 0, got, sizeof(got), &pages);
    assert_string_equal(got, "a/1=new;a/2=a/2;a/b/x=a/b/x;");
    /* Resuming after a key that is not there: the keys after it. */
    weft_store_page_t page;
    weft_store_scan_args_t a = {.prefix = "a/", .after = "a/11"};
    assert_int_equal(weft__store_scan(c, &a, &page), WEFT_OK);
    assert_int_equal(page.n, 2);
    assert_string_equal(page.kv[0].key, "a/2");
    assert_false(page.more);
    weft__store_page_free(&page);
    weft__store_page_free(&page); /* a freed page may be freed again */
    weft__store_close(c);
}

/* The byte budget cuts pages between entries, each holds one at least, and resuming after
 * the last key of each lists every key once. */
static void test_scan_pages(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    char want[4096] = "", key[32], val[64];
    size_t used = 0;
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "p/%03d", i);
        snprintf(val, sizeof(val), "value-%d-%.*s", i, i,
                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
        assert_int_equal(weft__store_set(c, key, val, strlen(val)), WEFT_OK);
        used += (size_t)snprintf(want + used, sizeof(want) - used, "%s=%s;", key, val);
    }
    char got[4096];
    int pages;
    scan_all(c, "p/", 0, got, sizeof(got), &pages);
    assert_string_equal(got, want);
    assert_int_equal(pages, 1);
    scan_all(c, "p/", 200, got, sizeof(got), &pages);
    assert_string_equal(got, want);
    assert_true(pages > 5);
    scan_all(c, "p/", 1, got, sizeof(got), &pages); /* below one entry: one per page */
    assert_string_equal(got, want);
    assert_int_equal(pages, 40);
    weft_store_page_t page;
    weft_store_scan_args_t a = {.prefix = "p/", .max_bytes = 6 + 5 + 8};
    assert_int_equal(weft__store_scan(c, &a, &page), WEFT_OK);
    assert_int_equal(page.n, 1); /* "p/000" and "value-0-": 19 bytes exactly */
    assert_true(page.more);
    weft__store_page_free(&page);
    weft__store_close(c);
}

/* A value as large as the store takes, under the longest key: listed alone in its page
 * when it fits one, refused with WEFT_ERR_NO_MEMORY when it cannot. */
static void test_scan_large_values(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    char key[WEFT_STORE_MAX_KEY + 1];
    size_t vlen = WEFT__STORE_MAX_VALUE;
    char *val = malloc(vlen);
    assert_non_null(val);
    memset(val, 'v', vlen);
    memset(key, 'k', sizeof(key));
    key[0] = 'x';
    key[1] = '/';
    key[WEFT_STORE_MAX_KEY] = '\0';
    assert_int_equal(weft__store_set(c, key, val, vlen), WEFT_OK);
    weft_store_page_t page;
    weft_store_scan_args_t a = {.prefix = "x/"};
    assert_int_equal(weft__store_scan(c, &a, &page), WEFT_ERR_NO_MEMORY);
    assert_true(log_has(WEFT_LOG_WARN, "does not fit a page", ""));
    /* The connection goes on; a value that fits the page's room is listed. */
    size_t fits = WEFT__STORE_MAX_PAGE - WEFT__STORE_PAGE_ENTRY_LEN - WEFT_STORE_MAX_KEY;
    assert_int_equal(weft__store_set(c, key, val, fits), WEFT_OK);
    assert_int_equal(weft__store_set(c, "x/small", "s", 1), WEFT_OK);
    assert_int_equal(weft__store_scan(c, &a, &page), WEFT_OK);
    assert_int_equal(page.n, 1);
    assert_int_equal(page.kv[0].len, fits);
    assert_true(page.more);
    weft__store_page_free(&page);
    a.after = key;
    assert_int_equal(weft__store_scan(c, &a, &page), WEFT_OK);
    assert_int_equal(page.n, 1);
    assert_string_equal(page.kv[0].key, "x/small");
    weft__store_page_free(&page);
    free(val);
    weft__store_close(c);
}

/* A scan that waits for a count: released by the set that makes it (not by a value that
 * changes, nor by a key elsewhere), or answered WEFT_ERR_TIMEOUT; deleted keys uncount. */
static void test_scan_waits(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f), *w = client(f);
    assert_int_equal(weft__store_set(c, "n/0", "0", 1), WEFT_OK);
    weft_store_page_t page;
    weft_store_scan_args_t a = {.prefix = "n/", .min_count = 3, .timeout_ms = 100};
    assert_int_equal(weft__store_scan(w, &a, &page), WEFT_ERR_TIMEOUT);
    a.timeout_ms = 0; /* no wait: at once */
    assert_int_equal(weft__store_scan(w, &a, &page), WEFT_ERR_TIMEOUT);

    weft_store_scan_t *q;
    a.timeout_ms = 20000;
    assert_int_equal(weft__store_scan_start(w, &a, &q), WEFT_OK);
    assert_int_equal(weft__store_scan_wait(q, 50, &page), WEFT_INPROGRESS);
    assert_int_equal(weft__store_set(c, "n/0", "again", 5), WEFT_OK);
    assert_int_equal(weft__store_set(c, "m/1", "elsewhere", 9), WEFT_OK);
    assert_int_equal(weft__store_set(c, "n/1", "1", 1), WEFT_OK);
    assert_int_equal(weft__store_delete(c, "n/1"), WEFT_OK);
    assert_int_equal(weft__store_set(c, "n/2", "2", 1), WEFT_OK);
    assert_int_equal(weft__store_scan_wait(q, 50, &page), WEFT_INPROGRESS);
    assert_int_equal(weft__store_server_set(f->server, "n/3", "3", 1), WEFT_OK);
    assert_int_equal(weft__store_scan_wait(q, 10000, &page), WEFT_OK);
    assert_int_equal(page.n, 3);
    assert_string_equal(page.kv[0].key, "n/0");
    assert_string_equal(page.kv[0].val, "again");
    assert_string_equal(page.kv[2].key, "n/3");
    weft__store_page_free(&page);
    /* Once there, at once. */
    a.timeout_ms = 0;
    assert_int_equal(weft__store_scan(w, &a, &page), WEFT_OK);
    assert_int_equal(page.n, 3);
    weft__store_page_free(&page);
    weft__store_close(w);
    weft__store_close(c);
}

/* Many connections wait for the same count; the one set that makes it releases them all,
 * and each gets every key. */
static void test_scan_many_waiters(void **state)
{
    enum { WAITERS = 40, KEYS = 30 };
    fixture_t *f = *state;
    weft_store_client_t *c = client(f), *w[WAITERS];
    weft_store_scan_t *q[WAITERS];
    weft_store_scan_args_t a = {.prefix = "m/", .min_count = KEYS, .timeout_ms = 30000};
    char key[16];
    for (int i = 0; i < WAITERS; i++) {
        w[i] = client(f);
        assert_int_equal(weft__store_scan_start(w[i], &a, &q[i]), WEFT_OK);
    }
    for (int i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "m/%02d", i);
        assert_int_equal(weft__store_set(c, key, key, strlen(key)), WEFT_OK);
    }
    for (int i = 0; i < WAITERS; i++) {
        weft_store_page_t page;
        assert_int_equal(weft__store_scan_wait(q[i], 10000, &page), WEFT_OK);
        assert_int_equal(page.n, KEYS);
        assert_false(page.more);
        assert_string_equal(page.kv[KEYS - 1].key, "m/29");
        weft__store_page_free(&page);
        weft__store_close(w[i]);
    }
    weft__store_close(c);
}

/* A lease that fires (its holder's connection closed) sets its key like any set: a scan
 * waiting for it is answered, with the notice. */
static void test_scan_released_by_lease(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *holder = client(f), *w = client(f);
    assert_int_equal(weft__store_lease(holder, "dead/1", "gone", 4, 60000), WEFT_OK);
    weft_store_scan_t *q;
    weft_store_page_t page;
    weft_store_scan_args_t a = {.prefix = "dead/", .min_count = 1, .timeout_ms = 30000};
    assert_int_equal(weft__store_scan_start(w, &a, &q), WEFT_OK);
    assert_int_equal(weft__store_scan_wait(q, 20, &page), WEFT_INPROGRESS);
    weft__store_close(holder);
    assert_int_equal(weft__store_scan_wait(q, 10000, &page), WEFT_OK);
    assert_int_equal(page.n, 1);
    assert_string_equal(page.kv[0].key, "dead/1");
    assert_string_equal(page.kv[0].val, "gone");
    weft__store_page_free(&page);
    weft__store_close(w);
}

/* One scan waits per connection: a second that waits answers the first WEFT_ERR_TIMEOUT at
 * once; a scan given up by its caller leaves the connection in step, its late answer
 * dropped. */
static void test_scan_replaced_and_cancelled(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f), *w = client(f);
    weft_store_scan_t *first, *second, *given_up;
    weft_store_page_t page;
    weft_store_scan_args_t a = {.prefix = "r/", .min_count = 2, .timeout_ms = 30000};
    assert_int_equal(weft__store_scan_start(w, &a, &first), WEFT_OK);
    a.min_count = 1;
    assert_int_equal(weft__store_scan_start(w, &a, &second), WEFT_OK);
    assert_int_equal(weft__store_scan_wait(first, 10000, &page), WEFT_ERR_TIMEOUT);
    assert_int_equal(weft__store_scan_wait(second, 20, &page), WEFT_INPROGRESS);
    assert_int_equal(weft__store_set(c, "r/1", "x", 1), WEFT_OK);
    assert_int_equal(weft__store_scan_wait(second, 10000, &page), WEFT_OK);
    assert_int_equal(page.n, 1);
    weft__store_page_free(&page);

    a.min_count = 5;
    assert_int_equal(weft__store_scan_start(w, &a, &given_up), WEFT_OK);
    assert_int_equal(weft__store_scan_wait(given_up, 20, &page), WEFT_INPROGRESS);
    weft__store_scan_cancel(given_up);
    weft__store_scan_cancel(NULL);
    for (int i = 2; i <= 5; i++) {
        char key[8];
        snprintf(key, sizeof(key), "r/%d", i);
        assert_int_equal(weft__store_set(c, key, "y", 1), WEFT_OK);
    }
    /* Its answer came meanwhile, for nobody: later calls are answered in step. */
    void *v;
    size_t len;
    assert_int_equal(weft__store_get(w, "r/5", 10000, &v, &len), WEFT_OK);
    assert_string_equal(v, "y");
    free(v);
    a.min_count = 0;
    assert_int_equal(weft__store_scan(w, &a, &page), WEFT_OK);
    assert_int_equal(page.n, 5);
    weft__store_page_free(&page);
    weft__store_close(w);
    weft__store_close(c);
}

static void test_scan_bad_arguments(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    char longer[WEFT_STORE_MAX_KEY + 2];
    memset(longer, 'k', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    weft_store_page_t page;
    weft_store_scan_t *q = (weft_store_scan_t *)0x1;
    weft_store_scan_args_t a = {.prefix = longer};
    assert_int_equal(weft__store_scan(c, &a, &page), WEFT_ERR_INVALID_ARG);
    a = (weft_store_scan_args_t){.prefix = "p", .after = longer};
    assert_int_equal(weft__store_scan(c, &a, &page), WEFT_ERR_INVALID_ARG);
    a = (weft_store_scan_args_t){.prefix = NULL};
    assert_int_equal(weft__store_scan_start(c, &a, &q), WEFT_ERR_INVALID_ARG);
    a = (weft_store_scan_args_t){.prefix = "p", .timeout_ms = -1};
    assert_int_equal(weft__store_scan_start(c, &a, &q), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_scan_start(NULL, &a, &q), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__store_scan_start(c, NULL, &q), WEFT_ERR_INVALID_ARG);
    assert_ptr_equal(q, (weft_store_scan_t *)0x1);
    assert_int_equal(weft__store_scan(c, &a, NULL), WEFT_ERR_INVALID_ARG);
    /* None of them was sent. */
    assert_int_equal(weft__store_requests(c), 0);
    assert_int_equal(weft__store_requests(NULL), 0);
    weft__store_close(c);
}

/* The counter: one per request sent, whatever its answer; a page is a request. */
static void test_requests_counted(void **state)
{
    fixture_t *f = *state;
    weft_store_client_t *c = client(f);
    void *v;
    size_t len;
    int pages;
    char got[256];
    assert_int_equal(weft__store_requests(c), 0);
    assert_int_equal(weft__store_set(c, "q/1", "a", 1), WEFT_OK);
    assert_int_equal(weft__store_set(c, "q/2", "b", 1), WEFT_OK);
    assert_int_equal(weft__store_get(c, "q/none", 0, &v, &len), WEFT_ERR_TIMEOUT);
    assert_int_equal(weft__store_add(c, "q/n", 1, NULL), WEFT_OK);
    assert_int_equal(weft__store_requests(c), 4);
    scan_all(c, "q/", 1, got, sizeof(got), &pages);
    assert_int_equal(pages, 3);
    assert_int_equal(weft__store_requests(c), 7);
    assert_int_equal(weft__store_watch(c, "q/"), WEFT_OK);
    char *k;
    assert_int_equal(weft__store_next_event(c, 10000, &k, &v, &len), WEFT_OK);
    free(k);
    free(v);
    assert_int_equal(weft__store_requests(c), 8);
    weft__store_close(c);
}

/* Malformed SCANs close the connection that sent them; the store serves the others. */
static void test_scan_malformed(void **state)
{
    fixture_t *f = *state;
    uint8_t args[WEFT__STORE_SCAN_ARGS_LEN + WEFT_STORE_MAX_KEY + 2] = {0};
    const size_t bad_rest[] = {0, 11, WEFT__STORE_SCAN_ARGS_LEN + WEFT_STORE_MAX_KEY + 1};
    for (size_t i = 0; i < sizeof(bad_rest) / sizeof(bad_rest[0]) + 1; i++) {
        raw_session_t r = raw_auth_as(f->port, f->token, WEFT__STORE_ROLE_MEMBER, 1);
        memset(args + WEFT__STORE_SCAN_ARGS_LEN, 'a', sizeof(args) - WEFT__STORE_SCAN_ARGS_LEN);
        size_t rlen = WEFT__STORE_SCAN_ARGS_LEN + 3;
        if (i < sizeof(bad_rest) / sizeof(bad_rest[0])) {
            rlen = bad_rest[i];
        } else {
            args[WEFT__STORE_SCAN_ARGS_LEN + 1] = '\0'; /* a NUL in the resume key */
        }
        raw_request(&r, WEFT__STORE_SCAN, "p/", args, rlen);
        raw_expect_closed(r.fd);
    }
    /* A well-formed one by hand, as a member: a read, answered. */
    raw_session_t r = raw_auth_as(f->port, f->token, WEFT__STORE_ROLE_MEMBER, 1);
    memset(args, 0, sizeof(args));
    raw_request(&r, WEFT__STORE_SCAN, "weftrun/", args, WEFT__STORE_SCAN_ARGS_LEN);
    assert_int_equal(raw_response(&r), WEFT_OK);
    close(r.fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_scan_order_and_prefix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_large_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_many_waiters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_released_by_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_replaced_and_cancelled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requests_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_malformed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
