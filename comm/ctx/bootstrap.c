#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/ctx/boot_pmix.h"
#include "comm/ctx/bootstrap.h"
#include "util/hex.h"
#include "util/parse.h"
#include "util/secret_file.h"

typedef struct env_source {
    const char *launcher;
    const char *rank, *size, *local_rank, *local_size;
} env_source_t;

/*
 * Launchers whose variables say who a process is, in order of precedence: the first one
 * present wins. Launchers nest (srun starts one weftrun or torchrun per node, mpirun
 * runs inside a Slurm allocation), so an outer launcher's variables describe the
 * process that started this one, and the innermost launcher comes first.
 */
static const env_source_t sources[] = {
    {"weftrun", "WEFT_RANK", "WEFT_WORLD_SIZE", "WEFT_LOCAL_RANK", "WEFT_LOCAL_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"pmix", "PMIX_RANK", "WEFT_WORLD_SIZE", NULL, NULL},
};

/*
 * The job token, taken out of the environment by the first weft_init of the process
 * that finds it there: the program's own children (data loaders, shell commands) need
 * not inherit the secret, and weft needs it only here. Later contexts of the process (a
 * second weft_init, weft-perf's rebuilds) read it from this copy; a token set again in
 * the environment replaces it. The one piece of state weft keeps per process.
 */
static pthread_mutex_t token_lock = PTHREAD_MUTEX_INITIALIZER;
/* One byte more than a context takes, so that a token too long is seen as one. */
#define TOKEN_COPY_LEN (sizeof(((weft_boot_t *)0)->token) + 1)
static char token_kept[TOKEN_COPY_LEN];

/*
 * The job token into @p out ("" when there is none): WEFT_JOB_TOKEN, else the first line
 * of WEFT_JOB_TOKEN_FILE (a file only this user can read: util/secret_file.h; weftrun
 * --store-only names one), else the copy kept by an earlier context. False, with the
 * reason in @p why, when the file is refused.
 */
static bool take_token(char out[TOKEN_COPY_LEN], char *why, size_t why_len)
{
    bool ok = true;
    pthread_mutex_lock(&token_lock);
    const char *env = getenv("WEFT_JOB_TOKEN"), *file = getenv("WEFT_JOB_TOKEN_FILE");
    if (env != NULL) {
        snprintf(token_kept, sizeof(token_kept), "%s", env);
        unsetenv("WEFT_JOB_TOKEN");
    } else if (file != NULL && file[0] != '\0') {
        char reason[512];
        ok = weft__read_secret_file(file, token_kept, sizeof(token_kept), reason, sizeof(reason));
        if (!ok) {
            snprintf(why, why_len, "WEFT_JOB_TOKEN_FILE: %s", reason);
        }
    }
    memcpy(out, token_kept, TOKEN_COPY_LEN);
    pthread_mutex_unlock(&token_lock);
    return ok;
}

/* The member secret weftrun handed this process, kept like the token (later contexts of
 * the process are the same member). */
static weft_store_cred_t cred_kept;
static bool cred_held;

bool weft__member_secret_parse(const char *line, size_t len, weft_store_cred_t *cred)
{
    static const char magic[] = "weft-member-v1 ";
    size_t m = sizeof(magic) - 1, i = m;
    uint64_t id = 0;
    if (len < m || memcmp(line, magic, m) != 0) {
        return false;
    }
    while (i < len && i - m < 10 && line[i] >= '0' && line[i] <= '9') {
        id = id * 10 + (uint64_t)(line[i++] - '0');
    }
    /* id, a space, 64 hex, a space, 64 hex, a line end, nothing more. */
    if (i == m || id > INT32_MAX || len != i + 1 + 64 + 1 + 64 + 1 || line[i] != ' ' ||
        line[i + 65] != ' ' || line[len - 1] != '\n' || !weft__hex_decode(line + i + 1, 32, cred->secret) ||
        !weft__hex_decode(line + i + 66, 32, cred->data_key)) {
        OPENSSL_cleanse(cred, sizeof(*cred));
        return false;
    }
    cred->id = (uint32_t)id;
    return true;
}

/*
 * This rank's member secret from the pipe WEFT_MEMBER_SECRET_FD names (read to its end,
 * closed, the variable removed), or the copy an earlier context kept. 1: *cred holds it;
 * 0: none was given; -1: refused, the reason in @p why.
 */
static int take_member_secret(weft_store_cred_t *cred, char *why, size_t why_len)
{
    int got = 0;
    pthread_mutex_lock(&token_lock);
    const char *var = getenv("WEFT_MEMBER_SECRET_FD");
    if (var != NULL) {
        int64_t fd = -1;
        char line[200];
        size_t len = 0;
        if (weft__parse_i64(var, 3, INT32_MAX, &fd)) {
            ssize_t n;
            while (len < sizeof(line) && ((n = read((int)fd, line + len, sizeof(line) - len)) > 0 ||
                                          (n < 0 && errno == EINTR))) {
                len += n > 0 ? (size_t)n : 0;
            }
            close((int)fd);
        }
        unsetenv("WEFT_MEMBER_SECRET_FD");
        cred_held = fd >= 3 && weft__member_secret_parse(line, len, &cred_kept);
        OPENSSL_cleanse(line, sizeof(line));
        if (!cred_held) {
            snprintf(why, why_len,
                     "WEFT_MEMBER_SECRET_FD=%.20s does not name a pipe holding this rank's "
                     "secret (weftrun hands it; a process it did not start is given "
                     "WEFT_JOB_TOKEN or WEFT_JOB_TOKEN_FILE instead)",
                     var);
            got = -1;
        }
    }
    if (cred_held) {
        *cred = cred_kept;
        got = 1;
    }
    pthread_mutex_unlock(&token_lock);
    return got;
}

void weft__bootstrap_forget_token(void)
{
    pthread_mutex_lock(&token_lock);
    OPENSSL_cleanse(token_kept, sizeof(token_kept));
    OPENSSL_cleanse(&cred_kept, sizeof(cred_kept));
    cred_held = false;
    pthread_mutex_unlock(&token_lock);
}

/* -1: absent; -2: malformed; else the value. */
static int env_int(const char *name)
{
    if (name == NULL) {
        return -1;
    }
    const char *s = getenv(name);
    if (s == NULL || *s == '\0') {
        return -1;
    }
    /* SLURM_NTASKS_PER_NODE may read "4(x2)": the leading number is what we want. */
    char num[24];
    size_t n = strcspn(s, "(");
    int64_t v;
    if (n >= sizeof(num)) {
        return -2;
    }
    memcpy(num, s, n);
    num[n] = '\0';
    return weft__parse_i64(num, 0, 1 << 30, &v) ? (int)v : -2;
}

weft_status_t weft__boot_fail(const weft_logger_t *lg, char *why, size_t why_len,
                              weft_status_t st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    WEFT_ERROR(lg, "%s", msg);
    if (why != NULL && why_len > 0) {
        snprintf(why, why_len, "%s", msg);
    }
    return st;
}

static weft_status_t read_source(const weft_logger_t *lg, const env_source_t *src, weft_boot_t *b,
                                 char *why, size_t why_len)
{
    int rank = env_int(src->rank), size = env_int(src->size);
    if (rank == -2 || size == -2) {
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_INVALID_ARG, "%s or %s is not a number", src->rank,
                    src->size);
    }
    if (size < 1 || rank >= size) {
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_INVALID_ARG, "%s=%d and %s=%d are inconsistent",
                    src->rank, rank, src->size, size);
    }
    int lrank = env_int(src->local_rank), lsize = env_int(src->local_size);
    b->rank = rank;
    b->size = size;
    b->local_rank = lrank >= 0 ? lrank : 0;
    b->local_size = lsize > 0 ? lsize : 1;
    snprintf(b->launcher, sizeof(b->launcher), "%s", src->launcher);
    return WEFT_OK;
}

static weft_status_t bootstrap_joiner(const weft_logger_t *lg, weft_boot_t *b, char *why,
                                      size_t why_len)
{
    int rank = env_int("WEFT_RANK"), size = env_int("WEFT_WORLD_SIZE");
    if (rank == -2 || size == -2) {
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_INVALID_ARG,
                    "WEFT_RANK or WEFT_WORLD_SIZE is not a number");
    }
    b->joining = true;
    b->rank = rank; /* -1: assigned by the store */
    b->size = size > 0 ? size : 1;
    /* Where the launcher says how many ranks share this host, believe it: the idle policy
     * depends on it, and a joiner that took itself for alone spun on a core that the
     * others needed (a job with a replacement trained 5-35% slower on 2 cores). */
    int lrank = env_int("WEFT_LOCAL_RANK"), lsize = env_int("WEFT_LOCAL_SIZE");
    b->local_size = lsize > 0 ? lsize : 1;
    b->local_rank = lrank >= 0 && lrank < b->local_size ? lrank : 0;
    snprintf(b->launcher, sizeof(b->launcher), "join");
    return WEFT_OK;
}

/*
 * Several ranks and no store: each would run alone as rank 0 of 1, so refuse, naming the
 * variables that were seen and the two ways to launch.
 */
static weft_status_t refuse_without_store(const weft_logger_t *lg, const env_source_t *src,
                                          const weft_boot_t *b, char *why, size_t why_len)
{
    if (src == NULL) {
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_INVALID_ARG,
                    "WEFT_JOIN=1 (a process joining a running job) but no WEFT_STORE: a "
                    "joiner needs the job's store (WEFT_STORE and WEFT_JOB_TOKEN)");
    }
    const char *torch = getenv("MASTER_ADDR") != NULL || getenv("MASTER_PORT") != NULL
                            ? " (MASTER_ADDR and MASTER_PORT are torch's store, which weft "
                              "does not use)"
                            : "";
    /* srun without --mpi=pmix starts no PMIx server: say that it would have sufficed. */
    const char *srun = strcmp(src->launcher, "srun") == 0
                           ? ", or with srun --mpi=pmix, which weft bootstraps from"
                           : "";
    return weft__boot_fail(lg, why, why_len, WEFT_ERR_INVALID_ARG,
                "%s=%d %s=%d set by %s but no WEFT_STORE, so this process would run alone as "
                "rank 0 of 1. Start the job with weftrun (weftrun -n %d -- PROGRAM)%s, or keep "
                "%s and give every rank a store: run 'weftrun --store-only' once and export "
                "the WEFT_STORE and WEFT_JOB_TOKEN it prints%s",
                src->rank, b->rank, src->size, b->size, src->launcher, b->size, srun,
                src->launcher, torch);
}

weft_status_t weft__bootstrap(const weft_logger_t *lg, weft_boot_t *boot, char *why, size_t why_len)
{
    weft_boot_t b;
    memset(&b, 0, sizeof(b));
    const env_source_t *src = NULL;
    const char *join = getenv("WEFT_JOIN");
    if (join != NULL && strcmp(join, "1") == 0) {
        weft_status_t st = bootstrap_joiner(lg, &b, why, why_len);
        if (st != WEFT_OK) {
            return st;
        }
        goto store;
    }
    const char *given = getenv("WEFT_STORE");
    if ((given == NULL || *given == '\0') && weft__pmix_present()) {
        /* A PMIx server started this process: it says who the process is, and the store
         * comes through it (comm/ctx/boot_pmix.c). */
        b.via_pmix = true;
        snprintf(b.launcher, sizeof(b.launcher), "pmix");
        *boot = b;
        return WEFT_OK;
    }
    for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]) && src == NULL; i++) {
        if (env_int(sources[i].rank) != -1) {
            src = &sources[i];
        }
    }
    if (src == NULL) {
        b.rank = 0;
        b.size = 1;
        b.local_rank = 0;
        b.local_size = 1;
        snprintf(b.launcher, sizeof(b.launcher), "singleton");
    } else {
        weft_status_t st = read_source(lg, src, &b, why, why_len);
        if (st != WEFT_OK) {
            return st;
        }
    }
store:;
    const char *store = getenv("WEFT_STORE");
    if (store != NULL && *store != '\0') {
        if (strlen(store) >= sizeof(b.store) || strchr(store, ':') == NULL) {
            return weft__boot_fail(lg, why, why_len, WEFT_ERR_INVALID_ARG,
                        "WEFT_STORE='%.300s' is not host:port", store);
        }
        snprintf(b.store, sizeof(b.store), "%s", store);
        char token[TOKEN_COPY_LEN], refused[640];
        int held = take_member_secret(&b.cred, refused, sizeof(refused));
        if (held < 0) {
            return weft__boot_fail(lg, why, why_len, WEFT_ERR_AUTH, "%s", refused);
        }
        if (held > 0) {
            if (b.rank < 0 || (uint32_t)b.rank != b.cred.id) {
                OPENSSL_cleanse(&b, sizeof(b));
                return weft__boot_fail(lg, why, why_len, WEFT_ERR_AUTH,
                                       "the member secret weftrun handed is for member %u, "
                                       "not for WEFT_RANK=%d",
                                       (unsigned)b.cred.id, b.rank);
            }
            b.member_only = true;
            *boot = b;
            OPENSSL_cleanse(&b, sizeof(b));
            return WEFT_OK;
        }
        if (!take_token(token, refused, sizeof(refused))) {
            OPENSSL_cleanse(token, sizeof(token));
            return weft__boot_fail(lg, why, why_len, WEFT_ERR_AUTH, "%s", refused);
        }
        bool fits = token[0] != '\0' && strlen(token) < sizeof(b.token);
        if (fits) {
            memcpy(b.token, token, strlen(token) + 1); /* fits: checked above */
        }
        OPENSSL_cleanse(token, sizeof(token));
        if (!fits) {
            return weft__boot_fail(lg, why, why_len, WEFT_ERR_AUTH,
                        "WEFT_STORE is set but WEFT_JOB_TOKEN (or WEFT_JOB_TOKEN_FILE) is missing "
                        "or too long: the store refuses clients without the job token");
        }
    } else if (b.size > 1 || b.joining) {
        return refuse_without_store(lg, b.joining ? NULL : src, &b, why, why_len);
    }
    *boot = b;
    OPENSSL_cleanse(&b, sizeof(b));
    return WEFT_OK;
}
