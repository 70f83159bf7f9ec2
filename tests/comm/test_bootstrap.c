#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "comm/ctx/bootstrap.h"
#include "weft/weft.h"

static const char *const all_vars[] = {
    "WEFT_RANK",
    "WEFT_WORLD_SIZE",
    "WEFT_LOCAL_RANK",
    "WEFT_LOCAL_SIZE",
    "WEFT_STORE",
    "WEFT_JOB_TOKEN",
    "WEFT_JOB_TOKEN_FILE",
    "WEFT_MEMBER_SECRET_FD",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "PMIX_RANK",
    "PMIX_NAMESPACE",
    "WEFT_PMIX_LIBRARY",
    "WEFT_JOIN",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
};

static void quiet(weft_log_level_t l, int r, const char *m, void *a)
{
    (void)l;
    (void)r;
    (void)m;
    (void)a;
}
static const weft_logger_t lg = {.level = WEFT_LOG_TRACE, .rank = -1, .fn = quiet};

static int errors_logged;

static void count_errors(weft_log_level_t l, int r, const char *m, void *a)
{
    (void)r;
    (void)m;
    (void)a;
    errors_logged += l == WEFT_LOG_ERROR;
}

/* A store that is not there: weft_init fails with one error logged (the store client's,
 * which says why), not one per layer it passes through; weft_last_error(NULL) says which
 * store. */
static void test_store_absent_one_error(void **state)
{
    (void)state;
    setenv("WEFT_RANK", "0", 1);
    setenv("WEFT_WORLD_SIZE", "2", 1);
    setenv("WEFT_STORE", "127.0.0.1:1", 1);
    setenv("WEFT_JOB_TOKEN", "0123456789abcdef0123456789abcdef", 1);
    setenv("WEFT_CONNECT_TIMEOUT_MS", "200", 1);
    weft_init_params_t p = {.size = sizeof(p), .log_fn = count_errors};
    weft_ctx_t *ctx = NULL;
    errors_logged = 0;
    assert_int_not_equal(weft_init(&p, &ctx), WEFT_OK);
    assert_null(ctx);
    assert_int_equal(errors_logged, 1);
    assert_non_null(strstr(weft_last_error(NULL), "127.0.0.1:1"));
    unsetenv("WEFT_CONNECT_TIMEOUT_MS");
}

static int setup(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(all_vars) / sizeof(all_vars[0]); i++) {
        unsetenv(all_vars[i]);
    }
    weft__bootstrap_forget_token();
    return 0;
}

static void test_singleton(void **state)
{
    (void)state;
    weft_boot_t b;
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_int_equal(b.rank, 0);
    assert_int_equal(b.size, 1);
    assert_string_equal(b.launcher, "singleton");
    assert_string_equal(b.store, "");
}

static void test_weftrun(void **state)
{
    (void)state;
    weft_boot_t b;
    setenv("WEFT_RANK", "2", 1);
    setenv("WEFT_WORLD_SIZE", "4", 1);
    setenv("WEFT_LOCAL_RANK", "2", 1);
    setenv("WEFT_LOCAL_SIZE", "4", 1);
    setenv("WEFT_STORE", "127.0.0.1:4000", 1);
    setenv("WEFT_JOB_TOKEN", "abc", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_int_equal(b.rank, 2);
    assert_int_equal(b.size, 4);
    assert_int_equal(b.local_rank, 2);
    assert_string_equal(b.launcher, "weftrun");
    assert_string_equal(b.store, "127.0.0.1:4000");
    assert_string_equal(b.token, "abc");
}

/* A replacement started by weftrun learns how many ranks share its host, like the
 * others: its idle policy (spin or yield) depends on it. */
static void test_joiner(void **state)
{
    (void)state;
    weft_boot_t b;
    setenv("WEFT_JOIN", "1", 1);
    setenv("WEFT_RANK", "5", 1);
    setenv("WEFT_WORLD_SIZE", "4", 1);
    setenv("WEFT_LOCAL_RANK", "1", 1);
    setenv("WEFT_LOCAL_SIZE", "4", 1);
    setenv("WEFT_STORE", "127.0.0.1:4000", 1);
    setenv("WEFT_JOB_TOKEN", "abc", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_true(b.joining);
    assert_int_equal(b.rank, 5);
    assert_int_equal(b.local_rank, 1);
    assert_int_equal(b.local_size, 4);
    /* Started by hand without them: alone on its host. */
    unsetenv("WEFT_LOCAL_RANK");
    unsetenv("WEFT_LOCAL_SIZE");
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_int_equal(b.local_rank, 0);
    assert_int_equal(b.local_size, 1);
}

static void test_mpirun_and_srun(void **state)
{
    (void)state;
    weft_boot_t b;
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    setenv("WEFT_STORE", "h:1", 1);
    setenv("WEFT_JOB_TOKEN", "t", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.launcher, "mpirun");
    assert_int_equal(b.rank, 1);
    assert_int_equal(b.size, 3);
    setup(NULL);
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1);
    setenv("WEFT_STORE", "h:1", 1);
    setenv("WEFT_JOB_TOKEN", "t", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.launcher, "srun");
    assert_int_equal(b.rank, 5);
    assert_int_equal(b.size, 8);
    assert_int_equal(b.local_size, 4);
}

/* torchrun's and Hydra's variables are read like mpirun's. */
static void test_torchrun_and_pmi(void **state)
{
    (void)state;
    weft_boot_t b;
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("WEFT_STORE", "h:1", 1);
    setenv("WEFT_JOB_TOKEN", "t", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.launcher, "torchrun");
    assert_int_equal(b.rank, 3);
    assert_int_equal(b.size, 8);
    assert_int_equal(b.local_rank, 1);
    assert_int_equal(b.local_size, 2);
    setup(NULL);
    setenv("PMI_RANK", "2", 1);
    setenv("PMI_SIZE", "5", 1);
    setenv("MPI_LOCALRANKID", "0", 1);
    setenv("MPI_LOCALNRANKS", "3", 1);
    setenv("WEFT_STORE", "h:1", 1);
    setenv("WEFT_JOB_TOKEN", "t", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.launcher, "pmi");
    assert_int_equal(b.rank, 2);
    assert_int_equal(b.size, 5);
    assert_int_equal(b.local_size, 3);
}

/*
 * Launchers nest: weftrun under srun (one per node) or inside an sbatch script, torchrun
 * under srun, mpirun in a Slurm allocation. The innermost launcher's variables win and the
 * outer ones, which describe the process that started this one, are not held against them.
 */
static void test_nested_launchers(void **state)
{
    (void)state;
    weft_boot_t b;
    setenv("WEFT_STORE", "h:1", 1);
    setenv("WEFT_JOB_TOKEN", "t", 1);
    setenv("SLURM_PROCID", "1", 1); /* the second of two nodes */
    setenv("SLURM_NTASKS", "2", 1);
    setenv("RANK", "5", 1);
    setenv("WORLD_SIZE", "8", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.launcher, "torchrun");
    assert_int_equal(b.rank, 5);
    assert_int_equal(b.size, 8);
    setenv("OMPI_COMM_WORLD_RANK", "6", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.launcher, "mpirun");
    assert_int_equal(b.rank, 6);
    setenv("WEFT_RANK", "7", 1);
    setenv("WEFT_WORLD_SIZE", "8", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.launcher, "weftrun");
    assert_int_equal(b.rank, 7);
    assert_int_equal(b.size, 8);
}

/* Another launcher's ranks without a store: refused, never N singletons, and the reason
 * names the variables seen and how to launch; the output is left alone. */
static void test_no_store_refused(void **state)
{
    (void)state;
    static const struct {
        const char *rank, *size, *launcher;
    } envs[] = {
        {"RANK", "WORLD_SIZE", "torchrun"},
        {"PMI_RANK", "PMI_SIZE", "pmi"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun"},
        {"SLURM_PROCID", "SLURM_NTASKS", "srun"},
    };
    for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
        setup(NULL);
        setenv(envs[i].rank, "3", 1);
        setenv(envs[i].size, "8", 1);
        weft_boot_t b;
        memset(&b, 0x5a, sizeof(b));
        char why[512] = "", want[128];
        assert_int_equal(weft__bootstrap(&lg, &b, why, sizeof(why)), WEFT_ERR_INVALID_ARG);
        assert_int_equal(((unsigned char *)&b)[0], 0x5a);
        snprintf(want, sizeof(want), "%s=3 %s=8 set by %s but no WEFT_STORE", envs[i].rank,
                 envs[i].size, envs[i].launcher);
        if (strstr(why, want) == NULL || strstr(why, "weftrun --store-only") == NULL ||
            strstr(why, "weftrun -n 8") == NULL ||
            (strcmp(envs[i].launcher, "srun") == 0) != (strstr(why, "srun --mpi=pmix") != NULL)) {
            fail_msg("%s: '%s'", envs[i].launcher, why);
        }
        assert_null(strstr(why, "MASTER_ADDR"));
        /* One rank of one is a singleton whatever launched it. */
        setenv(envs[i].rank, "0", 1);
        setenv(envs[i].size, "1", 1);
        assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
        assert_int_equal(b.size, 1);
        assert_string_equal(b.store, "");
    }
    /* torchrun's rendezvous variables are named as what they are. */
    setup(NULL);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    weft_boot_t b;
    char why[512] = "";
    assert_int_equal(weft__bootstrap(&lg, &b, why, sizeof(why)), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(why, "MASTER_ADDR and MASTER_PORT are torch's store"));
}

/* WEFT_JOB_TOKEN_FILE: the token from a file only this user can read; a file that others
 * can read, or one that is not there, fails with the reason instead. */
static void test_token_file(void **state)
{
    (void)state;
    char path[] = "/tmp/weft-test-token-XXXXXX";
    int fd = mkstemp(path); /* 0600 */
    assert_true(fd >= 0);
    const char *tok = "00112233445566778899aabbccddeeff\n";
    assert_int_equal(write(fd, tok, strlen(tok)), (ssize_t)strlen(tok));
    close(fd);
    weft_boot_t b;
    char why[640] = "";
    setenv("WEFT_RANK", "0", 1);
    setenv("WEFT_WORLD_SIZE", "2", 1);
    setenv("WEFT_STORE", "h:1", 1);
    setenv("WEFT_JOB_TOKEN_FILE", path, 1);
    assert_int_equal(weft__bootstrap(&lg, &b, why, sizeof(why)), WEFT_OK);
    assert_string_equal(b.token, "00112233445566778899aabbccddeeff");
    weft__bootstrap_forget_token();
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(weft__bootstrap(&lg, &b, why, sizeof(why)), WEFT_ERR_AUTH);
    assert_non_null(strstr(why, "WEFT_JOB_TOKEN_FILE"));
    assert_non_null(strstr(why, "mode 0644"));
    unlink(path);
    assert_int_equal(weft__bootstrap(&lg, &b, why, sizeof(why)), WEFT_ERR_AUTH);
    assert_non_null(strstr(why, "cannot read"));
}

/* A PMIx server started the process (srun --mpi=pmix, mpirun) and no store is given: not
 * refused, PMIx takes over; a store, when given, still wins, and a joiner needs one. */
static void test_pmix_without_store(void **state)
{
    (void)state;
    weft_boot_t b;
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("PMIX_RANK", "1", 1);
    setenv("PMIX_NAMESPACE", "job.7", 1);
    char why[512] = "";
    assert_int_equal(weft__bootstrap(&lg, &b, why, sizeof(why)), WEFT_OK);
    assert_true(b.via_pmix);
    assert_string_equal(b.store, "");
    setenv("WEFT_STORE", "h:1", 1);
    setenv("WEFT_JOB_TOKEN", "t", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_false(b.via_pmix);
    assert_string_equal(b.store, "h:1");
    unsetenv("WEFT_STORE");
    setenv("WEFT_JOIN", "1", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_ERR_INVALID_ARG);
    unsetenv("WEFT_JOIN");
    /* Half a PMIx environment is no PMIx server: refused as before. */
    unsetenv("PMIX_NAMESPACE");
    assert_int_equal(weft__bootstrap(&lg, &b, why, sizeof(why)), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(why, "no WEFT_STORE"));
}

/* PMIx that cannot be loaded: weft_init fails, naming the library and the ways out. */
static void test_pmix_library_absent(void **state)
{
    (void)state;
    setenv("PMIX_RANK", "0", 1);
    setenv("PMIX_NAMESPACE", "job.7", 1);
    setenv("WEFT_PMIX_LIBRARY", "libweft-no-such-pmix.so", 1);
    weft_init_params_t p = {.size = sizeof(p), .log_fn = quiet};
    weft_ctx_t *ctx = NULL;
    weft_status_t st = weft_init(&p, &ctx);
    assert_null(ctx);
    const char *why = weft_last_error(NULL);
    if (strstr(why, "built without PMIx") == NULL) { /* else: no pmix.h at build time */
        assert_int_equal(st, WEFT_ERR_UNSUPPORTED);
        assert_non_null(strstr(why, "libweft-no-such-pmix.so"));
        assert_non_null(strstr(why, "WEFT_PMIX_LIBRARY"));
    }
}

/* The token leaves the environment (children of the program do not inherit it); later
 * contexts of the process still get it, and a token set again replaces it. */
static void test_token_taken_from_environment(void **state)
{
    (void)state;
    weft_boot_t b;
    setenv("WEFT_STORE", "127.0.0.1:4000", 1);
    setenv("WEFT_JOB_TOKEN", "abc", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.token, "abc");
    assert_null(getenv("WEFT_JOB_TOKEN"));
    memset(&b, 0, sizeof(b));
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.token, "abc");
    setenv("WEFT_JOB_TOKEN", "xyz", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_OK);
    assert_string_equal(b.token, "xyz");
    assert_null(getenv("WEFT_JOB_TOKEN"));
    /* Too long for a context: refused, not cut short. */
    char longer[200];
    memset(longer, 'k', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    setenv("WEFT_JOB_TOKEN", longer, 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_ERR_AUTH);
}

static void test_bad_environment(void **state)
{
    (void)state;
    weft_boot_t b;
    /* Several ranks without a store. */
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_ERR_INVALID_ARG);
    /* Store without token. */
    setenv("WEFT_STORE", "127.0.0.1:5", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_ERR_AUTH);
    /* Store that is not host:port. */
    setenv("WEFT_JOB_TOKEN", "t", 1);
    setenv("WEFT_STORE", "localhost", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_ERR_INVALID_ARG);
    /* Rank out of range, malformed numbers. */
    setenv("WEFT_STORE", "h:1", 1);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_ERR_INVALID_ARG);
    setenv("OMPI_COMM_WORLD_RANK", "one", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_ERR_INVALID_ARG);
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "0", 1);
    assert_int_equal(weft__bootstrap(&lg, &b, NULL, 0), WEFT_ERR_INVALID_ARG);
}

/* The line weftrun writes into a rank's secret pipe: "weft-member-v1 <id> <64 hex> <64
 * hex>\n". Exactly that is taken; anything else is refused and leaves nothing behind. */
static void test_member_secret_parse(void **state)
{
    (void)state;
    char hex_a[65], hex_b[65], line[256];
    for (int i = 0; i < 32; i++) {
        snprintf(hex_a + 2 * i, 3, "%02x", i * 7 + 1);
        snprintf(hex_b + 2 * i, 3, "%02x", 255 - i);
    }
    weft_store_cred_t c;
    snprintf(line, sizeof(line), "weft-member-v1 42 %s %s\n", hex_a, hex_b);
    assert_true(weft__member_secret_parse(line, strlen(line), &c));
    assert_int_equal(c.id, 42);
    for (int i = 0; i < 32; i++) {
        assert_int_equal(c.secret[i], i * 7 + 1);
        assert_int_equal(c.data_key[i], 255 - i);
    }
    const char *bad_ids[] = {"", "-1", "2147483648", "99999999999", "4x", " 4"};
    for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
        snprintf(line, sizeof(line), "weft-member-v1 %s %s %s\n", bad_ids[i], hex_a, hex_b);
        assert_false(weft__member_secret_parse(line, strlen(line), &c));
    }
    char upper[65];
    memcpy(upper, hex_a, sizeof(upper));
    upper[10] = 'A';
    const char *bad_lines[][3] = {
        {"weft-member-v2 1 ", hex_a, hex_b},     /* another version */
        {"weft-member-v1 1 ", upper, hex_b},     /* uppercase hex */
        {"weft-member-v1 1 ", hex_a + 2, hex_b}, /* short */
    };
    for (size_t i = 0; i < sizeof(bad_lines) / sizeof(bad_lines[0]); i++) {
        snprintf(line, sizeof(line), "%s%s %s\n", bad_lines[i][0], bad_lines[i][1],
                 bad_lines[i][2]);
        assert_false(weft__member_secret_parse(line, strlen(line), &c));
    }
    snprintf(line, sizeof(line), "weft-member-v1 1 %s %s", hex_a, hex_b); /* no line end */
    assert_false(weft__member_secret_parse(line, strlen(line), &c));
    snprintf(line, sizeof(line), "weft-member-v1 1 %s %s\nx", hex_a, hex_b); /* more */
    assert_false(weft__member_secret_parse(line, strlen(line), &c));
    snprintf(line, sizeof(line), "weft-member-v1 1 %s  %s\n", hex_a, hex_b + 1); /* spacing */
    assert_false(weft__member_secret_parse(line, strlen(line), &c));
    /* Refused: the secret is not left in the output. */
    for (size_t i = 0; i < sizeof(c.secret); i++) {
        assert_int_equal(c.secret[i], 0);
    }
}

/* A rank with a secret pipe: its id must be WEFT_RANK's, a pipe that holds no valid line
 * is refused, and the variable is gone once read. */
static void test_member_secret_pipe(void **state)
{
    (void)state;
    char hex[65], line[256], fd_text[16];
    for (int i = 0; i < 32; i++) {
        snprintf(hex + 2 * i, 3, "%02x", i);
    }
    int ids[] = {1, 2};
    for (int k = 0; k < 3; k++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        if (k < 2) {
            snprintf(line, sizeof(line), "weft-member-v1 %d %s %s\n", ids[k], hex, hex);
        } else {
            snprintf(line, sizeof(line), "not a secret\n");
        }
        assert_int_equal(write(p[1], line, strlen(line)), (ssize_t)strlen(line));
        close(p[1]);
        snprintf(fd_text, sizeof(fd_text), "%d", p[0]);
        setenv("WEFT_RANK", "1", 1);
        setenv("WEFT_WORLD_SIZE", "3", 1);
        setenv("WEFT_STORE", "127.0.0.1:5", 1);
        setenv("WEFT_MEMBER_SECRET_FD", fd_text, 1);
        weft_boot_t b;
        weft_status_t st = weft__bootstrap(&lg, &b, NULL, 0);
        assert_null(getenv("WEFT_MEMBER_SECRET_FD"));
        if (k == 0) {
            assert_int_equal(st, WEFT_OK);
            assert_true(b.member_only);
            assert_int_equal(b.cred.id, 1);
            assert_string_equal(b.token, "");
        } else {
            assert_int_equal(st, WEFT_ERR_AUTH); /* for member 2, or no secret at all */
        }
        weft__bootstrap_forget_token();
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_member_secret_parse, setup),
        cmocka_unit_test_setup(test_member_secret_pipe, setup),
        cmocka_unit_test_setup(test_singleton, setup),
        cmocka_unit_test_setup(test_weftrun, setup),
        cmocka_unit_test_setup(test_joiner, setup),
        cmocka_unit_test_setup(test_mpirun_and_srun, setup),
        cmocka_unit_test_setup(test_torchrun_and_pmi, setup),
        cmocka_unit_test_setup(test_nested_launchers, setup),
        cmocka_unit_test_setup(test_no_store_refused, setup),
        cmocka_unit_test_setup(test_bad_environment, setup),
        cmocka_unit_test_setup(test_token_taken_from_environment, setup),
        cmocka_unit_test_setup(test_store_absent_one_error, setup),
        cmocka_unit_test_setup(test_pmix_without_store, setup),
        cmocka_unit_test_setup(test_token_file, setup),
        cmocka_unit_test_setup(test_pmix_library_absent, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
