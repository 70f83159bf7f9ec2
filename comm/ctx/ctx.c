/*
 * Context set-up: settings, bootstrap, store, transports, address exchange, world group.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/ctx/boot_pmix.h"
#include "comm/ctx/bootstrap.h"
#include "comm/core_impl.h"
#include "comm/device/memtype.h"
#include "comm/shm/shm.h"
#include "util/assert.h"
#include "util/bigmem.h"
#include "util/hex.h"
#include "util/log_escape.h"
#include "util/parse.h"

#define ADDR_DIR "addr/"
#define ADDR_KEY_FMT ADDR_DIR "%d"
#define CLAIM_KEY_FMT "claim/%d"
#define FAILED_DIR "failed/"
/* A published address: world size (int32), host name (ADDR_HOST_MAX, for people reading
 * the store), host id (util/host_id.h), transport address. */
#define ADDR_HOST_MAX 64
#define ADDR_HOST_ID_OFF (sizeof(int32_t) + ADDR_HOST_MAX)
#define ADDR_HEADER (ADDR_HOST_ID_OFF + WEFT__HOST_ID_LEN)

void weft__key(const weft_ctx_t *ctx, char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(buf, len, "%s/", ctx->cfg.ns);
    if (n < 0 || (size_t)n >= len) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(buf + n, len - (size_t)n, fmt, ap);
    va_end(ap);
}

static weft_status_t record_error(weft_ctx_t *ctx, weft_status_t status, weft_log_level_t level,
                                  const char *msg)
{
    if (ctx != NULL) {
        snprintf(ctx->last_error, sizeof(ctx->last_error), "rank %d: %s", ctx->rank, msg);
    }
    WEFT_LOG(ctx != NULL ? &ctx->logger : NULL, level, "%s (%s)", msg, weft_status_str(status));
    return status;
}

weft_status_t weft__error(weft_ctx_t *ctx, weft_status_t status, const char *fmt, ...)
{
    char msg[sizeof(ctx->last_error) - 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* Peer errors are expected in failure scenarios: log them once at info level. */
    weft_log_level_t level = (status == WEFT_ERR_PEER_FAILED || status == WEFT_ERR_REVOKED ||
                              status == WEFT_ERR_MISMATCH)
                                 ? WEFT_LOG_INFO
                                 : WEFT_LOG_ERROR;
    if (ctx != NULL) {
        level = weft__store_loss_explain(ctx, status, msg, sizeof(msg), level);
    }
    return record_error(ctx, status, level, msg);
}

weft_status_t weft__error_at(weft_ctx_t *ctx, weft_status_t status, weft_log_level_t level,
                             const char *fmt, ...)
{
    char msg[sizeof(ctx->last_error) - 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return record_error(ctx, status, level, msg);
}

/* Detail of the last failed call that has no context (layouts, plans), per thread. */
static __thread char noctx_error[512];

const char *weft_last_error(const weft_ctx_t *ctx)
{
    WEFT_API_LOCK((weft_ctx_t *)ctx);
    return ctx != NULL ? ctx->last_error : noctx_error;
}

weft_status_t weft__error_noctx(weft_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(noctx_error, sizeof(noctx_error), fmt, ap);
    va_end(ap);
    return status;
}

static void on_peer_failed(void *arg, int peer_id, weft_status_t why)
{
    weft__report_failure((weft_ctx_t *)arg, peer_id, weft_status_str(why));
}

/* Start the message transports of weft__transports[], in its order: the first loopback
 * one for this process and, in a job with a store (which may gain members later, so
 * even at size 1), the first other one for the other processes. Transports without a
 * message table move data on devices, not messages: comm/device/nccl_comm.c reaches them
 * per group. */
static weft_status_t init_transports(weft_ctx_t *ctx)
{
    weft_tl_params_t tp = {
        .size = sizeof(tp),
        .self_id = ctx->rank,
        .num_peers = ctx->size,
        .log = weft__log_tl,
        .log_arg = &ctx->logger,
        .peer_failed = on_peer_failed,
        .cb_arg = ctx,
    };
    for (size_t i = 0; weft__transports[i] != NULL && ctx->ntls < WEFT_CTX_MAX_TLS; i++) {
        const weft_transport_t *tr = weft__transports[i];
        const weft_tl_msg_ops_t *ops = tr->msg;
        if (ops == NULL) {
            continue;
        }
        bool local = (ops->flags & WEFT_TL_LOOPBACK) != 0;
        bool needed = local ? ctx->tl_local == NULL
                            : ctx->store != NULL && ctx->tl_remote == NULL;
        if (!needed || !tr->available()) {
            continue;
        }
        weft_tl_inst_t *t = &ctx->tls[ctx->ntls];
        weft_status_t st = ops->init(&tp, &t->tl);
        if (st != WEFT_OK) {
            return weft__error(ctx, st, "cannot start the %s transport", tr->name);
        }
        t->transport = tr;
        t->ops = ops;
        ctx->ntls++;
        if (local) {
            ctx->tl_local = t;
        } else {
            ctx->tl_remote = t;
        }
    }
    if (ctx->tl_local == NULL || (ctx->store != NULL && ctx->tl_remote == NULL)) {
        return weft__error(ctx, WEFT_ERR_UNSUPPORTED, "no usable transport reaches %s",
                           ctx->tl_local == NULL ? "this process" : "the other processes");
    }
    for (int i = 0; i < ctx->npeers; i++) {
        weft__peer_route(ctx, i);
        ctx->peers[i].failed = WEFT_OK;
    }
    return WEFT_OK;
}

void weft__ctx_discard(weft_ctx_t *ctx, uint64_t tag, uint64_t mask)
{
    for (int i = 0; i < ctx->ntls; i++) {
        ctx->tls[i].ops->discard(ctx->tls[i].tl, tag, mask);
    }
}

/*
 * Member id ctx->rank was registered before: by another process given the same rank, or
 * by an earlier job on the same store (whose world, if it ended well, is marked closed).
 * Either way the launch is wrong, not the data: say which at the default log level.
 */
static weft_status_t explain_second_claim(weft_ctx_t *ctx)
{
    char key[96];
    void *val = NULL;
    size_t len;
    weft__key(ctx, key, sizeof(key), "g/0/closed");
    bool ended = weft__store_get(ctx->store, key, 0, &val, &len) == WEFT_OK;
    free(val);
    return weft__error_at(
        ctx, WEFT_ERR_INVALID_ARG, WEFT_LOG_ERROR,
        "member %d is already registered in the store %s (key namespace '%s'): %s. A store "
        "serves one job: start a new 'weftrun --store-only' for each job, or give each job "
        "its own WEFT_NAMESPACE",
        ctx->rank, ctx->store_addr, ctx->cfg.ns,
        ended ? "a job that has ended already ran on this store (a second job on it)"
              : "this member was started twice (two processes given the same rank), or a "
                "second job is using the store of a job that runs or did not end cleanly");
}

/* Register this member id (once per job) and publish the address of its remote
 * transport. The value carries the world size the writer was started with, so two
 * launches that disagree are caught. */
static weft_status_t publish_address(weft_ctx_t *ctx)
{
    char key[64];
    const void *addr;
    size_t addr_len;
    int64_t claims;

    weft__key(ctx, key, sizeof(key), CLAIM_KEY_FMT, ctx->rank);
    weft_status_t st = weft__store_add(ctx->store, key, 1, &claims);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "store: cannot register member %d", ctx->rank);
    }
    if (claims != 1) {
        return explain_second_claim(ctx);
    }
    /* The id is ours: arm the liveness lease now, so that a rank that dies or hangs
     * during the rest of start-up is seen by the others as failed, not waited for. */
    st = weft__heartbeat_start(ctx);
    if (st != WEFT_OK) {
        return st;
    }
    const weft_tl_inst_t *t = ctx->tl_remote;
    st = t->ops->address(t->tl, &addr, &addr_len);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "cannot get the %s address of this process",
                           t->transport->name);
    }
    char host[ADDR_HOST_MAX] = {0};
    gethostname(host, sizeof(host) - 1);
    size_t len = ADDR_HEADER + addr_len;
    char *val = calloc(1, len);
    if (val == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for the address");
    }
    int32_t wsize = ctx->world_size_at_start;
    memcpy(val, &wsize, sizeof(wsize));
    memcpy(val + sizeof(wsize), host, sizeof(host));
    memcpy(val + ADDR_HOST_ID_OFF, ctx->host_id, WEFT__HOST_ID_LEN);
    memcpy(val + ADDR_HEADER, addr, addr_len);
    weft__key(ctx, key, sizeof(key), ADDR_KEY_FMT, ctx->rank);
    st = weft__store_set(ctx->store, key, val, len);
    free(val);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "store: cannot publish the address of member %d", ctx->rank);
    }
    return WEFT_OK;
}

/* Wait up to @p timeout_ms for member @p id's published address, in short slices that
 * also read failure notices: a member declared failed meanwhile (it died during start-up)
 * ends the wait at once with WEFT_ERR_PEER_FAILED instead of after the whole timeout. */
static weft_status_t wait_address(weft_ctx_t *ctx, int id, int timeout_ms, void **pv,
                                  size_t *plen)
{
    enum { SLICE_MS = 50 };
    char key[64];
    weft__key(ctx, key, sizeof(key), ADDR_KEY_FMT, id);
    uint64_t start = weft__now_ns(), end = start + weft__ms_to_ns((uint64_t)timeout_ms);
    for (;;) {
        uint64_t now = weft__now_ns();
        int left = now >= end ? 0 : (int)((end - now + 999999) / 1000000);
        weft_status_t st =
            weft__store_get(ctx->store, key, left < SLICE_MS ? left : SLICE_MS, pv, plen);
        if (st == WEFT_OK) {
            return WEFT_OK;
        }
        unsigned long long waited = (weft__now_ns() - start) / 1000000;
        if (st != WEFT_ERR_TIMEOUT) {
            return weft__error(ctx, st, "cannot read the address of member %d (after %llu ms)",
                               id, waited);
        }
        weft__poll_failure_notices(ctx);
        if (ctx->peers[id].failed != WEFT_OK) {
            return weft__error(ctx, WEFT_ERR_PEER_FAILED,
                               "member %d failed before it published its address", id);
        }
        if (left == 0) {
            return weft__error(ctx, WEFT_ERR_TIMEOUT, "member %d did not arrive (waited %llu ms)",
                               id, waited);
        }
    }
}

/* Member @p id's published address (@p len bytes at @p val): its world size checked
 * against @p expect_size (0: any), then its transport address and host id kept. */
static weft_status_t address_apply(weft_ctx_t *ctx, int id, const void *val, size_t len,
                                   int expect_size)
{
    int32_t wsize = -1;
    if (len > ADDR_HEADER) {
        memcpy(&wsize, val, sizeof(wsize));
    }
    if (len <= ADDR_HEADER || (expect_size > 0 && wsize != expect_size)) {
        return weft__error_at(ctx, WEFT_ERR_MISMATCH, WEFT_LOG_ERROR,
                              "member %d was started with world size %d, this one with %d: "
                              "two launches disagree (a second job on this store, or a "
                              "different -n or world size per node)",
                              id, (int)wsize, expect_size);
    }
    weft_peer_t *p = &ctx->peers[id];
    free(p->addr);
    p->addr_len = len - ADDR_HEADER;
    p->addr = malloc(p->addr_len);
    if (p->addr == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for addresses");
    }
    memcpy(p->addr, (const char *)val + ADDR_HEADER, p->addr_len);
    /* Not the host name: namespaces and containers of one machine may differ in nothing
     * else, and machines of a cluster may share one (util/host_id.h). */
    const char *host_id = (const char *)val + ADDR_HOST_ID_OFF;
    p->same_host = memcmp(ctx->host_id, host_id, WEFT__HOST_ID_LEN) == 0;
    memcpy(p->host_id, host_id, WEFT__HOST_ID_LEN);
    p->host_id[WEFT__HOST_ID_LEN - 1] = '\0';
    return WEFT_OK;
}

weft_status_t weft__fetch_address(weft_ctx_t *ctx, int id, int timeout_ms, int expect_size)
{
    void *pv;
    size_t plen;

    if (ctx->store == NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "no store to look member %d up in", id);
    }
    weft_status_t st = weft__peer_slot(ctx, id);
    if (st != WEFT_OK) {
        return st;
    }
    st = wait_address(ctx, id, timeout_ms, &pv, &plen);
    if (st == WEFT_OK) {
        st = address_apply(ctx, id, pv, plen, expect_size);
        free(pv);
    }
    return st;
}

/* ---- reading every address at start-up (docs/store-protocol.md, "Scans") ---- */

/* The members of the world whose address this rank still waits for: not read yet, and
 * not failed. */
static int addresses_missing(const weft_ctx_t *ctx, int *first)
{
    int n = 0;
    *first = -1;
    for (int i = 0; i < ctx->size; i++) {
        if (i != ctx->rank && ctx->peers[i].addr == NULL && ctx->peers[i].failed == WEFT_OK) {
            *first = n++ == 0 ? i : *first;
        }
    }
    return n;
}

/* How many keys addr/ must hold for every address this rank waits for to be there: one per
 * member but those that failed before publishing; after pages of @p seen keys that lacked
 * some (the keys of joiners count too), one more per member still missing. */
static uint32_t addresses_due(const weft_ctx_t *ctx, uint32_t seen)
{
    int first, missing = addresses_missing(ctx, &first);
    uint32_t due = 0;
    for (int i = 0; i < ctx->size; i++) {
        due += i == ctx->rank || ctx->peers[i].addr != NULL || ctx->peers[i].failed == WEFT_OK;
    }
    return seen + (uint32_t)missing > due ? seen + (uint32_t)missing : due;
}

/* Applies the addresses of a scan of addr/, @p first the first page: every page after it is
 * read at once. Keys other than addr/<a member of the world> are counted, not read. An
 * address that cannot be applied fails it with its own error, reported (*reported). */
static weft_status_t addresses_read(weft_ctx_t *ctx, const char *prefix, weft_store_page_t *first,
                                    uint32_t *seen, bool *reported)
{
    weft_store_page_t page = *first;
    char after[WEFT_STORE_MAX_KEY + 1];
    size_t plen = strlen(prefix);
    weft_status_t st = WEFT_OK;
    *seen = 0;
    for (;;) {
        for (size_t i = 0; i < page.n && st == WEFT_OK; i++) {
            int64_t id;
            const weft_store_kv_t *kv = &page.kv[i];
            if (weft__parse_i64(kv->key + plen, 0, ctx->size - 1, &id) && id != ctx->rank &&
                ctx->peers[id].addr == NULL) {
                st = address_apply(ctx, (int)id, kv->val, kv->len, ctx->size);
                *reported = st != WEFT_OK;
            }
        }
        *seen += (uint32_t)page.n;
        bool more = page.more && page.n > 0 && st == WEFT_OK;
        if (more) {
            snprintf(after, sizeof(after), "%s", page.kv[page.n - 1].key);
        }
        weft__store_page_free(&page);
        if (!more) {
            return st;
        }
        weft_store_scan_args_t next = {.prefix = prefix, .after = after};
        st = weft__store_scan(ctx->store, &next, &page);
        if (st != WEFT_OK) {
            return st;
        }
    }
}

/*
 * Reads the address of every member of the world with one scan of addr/, which waits in
 * the store until they are all there, and its further pages (3,280 addresses of 300 bytes
 * to a page: docs/store-protocol.md, "Scans"). While it waits, the failure notices are
 * read every SLICE_MS, as they were between the slices of the per-member GETs before: a
 * member that dies before publishing is marked failed, and the scan is asked again for
 * one address fewer (WEFT_INPROGRESS), so that the others start without it. *seen: the
 * keys of the last pages read.
 */
static weft_status_t addresses_scan(weft_ctx_t *ctx, const char *prefix, uint64_t end,
                                    uint32_t *seen, bool *reported)
{
    enum { SLICE_MS = 50 };
    uint32_t want = addresses_due(ctx, *seen);
    uint64_t now = weft__now_ns();
    weft_store_scan_args_t args = {
        .prefix = prefix,
        .min_count = want,
        .timeout_ms = now >= end ? 0 : (int)((end - now + 999999) / 1000000),
    };
    weft_store_scan_t *scan;
    weft_store_page_t page;
    weft_status_t st = weft__store_scan_start(ctx->store, &args, &scan);
    while (st == WEFT_OK &&
           (st = weft__store_scan_wait(scan, SLICE_MS, &page)) == WEFT_INPROGRESS) {
        weft__poll_failure_notices(ctx);
        if (addresses_due(ctx, *seen) < want) {
            weft__store_scan_cancel(scan); /* the store drops it for the next one */
            return WEFT_INPROGRESS;
        }
        st = WEFT_OK;
    }
    return st == WEFT_OK ? addresses_read(ctx, prefix, &page, seen, reported) : st;
}

/* Publish this rank's address and read every other's. A rank that dies during start-up
 * does not fail the others' weft_init: they start with it marked failed, so the world
 * group is revoked from the beginning and a repair removes it (its replacement, under
 * weftrun --elastic --replace, is admitted then). */
static weft_status_t exchange_addresses(weft_ctx_t *ctx)
{
    char prefix[64];
    weft__key(ctx, prefix, sizeof(prefix), ADDR_DIR);
    weft_status_t st = publish_address(ctx);
    uint64_t start = weft__now_ns();
    uint64_t end = start + weft__ms_to_ns(ctx->cfg.connect_timeout_ms);
    uint32_t seen = 0;
    bool reported = st != WEFT_OK;
    int first;
    while (st == WEFT_OK && addresses_missing(ctx, &first) > 0) {
        st = addresses_scan(ctx, prefix, end, &seen, &reported);
        if (st == WEFT_INPROGRESS) {
            st = WEFT_OK; /* a member failed: ask again for fewer */
        } else if (st == WEFT_OK && addresses_missing(ctx, &first) > 0 && weft__now_ns() >= end) {
            st = WEFT_ERR_TIMEOUT;
        } else if (st == WEFT_ERR_TIMEOUT) {
            /* Which ones are missing: what is there now (one more request, on failure only). */
            weft_store_scan_args_t all = {.prefix = prefix};
            weft_store_page_t page;
            st = weft__store_scan(ctx->store, &all, &page);
            st = st == WEFT_OK ? addresses_read(ctx, prefix, &page, &seen, &reported) : st;
            st = st == WEFT_OK && addresses_missing(ctx, &first) > 0 ? WEFT_ERR_TIMEOUT : st;
        }
    }
    if (st == WEFT_OK || reported) {
        return st;
    }
    int missing = addresses_missing(ctx, &first);
    unsigned long long waited = (weft__now_ns() - start) / 1000000;
    if (missing == 0) {
        return weft__error(ctx, st, "cannot read the members' addresses (after %llu ms)", waited);
    }
    if (st == WEFT_ERR_TIMEOUT) {
        return weft__error(ctx, st, "member %d did not arrive (waited %llu ms)%s", first, waited,
                           missing > 1 ? ", nor did others" : "");
    }
    return weft__error(ctx, st, "cannot read the address of member %d (after %llu ms)", first,
                       waited);
}

static weft_status_t watch_failures(weft_ctx_t *ctx);

/* A process joining a running job: it gets a member id, publishes its address and waits
 * in weft_group_join() to be admitted. Ids the launcher did not assign come from a store
 * counter in a range of their own. */
static weft_status_t init_joiner(weft_ctx_t *ctx)
{
    if (ctx->rank < 0) {
        int64_t n;
        char key[64];
        weft__key(ctx, key, sizeof(key), "joiner_ids");
        weft_status_t st = weft__store_add(ctx->store, key, 1, &n);
        if (st != WEFT_OK) {
            return weft__error(ctx, st, "cannot get a member id from the store");
        }
        if (n < 1 || n > (int64_t)WEFT_TAG_MAX_MEMBERS / 2 - 1) {
            return weft__error(ctx, WEFT_ERR_NO_MEMORY, "member ids are exhausted");
        }
        ctx->rank = (int)(WEFT_TAG_MAX_MEMBERS / 2 - 1 + n);
        ctx->logger.rank = ctx->rank;
        /* The store lets a member write what its id owns only on a connection that speaks
         * for that id: connect again as the member we now are. */
        weft_store_client_t *named;
        st = weft__store_connect_member(ctx->store_addr, ctx->token, ctx->rank,
                                        (int)ctx->cfg.connect_timeout_ms, &ctx->logger, &named);
        if (st != WEFT_OK) {
            return weft__error_at(ctx, st, WEFT_LOG_DEBUG, "cannot reach the store at %s as member %d",
                               ctx->store_addr, ctx->rank);
        }
        weft__store_close(ctx->store);
        ctx->store = named;
        ctx->watch = NULL;
        weft__store_share_health(ctx->store, &ctx->store_health);
        st = watch_failures(ctx);
        if (st != WEFT_OK) {
            return weft__error(ctx, st, "cannot watch failure notices at %s", ctx->store_addr);
        }
    }
    weft_status_t st = weft__peer_slot(ctx, ctx->rank);
    if (st == WEFT_OK) {
        st = init_transports(ctx);
    }
    if (st == WEFT_OK) {
        st = publish_address(ctx);
    }
    return st;
}

/* The store connection also carries the failure notices: ctx->watch names it once it
 * watches them, and is NULL again once they are lost. */
static weft_status_t watch_failures(weft_ctx_t *ctx)
{
    char prefix[64];
    weft__key(ctx, prefix, sizeof(prefix), FAILED_DIR);
    weft_status_t st = weft__store_watch(ctx->store, prefix);
    if (st == WEFT_OK) {
        ctx->watch = ctx->store;
    }
    return st;
}

/*
 * One connection to the store per process: requests, the failure notices it watches and
 * the heartbeat's lease share it (the client multiplexes them), so that a job of N ranks
 * holds N connections of the store.
 */
static weft_status_t connect_store(weft_ctx_t *ctx, const weft_boot_t *boot)
{
    int timeout = (int)ctx->cfg.connect_timeout_ms;
    /* Speaking for our member id, so that the store lets us write what it owns; a joiner
     * without an id yet connects again once it has one (init_joiner). */
    weft_status_t st =
        ctx->member_only
            ? weft__store_connect_cred(boot->store, &ctx->cred, timeout, &ctx->logger, &ctx->store)
            : weft__store_connect_member(boot->store, ctx->token, ctx->rank, timeout, &ctx->logger,
                                         &ctx->store);
    if (st != WEFT_OK) {
        /* The store client logged why (comm/store/client.c): one line per error. */
        return weft__error_at(ctx, st, WEFT_LOG_DEBUG, "cannot reach the store at %s",
                              boot->store);
    }
    weft__store_share_health(ctx->store, &ctx->store_health);
    st = watch_failures(ctx);
    if (st != WEFT_OK) {
        return weft__error(ctx, st, "cannot watch failure notices at %s", boot->store);
    }
    return WEFT_OK;
}

/* The context's credentials: the member secret weftrun handed, or the token; the job's
 * data key either way (from the token: weft__store_data_key), in bytes and in hex. */
static weft_status_t ctx_keys(weft_ctx_t *ctx, const weft_boot_t *boot)
{
    ctx->member_only = boot->member_only;
    ctx->cred = boot->cred;
    ctx->data_hex[0] = '\0';
    if (!boot->member_only && boot->token[0] != '\0' &&
        weft__store_data_key(boot->token, ctx->cred.data_key) != WEFT_OK) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "cannot derive the job's data key");
    }
    if (boot->member_only || boot->token[0] != '\0') {
        weft__hex_encode(ctx->cred.data_key, sizeof(ctx->cred.data_key), ctx->data_hex);
    }
    return WEFT_OK;
}

static weft_status_t create_world(weft_ctx_t *ctx)
{
    int *members = malloc(sizeof(int) * (size_t)ctx->size);
    if (members == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "no memory for the world group");
    }
    for (int i = 0; i < ctx->size; i++) {
        members[i] = i;
    }
    weft_status_t st = weft__group_create(ctx, members, ctx->size, 0, 0, NULL, &ctx->world);
    free(members);
    ctx->next_group_id = 1;
    return st;
}

weft__faults_t *weft__ctx_faults(weft_ctx_t *ctx)
{
    return &ctx->faults;
}

/* WEFT_DEBUG_FAULTS (comm/fault.h), checked when the settings were loaded: switches the
 * faults on in builds without NDEBUG; the others say once that it is ignored. */
static void apply_debug_faults(weft_ctx_t *ctx)
{
    if (ctx->cfg.debug_faults[0] == '\0') {
        return;
    }
#ifdef NDEBUG
    WEFT_WARN(&ctx->logger,
              "WEFT_DEBUG_FAULTS=%s ignored: this build defines NDEBUG (faults are for Debug "
              "and sanitizer builds)",
              ctx->cfg.debug_faults);
#else
    weft_status_t st = weft__faults_parse(ctx->cfg.debug_faults, weft__ctx_faults(ctx));
    WEFT_ASSERT(st == WEFT_OK); /* the settings' parser checked it */
    (void)st;
    WEFT_INFO(&ctx->logger, "test faults on: WEFT_DEBUG_FAULTS=%s", ctx->cfg.debug_faults);
#endif
}

weft_status_t weft_init(const weft_init_params_t *params, weft_ctx_t **out)
{
    weft_boot_t boot;
    if (out == NULL || (params != NULL && params->size < offsetof(weft_init_params_t, log_fn))) {
        return WEFT_ERR_INVALID_ARG;
    }
    /* weft's threads (heartbeat, progress) use OpenSSL (the store's frame tags) until
     * weft_finalize; a process that exits without it runs exit handlers while they still
     * run, and OpenSSL's own handler would free what they use. Without it, the process's
     * end frees everything anyway. First use in the process decides, so here; where
     * OpenSSL was started before (Python's hashlib, torch), its handler is armed, and
     * weft's own (weft__exit_watch, registered after this call so that it runs before
     * OpenSSL's) stops the threads first. */
    (void)OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
    weft_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    ctx->rank = -1;
    ctx->shm_job.lock_fd = -1;
    pthread_mutex_init(&ctx->job_lock, NULL);
    ctx->logger.level = WEFT_LOG_WARN;
    ctx->logger.rank = -1;
    ctx->logger.prefix = "weft";
    if (params != NULL && params->size >= offsetof(weft_init_params_t, log_arg) + sizeof(void *)) {
        ctx->logger.fn = params->log_fn;
        ctx->logger.arg = params->log_arg;
    }
    weft_status_t st = weft__config_load(&ctx->cfg, &ctx->logger);
    if (st != WEFT_OK) {
        goto err_free_ctx; /* it told weft_last_error(NULL) which setting is wrong */
    }
    ctx->logger.level = ctx->cfg.log_level;
    apply_debug_faults(ctx);
    st = weft__bootstrap(&ctx->logger, &boot, ctx->last_error, sizeof(ctx->last_error));
    if (st == WEFT_OK && boot.via_pmix) {
        st = weft__pmix_boot(&ctx->cfg, &ctx->logger, &boot, &ctx->pmix, ctx->last_error,
                             sizeof(ctx->last_error));
    }
    if (st != WEFT_OK) {
        goto err_free;
    }
    ctx->rank = boot.rank;
    ctx->size = boot.size;
    ctx->local_rank = boot.local_rank;
    ctx->local_size = boot.local_size;
    ctx->logger.rank = boot.rank;
    snprintf(ctx->launcher, sizeof(ctx->launcher), "%s", boot.launcher);
    snprintf(ctx->store_addr, sizeof(ctx->store_addr), "%s", boot.store);
    snprintf(ctx->token, sizeof(ctx->token), "%s", boot.token);
    st = ctx_keys(ctx, &boot);
    OPENSSL_cleanse(boot.token, sizeof(boot.token));
    OPENSSL_cleanse(&boot.cred, sizeof(boot.cred));
    if (st != WEFT_OK) {
        goto err_fini;
    }
    weft__host_id(ctx->host_id);
    st = weft__shm_ctx_init(ctx);
    if (st != WEFT_OK) {
        goto err_fini;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    ctx->oversubscribed = cores > 0 && boot.local_size > cores;
    if (ctx->cfg.yield_spins < 0) {
        /* More ranks than cores: a spinning waiter takes the core its peer needs. */
        ctx->cfg.yield_spins = ctx->oversubscribed ? 0 : 2000;
    }
    ctx->joining = boot.joining;
    ctx->world_size_at_start = boot.size;
    st = weft__peer_slot(ctx, ctx->joining ? 0 : ctx->size - 1);
    if (st != WEFT_OK) {
        goto err_fini;
    }
    if (boot.store[0] != '\0') {
        st = connect_store(ctx, &boot);
        if (st != WEFT_OK) {
            goto err_fini;
        }
    }
    if (ctx->joining) {
        st = init_joiner(ctx);
    } else {
        st = init_transports(ctx);
        if (st == WEFT_OK && ctx->tl_remote != NULL) {
            st = exchange_addresses(ctx);
        }
        if (st == WEFT_OK) {
            st = create_world(ctx);
        }
        if (st == WEFT_OK) {
            int *ranks, n;
            st = weft__warm_up_peers(ctx->world, &ranks, &n);
            if (st == WEFT_OK) {
                st = weft__warm_up(ctx->world, ranks, n);
                free(ranks);
            }
            if ((st == WEFT_ERR_PEER_FAILED || st == WEFT_ERR_REVOKED) &&
                weft__group_status(ctx->world) != WEFT_OK) {
                st = WEFT_OK; /* a rank died meanwhile: the first operation reports it */
            }
        }
    }
    if (st == WEFT_OK && ctx->store != NULL && ctx->heartbeat == NULL) {
        st = weft__heartbeat_start(ctx); /* no address was published: arm the lease now */
    }
    if (st == WEFT_OK) {
        st = weft__transport_check(ctx); /* a forced transport that cannot work fails here */
    }
    if (st == WEFT_OK) {
        st = weft__progress_thread_start(ctx);
    }
    if (st != WEFT_OK) {
        goto err_fini;
    }
    weft__exit_watch(ctx); /* its threads are stopped if the process exits without finalize */
    WEFT_DEBUG(&ctx->logger, "initialised: rank %d of %d (launcher %s, store %s)", ctx->rank,
               ctx->size, ctx->launcher, ctx->store_addr[0] ? ctx->store_addr : "none");
    *out = ctx;
    return WEFT_OK;

err_fini:
    /* No context comes back: weft_last_error(NULL) tells why. */
    weft__error_noctx(st, "%s", ctx->last_error);
    weft_finalize(ctx);
    return st;
err_free:
    weft__error_noctx(st, "%s", ctx->last_error);
err_free_ctx:
    pthread_mutex_destroy(&ctx->job_lock);
    OPENSSL_cleanse(ctx->token, sizeof(ctx->token));
    OPENSSL_cleanse(&ctx->cred, sizeof(ctx->cred));
    OPENSSL_cleanse(ctx->data_hex, sizeof(ctx->data_hex));
    free(ctx);
    return st;
}

weft_status_t weft_finalize(weft_ctx_t *ctx)
{
    if (ctx == NULL) {
        return WEFT_OK;
    }
    if (!weft__exit_forget(ctx)) {
        /* Called by a later exit handler (a static destructor): the process is ending and
         * weft's threads were stopped, its store fenced, OpenSSL perhaps gone. Leave the
         * context to the process's end; the others see this process fail. */
        return WEFT_OK;
    }
    weft__progress_thread_stop(ctx); /* from here on, this thread alone runs weft */
    /* Leave together: a member that disappears while others still talk to it looks
     * like a failure to them. Best effort, and only on a healthy world group. When the
     * members did not leave together (the group was revoked, the barrier failed or timed
     * out, or start-up failed), the liveness lease stays armed: this process's exit then
     * reads as a failure to members still working, which repair around it instead of
     * waiting for it. */
    bool left_together = ctx->world != NULL && ctx->world->rank >= 0 &&
                         weft__group_status(ctx->world) == WEFT_OK;
    if (left_together && ctx->world->size > 1 && ctx->cfg.finalize_timeout_ms > 0) {
        weft_req_t *req = NULL;
        weft_status_t st = weft_ibarrier(ctx->world, &req);
        if (st == WEFT_INPROGRESS) {
            st = weft_wait(req, weft__ms_to_ns(ctx->cfg.finalize_timeout_ms));
            weft_req_free(req);
        }
        if (st == WEFT_ERR_MISMATCH) {
            /* Only a disagreement on an earlier small broadcast, not seen until now. */
            WEFT_WARN(&ctx->logger, "finalize: %s", weft_last_error(ctx));
        } else if (st != WEFT_OK) {
            WEFT_DEBUG(&ctx->logger, "finalize: not everyone left together: %s",
                       weft_status_str(st));
            left_together = false;
        }
    }
    if (left_together && ctx->world->rank == 0 && ctx->store != NULL) {
        /* The world is over: a process still waiting to join it (a replacement started
         * late) learns so from weft_group_join instead of waiting out its timeout. */
        char key[96];
        weft__key(ctx, key, sizeof(key), "g/%u/closed", ctx->world->id);
        (void)weft__store_set(ctx->store, key, "1", 1);
    }
    weft__heartbeat_stop(ctx, left_together);
    weft__req_free_all(ctx, NULL);
    while (ctx->groups != NULL) {
        weft__group_destroy(ctx->groups);
    }
    weft__shm_ctx_fini(ctx); /* after the groups' segments are gone */
    weft__cuda_ctx_fini(ctx);
    weft__req_pool_drain(ctx);
    weft__ctx_ext_fini_all(ctx);
    for (int i = 0; i < ctx->npeers; i++) {
        weft_peer_t *p = &ctx->peers[i];
        if (p->ep != NULL) {
            p->ops->disconnect(p->tl, p->ep);
        }
        free(p->addr);
    }
    /* Messages of old epochs nobody will receive: drop them rather than have the
     * transports complain about them at shutdown. Stopped in the reverse order. */
    weft__ctx_discard(ctx, 0, 0);
    while (ctx->ntls > 0) {
        weft_tl_inst_t *t = &ctx->tls[--ctx->ntls];
        t->ops->fini(t->tl);
    }
    for (size_t i = 0; i < ctx->nretired; i++) { /* no transport can read them now */
        weft__bigmem_free(ctx->retired[i].ptr, ctx->retired[i].big_bytes);
    }
    free(ctx->retired);
    weft__store_close(ctx->store); /* ctx->watch is the same connection */
    /* Rank 0 of a PMIx job serves the store: it waits for the others to leave it. */
    weft__pmix_fini(ctx->pmix, ctx->cfg.finalize_timeout_ms, &ctx->logger);
    free(ctx->peers);
    free(ctx->user_ops);
    pthread_mutex_destroy(&ctx->job_lock);
    OPENSSL_cleanse(ctx->token, sizeof(ctx->token));
    OPENSSL_cleanse(&ctx->cred, sizeof(ctx->cred));
    OPENSSL_cleanse(ctx->data_hex, sizeof(ctx->data_hex));
    free(ctx);
    return WEFT_OK;
}

void weft__retire(weft_ctx_t *ctx, void *ptr)
{
    weft__retire_big(ctx, ptr, 0);
}

void weft__retire_big(weft_ctx_t *ctx, void *ptr, size_t bytes)
{
    if (ptr == NULL) {
        return;
    }
    if (ctx->nretired == ctx->cap_retired) {
        size_t cap = ctx->cap_retired ? 2 * ctx->cap_retired : 16;
        struct weft__retired *p = realloc(ctx->retired, cap * sizeof(*p));
        if (p == NULL) {
            return; /* leaked, never freed under a transport still reading it */
        }
        ctx->retired = p;
        ctx->cap_retired = cap;
    }
    ctx->retired[ctx->nretired].ptr = ptr;
    ctx->retired[ctx->nretired++].big_bytes = bytes;
}

weft_status_t weft_ctx_world(weft_ctx_t *ctx, weft_group_t **world)
{
    WEFT_API_LOCK((weft_ctx_t *)ctx);
    if (ctx == NULL || world == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    *world = ctx->world;
    return WEFT_OK;
}

/* A revocation notice "g<gid>.<epoch>": revoke that group if we are still at that epoch. */
static void apply_revoke_notice(weft_ctx_t *ctx, const char *what)
{
    unsigned gid, epoch;
    if (sscanf(what, "g%u.%u", &gid, &epoch) != 2) {
        return;
    }
    for (weft_group_t *g = ctx->groups; g != NULL; g = g->next) {
        if (g->id == gid && g->epoch == epoch && weft__group_revoke_here(g)) {
            WEFT_INFO(&ctx->logger, "group %u epoch %u revoked by a member", gid, epoch);
        }
    }
}

/*
 * This member's own notice: it was declared failed, and the others go on without it. An
 * edit that only removes members publishes no revocation, so nothing it waits for at its
 * epochs would come until the timeout: its groups are revoked now, and a repair or grow
 * then says why (comm/group/edit.c).
 */
static void declared_failed(weft_ctx_t *ctx, const void *why, size_t len)
{
    ctx->declared_failed = true;
    /* Written by whoever reported it: escaped before it reaches a log or an error. */
    weft__log_escape(why, strnlen(why, len), ctx->declared_failed_why,
                     sizeof(ctx->declared_failed_why));
    WEFT_WARN(&ctx->logger, "this member was declared failed (%s): its groups are revoked",
              ctx->declared_failed_why);
    for (weft_group_t *g = ctx->groups; g != NULL; g = g->next) {
        weft__group_revoke_here(g);
    }
}

/* Notices under weft/failed/: "<member id>" from the launcher or a member that saw a
 * transport error, and "g<gid>.<epoch>" for an explicit revocation. */
void weft__poll_failure_notices(weft_ctx_t *ctx)
{
    char *key;
    void *val;
    size_t len;
    if (ctx->watch == NULL) {
        return;
    }
    char prefix[64];
    weft__key(ctx, prefix, sizeof(prefix), FAILED_DIR);
    size_t plen = strlen(prefix);
    weft_status_t st;
    while ((st = weft__store_next_event(ctx->watch, 0, &key, &val, &len)) == WEFT_OK) {
        const char *what = key + plen;
        int64_t id;
        if (strncmp(key, prefix, plen) != 0) {
            /* not ours */
        } else if (what[0] == 'g') {
            apply_revoke_notice(ctx, what);
        } else if (weft__parse_i64(what, 0, WEFT_TAG_MAX_MEMBERS - 1, &id)) {
            char text[160];
            WEFT_INFO(&ctx->logger, "member %d failed (%s)", (int)id,
                      weft__log_escape(val, len, text, sizeof(text)));
            if (id == ctx->rank && !ctx->declared_failed) {
                declared_failed(ctx, val, len);
            }
            weft__peer_failed(ctx, (int)id, WEFT_ERR_PEER_FAILED);
            if (id != ctx->rank && id < ctx->npeers) {
                ctx->peers[id].noticed = true;
            }
        }
        free(key);
        free(val);
    }
    if (st != WEFT_INPROGRESS) {
        /* The store is gone (or broke the protocol): failures are now learned from the
         * transports alone. Stop watching rather than poll a dead socket in every wait. */
        if (weft__store_lost_ns(&ctx->store_health) != 0) {
            weft__store_loss_report(ctx);
        } else if (!weft__store_fenced(ctx->watch)) { /* fenced: the process is exiting */
            WEFT_WARN(&ctx->logger,
                      "lost the store's failure notices (%s): peer failures are "
                      "now detected by the transports only",
                      weft_status_str(st));
        }
        ctx->watch = NULL; /* the connection stays ctx->store's */
    }
}
