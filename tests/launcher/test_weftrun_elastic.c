/*
 * weftrun --elastic on the real binary with small /bin/sh ranks: a death does not stop
 * the others and does not fail the job, --replace starts a joiner with the next member id
 * and the environment of the member it replaces, --max-restarts caps the replacements,
 * --min stops the job, and a death once the job is finishing fails it.
 *
 * Ranks coordinate through files in $WT_DIR, never through sleeps. Where a rank must not
 * exit before weftrun has handled another's death (a death handled after everyone else
 * left would be the last process's, and below --min), it waits until that process is
 * reaped: its /proc entry outlives its exit until weftrun's waitpid(), which handles the
 * death before it looks at anything else.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "launcher/harness.h"
#include "weft/core.h"

#define SH(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *store_set; /* tests/launcher/store_set.c */

/* Shell helpers in front of every script: put NAME TEXT writes a file whole (readers never
 * see it half written), wait_file NAME, and reaped R waits until weftrun has reaped the
 * rank that left its pid in pid.R (see above). */
#define SH_LIB                                                                                     \
    "put() { echo \"$2\" > \"$WT_DIR/$1.tmp.$$\" && mv \"$WT_DIR/$1.tmp.$$\" \"$WT_DIR/$1\"; }\n"  \
    "wait_file() { while [ ! -e \"$WT_DIR/$1\" ]; do sleep 0.01; done; }\n"                        \
    "reaped() { wait_file pid.$1; p=$(cat \"$WT_DIR/pid.$1\");\n"                                  \
    "  while [ -e /proc/$p ]; do sleep 0.01; done; }\n"                                            \
    "put env.$WEFT_RANK \"$WEFT_RANK $WEFT_WORLD_SIZE $WEFT_LOCAL_RANK $WEFT_LOCAL_SIZE "          \
    "${WEFT_JOIN:--} $WEFT_STORE ${WEFT_JOB_TOKEN:-none} $RANK $WORLD_SIZE $LOCAL_RANK "           \
    "$LOCAL_WORLD_SIZE\"\n"

static void run_expect(const char *const *args, int code, const char *err_has)
{
    wr_result_t r;
    wr_run(args, &r);
    if (r.code != code || (err_has != NULL && strstr(r.err, err_has) == NULL)) {
        fprintf(stderr, "args:");
        for (const char *const *a = args; *a != NULL; a++) {
            fprintf(stderr, " '%s'", *a);
        }
        fprintf(stderr, "\nexit %d (want %d, stderr with '%s')\nstdout: %s\nstderr: %s\n", r.code,
                code, err_has != NULL ? err_has : "", r.out, r.err);
    }
    assert_int_equal(r.code, code);
    if (err_has != NULL) {
        assert_non_null(strstr(r.err, err_has));
    }
    wr_result_free(&r);
}

static bool have_file(const char *name)
{
    struct stat st;
    return stat(wr_path(name), &st) == 0;
}

typedef struct rank_env {
    int rank, size, local_rank, local_size;
    char join[8], store[300], token[80];
} rank_env_t;

/* The environment member @p id wrote (SH_LIB does it first thing). */
static void read_env(int id, rank_env_t *v)
{
    char name[32];
    snprintf(name, sizeof(name), "env.%d", id);
    char *text = wr_read_file(name);
    if (text == NULL) {
        fail_msg("member %d never ran", id);
    }
    int torch[4];
    int got = sscanf(text, "%d %d %d %d %7s %299s %79s %d %d %d %d", &v->rank, &v->size,
                     &v->local_rank, &v->local_size, v->join, v->store, v->token, &torch[0],
                     &torch[1], &torch[2], &torch[3]);
    if (got != 11) {
        fail_msg("member %d wrote '%s'", id, text);
    }
    /* PyTorch's names (RANK ...) repeat the WEFT_ values, replacements included. */
    if (torch[0] != v->rank || torch[1] != v->size || torch[2] != v->local_rank ||
        torch[3] != v->local_size) {
        fail_msg("member %d: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE differ: '%s'", id,
                 text);
    }
    free(text);
}

/* Rank 1 dies; the others outlive its handling, finish, and the job still exits 0. */
static void test_death_does_not_stop_job(void **state)
{
    (void)state;
    run_expect(SH("-n", "3", "--elastic", "--", "/bin/sh", "-c",
                  SH_LIB "if [ $WEFT_RANK = 1 ]; then put pid.1 $$; exit 5; fi\n"
                         "reaped 1; put done.$WEFT_RANK ok"),
               0, "rank 1 (pid");
    assert_true(have_file("done.0"));
    assert_true(have_file("done.2"));
    /* Without --replace nobody takes its place. */
    assert_false(have_file("env.3"));
}

static void test_elastic_with_keep_going(void **state)
{
    (void)state;
    run_expect(SH("-n", "3", "--keep-going", "--elastic", "--", "/bin/sh", "-c",
                  SH_LIB "if [ $WEFT_RANK = 1 ]; then put pid.1 $$; kill -9 $$; fi\n"
                         "reaped 1; put done.$WEFT_RANK ok"),
               0, "signal 9");
    assert_true(have_file("done.0"));
    assert_true(have_file("done.2"));
}

/*
 * Rank 1 exits 3, its replacement (member 2) is killed, the next (member 3) exits 0 and
 * rank 0 waits for member 3: each replacement has WEFT_JOIN=1, the next id, the world
 * size of the job and the local rank of the member it replaces; tags carry the ids.
 */
static void test_replace_env(void **state)
{
    (void)state;
    wr_result_t r;
    wr_run(SH("-n", "2", "--elastic", "--replace", "--max-restarts", "3", "--tag-output", "--",
              "/bin/sh", "-c",
              SH_LIB "echo hello $WEFT_RANK\n"
                     "case $WEFT_RANK in\n"
                     "  0) wait_file env.3 ;;\n"
                     "  1) exit 3 ;;\n"
                     "  2) kill -9 $$ ;;\n"
                     "esac"),
           &r);
    if (r.code != 0) {
        fprintf(stderr, "exit %d\nstdout: %s\nstderr: %s\n", r.code, r.out, r.err);
    }
    assert_int_equal(r.code, 0);
    for (int id = 0; id < 4; id++) {
        char line[32];
        snprintf(line, sizeof(line), "[rank %d] hello %d", id, id);
        assert_int_equal(wr_count_lines(r.out, line), 1);
    }
    assert_non_null(strstr(r.err, "started rank 2"));
    assert_non_null(strstr(r.err, "started rank 3"));
    wr_result_free(&r);

    rank_env_t v[4];
    for (int id = 0; id < 4; id++) {
        read_env(id, &v[id]);
        assert_int_equal(v[id].rank, id);
        assert_int_equal(v[id].size, 2);
        assert_int_equal(v[id].local_size, 2);
        assert_string_equal(v[id].join, id < 2 ? "-" : "1");
        assert_string_equal(v[id].store, v[0].store);
        assert_string_equal(v[id].token, "none"); /* replacements hold no token either */
    }
    assert_int_equal(v[0].local_rank, 0);
    /* Member 2 replaced rank 1 and member 3 replaced member 2: both in rank 1's place. */
    assert_int_equal(v[1].local_rank, 1);
    assert_int_equal(v[2].local_rank, 1);
    assert_int_equal(v[3].local_rank, 1);
    assert_false(have_file("env.4"));
}

/* Every process exits 6 at once: two replacements, then the last death leaves nobody. */
static void test_max_restarts(void **state)
{
    (void)state;
    run_expect(SH("-n", "1", "--elastic", "--replace", "--max-restarts", "2", "--", "/bin/sh", "-c",
                  SH_LIB "exit 6"),
               6, "fewer than --min 1");
    for (int id = 0; id < 3; id++) {
        rank_env_t v;
        read_env(id, &v);
        assert_int_equal(v.local_rank, 0);
    }
    assert_false(have_file("env.3"));
}

/* --max-restarts 0: nothing is replaced; the death is tolerated all the same. */
static void test_max_restarts_zero(void **state)
{
    (void)state;
    run_expect(SH("-n", "2", "--elastic", "--replace", "--max-restarts", "0", "--", "/bin/sh", "-c",
                  SH_LIB "if [ $WEFT_RANK = 1 ]; then put pid.1 $$; exit 3; fi\n"
                         "reaped 1"),
               0, "--max-restarts reached");
    assert_false(have_file("env.2"));
}

/*
 * --min 2 of 3: rank 1's death leaves 2 (tolerated), rank 2's then leaves 1: the job is
 * stopped (rank 0, waiting, gets SIGTERM) and weftrun exits with rank 2's status.
 */
static void test_below_min_stops(void **state)
{
    (void)state;
    run_expect(SH("-n", "3", "--elastic", "--min", "2", "--", "/bin/sh", "-c",
                  SH_LIB "case $WEFT_RANK in\n"
                         "  1) put pid.1 $$; exit 5 ;;\n"
                         "  2) wait_file ready.0; reaped 1; exit 7 ;;\n"
                         "esac\n"
                         "trap 'put term.0 got; exit 0' TERM\n"
                         "put ready.0 ok; sleep 30 & wait"),
               7, "fewer than --min 2: stopping the job");
    assert_true(have_file("term.0"));
}

/* With --replace the replacement counts: --min 2 of 2 holds until replacements run out. */
static void test_below_min_after_restarts(void **state)
{
    (void)state;
    run_expect(SH("-n", "2", "--elastic", "--replace", "--max-restarts", "1", "--min", "2", "--",
                  "/bin/sh", "-c",
                  SH_LIB "case $WEFT_RANK in\n"
                         "  1) exit 3 ;;\n"
                         "  2) wait_file ready.0; kill -USR1 $$ ;;\n"
                         "esac\n"
                         "trap 'put term.0 got; exit 0' TERM\n"
                         "put ready.0 ok; sleep 30 & wait"),
               128 + SIGUSR1, "fewer than --min 2");
    assert_true(have_file("env.2"));
    assert_false(have_file("env.3"));
    assert_true(have_file("term.0"));
}

/* Once a process has exited 0 the job is finishing: a death is not replaced and counts. */
static void test_death_while_finishing(void **state)
{
    (void)state;
    run_expect(SH("-n", "2", "--elastic", "--replace", "--", "/bin/sh", "-c",
                  SH_LIB "if [ $WEFT_RANK = 0 ]; then put pid.0 $$; exit 0; fi\n"
                         "reaped 0; exit 4"),
               4, "the job fails");
    assert_false(have_file("env.2"));
}

/* A member another member reported failed before the job began to finish was repaired
 * away: its death reaped after the first exit 0 (a process killed with SIGKILL closes its
 * sockets before weftrun can reap it) does not fail the job. */
static void test_reported_death_while_finishing(void **state)
{
    (void)state;
    char script[2048];
    snprintf(script, sizeof(script),
             SH_LIB "if [ $WEFT_RANK = 1 ]; then put pid.1 $$; sleep 30 & wait; fi\n"
                    "if [ $WEFT_RANK = 0 ]; then wait_file pid.1;\n"
                    "  '%s' weft/failed/1 'reported by member 0' || exit 9;\n"
                    "  put pid.0 $$; exit 0; fi\n"
                    "reaped 0; kill -KILL $(cat \"$WT_DIR/pid.1\"); reaped 1; exit 0",
             store_set);
    /* store_set speaks to the store with the token. */
    run_expect(SH("-n", "3", "--elastic", "--share-token", "--", "/bin/sh", "-c", script), 0,
               "no longer a member");
}

/*
 * Rank 1 exits WEFT_EXIT_JOB_FAILED once the others wait: it says the job failed, so
 * nobody replaces it, the others are stopped (they would sleep 30 s otherwise) and
 * weftrun exits with its status.
 */
static void test_job_failed_not_replaced(void **state)
{
    (void)state;
    char script[2048];
    snprintf(script, sizeof(script),
             SH_LIB "case $WEFT_RANK in\n"
                    "  1) wait_file ready.0; wait_file ready.2; exit %d ;;\n"
                    "  0|2) ;;\n"
                    "  *) exit 0 ;;\n"
                    "esac\n"
                    "trap 'put term.$WEFT_RANK got; exit 0' TERM\n"
                    "put ready.$WEFT_RANK ok; sleep 30 & wait",
             WEFT_EXIT_JOB_FAILED);
    run_expect(SH("-n", "3", "--elastic", "--replace", "--", "/bin/sh", "-c", script),
               WEFT_EXIT_JOB_FAILED, "the job failed; stopping the job");
    assert_false(have_file("env.3"));
    assert_true(have_file("term.0"));
    assert_true(have_file("term.2"));
}

/*
 * The run the issue saw, in order: rank 2 dies and is replaced (member 3); rank 1 then
 * says the job failed; the replacement and rank 0 find the job over and exit 0 (as the
 * trainer's late joiners do). The job failed all the same: exit WEFT_EXIT_JOB_FAILED, and
 * rank 1 is not replaced.
 */
static void test_job_failed_then_exit_0(void **state)
{
    (void)state;
    char script[2048];
    snprintf(script, sizeof(script),
             SH_LIB "case $WEFT_RANK in\n"
                    "  2) kill -9 $$ ;;\n"
                    "  1) wait_file env.3; put pid.1 $$; exit %d ;;\n"
                    "esac\n"
                    "trap 'exit 0' TERM\n"
                    "reaped 1; exit 0",
             WEFT_EXIT_JOB_FAILED);
    run_expect(SH("-n", "3", "--elastic", "--replace", "--", "/bin/sh", "-c", script),
               WEFT_EXIT_JOB_FAILED, "WEFT_EXIT_JOB_FAILED");
    assert_true(have_file("env.3"));
    assert_false(have_file("env.4"));
}

/* The same once the job is finishing (a process exited 0 first): not replaced, it fails. */
static void test_job_failed_while_finishing(void **state)
{
    (void)state;
    char script[2048];
    snprintf(script, sizeof(script),
             SH_LIB "if [ $WEFT_RANK = 0 ]; then put pid.0 $$; exit 0; fi\n"
                    "reaped 0; exit %d",
             WEFT_EXIT_JOB_FAILED);
    run_expect(SH("-n", "2", "--elastic", "--replace", "--", "/bin/sh", "-c", script),
               WEFT_EXIT_JOB_FAILED, "WEFT_EXIT_JOB_FAILED");
    assert_false(have_file("env.2"));
}

/* A program that cannot be executed is not replaced over and over: the job stops. */
static void test_exec_failure_not_replaced(void **state)
{
    (void)state;
    FILE *f = fopen(wr_path("bad"), "w");
    assert_non_null(f);
    fputs("\177ELF not really", f);
    fclose(f);
    chmod(wr_path("bad"), 0755);
    char bad[512];
    snprintf(bad, sizeof(bad), "%s", wr_path("bad"));
    run_expect(SH("-n", "2", "--elastic", "--replace", "--", bad), 127,
               "could not run the program");
}

/* The ordinary stop paths still work: --timeout stops an elastic job. */
static void test_timeout(void **state)
{
    (void)state;
    run_expect(SH("-n", "2", "--elastic", "--replace", "--timeout", "0.3", "--", "sleep", "30"),
               124, "timed out");
}

#define T(f) cmocka_unit_test_setup_teardown(f, wr_setup, wr_teardown)

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PATH-TO-WEFTRUN PATH-TO-STORE_SET\n", argv[0]);
        return 2;
    }
    wr_weftrun = argv[1];
    store_set = argv[2];
    const struct CMUnitTest tests[] = {
        T(test_death_does_not_stop_job),
        T(test_elastic_with_keep_going),
        T(test_replace_env),
        T(test_max_restarts),
        T(test_max_restarts_zero),
        T(test_below_min_stops),
        T(test_below_min_after_restarts),
        T(test_death_while_finishing),
        T(test_reported_death_while_finishing),
        T(test_job_failed_not_replaced),
        T(test_job_failed_then_exit_0),
        T(test_job_failed_while_finishing),
        T(test_exec_failure_not_replaced),
        T(test_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
