/**
 * @file vocab.h
 * @brief Vocabulary parallelism: the output layer (logits + softmax cross-entropy) and the
 * input embedding sharded by vocabulary over the ranks of a group.
 *
 * The vocabulary of V entries is cut into P contiguous shards of equal padded length
 * (P = group size); rank i holds rows [start, start + length) of the output weight W
 * (and of the embedding table) in a buffer of `padded_length` rows. Padding rows are
 * not vocabulary entries: they take no part in the softmax and their gradient is zero.
 *
 * Output layer (Yeung et al. 2024, "Balancing Pipeline Parallelism with Vocabulary
 * Parallelism"): X [n, h] are the last hidden states, the same on every rank. Each rank
 * computes the logits of its shard, Y_i = X W_iᵀ, and the ranks merge per-token
 * statistics. Three algorithms give the same results and differ in how many collectives
 * (communication barriers) a microbatch needs:
 *
 * | algorithm        | forward            | backward           | collectives |
 * |------------------|--------------------|--------------------|-------------|
 * | WEFT_VOCAB_ALG2  | S, C1 (merge + D)  | T                  | 1           |
 * | WEFT_VOCAB_ALG1  | S, C1 (one merge)  | T, C2 (sum of ∇X)  | 2           |
 * | WEFT_VOCAB_NAIVE | S, C1 (max; sums)  | T, C2 (sum of ∇X)  | 3           |
 *
 * WEFT_VOCAB_ALG2, one collective per microbatch, is the recommended algorithm and the
 * default: it is 0, so a zero-initialised weft_vocab_mb_params_t selects it, as the
 * Python binding's default does. NAIVE is the baseline of the paper.
 *
 * The passes are separate calls so a pipeline schedule can place them (the paper's
 * letters in brackets):
 * - weft_vocab_xent_logits() [S] and weft_vocab_xent_grad() [T] compute, with no
 *   communication, and run to completion in the call;
 * - weft_vocab_xent_merge_start() [C1] and weft_vocab_xent_dx_reduce_start() [C2]
 *   start the pass's collective and return a request (weft_req_t), finished like every
 *   other request with weft_test() / weft_wait() and released with weft_req_free()
 *   (include/weft/core.h). What follows the collective (the loss after C1, the upload of
 *   ∇X to the device after C2) runs in the weft_test() / weft_wait() that completes it.
 * Blocking wrappers weft_vocab_xent_forward() (S, C1) and weft_vocab_xent_backward() (T,
 * C2) run them in order and wait.
 *
 * Labels: a label in [0, V) is a target token (with label smoothing, see
 * weft_vocab_mb_params_t, the target distribution puts ε / V on every entry as well); any negative
 * label (e.g. -100, PyTorch's default ignore_index) marks an ignored token, which has zero loss,
 * contributes to no gradient and is not counted by the mean. A label >= V is WEFT_ERR_INVALID_ARG.
 *
 * Refusals: a rank whose arguments of a pass are invalid (a label >= V, a NULL buffer, a
 * pass out of order) still takes part in the collective of that pass, as a refusal, and
 * every rank of the group gets WEFT_ERR_INVALID_ARG from it at once. The blocking
 * forward and backward do this themselves. With the passes called one by one, a rank
 * whose S (or T) failed must still call C1 (or C2), which then refuses and returns
 * WEFT_ERR_INVALID_ARG without waiting (and without a request); skipping it leaves the
 * others waiting for their timeout. The embedding calls refuse their collective likewise.
 *
 * Cancelling: weft_req_free() of a pass request still in flight cancels it as for other
 * requests: the collective is abandoned, which revokes the group's epoch on every member
 * (include/weft/group.h), and the microbatch must start again with S. Only one pass of a
 * microbatch is in flight at a time.
 *
 * Buffers are row-major and contiguous; X, W, ∇X and ∇W hold the vocabulary's dtype
 * (float32 unless weft_vocab_params_t says bf16 or f16), everything else float32. The tensors of
 * one call must all be in host memory or all in CUDA device memory (detected per call with
 * weft_memory_is_cuda(), which in a build without CUDA reports host memory for everything); labels,
 * ids and the upstream gradient may be in either. On the device, the passes run cuBLAS and weft's
 * kernels on the group's CUDA stream (weft_group_set_cuda_stream()) and return once that
 * work is done; the collectives reduce host copies of the statistics (the merge operator
 * runs on the host).
 *
 * Communication volume per microbatch of n tokens (4-byte floats): NAIVE and ALG1 reduce
 * 3n + n*h floats, ALG2 (3 + 2h) * n, twice as much: the price of its single barrier is
 * that A and B travel unscaled (weft_vocab_mb_stats() reports the bytes).
 *
 * Thread safety: as for the group the handle was created on.
 */
#ifndef WEFT_VOCAB_H
#define WEFT_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "weft/export.h"
#include "weft/coll.h"
#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------ */
/** @name Sharding */
/** @{ */

/** @brief The part of the vocabulary one rank holds. */
typedef struct weft_vocab_range {
    size_t start;         /**< First vocabulary id of the shard. */
    size_t length;        /**< Real entries in the shard (may be 0 for the last ranks). */
    size_t padded_length; /**< Rows of the shard's buffers; the same on every rank. */
} weft_vocab_range_t;

/**
 * @brief Shard of @p rank when @p vocab_size entries are cut over @p nranks ranks.
 *
 * The padded length is ceil(V / P) rounded up to a multiple of @p align, so the padded
 * vocabulary P * padded_length is a multiple of P (and of P * align). Rank r starts at
 * r * padded_length; its length is what is left of V there, clamped to [0, padded_length].
 * @param[in]  vocab_size V, > 0.
 * @param[in]  nranks     P, > 0.
 * @param[in]  align      Shard length multiple; 0 or 1 for none.
 * @param[in]  rank       0 .. P-1.
 * @param[out] range      Set on success.
 * @return WEFT_OK, or WEFT_ERR_INVALID_ARG (zero sizes, rank out of range, NULL, overflow).
 */
WEFT_API weft_status_t weft_vocab_shard_range(size_t vocab_size, int nranks, size_t align, int rank,
                                              weft_vocab_range_t *range);

/** @} */

/* ------------------------------------------------------------------------------------ */
/** @name Handles */
/** @{ */

/** @brief A sharded vocabulary on a group: sharding, the group and the merge operators. */
typedef struct weft_vocab weft_vocab_t;
/** @brief Per-microbatch state of the output layer between its passes. */
typedef struct weft_vocab_mb weft_vocab_mb_t;

/** @brief Parameters of weft_vocab_create(). Zero-initialise, then set @c size. */
typedef struct weft_vocab_params {
    size_t size;       /**< sizeof(weft_vocab_params_t). */
    size_t vocab_size; /**< V, > 0. */
    size_t hidden;     /**< h, the hidden size, > 0. */
    size_t align;      /**< Shard length multiple; 0 or 1 for none. */
    /** Element type of X, W, ∇X and ∇W of the output layer: WEFT_F32 (zero-initialised),
     * WEFT_BF16 or WEFT_F16. The passes accumulate in float32 on float32 copies of X and
     * W (kept per microbatch and per vocabulary, in the memory of the call) and round
     * ∇X and ∇W to the dtype once they are complete; C2 reduces ∇X in float32. The
     * upstream gradient, the losses and the statistics stay float32. The embedding's
     * table, output and gradients are in the dtype too: the forward's sum is exact (one
     * rank holds each row), the scatter adds in float32 and rounds each add; on the
     * device the embedding takes float32 only (WEFT_ERR_UNSUPPORTED). */
    weft_dtype_t dtype;
} weft_vocab_params_t;

/**
 * @brief Create a sharded vocabulary on @p g.
 *
 * Registers the statistics-merge reduction operators with weft_op_create() on the
 * group's context, so every rank of the job must create its weft_vocab_t handles (and
 * any other user operators) in the same order. No communication.
 * The handle must be freed before @p g.
 * @param[in]  g      The group whose ranks share the vocabulary (P = its size).
 * @param[in]  params Required.
 * @param[out] vocab  Set on success.
 * @return WEFT_OK, WEFT_ERR_INVALID_ARG, WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_vocab_create(weft_group_t *g, const weft_vocab_params_t *params,
                                         weft_vocab_t **vocab);

/**
 * @brief Free @p vocab (NULL: no-op).
 * @return WEFT_OK, or WEFT_ERR_INVALID_ARG while microbatch states made from it are
 *         alive (weft_vocab_mb_free() them first; the handle is then kept).
 */
WEFT_API weft_status_t weft_vocab_free(weft_vocab_t *vocab);

/** @brief This rank's shard of @p vocab. @return WEFT_OK or WEFT_ERR_INVALID_ARG. */
WEFT_API weft_status_t weft_vocab_local_range(const weft_vocab_t *vocab, weft_vocab_range_t *range);

/** @} */

/* ------------------------------------------------------------------------------------ */
/** @name Output layer: softmax cross-entropy */
/** @{ */

/** @brief How the output layer communicates (see the table in the file comment). */
typedef enum weft_vocab_algo {
    WEFT_VOCAB_ALG2 = 0,  /**< 1 collective: merged statistics and ∇X direction. The
                               default (zero-initialised) and recommended algorithm. */
    WEFT_VOCAB_ALG1 = 1,  /**< 2 collectives: merged statistics, ∇X. */
    WEFT_VOCAB_NAIVE = 2, /**< 3 collectives: max, (sum-exp, target), ∇X. The baseline. */
    WEFT_VOCAB_ALGO_COUNT
} weft_vocab_algo_t;

/** @brief Name of an algorithm ("alg2", "alg1", "naive"); "?" if invalid. */
WEFT_API const char *weft_vocab_algo_name(weft_vocab_algo_t algo);

/** @brief How per-token losses combine into the scalar loss. */
typedef enum weft_vocab_reduction {
    WEFT_VOCAB_MEAN = 0, /**< Mean over non-ignored tokens (0 when there are none). */
    WEFT_VOCAB_SUM = 1,  /**< Sum over tokens. */
    WEFT_VOCAB_NONE = 2, /**< No reduction: the upstream gradient is per token. */
} weft_vocab_reduction_t;

/** @brief Parameters of weft_vocab_mb_create(). Zero-initialise, then set @c size. */
typedef struct weft_vocab_mb_params {
    size_t size;                      /**< sizeof(weft_vocab_mb_params_t). */
    weft_vocab_algo_t algo;           /**< Zero-initialised: WEFT_VOCAB_ALG2. */
    weft_vocab_reduction_t reduction; /**< Zero-initialised: WEFT_VOCAB_MEAN. */
    size_t max_tokens;                /**< Largest n of a microbatch, > 0. */
    int accumulate_dw;                /**< Nonzero: T adds into ∇W_i instead of writing. */
    /** Label smoothing ε in [0, 1], as PyTorch's cross_entropy(label_smoothing=ε): the
     * target distribution is (1 - ε) on the label plus ε / V on every entry, so a
     * token's loss is (1 - ε)(-log p_label) + ε mean_v(-log p_v). It costs no extra
     * communication: each shard folds ε / V times the sum of its logits into the target
     * statistic it sends anyway. 0 (zero-initialised) for none. */
    float label_smoothing;
    /** ALG1/ALG2: compute the shard's logits this many rows of W at a time and never hold
     * them whole: the microbatch keeps n x block_rows floats of logits instead of
     * n x padded_length, and T computes each block's logits again (one more GEMM of the
     * shard's size; see weft_vocab_mb_memory()). The collectives are those of the
     * algorithm. 0 (zero-initialised), or at least the shard's length, for the whole
     * shard at once. NAIVE refuses it: its sums need the global max, so its forward
     * would compute the logits twice. */
    size_t block_rows;
} weft_vocab_mb_params_t;

/**
 * @brief Create the state of one microbatch in flight.
 *
 * A pipeline schedule creates one per microbatch that can be between S and T at once;
 * a state is reused for the next microbatch once its last pass completed. Working
 * buffers are allocated at the first S on each memory type and kept until freed.
 * @return WEFT_OK, WEFT_ERR_INVALID_ARG, WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_vocab_mb_create(weft_vocab_t *vocab,
                                            const weft_vocab_mb_params_t *params,
                                            weft_vocab_mb_t **mb);

/**
 * @brief Free @p mb (NULL: no-op).
 *
 * A pass request still in flight is cancelled (its collective abandoned, the group's
 * epoch revoked, see "Cancelling" above); that request then completes with
 * WEFT_ERR_REVOKED and must still be released with weft_req_free(). A completed pass
 * request that was not released yet stays valid.
 * @return WEFT_OK.
 */
WEFT_API weft_status_t weft_vocab_mb_free(weft_vocab_mb_t *mb);

/**
 * @brief Local logits Y_i = X W_iᵀ and local statistics, for ALG2 also A_i, B_i (the
 * paper's pass S).
 *
 * No communication. @p x, @p w and @p labels are kept by reference: they must stay
 * unchanged until T has completed. Starts a new microbatch: allowed when @p mb is idle,
 * after a completed or failed pass, not while a pass request is in flight.
 * @param[in] x      X [n, h].
 * @param[in] w      W_i [padded_length, h]; padding rows are not read.
 * @param[in] labels [n] target ids, negative for ignored tokens.
 * @param[in] n      Tokens, 0 .. max_tokens.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG (NULL, n too large, a label >= V, pass out of
 *         order, mixed memory types); WEFT_ERR_NO_MEMORY; WEFT_ERR_UNSUPPORTED.
 */
WEFT_API weft_status_t weft_vocab_xent_logits(weft_vocab_mb_t *mb, const void *x, const void *w,
                                              const int64_t *labels, size_t n);

/**
 * @brief Start merging the statistics over the group (the paper's pass C1); no blocking
 * twin (weft_vocab_xent_forward() runs S and C1 and waits).
 *
 * ALG1/ALG2: one collective with the merge operator. NAIVE: a max, which this call waits
 * for (what follows depends on it; starting the next collective later from progress
 * would let ranks with several microbatches in flight start collectives in different
 * orders), then the sums, left in flight. Every rank of the group must call it, also a
 * rank whose S failed: its C1 refuses (see "Refusals" above). The loss is known
 * (weft_vocab_xent_loss()) once the request completed.
 * @param[out] req The request of the pass, finished with weft_test() / weft_wait() and
 *                 released with weft_req_free(); NULL when it completed inline (WEFT_OK).
 *                 Not written on error.
 * @return WEFT_OK (completed, *req = NULL), WEFT_INPROGRESS (*req set),
 *         WEFT_ERR_INVALID_ARG when this rank refused (no request) or, from the request,
 *         when another rank did, or an error of the collective.
 */
WEFT_API weft_status_t weft_vocab_xent_merge_start(weft_vocab_mb_t *mb, weft_req_t **req);

/**
 * @brief Per-token and reduced loss of a microbatch whose C1 request completed.
 * @param[out] loss_tok [n] per-token loss (0 for ignored tokens), may be NULL; host or
 *                      device memory.
 * @param[out] loss     Reduced loss (per the reduction; the sum for NONE), may be NULL.
 * @return WEFT_OK, or WEFT_ERR_INVALID_ARG when C1 has not completed.
 */
WEFT_API weft_status_t weft_vocab_xent_loss(const weft_vocab_mb_t *mb, float *loss_tok,
                                            float *loss);

/**
 * @brief ∇W_i, and ∇X: complete for ALG2, this rank's part for NAIVE/ALG1 (the paper's
 * pass T).
 *
 * No communication. Allowed once the C1 request has completed.
 * @param[in]  grad Upstream gradient: 1 float (dLoss for MEAN/SUM) or [n] floats (NONE);
 *                  host or device memory.
 * @param[out] dx   ∇X [n, h]. NAIVE/ALG1: holds this rank's partial sum until the C2
 *                  request completes.
 * @param[out] dw   ∇W_i [padded_length, h]; padding rows are zero (left as they are
 *                  with accumulate_dw).
 * @return WEFT_OK, WEFT_ERR_INVALID_ARG (NULL, out of order, mixed memory types).
 */
WEFT_API weft_status_t weft_vocab_xent_grad(weft_vocab_mb_t *mb, const float *grad, void *dx,
                                            void *dw);

/**
 * @brief Start the sum of ∇X over the group (the paper's pass C2; NAIVE, ALG1); no
 * blocking twin (weft_vocab_xent_backward() runs T and C2 and waits).
 *
 * For ALG2 there is nothing to communicate: it returns WEFT_OK at once with *req = NULL,
 * issuing no collective. A rank whose T failed must still call it: it refuses (see
 * "Refusals" above). ∇X is complete in the buffer given to weft_vocab_xent_grad() once
 * the request completed.
 * @param[out] req As for weft_vocab_xent_merge_start().
 * @return WEFT_OK (completed, *req = NULL), WEFT_INPROGRESS (*req set),
 *         WEFT_ERR_INVALID_ARG when this rank refused (no request) or, from the request,
 *         when another rank did, or an error of the collective.
 */
WEFT_API weft_status_t weft_vocab_xent_dx_reduce_start(weft_vocab_mb_t *mb, weft_req_t **req);

/**
 * @brief Blocking forward: weft_vocab_xent_logits() [S], weft_vocab_xent_merge_start()
 * [C1] and the wait for it. A wait that times out cancels the pass (see "Cancelling").
 * @param[out] loss_tok,loss As weft_vocab_xent_loss(); written only on success.
 * @return As the passes.
 */
WEFT_API weft_status_t weft_vocab_xent_forward(weft_vocab_mb_t *mb, const void *x, const void *w,
                                               const int64_t *labels, size_t n, float *loss_tok,
                                               float *loss);

/** @brief Blocking backward: weft_vocab_xent_grad() [T], weft_vocab_xent_dx_reduce_start()
 * [C2] and the wait for it. @return As the passes. */
WEFT_API weft_status_t weft_vocab_xent_backward(weft_vocab_mb_t *mb, const float *grad, void *dx,
                                                void *dw);

/** @brief Where the time of a microbatch went (filled by weft_vocab_mb_stats()). */
typedef struct weft_vocab_mb_stats {
    size_t size;          /**< sizeof(weft_vocab_mb_stats_t), set by the caller. */
    uint64_t compute_ns;  /**< Time in the compute of S, T and between collectives. */
    uint64_t comm_ns;     /**< Σ over its collectives of start-to-completion time as seen
                               by this rank (includes waiting for slower ranks, and is only
                               as fine as the calls that drive progress). */
    uint32_t collectives; /**< Collectives it issued. */
    size_t comm_bytes;    /**< Bytes of the buffers those collectives reduced. */
} weft_vocab_mb_stats_t;

/**
 * @brief Statistics of the current (or last) microbatch of @p mb, reset by
 * weft_vocab_xent_logits().
 * @param[in,out] stats Its @c size must be set; the other fields are written on success.
 * @return WEFT_OK or WEFT_ERR_INVALID_ARG.
 */
WEFT_API weft_status_t weft_vocab_mb_stats(const weft_vocab_mb_t *mb, weft_vocab_mb_stats_t *stats);

/** @brief Working memory a microbatch holds between its passes (bytes, on its device). */
typedef struct weft_vocab_mem {
    size_t size;    /**< sizeof(weft_vocab_mem_t), set by the caller. */
    size_t s_to_c1; /**< Held from the end of S until C1 completes. */
    size_t c1_to_t; /**< Held from the end of C1 until T. */
    size_t peak;    /**< max(s_to_c1, c1_to_t): activation bytes per microbatch. */
} weft_vocab_mem_t;

/**
 * @brief Bytes each algorithm keeps alive per microbatch of @p n tokens between S and T
 * (not counting the caller's X, W, labels and output buffers).
 * @param[in,out] mem Its @c size must be set; the other fields are written on success.
 * @return WEFT_OK or WEFT_ERR_INVALID_ARG.
 */
WEFT_API weft_status_t weft_vocab_xent_memory(const weft_vocab_t *vocab, weft_vocab_algo_t algo,
                                              size_t n, weft_vocab_mem_t *mem);

/**
 * @brief As weft_vocab_xent_memory(), for the algorithm and block_rows of @p mb: what one
 * of its microbatches of @p n tokens keeps alive between S and T (the logits of one block
 * where it is blocked).
 * @return WEFT_OK or WEFT_ERR_INVALID_ARG.
 */
WEFT_API weft_status_t weft_vocab_mb_memory(const weft_vocab_mb_t *mb, size_t n,
                                            weft_vocab_mem_t *mem);

/** @} */

/* ------------------------------------------------------------------------------------ */
/** @name Input embedding */
/** @{ */

/**
 * @brief Embedding forward (pass IF), nonblocking: out[j] = E[ids[j]].
 *
 * Each rank writes the rows of ids in its shard and zeros elsewhere, then a sum over the
 * group (one collective, in place on @p out) completes every row on every rank.
 * @param[in]  table E_i [padded_length, h] (h = the vocab's hidden size).
 * @param[in]  ids   [n] token ids in [0, V).
 * @param[out] out   [n, h]; final once the request completed.
 * @param[out] req   NULL when completed inline (WEFT_OK).
 * @return WEFT_OK, WEFT_INPROGRESS, WEFT_ERR_INVALID_ARG (an id outside [0, V)), errors of
 *         the collective.
 */
WEFT_API weft_status_t weft_vocab_iembed_forward(weft_vocab_t *vocab, const void *table,
                                                 const int64_t *ids, size_t n, void *out,
                                                 weft_req_t **req);

/** @brief Blocking weft_vocab_iembed_forward(). */
WEFT_API weft_status_t weft_vocab_embed_forward(weft_vocab_t *vocab, const void *table,
                                                const int64_t *ids, size_t n, void *out);

/**
 * @brief Embedding backward, communication part (pass IB): start the broadcast of ∇out
 * from @p root, which computed it, to every rank (one collective); no blocking twin
 * (weft_vocab_embed_backward() broadcasts and scatters).
 *
 * Not needed when every rank already holds ∇out: then call only
 * weft_vocab_embed_grad_scatter().
 * @param[in,out] grad_out [n, h]: input on @p root, output elsewhere.
 */
WEFT_API weft_status_t weft_vocab_embed_grad_bcast_start(weft_vocab_t *vocab, void *grad_out,
                                                         size_t n, int root, weft_req_t **req);

/**
 * @brief Embedding backward, local part: ∇E_i[ids[j] - start] += ∇out[j] for every id in
 * this rank's shard (no communication; ∇E_i is accumulated, not overwritten).
 * @param[in,out] grad_table ∇E_i [padded_length, h].
 * @return WEFT_OK or WEFT_ERR_INVALID_ARG.
 */
WEFT_API weft_status_t weft_vocab_embed_grad_scatter(weft_vocab_t *vocab, const void *grad_out,
                                                     const int64_t *ids, size_t n,
                                                     void *grad_table);

/**
 * @brief Blocking embedding backward: broadcast from @p root (skipped when @p root is
 * -1: every rank holds ∇out already), then the local scatter-add.
 */
WEFT_API weft_status_t weft_vocab_embed_backward(weft_vocab_t *vocab, void *grad_out,
                                                 const int64_t *ids, size_t n, int root,
                                                 void *grad_table);

/** @} */

#ifdef __cplusplus
}
#endif
#endif
