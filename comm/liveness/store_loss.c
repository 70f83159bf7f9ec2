/*
 * A lost store. A context's connections to the store (requests, the failure-notice
 * watch, the heartbeat's lease) share one health record: the first to lose the store
 * loses it for all, later store calls fail at once with WEFT_ERR_IO, and the loss is
 * logged once per process, with the store's address and the cause. Failure detection
 * of a hung peer needs the store's leases, so from then on a wait on peers is bounded
 * by WEFT_FAILURE_TIMEOUT_MS: a hung member can no longer be told from a slow one.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/core_impl.h"

/* "the store at H:P is unreachable (what failed)" */
static void loss_phrase(const weft_ctx_t *ctx, char *buf, size_t len)
{
    const weft_store_health_t *h = &ctx->store_health;
    snprintf(buf, len, "the store at %s is unreachable (%s)", h->addr, weft__store_lost_cause(h));
}

void weft__store_loss_report(weft_ctx_t *ctx)
{
    if (!weft__store_claim_report(&ctx->store_health)) {
        return;
    }
    char phrase[384];
    loss_phrase(ctx, phrase, sizeof(phrase));
    WEFT_ERROR(&ctx->logger,
               "%s; later store calls fail at once, and waits on peers give up after "
               "WEFT_FAILURE_TIMEOUT_MS (%llu ms)",
               phrase, (unsigned long long)ctx->cfg.failure_timeout_ms);
}

weft_log_level_t weft__store_loss_explain(weft_ctx_t *ctx, weft_status_t status, char *msg,
                                          size_t len, weft_log_level_t level)
{
    if ((status != WEFT_ERR_IO && status != WEFT_ERR_TIMEOUT) ||
        weft__store_lost_ns(&ctx->store_health) == 0) {
        return level;
    }
    char phrase[384];
    loss_phrase(ctx, phrase, sizeof(phrase));
    size_t n = strlen(msg);
    if (n + 2 < len) {
        snprintf(msg + n, len - n, ": %s", phrase);
    }
    /* The first error it causes is the one report of the loss; the others repeat it. */
    return weft__store_claim_report(&ctx->store_health) ? WEFT_LOG_ERROR : WEFT_LOG_DEBUG;
}

uint64_t weft__wait_limit(const weft_ctx_t *ctx, uint64_t start, uint64_t timeout_ns)
{
    uint64_t lost = weft__store_lost_ns(&ctx->store_health);
    if (lost == 0) {
        return timeout_ns;
    }
    uint64_t from = lost > start ? lost : start;
    uint64_t bound = (from - start) + weft__ms_to_ns(ctx->cfg.failure_timeout_ms);
    return bound < timeout_ns ? bound : timeout_ns;
}

weft_status_t weft__wait_timeout(weft_ctx_t *ctx, uint64_t start, uint64_t timeout_ns,
                                 const char *what)
{
    unsigned long long waited = (weft__now_ns() - start) / 1000000ull;
    if (weft__wait_limit(ctx, start, timeout_ns) >= timeout_ns) {
        return weft__error_at(ctx, WEFT_ERR_TIMEOUT, WEFT_LOG_ERROR, "%s timed out after %llu ms",
                              what, waited);
    }
    char phrase[384];
    loss_phrase(ctx, phrase, sizeof(phrase));
    weft__store_claim_report(&ctx->store_health); /* this line says it */
    return weft__error_at(ctx, WEFT_ERR_TIMEOUT, WEFT_LOG_ERROR,
                          "%s gave up after %llu ms: %s, so a hung member cannot be told from a "
                          "slow one (WEFT_FAILURE_TIMEOUT_MS=%llu)",
                          what, waited, phrase, (unsigned long long)ctx->cfg.failure_timeout_ms);
}
