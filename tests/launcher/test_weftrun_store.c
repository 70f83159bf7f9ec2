/*
 * weftrun and its store, tested with the store client: the ranks (weftrun --share-token)
 * reach the store at WEFT_STORE with WEFT_JOB_TOKEN (and are refused with another token), an
 * abnormal exit is published as weft/failed/<rank> before the others are told to stop, and
 * --store-only serves a store for ranks started by someone else. Under --elastic
 * --replace the death of a replacement is published under its own member id.
 *
 * The ranks are this test program itself, started by weftrun with "--rank MODE ...":
 * each writes a verdict ("ok" or what went wrong) to $WT_DIR/verdict.<rank>.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/store/store.h"
#include "util/secret_file.h"
#include "launcher/harness.h"

#define SH(...) ((const char *const[]){__VA_ARGS__, NULL})
#define RANK_WAIT_MS 8000

static char self_exe[4096];

/* ---- the rank side ---- */

static int my_rank;
static volatile sig_atomic_t got_term;

static void on_term(int sig)
{
    (void)sig;
    got_term = 1;
}

/* A refusal is what some checks expect: its error message is not news. */
static void discard_log(weft_log_level_t level, int rank, const char *msg, void *arg)
{
    (void)level;
    (void)rank;
    (void)msg;
    (void)arg;
}

static int verdict(const char *fmt, ...)
{
    char path[512], text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), "%s/verdict.%d", getenv("WT_DIR"), my_rank);
    FILE *f = fopen(path, "w");
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
    return strcmp(text, "ok") == 0 ? 0 : 20;
}

static weft_status_t connect_env(weft_store_client_t **c)
{
    return weft__store_connect(getenv("WEFT_STORE"), getenv("WEFT_JOB_TOKEN"), RANK_WAIT_MS, NULL,
                               c);
}

/* Check the value of @p key (waiting for it at most @p wait_ms) against @p want. */
static const char *expect_key(weft_store_client_t *c, const char *key, int wait_ms,
                              const char *want)
{
    void *val;
    size_t len;
    weft_status_t st = weft__store_get(c, key, wait_ms, &val, &len);
    if (st != WEFT_OK) {
        return weft_status_str(st);
    }
    bool same = len == strlen(want) && memcmp(val, want, len) == 0;
    free(val);
    return same ? NULL : "wrong value";
}

/* Every rank publishes its rank, reads everyone's, and is refused with a wrong token. */
static int rank_check_store(int size)
{
    weft_store_client_t *c;
    if (connect_env(&c) != WEFT_OK) {
        return verdict("cannot connect to %s", getenv("WEFT_STORE"));
    }
    char key[64], val[16];
    snprintf(key, sizeof(key), "test/rank/%d", my_rank);
    snprintf(val, sizeof(val), "%d", my_rank);
    if (weft__store_set(c, key, val, strlen(val)) != WEFT_OK) {
        return verdict("set failed");
    }
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof(key), "test/rank/%d", r);
        snprintf(val, sizeof(val), "%d", r);
        const char *why = expect_key(c, key, RANK_WAIT_MS, val);
        if (why != NULL) {
            return verdict("%s: %s", key, why);
        }
    }
    weft__store_close(c);
    char wrong[65];
    snprintf(wrong, sizeof(wrong), "%s", getenv("WEFT_JOB_TOKEN"));
    wrong[0] = wrong[0] == '0' ? '1' : '0';
    weft_logger_t quiet = {.level = WEFT_LOG_ERROR, .rank = my_rank, .fn = discard_log};
    weft_status_t st = weft__store_connect(getenv("WEFT_STORE"), wrong, 2000, &quiet, &c);
    if (st == WEFT_OK) {
        weft__store_close(c);
        return verdict("a wrong token was accepted");
    }
    if (st != WEFT_ERR_AUTH) {
        return verdict("wrong token: %s, not WEFT_ERR_AUTH", weft_status_str(st));
    }
    return verdict("ok");
}

/* Wait for the failure notice of @p failed among the watch events on weft/failed/. */
static const char *watch_for_failure(int failed, const char *want)
{
    weft_store_client_t *c;
    if (connect_env(&c) != WEFT_OK || weft__store_watch(c, "weft/failed/") != WEFT_OK) {
        return "cannot watch";
    }
    char want_key[64];
    snprintf(want_key, sizeof(want_key), "weft/failed/%d", failed);
    const char *why = "no event";
    char *key;
    void *val;
    size_t len;
    if (weft__store_next_event(c, RANK_WAIT_MS, &key, &val, &len) == WEFT_OK) {
        why = strcmp(key, want_key) != 0                           ? "wrong key"
              : len != strlen(want) || memcmp(val, want, len) != 0 ? "wrong value"
                                                                   : NULL;
        free(key);
        free(val);
    }
    weft__store_close(c);
    return why;
}

/*
 * "failwatch F HOW": rank F fails at once (HOW "exit": exit 3, "kill": SIGKILL); the
 * others watch weft/failed/ (which also delivers keys set before the watch began) and
 * must see weft/failed/F with the right text.
 */
static int rank_failwatch(int failed, const char *how)
{
    if (my_rank == failed) {
        if (strcmp(how, "kill") == 0) {
            raise(SIGKILL);
        }
        exit(3);
    }
    const char *why = watch_for_failure(failed, strcmp(how, "kill") == 0 ? "signal 9" : "exit 3");
    return why == NULL ? verdict("ok") : verdict("%s", why);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/*
 * "termsees F": the others wait for SIGTERM; when it comes, weft/failed/F must already be
 * in the store (weftrun publishes first, then stops the job).
 */
static int rank_term_sees_key(int failed, int size)
{
    char path[512];
    if (my_rank == failed) {
        for (int r = 0; r < size; r++) {
            snprintf(path, sizeof(path), "%s/ready.%d", getenv("WT_DIR"), r);
            for (int i = 0; r != failed && access(path, F_OK) != 0 && i < RANK_WAIT_MS; i++) {
                sleep_ms(1);
            }
        }
        exit(3);
    }
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    snprintf(path, sizeof(path), "%s/ready.%d", getenv("WT_DIR"), my_rank);
    FILE *f = fopen(path, "w");
    if (f != NULL) {
        fclose(f);
    }
    for (int i = 0; !got_term && i < RANK_WAIT_MS; i++) {
        sleep_ms(1);
    }
    if (!got_term) {
        return verdict("no SIGTERM");
    }
    weft_store_client_t *c;
    if (connect_env(&c) != WEFT_OK) {
        return verdict("cannot connect after SIGTERM");
    }
    char key[64];
    snprintf(key, sizeof(key), "weft/failed/%d", failed);
    const char *why = expect_key(c, key, 0, "exit 3");
    weft__store_close(c);
    return why == NULL ? verdict("ok") : verdict("after SIGTERM, %s: %s", key, why);
}

/*
 * "chain": under --keep-going rank 1 exits 5; rank 2 waits for its notice, then exits 7;
 * rank 0 waits for rank 2's notice and exits 0. weftrun must report the first failure.
 */
static int rank_chain(void)
{
    if (my_rank == 1) {
        exit(5);
    }
    weft_store_client_t *c;
    if (connect_env(&c) != WEFT_OK) {
        return verdict("cannot connect");
    }
    const char *why = my_rank == 2 ? expect_key(c, "weft/failed/1", RANK_WAIT_MS, "exit 5")
                                   : expect_key(c, "weft/failed/2", RANK_WAIT_MS, "exit 7");
    weft__store_close(c);
    if (why != NULL) {
        return verdict("%s", why);
    }
    verdict("ok");
    return my_rank == 2 ? 7 : 0;
}

/*
 * Read events on weft/failed/ until each of the @p n keys has arrived with its value in
 * @p want. Keys set before the watch began come in no particular order.
 */
static const char *wait_failures(weft_store_client_t *c, const char *const *keys,
                                 const char *const *want, int n)
{
    bool seen[8] = {false};
    for (int left = n; left > 0;) {
        char *k;
        void *val;
        size_t len;
        if (weft__store_next_event(c, RANK_WAIT_MS, &k, &val, &len) != WEFT_OK) {
            return "a notice did not come";
        }
        const char *why = NULL;
        for (int i = 0; i < n; i++) {
            if (strcmp(k, keys[i]) == 0 && !seen[i]) {
                seen[i] = true;
                left--;
                why =
                    len == strlen(want[i]) && memcmp(val, want[i], len) == 0 ? NULL : "wrong value";
            }
        }
        free(k);
        free(val);
        if (why != NULL) {
            return why;
        }
    }
    return NULL;
}

/*
 * "replace", under --elastic --replace --max-restarts 1 with 2 ranks: rank 1 exits 3; its
 * replacement (member 2, WEFT_JOIN=1) is killed; rank 0 must see weft/failed/1 "exit 3"
 * and weft/failed/2 "signal 9", and only then exits (so weftrun handled both deaths first).
 */
static int rank_replace(void)
{
    if (my_rank == 1) {
        exit(3);
    }
    if (my_rank == 2) {
        const char *join = getenv("WEFT_JOIN");
        if (join == NULL || strcmp(join, "1") != 0) {
            return verdict("a replacement without WEFT_JOIN=1");
        }
        verdict("ok");
        raise(SIGKILL);
    }
    if (my_rank != 0) {
        return verdict("unexpected member id %d", my_rank);
    }
    weft_store_client_t *c;
    if (connect_env(&c) != WEFT_OK || weft__store_watch(c, "weft/failed/") != WEFT_OK) {
        return verdict("cannot watch");
    }
    const char *const keys[] = {"weft/failed/1", "weft/failed/2"};
    const char *const want[] = {"exit 3", "signal 9"};
    const char *why = wait_failures(c, keys, want, 2);
    weft__store_close(c);
    return why != NULL ? verdict("%s", why) : verdict("ok");
}

static int rank_main(int argc, char **argv)
{
    const char *r = getenv("WEFT_RANK"), *n = getenv("WEFT_WORLD_SIZE");
    if (r == NULL || n == NULL || getenv("WEFT_STORE") == NULL ||
        getenv("WEFT_JOB_TOKEN") == NULL || getenv("WT_DIR") == NULL) {
        fprintf(stderr, "rank: launcher environment missing\n");
        return 30;
    }
    my_rank = atoi(r);
    int size = atoi(n);
    const char *mode = argv[2];
    if (strcmp(mode, "check") == 0) {
        return rank_check_store(size);
    }
    if (strcmp(mode, "failwatch") == 0 && argc >= 5) {
        return rank_failwatch(atoi(argv[3]), argv[4]);
    }
    if (strcmp(mode, "termsees") == 0 && argc >= 4) {
        return rank_term_sees_key(atoi(argv[3]), size);
    }
    if (strcmp(mode, "chain") == 0) {
        return rank_chain();
    }
    if (strcmp(mode, "replace") == 0) {
        return rank_replace();
    }
    fprintf(stderr, "rank: unknown mode %s\n", mode);
    return 31;
}

/* ---- the test side ---- */

static void expect_verdict(int rank)
{
    char name[32];
    snprintf(name, sizeof(name), "verdict.%d", rank);
    char *v = wr_read_file(name);
    if (v == NULL) {
        fail_msg("rank %d left no verdict", rank);
    }
    if (strcmp(v, "ok") != 0) {
        fail_msg("rank %d: %s", rank, v);
    }
    free(v);
}

static void run_ranks(const char *const *args, int code)
{
    wr_result_t r;
    wr_run(args, &r);
    if (r.code != code) {
        fprintf(stderr, "exit %d (want %d)\nstdout: %s\nstderr: %s\n", r.code, code, r.out, r.err);
    }
    assert_int_equal(r.code, code);
    wr_result_free(&r);
}

static void test_ranks_reach_store(void **state)
{
    (void)state;
    run_ranks(SH("--share-token", "-n", "3", "--", self_exe, "--rank", "check"), 0);
    for (int r = 0; r < 3; r++) {
        expect_verdict(r);
    }
}

static void test_failure_published_keep_going(void **state)
{
    (void)state;
    run_ranks(SH("--share-token", "-n", "3", "--keep-going", "--", self_exe, "--rank", "failwatch",
                 "1", "exit"),
              3);
    expect_verdict(0);
    expect_verdict(2);
}

static void test_kill_published_keep_going(void **state)
{
    (void)state;
    run_ranks(SH("--share-token", "-n", "2", "--keep-going", "--", self_exe, "--rank", "failwatch",
                 "0", "kill"),
              137);
    expect_verdict(1);
}

static void test_failure_published_before_term(void **state)
{
    (void)state;
    run_ranks(
        SH("--share-token", "-n", "3", "--grace", "8", "--", self_exe, "--rank", "termsees", "2"),
        3);
    expect_verdict(0);
    expect_verdict(1);
}

static void test_first_failure_wins(void **state)
{
    (void)state;
    run_ranks(SH("--share-token", "-n", "3", "--keep-going", "--", self_exe, "--rank", "chain"), 5);
    expect_verdict(0);
    expect_verdict(2);
}

/* Tolerated deaths, the replacement's included, leave the job's status at 0. */
static void test_replacement_failure_published(void **state)
{
    (void)state;
    wr_result_t r;
    wr_run(SH("--share-token", "-n", "2", "--elastic", "--replace", "--max-restarts", "1", "--",
              self_exe, "--rank", "replace"),
           &r);
    if (r.code != 0) {
        fprintf(stderr, "exit %d\nstderr: %s\n", r.code, r.err);
    }
    wr_result_free(&r);
    /* The verdicts first: they say more than the exit code. */
    expect_verdict(0);
    expect_verdict(2);
    assert_int_equal(r.code, 0);
}

/* Read "NAME=value" from the lines weftrun --store-only printed. */
static bool find_var(const char *text, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        if (nl == NULL) {
            return false; /* not a complete line yet */
        }
        if (strncmp(p, name, n) == 0 && p[n] == '=' && (size_t)(nl - p - (long)n - 1) < outlen) {
            memcpy(out, p + n + 1, (size_t)(nl - p) - n - 1);
            out[nl - p - (long)n - 1] = '\0';
            return true;
        }
        p = nl + 1;
    }
    return false;
}

static void test_store_only(void **state)
{
    (void)state;
    pid_t pid = wr_start(SH("--store-only", "--bind", "127.0.0.1"), NULL);
    assert_true(pid > 0);
    char store[300] = "", token_file[4200] = "", token[80] = "";
    for (int i = 0; i < WR_LIMIT_MS / 5; i++) {
        char *out = wr_read_file("_stdout");
        bool done = out != NULL && find_var(out, "WEFT_STORE", store, sizeof(store)) &&
                    find_var(out, "WEFT_JOB_TOKEN_FILE", token_file, sizeof(token_file));
        free(out);
        if (done) {
            break;
        }
        sleep_ms(5);
    }
    /* The token is in a file only this user can read, never on stdout. */
    struct stat st;
    assert_int_equal(stat(token_file, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_uid, geteuid());
    assert_true(weft__read_secret_file(token_file, token, sizeof(token), NULL, 0));
    char *printed = wr_read_file("_stdout");
    assert_non_null(printed);
    assert_null(strstr(printed, token));
    free(printed);
    assert_non_null(strstr(store, "127.0.0.1:"));
    assert_int_equal(strlen(token), 32);

    weft_store_client_t *c;
    assert_int_equal(weft__store_connect(store, token, 5000, NULL, &c), WEFT_OK);
    int64_t v = 0;
    assert_int_equal(weft__store_add(c, "test/counter", 2, &v), WEFT_OK);
    assert_int_equal(v, 2);
    weft__store_close(c);
    weft_logger_t quiet = {.level = WEFT_LOG_ERROR, .rank = -1, .fn = discard_log};
    assert_int_equal(
        weft__store_connect(store, "0123456789abcdef0123456789abcdef", 2000, &quiet, &c),
        WEFT_ERR_AUTH);

    /* SIGUSR1 and SIGUSR2 (a batch system's warning) leave the store serving. */
    kill(pid, SIGUSR1);
    kill(pid, SIGUSR2);
    sleep_ms(100);
    assert_int_equal(weft__store_connect(store, token, 5000, NULL, &c), WEFT_OK);
    assert_int_equal(weft__store_add(c, "test/counter", 1, &v), WEFT_OK);
    assert_int_equal(v, 3);
    weft__store_close(c);

    kill(pid, SIGTERM);
    wr_result_t r;
    wr_wait(pid, WR_LIMIT_MS, &r);
    assert_int_equal(r.code, 0);
    wr_result_free(&r);
    assert_int_not_equal(access(token_file, F_OK), 0); /* a file it made goes with it */

    /* With --timeout the store does not outlive a forgotten job. */
    wr_run(SH("--store-only", "--timeout", "0.2"), &r);
    assert_int_equal(r.code, 124);
    assert_non_null(strstr(r.out, "WEFT_JOB_TOKEN_FILE="));
    assert_null(strstr(r.out, "WEFT_JOB_TOKEN="));
    assert_non_null(strstr(r.err, "timed out"));
    wr_result_free(&r);
}

#define T(f) cmocka_unit_test_setup_teardown(f, wr_setup, wr_teardown)

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--rank") == 0) {
        return rank_main(argc, argv);
    }
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH-TO-WEFTRUN\n", argv[0]);
        return 2;
    }
    wr_weftrun = argv[1];
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        return 2;
    }
    self_exe[n] = '\0';
    const struct CMUnitTest tests[] = {
        T(test_ranks_reach_store),
        T(test_failure_published_keep_going),
        T(test_kill_published_keep_going),
        T(test_failure_published_before_term),
        T(test_first_failure_wins),
        T(test_replacement_failure_published),
        T(test_store_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
