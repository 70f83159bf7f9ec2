/**
 * @file weft/kv.h
 * @brief A key-value space the job's processes share, for a program's own rendezvous.
 *
 * The keys live in the job's store (weft's own, or etcd), under the context's namespace
 * and apart from weft's own keys: a program (or a framework on top of weft, such as
 * torch.distributed's Store in the Python package) can agree on small values without a
 * server of its own. Every member reads and writes every key; what a member writes counts
 * against its share of the store (docs/store-protocol.md, "Memory").
 *
 * Keys are 1 to WEFT_KV_MAX_KEY bytes of printable ASCII (space to '~'); values at most
 * WEFT_KV_MAX_VALUE bytes, any bytes. These calls take the context's lock only while they
 * talk to the store: a get that waits does not hold up collectives of other threads.
 * A context without a store (a single process started without a launcher) has no such
 * space: WEFT_ERR_UNSUPPORTED.
 */
#ifndef WEFT_KV_H
#define WEFT_KV_H

#include <stddef.h>
#include <stdint.h>

#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_KV_MAX_KEY 160            /**< Longest key, in bytes. */
#define WEFT_KV_MAX_VALUE (256u << 10) /**< Longest value, in bytes. */

/** Set @p key to @p len bytes at @p val (replacing what it held). */
WEFT_API weft_status_t weft_kv_set(weft_ctx_t *ctx, const char *key, const void *val, size_t len);

/**
 * Read @p key, waiting until it exists or @p timeout_ns passes (WEFT_ERR_TIMEOUT; 0: do not
 * wait; WEFT_TIMEOUT_DEFAULT: the context's WEFT_TIMEOUT_MS). Copies at most @p cap bytes
 * to @p buf (NULL when @p cap is 0) and sets *len to the value's whole length: when *len
 * exceeds @p cap the value was cut, and a larger buffer reads it whole.
 */
WEFT_API weft_status_t weft_kv_get(weft_ctx_t *ctx, const char *key, void *buf, size_t cap,
                                   size_t *len, uint64_t timeout_ns);

/**
 * Add @p delta to the decimal counter @p key (created at 0) and set *value (may be NULL)
 * to the result, atomically among all callers. WEFT_ERR_INVALID_ARG if the key holds
 * something that is not a counter.
 */
WEFT_API weft_status_t weft_kv_add(weft_ctx_t *ctx, const char *key, int64_t delta, int64_t *value);

/** Delete @p key. *existed (may be NULL) says whether it held a value just before. */
WEFT_API weft_status_t weft_kv_delete(weft_ctx_t *ctx, const char *key, int *existed);

#ifdef __cplusplus
}
#endif

#endif
