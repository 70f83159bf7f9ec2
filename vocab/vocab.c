/* The weft_vocab_t handle: sharding on a group and the statistics-merge operators. */
#include <stdlib.h>

#include "comm/core.h"
#include "vocab/vocab_impl.h"

static weft_status_t create_ops(weft_vocab_t *v)
{
    weft_op_params_t p = {.size = sizeof(p), .fn = weft__rec_merge, .elem_size = 3 * sizeof(float)};
    weft_status_t st = weft_op_create(v->ctx, &p, &v->op_alg1);
    if (st != WEFT_OK) {
        return st;
    }
    p.elem_size = weft__rec_floats(WEFT_VOCAB_ALG2, v->hidden) * sizeof(float);
    p.arg = &v->hidden; /* the handle outlives its operators */
    st = weft_op_create(v->ctx, &p, &v->op_alg2);
    if (st != WEFT_OK) {
        weft_op_free(v->ctx, v->op_alg1);
    }
    return st;
}

weft_status_t weft_vocab_create(weft_group_t *g, const weft_vocab_params_t *params,
                                weft_vocab_t **vocab)
{
    WEFT_API_LOCK(g != NULL ? weft__group_ctx(g) : NULL);
    if (g == NULL || params == NULL || vocab == NULL ||
        params->size < offsetof(weft_vocab_params_t, align) + sizeof(size_t)) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = weft__group_ctx(g);
    int rank, size;
    weft_status_t st = weft_group_rank(g, &rank);
    if (st == WEFT_OK) {
        st = weft_group_size(g, &size);
    }
    if (st != WEFT_OK) {
        return st;
    }
    /* GEMM dimensions are ints; records of one token must fit a user element. */
    if (params->hidden == 0 || params->hidden > (size_t)INT32_MAX / 4 || params->vocab_size == 0) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "vocab: bad sizes V=%zu h=%zu",
                           params->vocab_size, params->hidden);
    }
    weft_vocab_t *v = calloc(1, sizeof(*v));
    if (v == NULL) {
        return weft__error(ctx, WEFT_ERR_NO_MEMORY, "vocab: no memory for the handle");
    }
    v->ctx = ctx;
    v->group = g;
    v->rank = rank;
    v->nranks = size;
    v->vocab_size = params->vocab_size;
    v->hidden = params->hidden;
    v->align = params->align == 0 ? 1 : params->align;
    v->dtype = params->size >= offsetof(weft_vocab_params_t, dtype) + sizeof(weft_dtype_t)
                   ? params->dtype
                   : WEFT_F32;
    if (v->dtype != WEFT_F32 && v->dtype != WEFT_BF16 && v->dtype != WEFT_F16) {
        st = weft__error(ctx, WEFT_ERR_INVALID_ARG,
                         "vocab: dtype %s: the layers take f32, bf16 or f16",
                         weft_dtype_name(v->dtype));
        goto err_free_v;
    }
    st = weft_vocab_shard_range(v->vocab_size, size, v->align, rank, &v->range);
    if (st != WEFT_OK || v->range.padded_length > (size_t)INT32_MAX) {
        st = weft__error(ctx, WEFT_ERR_INVALID_ARG, "vocab: cannot shard V=%zu over %d ranks",
                         v->vocab_size, size);
        goto err_free_v;
    }
    st = create_ops(v);
    if (st != WEFT_OK) {
        goto err_free_v;
    }
    *vocab = v;
    return WEFT_OK;

err_free_v:
    free(v);
    return st;
}

weft_status_t weft_vocab_free(weft_vocab_t *vocab)
{
    WEFT_API_LOCK(vocab != NULL ? vocab->ctx : NULL);
    if (vocab == NULL) {
        return WEFT_OK;
    }
    if (vocab->n_mb > 0) {
        return weft__error(vocab->ctx, WEFT_ERR_INVALID_ARG,
                           "vocab: %d microbatch states still alive", vocab->n_mb);
    }
    weft_op_free(vocab->ctx, vocab->op_alg2);
    weft_op_free(vocab->ctx, vocab->op_alg1);
    weft__vx_free_vocab(vocab);
    free(vocab);
    return WEFT_OK;
}

weft_status_t weft_vocab_local_range(const weft_vocab_t *vocab, weft_vocab_range_t *range)
{
    WEFT_API_LOCK(vocab != NULL ? vocab->ctx : NULL);
    if (vocab == NULL || range == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    *range = vocab->range;
    return WEFT_OK;
}
