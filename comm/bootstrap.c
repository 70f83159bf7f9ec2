#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "comm/bootstrap.h"
#include "util/parse.h"

typedef struct env_source {
    const char *launcher;
    const char *rank, *size, *local_rank, *local_size;
} env_source_t;

/* Launchers whose variables say who a process is, in order of precedence. */
static const env_source_t sources[] = {
    {"weftrun", "WEFT_RANK", "WEFT_WORLD_SIZE", "WEFT_LOCAL_RANK", "WEFT_LOCAL_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
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

/* The job token into @p out ("" when there is none). */
static void take_token(char out[TOKEN_COPY_LEN])
{
    pthread_mutex_lock(&token_lock);
    const char *env = getenv("WEFT_JOB_TOKEN");
    if (env != NULL) {
        snprintf(token_kept, sizeof(token_kept), "%s", env);
        unsetenv("WEFT_JOB_TOKEN");
    }
    memcpy(out, token_kept, TOKEN_COPY_LEN);
    pthread_mutex_unlock(&token_lock);
}

void weft__bootstrap_forget_token(void)
{
    pthread_mutex_lock(&token_lock);
    OPENSSL_cleanse(token_kept, sizeof(token_kept));
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

static weft_status_t read_source(const weft_logger_t *lg, const env_source_t *src,
                                 weft_boot_t *b)
{
    int rank = env_int(src->rank), size = env_int(src->size);
    if (rank == -2 || size == -2) {
        WEFT_ERROR(lg, "%s or %s is not a number", src->rank, src->size);
        return WEFT_ERR_INVALID_ARG;
    }
    if (size < 1 || rank >= size) {
        WEFT_ERROR(lg, "%s=%d and %s=%d are inconsistent", src->rank, rank, src->size, size);
        return WEFT_ERR_INVALID_ARG;
    }
    int lrank = env_int(src->local_rank), lsize = env_int(src->local_size);
    b->rank = rank;
    b->size = size;
    b->local_rank = lrank >= 0 ? lrank : 0;
    b->local_size = lsize > 0 ? lsize : 1;
    snprintf(b->launcher, sizeof(b->launcher), "%s", src->launcher);
    return WEFT_OK;
}

/* Other launchers' variables present beside the chosen one must tell the same story. */
static weft_status_t cross_check(const weft_logger_t *lg, const weft_boot_t *b, size_t chosen)
{
    for (size_t i = chosen + 1; i < sizeof(sources) / sizeof(sources[0]); i++) {
        int rank = env_int(sources[i].rank), size = env_int(sources[i].size);
        if (rank < 0 || size < 0 || strcmp(sources[i].size, sources[chosen].size) == 0) {
            continue;
        }
        if (size != b->size || rank != b->rank) {
            WEFT_ERROR(lg,
                       "%s says rank %d of %d but %s says rank %d of %d: the launch is "
                       "inconsistent (was the job started twice, or with the wrong -n?)",
                       b->launcher, b->rank, b->size, sources[i].launcher, rank, size);
            return WEFT_ERR_MISMATCH;
        }
    }
    return WEFT_OK;
}

static weft_status_t bootstrap_joiner(const weft_logger_t *lg, weft_boot_t *b)
{
    int rank = env_int("WEFT_RANK"), size = env_int("WEFT_WORLD_SIZE");
    if (rank == -2 || size == -2) {
        WEFT_ERROR(lg, "WEFT_RANK or WEFT_WORLD_SIZE is not a number");
        return WEFT_ERR_INVALID_ARG;
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

weft_status_t weft__bootstrap(const weft_logger_t *lg, weft_boot_t *boot)
{
    weft_boot_t b;
    memset(&b, 0, sizeof(b));
    const char *join = getenv("WEFT_JOIN");
    if (join != NULL && strcmp(join, "1") == 0) {
        weft_status_t st = bootstrap_joiner(lg, &b);
        if (st != WEFT_OK) {
            return st;
        }
        goto store;
    }
    size_t chosen = sizeof(sources) / sizeof(sources[0]);
    for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
        if (env_int(sources[i].rank) != -1) {
            chosen = i;
            break;
        }
    }
    if (chosen == sizeof(sources) / sizeof(sources[0])) {
        b.rank = 0;
        b.size = 1;
        b.local_rank = 0;
        b.local_size = 1;
        snprintf(b.launcher, sizeof(b.launcher), "singleton");
    } else {
        weft_status_t st = read_source(lg, &sources[chosen], &b);
        if (st == WEFT_OK) {
            st = cross_check(lg, &b, chosen);
        }
        if (st != WEFT_OK) {
            return st;
        }
    }
store:;
    const char *store = getenv("WEFT_STORE");
    if (store != NULL && *store != '\0') {
        if (strlen(store) >= sizeof(b.store) || strchr(store, ':') == NULL) {
            WEFT_ERROR(lg, "WEFT_STORE='%s' is not host:port", store);
            return WEFT_ERR_INVALID_ARG;
        }
        snprintf(b.store, sizeof(b.store), "%s", store);
        char token[TOKEN_COPY_LEN];
        take_token(token);
        bool fits = token[0] != '\0' && strlen(token) < sizeof(b.token);
        if (fits) {
            memcpy(b.token, token, strlen(token) + 1); /* fits: checked above */
        }
        OPENSSL_cleanse(token, sizeof(token));
        if (!fits) {
            WEFT_ERROR(lg, "WEFT_STORE is set but WEFT_JOB_TOKEN is missing or too long: the "
                           "store refuses clients without the job token");
            return WEFT_ERR_AUTH;
        }
    } else if (b.size > 1 || b.joining) {
        WEFT_ERROR(lg,
                   "%s started %d ranks but WEFT_STORE is not set: start a store with "
                   "'weftrun --store-only' and export WEFT_STORE and WEFT_JOB_TOKEN",
                   b.launcher, b.size);
        return WEFT_ERR_INVALID_ARG;
    }
    *boot = b;
    OPENSSL_cleanse(&b, sizeof(b));
    return WEFT_OK;
}
