/*
 * weftrun's process management, tested on the real binary with small /bin/sh ranks:
 * usage errors, the rank environment, exit status propagation, stopping the others,
 * --keep-going, --timeout, --tag-output, signal forwarding and exec failures.
 * Ranks coordinate through files in $WT_DIR, never through sleeps, wherever an order
 * matters.
 */
#include <ctype.h>
#include <sched.h>
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "launcher/harness.h"
#include "weft/core.h"

#define SH(...) ((const char *const[]){__VA_ARGS__, NULL})

static void run_expect(const char *const *args, int code, const char *err_has)
{
    wr_result_t r;
    wr_run(args, &r);
    if (r.code != code || (err_has != NULL && strstr(r.err, err_has) == NULL)) {
        fprintf(stderr, "args:");
        for (const char *const *a = args; *a != NULL; a++) {
            fprintf(stderr, " '%s'", *a);
        }
        fprintf(stderr, "\nexit %d (want %d)\nstdout: %s\nstderr: %s\n", r.code, code, r.out,
                r.err);
    }
    assert_int_equal(r.code, code);
    if (err_has != NULL) {
        assert_non_null(strstr(r.err, err_has));
    }
    wr_result_free(&r);
}

static void test_bad_usage(void **state)
{
    (void)state;
    const char *const *cases[] = {
        SH("-n"),
        SH("-n", "0", "--", "true"),
        SH("-n", "abc", "true"),
        SH("-n", "-1", "true"),
        SH("-n", "2x", "true"),
        SH("-n", "99999999999", "true"),
        SH("-n", "2"),
        SH("-n", "2", "--"),
        SH("true"),
        SH("--bogus", "-n", "1", "true"),
        SH("-n", "1", "-q", "true"),
        SH("-n", "1", "--timeout", "-1", "true"),
        SH("-n", "1", "--timeout", "0", "true"),
        SH("-n", "1", "--timeout", "nan", "true"),
        SH("-n", "1", "--grace", "x", "true"),
        SH("-n", "1", "--grace", "", "true"),
        SH("-n", "1", "--port", "70000", "true"),
        SH("-n", "1", "--bind", "", "true"),
        SH("--store-only", "-n", "2"),
        SH("--store-only", "true"),
        /* The elastic options need --elastic (--keep-going is not enough). */
        SH("-n", "2", "--replace", "true"),
        SH("-n", "2", "--keep-going", "--replace", "true"),
        SH("-n", "2", "--min", "1", "true"),
        SH("-n", "2", "--max-restarts", "3", "true"),
        SH("-n", "2", "--elastic", "--min", "0", "true"),
        SH("-n", "2", "--elastic", "--min", "3", "true"),
        SH("-n", "2", "--elastic", "--min", "x", "true"),
        SH("-n", "2", "--elastic", "--max-restarts", "-1", "true"),
        SH("-n", "2", "--elastic", "--max-restarts", "", "true"),
        SH("-n", "2", "--elastic", "--replace", "--max-restarts", "32767", "true"),
        SH("--store-only", "--elastic"),
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        run_expect(cases[i], 2, "weftrun --help");
    }
    /* No arguments at all. */
    const char *const none[] = {NULL};
    run_expect(none, 2, "weftrun --help");
}

static void test_help_and_version(void **state)
{
    (void)state;
    wr_result_t r;
    wr_run(SH("--help"), &r);
    assert_int_equal(r.code, 0);
    const char *must[] = {"-n, --np",        "--tag-output",
                          "--keep-going",    "--grace",
                          "--timeout",       "--bind",
                          "--port",          "--store-only",
                          "--verbose",       "--help",
                          "--version",       "WEFT_RANK",
                          "WEFT_WORLD_SIZE", "WEFT_LOCAL_RANK",
                          "WEFT_LOCAL_SIZE", "WEFT_STORE",
                          "WEFT_JOB_TOKEN",  "<ns>/failed/",
                          "--elastic",       "--replace",
                          "--min",           "--max-restarts",
                          "WEFT_JOIN",       "WEFT_EXIT_JOB_FAILED",
                          "--share-token",   "WEFT_MEMBER_SECRET_FD",
                          "--member-secrets"};
    for (size_t i = 0; i < sizeof(must) / sizeof(must[0]); i++) {
        if (strstr(r.out, must[i]) == NULL) {
            fail_msg("--help does not mention %s", must[i]);
        }
    }
    wr_result_free(&r);
    wr_run(SH("--version"), &r);
    assert_int_equal(r.code, 0);
    char version[64];
    snprintf(version, sizeof(version), "weft %s\n", weft_version(NULL, NULL, NULL));
    assert_string_equal(r.out, version);
    wr_result_free(&r);
}

typedef struct rank_env {
    int rank, size, local_rank, local_size;
    char store[300], token[80], secret_fd[16];
    int torch[4]; /* RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE */
} rank_env_t;

/* Read the env.* files the ranks wrote; returns how many. */
static int read_rank_envs(rank_env_t *envs, int max)
{
    DIR *d = opendir(wr_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "env.", 4) != 0) {
            continue;
        }
        assert_true(n < max);
        char *text = wr_read_file(e->d_name);
        assert_non_null(text);
        rank_env_t *v = &envs[n++];
        int got = sscanf(text, "%d %d %d %d %299s %79s %15s %d %d %d %d", &v->rank, &v->size,
                         &v->local_rank, &v->local_size, v->store, v->token, v->secret_fd,
                         &v->torch[0], &v->torch[1], &v->torch[2], &v->torch[3]);
        if (got != 11) {
            fail_msg("rank wrote '%s'", text);
        }
        free(text);
    }
    closedir(d);
    return n;
}

/*
 * The variables each of @p nranks ranks sees. By default a rank gets its member secret's
 * pipe and no token; with --share-token (@p share) the token and no pipe.
 */
static void check_env(int nranks, bool share)
{
    char n[16];
    snprintf(n, sizeof(n), "%d", nranks);
    /* Values inherited from the caller must be replaced, not kept: torchrun's names too. */
    const char *inherited[] = {"WEFT_RANK",  "WEFT_JOB_TOKEN", "RANK",
                               "WORLD_SIZE", "LOCAL_RANK",     "LOCAL_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof(inherited) / sizeof(inherited[0]); i++) {
        setenv(inherited[i], "77", 1);
    }
    run_expect(SH("-n", n, share ? "--share-token" : "--member-secrets", "--", "/bin/sh", "-c",
                  "echo \"$WEFT_RANK $WEFT_WORLD_SIZE $WEFT_LOCAL_RANK $WEFT_LOCAL_SIZE "
                  "$WEFT_STORE ${WEFT_JOB_TOKEN:-none} ${WEFT_MEMBER_SECRET_FD:-none} $RANK "
                  "$WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE\" > \"$WT_DIR/env.$$\""),
               0, NULL);
    for (size_t i = 0; i < sizeof(inherited) / sizeof(inherited[0]); i++) {
        unsetenv(inherited[i]);
    }
    rank_env_t envs[8];
    assert_int_equal(read_rank_envs(envs, 8), nranks);
    bool seen[8] = {false};
    for (int i = 0; i < nranks; i++) {
        rank_env_t *v = &envs[i];
        assert_true(v->rank >= 0 && v->rank < nranks);
        assert_false(seen[v->rank]);
        seen[v->rank] = true;
        assert_int_equal(v->size, nranks);
        assert_int_equal(v->local_rank, v->rank);
        assert_int_equal(v->local_size, nranks);
        /* PyTorch's names carry the same values. */
        assert_int_equal(v->torch[0], v->rank);
        assert_int_equal(v->torch[1], nranks);
        assert_int_equal(v->torch[2], v->local_rank);
        assert_int_equal(v->torch[3], nranks);
        assert_string_equal(v->store, envs[0].store);
        if (share) {
            assert_string_equal(v->secret_fd, "none");
            assert_string_equal(v->token, envs[0].token);
            assert_int_equal(strlen(v->token), 32);
            for (const char *p = v->token; *p != '\0'; p++) {
                assert_true(isxdigit((unsigned char)*p));
            }
        } else {
            /* The inherited token is dropped and none is set: the secret comes by pipe. */
            assert_string_equal(v->token, "none");
            assert_true(atoi(v->secret_fd) > 2);
        }
        assert_non_null(strstr(v->store, "127.0.0.1:"));
    }
}

static void test_env_one_rank(void **state)
{
    (void)state;
    check_env(1, false);
}

static void test_env_five_ranks(void **state)
{
    (void)state;
    check_env(5, false);
}

static void test_env_share_token(void **state)
{
    (void)state;
    check_env(3, true);
}

static void test_all_succeed(void **state)
{
    (void)state;
    run_expect(SH("-n", "6", "true"), 0, NULL);
    /* Options after the program belong to it; '--' is optional. */
    run_expect(SH("-n", "2", "/bin/sh", "-c", "exit 0", "-n", "x"), 0, NULL);
}

/*
 * Rank 1 exits once rank 0 has its TERM handler in place; rank 0 must then be stopped
 * (it would sleep 30 s otherwise, past the harness's limit) and say it got SIGTERM.
 */
static void test_exit_status_stops_others(void **state)
{
    (void)state;
    run_expect(SH("-n", "3", "--", "/bin/sh", "-c",
                  "if [ $WEFT_RANK = 1 ]; then\n"
                  "  while [ ! -e $WT_DIR/ready.0 ] || [ ! -e $WT_DIR/ready.2 ]; do sleep 0.01; "
                  "done; exit 3\n"
                  "fi\n"
                  "trap 'echo term > $WT_DIR/term.$WEFT_RANK; exit 0' TERM\n"
                  "touch $WT_DIR/ready.$WEFT_RANK; sleep 30 & wait"),
               3, "rank 1");
    char *t0 = wr_read_file("term.0"), *t2 = wr_read_file("term.2");
    assert_non_null(t0);
    assert_non_null(t2);
    free(t0);
    free(t2);
}

static void test_killed_by_signal(void **state)
{
    (void)state;
    run_expect(SH("-n", "2", "--", "/bin/sh", "-c",
                  "if [ $WEFT_RANK = 0 ]; then kill -9 $$; fi; sleep 30"),
               137, "rank 0");
    char want[32];
    snprintf(want, sizeof(want), "signal %d", SIGUSR1);
    run_expect(SH("-n", "1", "--", "/bin/sh", "-c", "kill -USR1 $$"), 128 + SIGUSR1, want);
}

/* A rank that ignores SIGTERM is killed after the grace period. */
static void test_grace_then_kill(void **state)
{
    (void)state;
    run_expect(SH("-n", "2", "--grace", "0.2", "--", "/bin/sh", "-c",
                  "if [ $WEFT_RANK = 1 ]; then\n"
                  "  while [ ! -e $WT_DIR/ready.0 ]; do sleep 0.01; done; exit 4\n"
                  "fi\n"
                  "trap '' TERM; touch $WT_DIR/ready.0; sleep 30 & wait"),
               4, "rank 1");
}

static void test_keep_going(void **state)
{
    (void)state;
    /* Ranks 0 and 2 finish their work only after rank 1 has failed. */
    run_expect(SH("-n", "3", "--keep-going", "--", "/bin/sh", "-c",
                  "if [ $WEFT_RANK = 1 ]; then touch $WT_DIR/failing; exit 5; fi\n"
                  "while [ ! -e $WT_DIR/failing ]; do sleep 0.01; done; sleep 0.3\n"
                  "echo done > $WT_DIR/done.$WEFT_RANK"),
               5, "rank 1");
    char *d0 = wr_read_file("done.0"), *d2 = wr_read_file("done.2");
    assert_non_null(d0);
    assert_non_null(d2);
    assert_string_equal(d0, "done\n");
    free(d0);
    free(d2);
}

/*
 * A rank that exits WEFT_EXIT_JOB_FAILED says the job failed: weftrun stops the others
 * even under --keep-going (rank 0 would sleep 30 s otherwise, past the harness's limit)
 * and exits with that status; without --keep-going as any failure.
 */
static void test_job_failed(void **state)
{
    (void)state;
    char script[512];
    snprintf(script, sizeof(script),
             "if [ $WEFT_RANK = 1 ]; then\n"
             "  while [ ! -e $WT_DIR/ready.0 ]; do sleep 0.01; done; exit %d\n"
             "fi\n"
             "trap 'echo term > $WT_DIR/term.0; exit 0' TERM\n"
             "touch $WT_DIR/ready.0; sleep 30 & wait",
             WEFT_EXIT_JOB_FAILED);
    run_expect(SH("-n", "2", "--keep-going", "--", "/bin/sh", "-c", script), WEFT_EXIT_JOB_FAILED,
               "rank 1 (pid");
    char *t0 = wr_read_file("term.0");
    assert_non_null(t0);
    free(t0);
    unlink(wr_path("ready.0"));
    unlink(wr_path("term.0"));
    run_expect(SH("-n", "2", "--", "/bin/sh", "-c", script), WEFT_EXIT_JOB_FAILED,
               "WEFT_EXIT_JOB_FAILED");
}

/*
 * A WEFT_* setting that does not parse would make every rank's weft_init fail: weftrun
 * says which variable, its value and what it takes, and starts no rank. One that parses,
 * and a variable it does not know (the ranks' to warn about), change nothing.
 */
static void test_bad_setting_refused(void **state)
{
    (void)state;
    const char *const rank[] = {"-n", "2", "--", "/bin/sh", "-c", "touch $WT_DIR/ran.$WEFT_RANK",
                                NULL};
    static const char *const bad[][2] = {
        {"WEFT_COLL_SHM", "maybe"}, {"WEFT_TIMEOUT_MS", "10 s"}, {"WEFT_LOG_LEVEL", "loud"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv(bad[i][0], bad[i][1], 1);
        char want[128];
        snprintf(want, sizeof(want), "%s='%s' is not valid: ", bad[i][0], bad[i][1]);
        wr_result_t r;
        wr_run(rank, &r);
        unsetenv(bad[i][0]);
        if (r.code != 2 || strstr(r.err, want) == NULL) {
            fprintf(stderr, "%s=%s: exit %d\nstderr: %s\n", bad[i][0], bad[i][1], r.code, r.err);
        }
        assert_int_equal(r.code, 2);
        assert_non_null(strstr(r.err, want));
        assert_non_null(strstr(r.err, "(default "));
        assert_non_null(strstr(r.err, "no rank started"));
        wr_result_free(&r);
        assert_null(wr_read_file("ran.0"));
        assert_null(wr_read_file("ran.1"));
    }
    setenv("WEFT_COLL_SHM", "off", 1);
    setenv("WEFT_NO_SUCH_SETTING", "1", 1);
    run_expect(rank, 0, NULL);
    unsetenv("WEFT_COLL_SHM");
    unsetenv("WEFT_NO_SUCH_SETTING");
    char *ran = wr_read_file("ran.1");
    assert_non_null(ran);
    free(ran);
}

static void test_timeout(void **state)
{
    (void)state;
    run_expect(SH("-n", "2", "--timeout", "0.5", "--", "sleep", "30"), 124, "timed out");
    /* Ranks that ignore SIGTERM are killed after the grace period. */
    run_expect(SH("-n", "2", "--timeout", "0.3", "--grace", "0.3", "--", "/bin/sh", "-c",
                  "trap '' TERM; sleep 30 & wait"),
               124, "timed out");
}

static void test_exec_failure(void **state)
{
    (void)state;
    run_expect(SH("-n", "2", "--", "/nonexistent/prog"), 127, "/nonexistent/prog");
    run_expect(SH("-n", "2", "--", "no-such-command-for-weftrun"), 127,
               "no-such-command-for-weftrun");
    run_expect(SH("-n", "1", "--", "/tmp"), 127, "directory");
    /* Executable but not a program: found, and then exec fails in the child. */
    FILE *f = fopen(wr_path("bad"), "w");
    assert_non_null(f);
    fputs("\177ELF not really", f);
    fclose(f);
    chmod(wr_path("bad"), 0755);
    char bad[512];
    snprintf(bad, sizeof(bad), "%s", wr_path("bad"));
    run_expect(SH("-n", "3", "--", bad), 127, "cannot execute");
}

static void test_tag_output(void **state)
{
    (void)state;
    wr_result_t r;
    wr_run(SH("-n", "2", "--tag-output", "--", "/bin/sh", "-c",
              "echo out$WEFT_RANK; echo err$WEFT_RANK >&2; echo; printf 'part%s' $WEFT_RANK"),
           &r);
    assert_int_equal(r.code, 0);
    for (int rank = 0; rank < 2; rank++) {
        char line[64];
        snprintf(line, sizeof(line), "[rank %d] out%d", rank, rank);
        assert_int_equal(wr_count_lines(r.out, line), 1);
        snprintf(line, sizeof(line), "[rank %d] ", rank);
        assert_int_equal(wr_count_lines(r.out, line), 1);
        snprintf(line, sizeof(line), "[rank %d] part%d", rank, rank);
        assert_int_equal(wr_count_lines(r.out, line), 1);
        snprintf(line, sizeof(line), "[rank %d] err%d", rank, rank);
        assert_int_equal(wr_count_lines(r.err, line), 1);
    }
    /* Nothing else, and the output ends with a complete line. */
    size_t lines = 0;
    for (const char *p = r.out; *p != '\0'; p++) {
        lines += *p == '\n';
    }
    assert_int_equal(lines, 6);
    assert_int_equal(r.out[strlen(r.out) - 1], '\n');
    wr_result_free(&r);

    /* Without --tag-output the ranks write straight through. */
    wr_run(SH("-n", "1", "--", "/bin/sh", "-c", "printf 'plain'; printf 'e' >&2"), &r);
    assert_int_equal(r.code, 0);
    assert_string_equal(r.out, "plain");
    assert_string_equal(r.err, "e");
    wr_result_free(&r);
}

/* Lines of @p text that start with @p prefix must be prefix+1 .. prefix+count in order. */
static void check_sequence(const char *text, const char *prefix, int count)
{
    size_t plen = strlen(prefix);
    int next = 1;
    for (const char *p = text; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        if (strncmp(p, prefix, plen) == 0 && isdigit((unsigned char)p[plen])) {
            int v = atoi(p + plen);
            if (v != next) {
                fail_msg("%s: got %d, expected %d", prefix, v, next);
            }
            next++;
        }
        p = nl + 1;
    }
    assert_int_equal(next, count + 1);
}

/*
 * Much more output than a pipe holds, on both streams at once, from two ranks: nothing
 * lost, no deadlock, every line whole and in order.
 */
static void test_tag_output_large(void **state)
{
    (void)state;
    wr_result_t r;
    wr_run(SH("-n", "2", "--tag-output", "--", "/bin/sh", "-c",
              "seq 1 30000 & seq 1 30000 >&2; wait\n"
              "head -c 60000 /dev/zero | tr '\\0' a; echo"),
           &r);
    assert_int_equal(r.code, 0);
    char longline[60016];
    for (int rank = 0; rank < 2; rank++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "[rank %d] ", rank);
        check_sequence(r.out, prefix, 30000);
        check_sequence(r.err, prefix, 30000);
        int n = snprintf(longline, sizeof(longline), "%s", prefix);
        memset(longline + n, 'a', 60000);
        longline[n + 60000] = '\0';
        assert_int_equal(wr_count_lines(r.out, longline), 1);
    }
    wr_result_free(&r);

    /* A line longer than weftrun buffers leaves in pieces, but with one prefix. */
    static char huge[200064];
    wr_run(SH("-n", "1", "--tag-output", "--", "/bin/sh", "-c",
              "head -c 200000 /dev/zero | tr '\\0' b; echo; echo tail"),
           &r);
    assert_int_equal(r.code, 0);
    int n = snprintf(huge, sizeof(huge), "[rank 0] ");
    memset(huge + n, 'b', 200000);
    snprintf(huge + n + 200000, sizeof(huge) - (size_t)n - 200000, "\n[rank 0] tail\n");
    assert_string_equal(r.out, huge);
    wr_result_free(&r);
}

/* Start ranks that note a signal in term.<rank>, wait until they are ready, signal weftrun. */
static void check_forwarded(int sig, const char *trap_name, int expect_code)
{
    char script[512];
    snprintf(script, sizeof(script),
             "trap 'echo got > $WT_DIR/term.$WEFT_RANK; exit 0' %s\n"
             "touch $WT_DIR/ready.$WEFT_RANK; while :; do sleep 0.05; done",
             trap_name);
    pid_t pid = wr_start(SH("-n", "2", "--", "/bin/sh", "-c", script), NULL);
    assert_true(pid > 0);
    assert_true(wr_wait_file("ready.0", WR_LIMIT_MS));
    assert_true(wr_wait_file("ready.1", WR_LIMIT_MS));
    kill(pid, sig);
    wr_result_t r;
    wr_wait(pid, WR_LIMIT_MS, &r);
    assert_int_equal(r.code, expect_code);
    wr_result_free(&r);
    for (int rank = 0; rank < 2; rank++) {
        char name[16];
        snprintf(name, sizeof(name), "term.%d", rank);
        char *t = wr_read_file(name);
        if (t == NULL) {
            fail_msg("rank %d did not get the signal", rank);
        }
        free(t);
    }
}

static void test_sigterm_forwarded(void **state)
{
    (void)state;
    check_forwarded(SIGTERM, "TERM", 128 + SIGTERM);
}

static void test_sigint_forwarded(void **state)
{
    (void)state;
    check_forwarded(SIGINT, "INT", 128 + SIGINT);
}

/* A second signal does not wait for the (long) grace period. */
static void test_second_signal_kills(void **state)
{
    (void)state;
    pid_t pid = wr_start(SH("-n", "2", "--grace", "60", "--", "/bin/sh", "-c",
                            "trap '' TERM INT; touch $WT_DIR/ready.$WEFT_RANK; sleep 30 & wait"),
                         NULL);
    assert_true(pid > 0);
    assert_true(wr_wait_file("ready.0", WR_LIMIT_MS));
    assert_true(wr_wait_file("ready.1", WR_LIMIT_MS));
    /* Two different signals, so they cannot merge into one. */
    kill(pid, SIGTERM);
    kill(pid, SIGINT);
    wr_result_t r;
    wr_wait(pid, WR_LIMIT_MS, &r);
    assert_true(r.code == 128 + SIGTERM || r.code == 128 + SIGINT);
    wr_result_free(&r);
}

/* Wait until file @p name holds a line @p line; false after @p limit_ms. */
static bool wait_line(const char *name, const char *line, int limit_ms)
{
    for (int waited = 0; waited < limit_ms; waited += 10) {
        char *t = wr_read_file(name);
        size_t n = t != NULL ? wr_count_lines(t, line) : 0;
        free(t);
        if (n > 0) {
            return true;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* How many times rank @p rank of start_recording_ranks() recorded signal @p sig. */
static int signals_got(int rank, const char *sig)
{
    char name[16];
    snprintf(name, sizeof(name), "got.%d", rank);
    char *t = wr_read_file(name);
    assert_non_null(t);
    int n = (int)wr_count_lines(t, sig);
    free(t);
    return n;
}

/* Ranks (shell scripts) that append the name of each of HUP, USR1, USR2 and TERM they
 * receive to got.<rank>, and exit on TERM. */
static pid_t start_recording_ranks(void)
{
    pid_t pid = wr_start(SH("-n", "2", "--", "/bin/sh", "-c",
                            "f=$WT_DIR/got.$WEFT_RANK\n"
                            "trap 'echo hup >> $f' HUP\n"
                            "trap 'echo usr1 >> $f' USR1\n"
                            "trap 'echo usr2 >> $f' USR2\n"
                            "trap 'echo term >> $f; exit 0' TERM\n"
                            "touch $WT_DIR/ready.$WEFT_RANK; while :; do sleep 0.05; done"),
                         NULL);
    assert_true(pid > 0);
    assert_true(wr_wait_file("ready.0", WR_LIMIT_MS));
    assert_true(wr_wait_file("ready.1", WR_LIMIT_MS));
    return pid;
}

/* mpirun's "-np N" (and "-npN") is -n; a missing value is named as -np. */
static void test_np_spelling(void **state)
{
    (void)state;
    const char *const *cases[] = {
        SH("-np", "3", "--", "/bin/sh", "-c", "echo $WEFT_WORLD_SIZE"),
        SH("-np3", "--", "/bin/sh", "-c", "echo $WEFT_WORLD_SIZE"),
        SH("--np", "3", "--", "/bin/sh", "-c", "echo $WEFT_WORLD_SIZE"),
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        wr_result_t r;
        wr_run(cases[i], &r);
        assert_int_equal(r.code, 0);
        assert_int_equal(wr_count_lines(r.out, "3"), 3);
        wr_result_free(&r);
    }
    run_expect(SH("-np"), 2, "option '-np' needs a value");
    run_expect(SH("-np", "x", "true"), 2, "not 'x'");
    run_expect(SH("-np0", "true"), 2, "not '0'");
}

/* Lines of @p text that contain @p part. */
static size_t count_containing(const char *text, const char *part)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, part)) != NULL; p++) {
        n++;
    }
    return n;
}

/* -n above twice the CPUs weftrun may use: one warning line on stderr, and the job runs. */
static void test_oversubscription_warning(void **state)
{
    (void)state;
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
    int cpus = CPU_COUNT(&set);
    if (cpus > 64) {
        skip(); /* too many processes to start for a unit test */
    }
    char many[16], fine[16];
    snprintf(many, sizeof(many), "%d", 2 * cpus + 1);
    snprintf(fine, sizeof(fine), "%d", 2 * cpus);
    wr_result_t r;
    wr_run(SH("-n", many, "--", "true"), &r);
    assert_int_equal(r.code, 0);
    assert_int_equal(count_containing(r.err, "take turns on the cores"), 1);
    assert_int_equal(count_containing(r.err, "\n"), 1);
    wr_result_free(&r);
    wr_run(SH("-n", fine, "--", "true"), &r);
    assert_int_equal(r.code, 0);
    assert_string_equal(r.err, "");
    wr_result_free(&r);
}

/* --cpu-bind core: each rank runs on the CPU of its local rank among those weftrun may
 * use (read back from /proc/self/status); more ranks than CPUs: unpinned, said once;
 * anything but core or none is refused. */
static void test_cpu_bind(void **state)
{
    (void)state;
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
    int cpus = CPU_COUNT(&set), nth[CPU_SETSIZE], k = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &set)) {
            nth[k++] = cpu;
        }
    }
    int n = cpus < 4 ? cpus : 4;
    char ns[16], over[16];
    snprintf(ns, sizeof(ns), "%d", n);
    snprintf(over, sizeof(over), "%d", cpus + 1);
    const char *report = "echo \"$WEFT_LOCAL_RANK $(sed -n 's/^Cpus_allowed_list:\\t//p' "
                         "/proc/self/status)\"";
    wr_result_t r;
    wr_run(SH("-n", ns, "--cpu-bind", "core", "--", "/bin/sh", "-c", report), &r);
    assert_int_equal(r.code, 0);
    int seen = 0;
    for (char *line = r.out; line != NULL && *line != '\0'; seen++) {
        int lr = -1;
        char list[64] = "";
        assert_int_equal(sscanf(line, "%d %63s", &lr, list), 2);
        assert_true(lr >= 0 && lr < n);
        char want[16];
        snprintf(want, sizeof(want), "%d", nth[lr]);
        if (strcmp(list, want) != 0) {
            fail_msg("local rank %d runs on CPUs %s, not %s", lr, list, want);
        }
        line = strchr(line, '\n');
        line = line != NULL ? line + 1 : NULL;
    }
    assert_int_equal(seen, n);
    wr_result_free(&r);
    if (cpus <= 64) {
        wr_run(SH("-n", over, "--cpu-bind", "core", "--", "true"), &r);
        assert_int_equal(r.code, 0);
        assert_int_equal(count_containing(r.err, "the ranks are not pinned"), 1);
        wr_result_free(&r);
    }
    run_expect(SH("-n", "1", "--cpu-bind", "socket", "--", "true"), 2,
               "--cpu-bind takes core or none, not 'socket'");
}

/* weftrun started N times by mpirun or mpiexec without --nnodes: N separate jobs, said
 * in one line that names the way to one job; nothing for a single copy. */
static void test_nested_launch_warning(void **state)
{
    (void)state;
    static const char *const vars[][2] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                          {"PMI_SIZE", "PMI_RANK"}};
    for (size_t i = 0; i < 2; i++) {
        setenv(vars[i][0], "4", 1);
        setenv(vars[i][1], "1", 1);
        wr_result_t r;
        wr_run(SH("-n", "1", "--", "true"), &r);
        assert_int_equal(r.code, 0);
        assert_int_equal(count_containing(r.err, "each starts a job of its own"), 1);
        assert_non_null(strstr(r.err, "--nnodes 4 --node-rank $"));
        assert_non_null(strstr(r.err, vars[i][1]));
        wr_result_free(&r);
        setenv(vars[i][0], "1", 1);
        wr_run(SH("-n", "1", "--", "true"), &r);
        assert_int_equal(r.code, 0);
        assert_string_equal(r.err, "");
        wr_result_free(&r);
        unsetenv(vars[i][0]);
        unsetenv(vars[i][1]);
    }
}

/*
 * SIGUSR1 and SIGUSR2 (Slurm's warning before preemption or the time limit) reach every
 * rank, and weftrun and the job go on; SIGTERM still stops it.
 */
static void test_usr_signals_forwarded(void **state)
{
    (void)state;
    pid_t pid = start_recording_ranks();
    int sigs[] = {SIGUSR1, SIGUSR2};
    const char *lines[] = {"usr1", "usr2"};
    for (int i = 0; i < 2; i++) {
        kill(pid, sigs[i]);
        for (int rank = 0; rank < 2; rank++) {
            char name[16];
            snprintf(name, sizeof(name), "got.%d", rank);
            if (!wait_line(name, lines[i], WR_LIMIT_MS)) {
                kill(pid, SIGKILL);
                fail_msg("rank %d did not get %s", rank, lines[i]);
            }
        }
        int st;
        assert_int_equal(waitpid(pid, &st, WNOHANG), 0); /* weftrun runs on */
    }
    kill(pid, SIGTERM);
    wr_result_t r;
    wr_wait(pid, WR_LIMIT_MS, &r);
    assert_int_equal(r.code, 128 + SIGTERM);
    assert_non_null(strstr(r.err, "forwarded to the ranks; the job goes on"));
    wr_result_free(&r);
    for (int rank = 0; rank < 2; rank++) {
        assert_int_equal(signals_got(rank, "usr1"), 1);
        assert_int_equal(signals_got(rank, "usr2"), 1);
        assert_int_equal(signals_got(rank, "term"), 1);
    }
}

/* SIGHUP stops the job, but the ranks get SIGTERM: UCX takes SIGHUP as its debug signal. */
static void test_sighup_stops_with_sigterm(void **state)
{
    (void)state;
    pid_t pid = start_recording_ranks();
    kill(pid, SIGHUP);
    wr_result_t r;
    wr_wait(pid, WR_LIMIT_MS, &r);
    assert_int_equal(r.code, 128 + SIGHUP);
    wr_result_free(&r);
    for (int rank = 0; rank < 2; rank++) {
        assert_int_equal(signals_got(rank, "term"), 1);
        assert_int_equal(signals_got(rank, "hup"), 0);
    }
}

/* Rank 0 reads weftrun's stdin (a file here); the others read /dev/null. */
static void test_stdin(void **state)
{
    (void)state;
    FILE *f = fopen(wr_path("input"), "w");
    assert_non_null(f);
    fputs("hello\n", f);
    fclose(f);
    char input[512];
    snprintf(input, sizeof(input), "%s", wr_path("input"));
    pid_t pid =
        wr_start(SH("-n", "2", "--", "/bin/sh", "-c", "cat > $WT_DIR/in.$WEFT_RANK"), input);
    wr_result_t r;
    wr_wait(pid, WR_LIMIT_MS, &r);
    assert_int_equal(r.code, 0);
    wr_result_free(&r);
    char *in0 = wr_read_file("in.0"), *in1 = wr_read_file("in.1");
    assert_non_null(in0);
    assert_non_null(in1);
    assert_string_equal(in0, "hello\n");
    assert_string_equal(in1, "");
    free(in0);
    free(in1);
}

#define T(f) cmocka_unit_test_setup_teardown(f, wr_setup, wr_teardown)

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH-TO-WEFTRUN\n", argv[0]);
        return 2;
    }
    wr_weftrun = argv[1];
    const struct CMUnitTest tests[] = {
        T(test_bad_usage),
        T(test_help_and_version),
        T(test_env_one_rank),
        T(test_env_five_ranks),
        T(test_env_share_token),
        T(test_all_succeed),
        T(test_exit_status_stops_others),
        T(test_killed_by_signal),
        T(test_grace_then_kill),
        T(test_keep_going),
        T(test_job_failed),
        T(test_bad_setting_refused),
        T(test_timeout),
        T(test_exec_failure),
        T(test_tag_output),
        T(test_tag_output_large),
        T(test_sigterm_forwarded),
        T(test_sigint_forwarded),
        T(test_second_signal_kills),
        T(test_usr_signals_forwarded),
        T(test_np_spelling),
        T(test_oversubscription_warning),
        T(test_cpu_bind),
        T(test_nested_launch_warning),
        T(test_sighup_stops_with_sigterm),
        T(test_stdin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
