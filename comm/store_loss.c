/*
 * A lost store. A context's connections to the store (requests, the failure-notice
 * watch, the heartbeat's lease) share one health record: the first to lose the store
 * loses it for all, later store calls fail at once with WEFT_ERR_IO, and the loss is
 * logged once per process, with the store's address and the cause.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/ctx.h"

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
    WEFT_ERROR(&ctx->logger, "%s; later store calls fail at once", phrase);
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
