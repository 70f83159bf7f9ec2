/*
 * Bootstrap through PMIx (comm/ctx/boot_pmix.h). Built where pmix.h was found
 * (WEFT_HAVE_PMIX); libpmix itself is opened with dlopen on first use, never linked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/ctx/boot_pmix.h"

bool weft__pmix_present(void)
{
    const char *rank = getenv("PMIX_RANK"), *ns = getenv("PMIX_NAMESPACE");
    return rank != NULL && rank[0] != '\0' && ns != NULL && ns[0] != '\0';
}

#ifndef WEFT_HAVE_PMIX

weft_status_t weft__pmix_boot(const weft_config_t *cfg, const weft_logger_t *lg, weft_boot_t *b,
                              weft_pmix_t **out, char *why, size_t why_len)
{
    (void)cfg;
    (void)b;
    *out = NULL;
    return weft__boot_fail(lg, why, why_len, WEFT_ERR_UNSUPPORTED,
                           "PMIX_RANK and PMIX_NAMESPACE are set (a PMIx launcher started this "
                           "process) but this weft was built without PMIx (pmix.h was absent): "
                           "rebuild it with libpmix-dev installed, or start the job with "
                           "weftrun");
}

void weft__pmix_fini(weft_pmix_t *p, uint64_t wait_ms, const weft_logger_t *lg)
{
    (void)p;
    (void)wait_ms;
    (void)lg;
}

#else

#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <openssl/crypto.h>
#include <pmix.h>

#include "comm/ctx/boot_seal.h"
#include "comm/store/store.h"
#include "util/clock.h"
#include "util/hex.h"

/* The few PMIx calls weft makes, resolved once per process. */
static struct {
    pmix_status_t (*init)(pmix_proc_t *, pmix_info_t *, size_t);
    pmix_status_t (*finalize)(const pmix_info_t *, size_t);
    pmix_status_t (*put)(pmix_scope_t, const pmix_key_t, pmix_value_t *);
    pmix_status_t (*commit)(void);
    pmix_status_t (*fence)(const pmix_proc_t *, size_t, const pmix_info_t *, size_t);
    pmix_status_t (*get)(const pmix_proc_t *, const pmix_key_t, const pmix_info_t *, size_t,
                         pmix_value_t **);
    void (*value_destruct)(pmix_value_t *);
    const char *(*error_string)(pmix_status_t);
    char error[600];
    bool ok;
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static char lib_name[512];

/* Exchanges made by this process so far: each weft_init under PMIx publishes under keys
 * of its own, so that a later context never reads an earlier one's (PMIx caches what it
 * fetched). Every rank of a job makes its contexts in the same order. */
static atomic_uint exchanges;

/*
 * The process joins the PMIx job once and leaves it when it exits: a PMIx server may read
 * a client that finalized as gone (a later fence that counts it then fails, as Open MPI's
 * did for a second context), and one that never finalized as having died.
 */
static pthread_once_t join_once = PTHREAD_ONCE_INIT;
static pmix_status_t joined = PMIX_ERR_INIT;
static pmix_proc_t me;

static void leave_job(void)
{
    lib.finalize(NULL, 0);
}

static void join_job(void)
{
    joined = lib.init(&me, NULL, 0);
    if (joined == PMIX_SUCCESS) {
        atexit(leave_job);
    }
}

struct weft_pmix {
    pmix_proc_t me;
    weft_store_server_t *server; /* rank 0 only */
};

static void lib_load(void)
{
    void *h = dlopen(lib_name, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(lib.error, sizeof(lib.error), "cannot open %s: %s", lib_name,
                 e != NULL ? e : "not found");
        return;
    }
    struct {
        const char *name;
        void **fn;
    } syms[] = {
        {"PMIx_Init", (void **)&lib.init},
        {"PMIx_Finalize", (void **)&lib.finalize},
        {"PMIx_Put", (void **)&lib.put},
        {"PMIx_Commit", (void **)&lib.commit},
        {"PMIx_Fence", (void **)&lib.fence},
        {"PMIx_Get", (void **)&lib.get},
        {"PMIx_Value_destruct", (void **)&lib.value_destruct},
        {"PMIx_Error_string", (void **)&lib.error_string},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        *syms[i].fn = dlsym(h, syms[i].name);
        if (*syms[i].fn == NULL) {
            snprintf(lib.error, sizeof(lib.error), "%s has no %s", lib_name, syms[i].name);
            return; /* the library stays open: unloading a half-used one gains nothing */
        }
    }
    lib.ok = true;
}

static const char *perr(pmix_status_t rc)
{
    const char *s = lib.error_string != NULL ? lib.error_string(rc) : NULL;
    return s != NULL ? s : "unknown PMIx error";
}

static void value_free(pmix_value_t *v)
{
    if (v != NULL) {
        lib.value_destruct(v);
        free(v);
    }
}

/* An unsigned job or node attribute of @p proc; false when PMIx does not have it. */
static bool get_uint(const pmix_proc_t *proc, const char *key, uint32_t *out)
{
    pmix_value_t *v = NULL;
    if (lib.get(proc, key, NULL, 0, &v) != PMIX_SUCCESS || v == NULL) {
        return false;
    }
    bool ok = true;
    switch (v->type) {
    case PMIX_UINT32:
        *out = v->data.uint32;
        break;
    case PMIX_UINT16:
        *out = v->data.uint16;
        break;
    case PMIX_UINT:
        *out = v->data.uint;
        break;
    case PMIX_INT:
        ok = v->data.integer >= 0;
        *out = (uint32_t)v->data.integer;
        break;
    default:
        ok = false;
    }
    value_free(v);
    return ok;
}

/* A string that rank 0 published; hostile like all input: bounded and NUL-terminated. */
static pmix_status_t get_string(const pmix_proc_t *proc, const char *key, char *out, size_t len)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = lib.get(proc, key, NULL, 0, &v);
    if (rc != PMIX_SUCCESS || v == NULL) {
        return rc != PMIX_SUCCESS ? rc : PMIX_ERR_NOT_FOUND;
    }
    rc = PMIX_ERR_BAD_PARAM;
    if (v->type == PMIX_STRING && v->data.string != NULL && strlen(v->data.string) < len) {
        snprintf(out, len, "%s", v->data.string);
        rc = PMIX_SUCCESS;
    }
    if (v->type == PMIX_STRING && v->data.string != NULL) {
        OPENSSL_cleanse(v->data.string, strlen(v->data.string)); /* it may be the token */
    }
    value_free(v);
    return rc;
}

static pmix_status_t put_string(const char *key, const char *s)
{
    pmix_value_t v;
    memset(&v, 0, sizeof(v));
    v.type = PMIX_STRING;
    v.data.string = (char *)s; /* PMIx_Put copies it */
    return lib.put(PMIX_GLOBAL, key, &v);
}

/*
 * Where rank 0 serves the store: WEFT_BOOT_ADDR, else the loopback when the whole job is
 * on this host, else the first IPv4 address of an interface that is up and not the
 * loopback (a host with several networks names the right one in WEFT_BOOT_ADDR).
 */
static bool pick_addr(const weft_config_t *cfg, bool one_host, char *out, size_t len)
{
    if (cfg->boot_addr[0] != '\0') {
        snprintf(out, len, "%s", cfg->boot_addr);
        return true;
    }
    if (one_host) {
        snprintf(out, len, "127.0.0.1");
        return true;
    }
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        return false;
    }
    bool found = false;
    for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
            (i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) {
            continue;
        }
        const struct sockaddr_in *sa = (const struct sockaddr_in *)i->ifa_addr;
        found = inet_ntop(AF_INET, &sa->sin_addr, out, (socklen_t)len) != NULL;
    }
    freeifaddrs(ifs);
    return found;
}

/* Rank 0: start the store here and publish where it is (its token stays here). */
static weft_status_t serve_store(const weft_config_t *cfg, const weft_logger_t *lg,
                                 weft_pmix_t *p, bool one_host, unsigned seq, weft_boot_t *b,
                                 char *why, size_t why_len)
{
    char host[64], token[65], key[64];
    if (!pick_addr(cfg, one_host, host, sizeof(host))) {
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_UNSUPPORTED,
                    "PMIx bootstrap: this host has no IPv4 address the other hosts could reach "
                    "the job's store on; name one in WEFT_BOOT_ADDR");
    }
    weft_status_t st = weft__store_make_token(token);
    if (st != WEFT_OK) {
        return weft__boot_fail(lg, why, why_len, st, "PMIx bootstrap: cannot make a job token");
    }
    weft_store_server_params_t sp = {
        .size = sizeof(sp), .bind_addr = host, .port = 0, .token = token, .logger = lg};
    st = weft__store_server_start(&sp, &p->server);
    if (st != WEFT_OK) {
        OPENSSL_cleanse(token, sizeof(token));
        return weft__boot_fail(lg, why, why_len, st, "PMIx bootstrap: cannot serve the job's store on %s",
                    host);
    }
    int port = weft__store_server_port(p->server);
    snprintf(b->store, sizeof(b->store), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    memcpy(b->token, token, sizeof(token)); /* 65 bytes into 128 */
    OPENSSL_cleanse(token, sizeof(token));
    snprintf(key, sizeof(key), "weft.%u.store", seq);
    pmix_status_t rc = put_string(key, b->store);
    if (rc != PMIX_SUCCESS) {
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_IO, "PMIx bootstrap: PMIx_Put failed: %s",
                    perr(rc));
    }
    return WEFT_OK;
}

/* Everyone: make what was put visible (Commit, then a Fence collecting data). */
static weft_status_t fence_all(const weft_config_t *cfg, const weft_logger_t *lg, weft_pmix_t *p,
                               char *why, size_t why_len)
{
    pmix_status_t rc = lib.commit();
    if (rc != PMIX_SUCCESS) {
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_IO, "PMIx bootstrap: PMIx_Commit failed: %s",
                    perr(rc));
    }
    pmix_proc_t all = p->me;
    all.rank = PMIX_RANK_WILDCARD;
    pmix_info_t info[2];
    memset(info, 0, sizeof(info));
    snprintf(info[0].key, sizeof(info[0].key), "%s", PMIX_COLLECT_DATA);
    info[0].value.type = PMIX_BOOL;
    info[0].value.data.flag = true;
    snprintf(info[1].key, sizeof(info[1].key), "%s", PMIX_TIMEOUT);
    info[1].value.type = PMIX_INT;
    uint64_t secs = (cfg->connect_timeout_ms + 999) / 1000;
    info[1].value.data.integer = secs > 0 && secs < 86400 ? (int)secs : 86400;
    rc = lib.fence(&all, 1, info, 2);
    if (rc != PMIX_SUCCESS) {
        return weft__boot_fail(lg, why, why_len, rc == PMIX_ERR_TIMEOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_IO,
                    "PMIx bootstrap: the fence of the job's ranks failed: %s (a rank did not "
                    "arrive within WEFT_CONNECT_TIMEOUT_MS, or one died)",
                    perr(rc));
    }
    return WEFT_OK;
}

/* The public key rank @p rank put for exchange @p seq (64 hex digits). */
static bool get_pub(const weft_pmix_t *p, unsigned seq, uint32_t rank, uint8_t pub[WEFT__SEAL_PUB])
{
    pmix_proc_t who = p->me;
    who.rank = rank;
    char key[64], hex[2 * WEFT__SEAL_PUB + 1];
    snprintf(key, sizeof(key), "weft.%u.pub", seq);
    return get_string(&who, key, hex, sizeof(hex)) == PMIX_SUCCESS &&
           strlen(hex) == 2 * WEFT__SEAL_PUB && weft__hex_decode(hex, WEFT__SEAL_PUB, pub);
}

/* The label a rank's sealed secret is bound to: the exchange, and the rank it is for. */
static void seal_label(unsigned seq, uint32_t rank, char out[64])
{
    snprintf(out, 64, "weft.%u.seal.%u", seq, rank);
}

/* Rank 0: every other rank's member secret sealed to the key it put (weft.<seq>.seal.<r>). */
static weft_status_t put_secrets(const weft_logger_t *lg, const weft_pmix_t *p, unsigned seq,
                                 uint32_t size, const weft_seal_key_t *mine, const char *token,
                                 char *why, size_t why_len)
{
    char line[WEFT__STORE_MEMBER_LINE], label[64];
    uint8_t pub[WEFT__SEAL_PUB], sealed[WEFT__STORE_MEMBER_LINE + WEFT__SEAL_TAG];
    char hex[2 * sizeof(sealed) + 1];
    weft_status_t st = WEFT_OK;
    for (uint32_t r = 1; r < size && st == WEFT_OK; r++) {
        int n = weft__store_member_line(token, (int)r, line);
        seal_label(seq, r, label);
        if (!get_pub(p, seq, r, pub)) {
            st = weft__boot_fail(lg, why, why_len, WEFT_ERR_PROTOCOL,
                                 "PMIx bootstrap: rank %u put no usable public key", r);
        } else if (n < 0 || weft__seal(mine, pub, label, (const uint8_t *)line, (size_t)n,
                                       sealed) != WEFT_OK) {
            st = weft__boot_fail(lg, why, why_len, WEFT_ERR_INVALID_ARG,
                                 "PMIx bootstrap: cannot seal rank %u's secret", r);
        } else {
            weft__hex_encode(sealed, (size_t)n + WEFT__SEAL_TAG, hex);
            pmix_status_t rc = put_string(label, hex);
            if (rc != PMIX_SUCCESS) {
                st = weft__boot_fail(lg, why, why_len, WEFT_ERR_IO,
                                     "PMIx bootstrap: PMIx_Put failed: %s", perr(rc));
            }
        }
        OPENSSL_cleanse(line, sizeof(line));
    }
    return st;
}

/* A rank but 0: the store's address and this rank's member secret, opened with @p mine. */
static weft_status_t get_secret(const weft_logger_t *lg, const weft_pmix_t *p, unsigned seq,
                                const weft_seal_key_t *mine, weft_boot_t *b, char *why,
                                size_t why_len)
{
    pmix_proc_t root = p->me;
    root.rank = 0;
    char key[64], label[64], hex[2 * (WEFT__STORE_MEMBER_LINE + WEFT__SEAL_TAG) + 1] = "";
    uint8_t pub[WEFT__SEAL_PUB], sealed[WEFT__STORE_MEMBER_LINE + WEFT__SEAL_TAG];
    uint8_t line[WEFT__STORE_MEMBER_LINE + WEFT__SEAL_TAG];
    snprintf(key, sizeof(key), "weft.%u.store", seq);
    seal_label(seq, p->me.rank, label);
    pmix_status_t rc = get_string(&root, key, b->store, sizeof(b->store));
    if (rc == PMIX_SUCCESS) {
        rc = get_string(&root, label, hex, sizeof(hex));
    }
    size_t n = strlen(hex) / 2;
    bool ok = rc == PMIX_SUCCESS && strchr(b->store, ':') != NULL && get_pub(p, seq, 0, pub) &&
              strlen(hex) % 2 == 0 && n > WEFT__SEAL_TAG && weft__hex_decode(hex, n, sealed) &&
              weft__seal_open(mine, pub, label, sealed, n, line) &&
              weft__member_secret_parse((const char *)line, n - WEFT__SEAL_TAG, &b->cred) &&
              b->cred.id == p->me.rank;
    OPENSSL_cleanse(line, sizeof(line));
    OPENSSL_cleanse(hex, sizeof(hex));
    if (!ok) {
        OPENSSL_cleanse(&b->cred, sizeof(b->cred));
        return weft__boot_fail(
            lg, why, why_len, WEFT_ERR_PROTOCOL,
            "PMIx bootstrap: rank 0 published no usable store address or secret for "
            "this rank (%s)",
            rc != PMIX_SUCCESS ? perr(rc) : "malformed, or not sealed to this rank");
    }
    b->member_only = true;
    return WEFT_OK;
}

/*
 * Everyone: a fresh key pair, its public half put; rank 0 serves the store and, once the
 * keys are seen (a first fence), seals each rank's member secret to its key (a second);
 * the others read the store's address and open their secret. Only rank 0 holds the token.
 */
static weft_status_t exchange(const weft_config_t *cfg, const weft_logger_t *lg, weft_pmix_t *p,
                              uint32_t size, bool one_host, unsigned seq, weft_boot_t *b, char *why,
                              size_t why_len)
{
    weft_seal_key_t *key = NULL;
    uint8_t pub[WEFT__SEAL_PUB];
    char name[64], hex[2 * WEFT__SEAL_PUB + 1];
    weft_status_t st = weft__seal_keygen(&key, pub);
    if (st != WEFT_OK) {
        return weft__boot_fail(lg, why, why_len, st, "PMIx bootstrap: cannot make a key pair");
    }
    weft__hex_encode(pub, sizeof(pub), hex);
    snprintf(name, sizeof(name), "weft.%u.pub", seq);
    pmix_status_t rc = put_string(name, hex);
    if (rc != PMIX_SUCCESS) {
        st = weft__boot_fail(lg, why, why_len, WEFT_ERR_IO, "PMIx bootstrap: PMIx_Put failed: %s",
                             perr(rc));
    }
    if (st == WEFT_OK && p->me.rank == 0) {
        st = serve_store(cfg, lg, p, one_host, seq, b, why, why_len);
    }
    if (st == WEFT_OK) {
        st = fence_all(cfg, lg, p, why, why_len);
    }
    if (st == WEFT_OK && p->me.rank == 0) {
        st = put_secrets(lg, p, seq, size, key, b->token, why, why_len);
    }
    if (st == WEFT_OK) {
        st = fence_all(cfg, lg, p, why, why_len);
    }
    if (st == WEFT_OK && p->me.rank != 0) {
        st = get_secret(lg, p, seq, key, b, why, why_len);
    }
    weft__seal_key_free(key);
    return st;
}

weft_status_t weft__pmix_boot(const weft_config_t *cfg, const weft_logger_t *lg, weft_boot_t *b,
                              weft_pmix_t **out, char *why, size_t why_len)
{
    *out = NULL;
    if (lib_name[0] == '\0') {
        /* Read once per process, by the first context that needs it (as NCCL's). */
        static pthread_mutex_t name_lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&name_lock);
        if (lib_name[0] == '\0') {
            snprintf(lib_name, sizeof(lib_name), "%s", cfg->pmix_library);
        }
        pthread_mutex_unlock(&name_lock);
    }
    pthread_once(&lib_once, lib_load);
    if (!lib.ok) {
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_UNSUPPORTED,
                    "PMIX_RANK and PMIX_NAMESPACE are set (a PMIx launcher started this "
                    "process) but PMIx is unusable: %s. Install libpmix2, name the library in "
                    "WEFT_PMIX_LIBRARY, or start the job with weftrun",
                    lib.error);
    }
    pthread_once(&join_once, join_job);
    if (joined != PMIX_SUCCESS) {
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_IO,
                    "PMIx_Init failed: %s. The PMIx server that set PMIX_RANK is not reachable "
                    "(under Slurm, start the job with srun --mpi=pmix; or with weftrun)",
                    perr(joined));
    }
    weft_pmix_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    p->me = me;
    pmix_proc_t job = p->me;
    job.rank = PMIX_RANK_WILDCARD;
    uint32_t size = 0, lrank = 0, lsize = 0;
    if (!get_uint(&job, PMIX_JOB_SIZE, &size) || size < 1 || size > (1u << 30) ||
        p->me.rank >= size) {
        unsigned rank = (unsigned)p->me.rank;
        free(p);
        return weft__boot_fail(lg, why, why_len, WEFT_ERR_PROTOCOL,
                    "PMIx bootstrap: the job's size is missing or inconsistent with rank %u",
                    rank);
    }
    if (!get_uint(&p->me, PMIX_LOCAL_RANK, &lrank) || !get_uint(&job, PMIX_LOCAL_SIZE, &lsize) ||
        lsize < 1 || lrank >= lsize) {
        lrank = 0; /* unknown: the idle policy then assumes a core of its own */
        lsize = 1;
    }
    b->rank = (int)p->me.rank;
    b->size = (int)size;
    b->local_rank = (int)lrank;
    b->local_size = (int)lsize;
    snprintf(b->launcher, sizeof(b->launcher), "pmix");
    weft_status_t st = WEFT_OK;
    if (size > 1) {
        unsigned seq = atomic_fetch_add(&exchanges, 1);
        st = exchange(cfg, lg, p, size, lsize == size, seq, b, why, why_len);
    }
    if (st != WEFT_OK) {
        weft__pmix_fini(p, 0, lg);
        OPENSSL_cleanse(b->token, sizeof(b->token));
        return st;
    }
    *out = p;
    return WEFT_OK;
}

void weft__pmix_fini(weft_pmix_t *p, uint64_t wait_ms, const weft_logger_t *lg)
{
    if (p == NULL) {
        return;
    }
    if (p->server != NULL) {
        /* The others reach the job through this store until they leave: wait for them. */
        uint64_t t0 = weft__now_ms();
        size_t left;
        while ((left = weft__store_server_conns(p->server)) > 0) {
            uint64_t ms = weft__now_ms() - t0;
            if (ms >= wait_ms) {
                WEFT_WARN(lg,
                          "finalize: the job's store stops now, %zu process(es) still "
                          "connected to it lose it (waited %llu ms, WEFT_FINALIZE_TIMEOUT_MS)",
                          left, (unsigned long long)ms);
                break;
            }
            struct timespec nap = {0, 5 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
        weft__store_server_stop(p->server);
    }
    free(p);
}

#endif /* WEFT_HAVE_PMIX */
