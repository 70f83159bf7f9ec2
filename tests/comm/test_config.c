#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm/ctx/config.h"
#include "comm/fault.h"

/* Captures log lines so tests can check what was warned about. */
typedef struct captured {
    char text[4096];
    int lines;
} captured_t;

static void capture(weft_log_level_t level, int rank, const char *msg, void *arg)
{
    captured_t *c = arg;
    (void)level;
    (void)rank;
    strncat(c->text, msg, sizeof(c->text) - strlen(c->text) - 2);
    strcat(c->text, "\n");
    c->lines++;
}

static weft_logger_t make_logger(captured_t *c)
{
    memset(c, 0, sizeof(*c));
    weft_logger_t lg = {.level = WEFT_LOG_TRACE, .rank = 0, .fn = capture, .arg = c};
    return lg;
}

static void clear_env(void)
{
    const char *vars[] = {"WEFT_LOG_LEVEL", "WEFT_TIMEOUT_MS", "WEFT_COLL_SMALL_MAX",
                          "WEFT_TRANSPORT", "WEFT_YIELD_SPINS", "WEFT_BOGUS_SETTING",
                          "WEFT_DEBUG_FAULTS", "WEFT_BOOT_ADDR"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        unsetenv(vars[i]);
    }
}

static int setup(void **state)
{
    (void)state;
    clear_env();
    return 0;
}

/* Defaults parse to the documented values in the table. */
static void test_defaults(void **state)
{
    (void)state;
    captured_t c;
    weft_logger_t lg = make_logger(&c);
    weft_config_t cfg;
    assert_int_equal(weft__config_load(&cfg, &lg), WEFT_OK);
    assert_int_equal(cfg.log_level, WEFT_LOG_WARN);
    assert_int_equal(cfg.timeout_ms, 300000);
    assert_int_equal(cfg.coll_small_max, 16 * 1024);
    assert_string_equal(cfg.transport, "auto");
    assert_int_equal(c.lines, 0);
}

static void test_env_overrides_and_suffixes(void **state)
{
    (void)state;
    captured_t c;
    weft_logger_t lg = make_logger(&c);
    weft_config_t cfg;
    setenv("WEFT_LOG_LEVEL", "DEBUG", 1);
    setenv("WEFT_TIMEOUT_MS", "1500", 1);
    setenv("WEFT_COLL_SMALL_MAX", "3M", 1);
    setenv("WEFT_TRANSPORT", "ucx", 1);
    setenv("WEFT_BOOT_ADDR", "fd00::7", 1);
    assert_int_equal(weft__config_load(&cfg, &lg), WEFT_OK);
    assert_string_equal(cfg.boot_addr, "fd00::7");
    assert_int_equal(cfg.log_level, WEFT_LOG_DEBUG);
    assert_int_equal(cfg.timeout_ms, 1500);
    assert_int_equal(cfg.coll_small_max, 3u << 20);
    assert_string_equal(cfg.transport, "ucx");
}

/* A bad value is an error naming the variable; the output is left untouched. */
static void test_bad_values(void **state)
{
    (void)state;
    const char *cases[][2] = {
        {"WEFT_TIMEOUT_MS", "-5"},  {"WEFT_TIMEOUT_MS", "12x"},
        {"WEFT_TIMEOUT_MS", ""},    {"WEFT_LOG_LEVEL", "loud"},
        {"WEFT_TRANSPORT", "tcp"},  {"WEFT_COLL_SMALL_MAX", "99999999999999999999"},
        {"WEFT_YIELD_SPINS", "5G"}, {"WEFT_COLL_SMALL_MAX", "17179869184G"},
        {"WEFT_BOOT_ADDR", "node7"}, {"WEFT_BOOT_ADDR", "10.0.0.1:80"},
        {"WEFT_BOOT_ADDR", "1.2.3.4.5"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        captured_t c;
        weft_logger_t lg = make_logger(&c);
        weft_config_t cfg;
        memset(&cfg, 0xab, sizeof(cfg));
        clear_env();
        setenv(cases[i][0], cases[i][1], 1);
        assert_int_equal(weft__config_load(&cfg, &lg), WEFT_ERR_INVALID_ARG);
        assert_non_null(strstr(c.text, cases[i][0]));
        assert_non_null(strstr(weft_last_error(NULL), cases[i][0])); /* not only logged */
        assert_int_equal(((unsigned char *)&cfg)[0], 0xab);
    }
}

/* weft_init refused for a bad setting: the caller has no context, and learns which
 * setting and value from weft_last_error(NULL), as for any other failed weft_init. */
static void test_bad_value_fails_init_with_its_reason(void **state)
{
    (void)state;
    setenv("WEFT_LOG_LEVEL", "error", 1);
    setenv("WEFT_TIMEOUT_MS", "abc", 1);
    weft_ctx_t *ctx = NULL;
    assert_int_equal(weft_init(NULL, &ctx), WEFT_ERR_INVALID_ARG);
    assert_null(ctx);
    assert_non_null(strstr(weft_last_error(NULL), "WEFT_TIMEOUT_MS='abc' is not valid"));
}

static void test_unknown_variable_warned(void **state)
{
    (void)state;
    captured_t c;
    weft_logger_t lg = make_logger(&c);
    weft_config_t cfg;
    setenv("WEFT_BOGUS_SETTING", "1", 1);
    setenv("WEFT_RANK", "0", 1);                /* launcher variable: known, not warned */
    setenv("WEFT_LIBRARY", "/x/libweft.so", 1); /* the Python binding's: not warned */
    assert_int_equal(weft__config_load(&cfg, &lg), WEFT_OK);
    assert_int_equal(c.lines, 1);
    assert_non_null(strstr(c.text, "WEFT_BOGUS_SETTING"));
    unsetenv("WEFT_RANK");
    unsetenv("WEFT_LIBRARY");
}

/* The WEFT_DEBUG_FAULTS syntax (comm/fault.h): names, values, and what it refuses. */
static void test_debug_faults_syntax(void **state)
{
    (void)state;
    weft__faults_t f;
    memset(&f, 0, sizeof(f));
    assert_int_equal(weft__faults_parse("", &f), WEFT_OK);
    assert_false(f.cma_refuse);
    assert_int_equal(weft__faults_parse("cma_refuse,ring_refuse=2,snap_share_fail", &f), WEFT_OK);
    assert_true(f.cma_refuse);
    assert_int_equal(f.ring_refuse, 2);
    assert_true(f.snap_share_fail);
    assert_int_equal(weft__faults_parse("ring_refuse,cma_refuse=0", &f), WEFT_OK);
    assert_int_equal(f.ring_refuse, 1); /* bare: 1 */
    assert_false(f.cma_refuse);
    const char *bad[] = {"bogus", "ring_refuse=3", "cma_refuse=", "cma_refuse,,ring_refuse",
                         "cma_refuse,", ",cma_refuse", "ring_refuse=12", "cma_refuse=2",
                         "CMA_REFUSE", "cma_refuse ", "snap_share_fail,nope"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(weft__faults_parse(bad[i], &f), WEFT_ERR_INVALID_ARG);
        assert_int_equal(f.ring_refuse, 1); /* unchanged */
        assert_false(f.cma_refuse);
        assert_true(f.snap_share_fail);
    }
}

/* WEFT_DEBUG_FAULTS at weft_init: without NDEBUG it switches the context's faults on and
 * a bad value fails the load like any setting; with NDEBUG any value is ignored, with one
 * warning. */
static void test_debug_faults_setting(void **state)
{
    (void)state;
    captured_t c;
    weft_logger_t lg = make_logger(&c);
    weft_config_t cfg;
    setenv("WEFT_DEBUG_FAULTS", "ring_refuse=3", 1);
#ifdef NDEBUG
    assert_int_equal(weft__config_load(&cfg, &lg), WEFT_OK);
#else
    assert_int_equal(weft__config_load(&cfg, &lg), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "WEFT_DEBUG_FAULTS='ring_refuse=3'"));
#endif
    setenv("WEFT_DEBUG_FAULTS", "cma_refuse,ring_refuse=2", 1);
    memset(&c, 0, sizeof(c));
    weft_init_params_t ip = {.size = sizeof(ip), .log_fn = capture, .log_arg = &c};
    weft_ctx_t *ctx = NULL;
    assert_int_equal(weft_init(&ip, &ctx), WEFT_OK);
    weft__faults_t *f = weft__ctx_faults(ctx);
#ifdef NDEBUG
    assert_false(f->cma_refuse);
    assert_int_equal(f->ring_refuse, 0);
    assert_int_equal(c.lines, 1);
    assert_non_null(strstr(c.text, "WEFT_DEBUG_FAULTS=cma_refuse,ring_refuse=2 ignored"));
#else
    assert_true(f->cma_refuse);
    assert_int_equal(f->ring_refuse, 2);
    assert_false(f->snap_share_fail);
    assert_null(strstr(c.text, "ignored"));
#endif
    assert_null(f->recv_hook);
    assert_int_equal(weft_finalize(ctx), WEFT_OK);
    unsetenv("WEFT_DEBUG_FAULTS");
}

/* The public listing covers the whole table, each entry documented, and ends with NULL. */
static void test_listing(void **state)
{
    (void)state;
    size_t n = 0;
    const char *value;
    setenv("WEFT_TIMEOUT_MS", "777", 1);
    int saw_timeout = 0;
    for (const weft_config_entry_t *e; (e = weft_config_entry(NULL, n, &value)) != NULL; n++) {
        assert_int_equal(strncmp(e->name, "WEFT_", 5), 0);
        assert_true(strlen(e->doc) > 10);
        assert_non_null(e->deflt);
        if (strcmp(e->name, "WEFT_TIMEOUT_MS") == 0) {
            assert_string_equal(value, "777");
            saw_timeout = 1;
        }
    }
    assert_true(n >= 8);
    assert_true(saw_timeout);
    weft_config_t cfg;
    captured_t c;
    weft_logger_t lg = make_logger(&c);
    assert_int_equal(weft__config_load(&cfg, &lg), WEFT_OK);
    char buf[64];
    for (size_t i = 0; i < n; i++) {
        assert_non_null(weft__config_value(&cfg, i, buf, sizeof(buf)));
    }
    assert_null(weft__config_value(&cfg, n, buf, sizeof(buf)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, setup),
        cmocka_unit_test_setup(test_env_overrides_and_suffixes, setup),
        cmocka_unit_test_setup(test_bad_values, setup),
        cmocka_unit_test_setup(test_bad_value_fails_init_with_its_reason, setup),
        cmocka_unit_test_setup(test_unknown_variable_warned, setup),
        cmocka_unit_test_setup(test_listing, setup),
        cmocka_unit_test_setup(test_debug_faults_syntax, setup),
        cmocka_unit_test_setup(test_debug_faults_setting, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
