/*
 * The vocabulary-parallel output layer: microbatch states and the passes S (logits),
 * C1 (merge_start), T (grad) and C2 (dx_reduce_start) of the three algorithms, the
 * requests of the communicating passes, and the blocking wrappers.
 *
 * The compute passes run here (CPU kernels in xent_cpu.c, device kernels behind
 * weft__vxd_*); the collectives always reduce host buffers of the microbatch, so the
 * statistics-merge operator runs on the host whatever memory the tensors are in.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/core.h"
#include "util/assert.h"
#include "vocab/vocab_impl.h"

weft_status_t weft_vocab_mb_create(weft_vocab_t *vocab, const weft_vocab_mb_params_t *params,
                                   weft_vocab_mb_t **mb)
{
    WEFT_API_LOCK(vocab != NULL ? vocab->ctx : NULL);
    if (vocab == NULL || params == NULL || mb == NULL ||
        params->size < offsetof(weft_vocab_mb_params_t, accumulate_dw) + sizeof(int)) {
        return WEFT_ERR_INVALID_ARG;
    }
    if ((unsigned)params->algo >= WEFT_VOCAB_ALGO_COUNT ||
        (unsigned)params->reduction > WEFT_VOCAB_NONE || params->max_tokens == 0 ||
        params->max_tokens > (size_t)INT32_MAX) {
        return weft__error(vocab->ctx, WEFT_ERR_INVALID_ARG,
                           "vocab: bad microbatch parameters (algo %d, reduction %d, n %zu)",
                           (int)params->algo, (int)params->reduction, params->max_tokens);
    }
    float ls = params->size >= offsetof(weft_vocab_mb_params_t, label_smoothing) + sizeof(float)
                   ? params->label_smoothing
                   : 0.0f;
    if (!(ls >= 0.0f && ls <= 1.0f)) { /* NaN too */
        return weft__error(vocab->ctx, WEFT_ERR_INVALID_ARG,
                           "vocab: label smoothing %g is not in [0, 1]", (double)ls);
    }
    size_t block = params->size >= offsetof(weft_vocab_mb_params_t, block_rows) + sizeof(size_t)
                       ? params->block_rows
                       : 0;
    if (block > 0 && params->algo == WEFT_VOCAB_NAIVE) {
        return weft__error(vocab->ctx, WEFT_ERR_INVALID_ARG,
                           "vocab: block_rows needs alg1 or alg2: naive's sums need the global "
                           "max first, so its forward would compute the logits twice");
    }
    if (block >= vocab->range.length) {
        block = 0; /* the shard fits one block */
    }
    weft_vocab_mb_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return weft__error(vocab->ctx, WEFT_ERR_NO_MEMORY, "vocab: no memory for a microbatch");
    }
    m->v = vocab;
    m->algo = params->algo;
    m->reduction = params->reduction;
    m->max_tokens = params->max_tokens;
    m->accumulate_dw = params->accumulate_dw != 0;
    m->label_smoothing = ls;
    m->block = block;
    m->state = WEFT__MB_IDLE;
    vocab->n_mb++;
    *mb = m;
    return WEFT_OK;
}

static void pass_cancel(weft_vocab_mb_t *mb);

weft_status_t weft_vocab_mb_free(weft_vocab_mb_t *mb)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    if (mb == NULL) {
        return WEFT_OK;
    }
    pass_cancel(mb);
#ifdef WEFT_HAVE_CUDA
    weft__vxd_free(mb);
#endif
    free(mb->y);
    free(mb->rec);
    free(mb->mloc);
    free(mb->loss);
    free(mb->coef);
    free(mb->wtok);
    free(mb->labels_host);
    free(mb->dx_host);
    free(mb->wsum);
    weft__vx_free_mb(mb);
    mb->v->n_mb--;
    free(mb);
    return WEFT_OK;
}

/* Host buffers of the microbatch; y only where the CPU computes. */
static weft_status_t ensure_host_buffers(weft_vocab_mb_t *mb, bool device_labels)
{
    const weft_vocab_t *v = mb->v;
    size_t n = mb->max_tokens;
    size_t rec = weft__rec_floats(mb->algo, v->hidden);
    float **small[] = {&mb->mloc, &mb->loss, &mb->coef, &mb->wtok};
    for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
        if (*small[i] == NULL && (*small[i] = malloc(n * sizeof(float))) == NULL) {
            goto err_nomem;
        }
    }
    if (mb->rec == NULL && (mb->rec = malloc(n * rec * sizeof(float))) == NULL) {
        goto err_nomem;
    }
    size_t rows = mb->block > 0 ? mb->block : v->range.length;
    if (!mb->on_device && mb->y == NULL && rows > 0 &&
        (mb->y = malloc(n * rows * sizeof(float))) == NULL) {
        goto err_nomem;
    }
    if (mb->algo == WEFT_VOCAB_ALG2 && mb->label_smoothing > 0.0f && mb->wsum == NULL &&
        (mb->wsum = malloc(v->hidden * sizeof(float))) == NULL) {
        goto err_nomem;
    }
    if (device_labels && mb->labels_host == NULL &&
        (mb->labels_host = malloc(n * sizeof(int64_t))) == NULL) {
        goto err_nomem;
    }
    if (mb->on_device && mb->algo != WEFT_VOCAB_ALG2 && mb->dx_host == NULL &&
        (mb->dx_host = malloc(n * v->hidden * sizeof(float))) == NULL) {
        goto err_nomem;
    }
    return WEFT_OK;

err_nomem:
    return weft__error(v->ctx, WEFT_ERR_NO_MEMORY, "vocab: no memory for the buffers of %zu tokens",
                       n);
}

/* Which memory the tensors of S are in; mixing host and device is an error. */
static weft_status_t s_memory_type(weft_vocab_mb_t *mb, const void *x, const void *w)
{
    int dx = weft__vocab_is_device(x);
    int dw = w != NULL ? weft__vocab_is_device(w) : dx;
    if (dx != dw) {
        return weft__error(mb->v->ctx, WEFT_ERR_INVALID_ARG,
                           "vocab: X and W must both be in host or both in device memory");
    }
    mb->on_device = dx != 0;
    return WEFT_OK;
}

/* Host view of the labels, checked against V; sets n_valid. */
static weft_status_t s_labels(weft_vocab_mb_t *mb, const int64_t *labels, bool device_labels)
{
    const weft_vocab_t *v = mb->v;
    mb->labels = labels;
    if (device_labels) {
#ifdef WEFT_HAVE_CUDA
        weft_status_t st = weft__vxd_copy(mb->v, mb->labels_host, labels, mb->n * sizeof(int64_t));
        if (st != WEFT_OK) {
            return st;
        }
#endif
        mb->labels = mb->labels_host;
    }
    int64_t valid = weft__count_valid_labels(mb->labels, mb->n, v->vocab_size);
    if (valid < 0) {
        return weft__error(v->ctx, WEFT_ERR_INVALID_ARG,
                           "vocab: a label is >= the vocabulary size %zu", v->vocab_size);
    }
    mb->n_valid = (size_t)valid;
    return WEFT_OK;
}

weft_status_t weft_vocab_xent_logits(weft_vocab_mb_t *mb, const void *x, const void *w,
                                     const int64_t *labels, size_t n)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    if (mb == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = mb->v->ctx;
    if (mb->state == WEFT__MB_C1 || mb->state == WEFT__MB_C2) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "vocab: S while a pass request is in flight");
    }
    mb->state = WEFT__MB_IDLE; /* a failed S leaves nothing for C1: it refuses */
    if (n > mb->max_tokens || (n > 0 && (x == NULL || labels == NULL)) ||
        (mb->v->range.length > 0 && w == NULL)) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "vocab: S: bad arguments (n %zu, max %zu)", n,
                           mb->max_tokens);
    }
    weft_status_t st = s_memory_type(mb, x, w);
    if (st != WEFT_OK) {
        return st;
    }
    bool device_labels = n > 0 && weft__vocab_is_device(labels);
    if ((st = ensure_host_buffers(mb, device_labels)) != WEFT_OK) {
        return st;
    }
    mb->have_loss = false;
    mb->stats = (weft_vocab_mb_stats_t){.size = sizeof(mb->stats)};
    uint64_t t0 = weft__now_ns();
    mb->n = n;
    mb->labels_user = labels;
    if ((st = s_labels(mb, labels, device_labels)) != WEFT_OK ||
        (st = weft__vx_s_views(mb, x, w)) != WEFT_OK) {
        return st;
    }
    if (mb->on_device) {
#ifdef WEFT_HAVE_CUDA
        if ((st = weft__vxd_s(mb)) != WEFT_OK) {
            return st;
        }
#endif
    } else {
        weft__xent_dims_t d = weft__vocab_mb_dims(mb);
        weft__xent_s_cpu(&d, mb->algo, mb->x, mb->w, mb->labels, mb->y, mb->rec, mb->mloc,
                         mb->wsum);
    }
    mb->stats.compute_ns += weft__now_ns() - t0;
    mb->state = WEFT__MB_S_DONE;
    return WEFT_OK;
}

static weft_status_t finish_c1(weft_vocab_mb_t *mb)
{
    uint64_t t0 = weft__now_ns();
    weft__xent_dims_t d = weft__vocab_mb_dims(mb);
    mb->loss_sum =
        weft__xent_finish_c1_cpu(&d, mb->algo, mb->labels, mb->rec, mb->mloc, mb->loss, mb->coef);
    mb->state = WEFT__MB_C1_DONE;
    mb->have_loss = true;
    mb->stats.compute_ns += weft__now_ns() - t0;
    return WEFT_OK;
}

static weft_status_t after_collective(weft_vocab_mb_t *mb);
static weft_status_t request_done(weft_vocab_mb_t *mb, weft_status_t st);

/* Start an in-place all-reduce of the microbatch; runs what follows if it completed
 * inline. */
static weft_status_t start_allreduce(weft_vocab_mb_t *mb, void *buf, size_t count,
                                     weft_dtype_t dtype, weft_op_t op)
{
    weft_req_t *req = NULL;
    mb->coll_start_ns = weft__now_ns();
    mb->stats.collectives++;
    mb->stats.comm_bytes += count * (dtype == WEFT_DTYPE_USER
                                         ? weft__rec_floats(mb->algo, mb->v->hidden) * sizeof(float)
                                         : weft_dtype_size(dtype));
    weft_status_t st = weft__vocab_iallreduce(mb->v, buf, count, dtype, op, &req);
    if (st == WEFT_INPROGRESS) {
        mb->req = req;
        return st;
    }
    weft_req_free(req); /* NULL after an inline completion */
    mb->stats.comm_ns += weft__now_ns() - mb->coll_start_ns;
    if (st != WEFT_OK) {
        mb->state = WEFT__MB_FAILED;
        return st;
    }
    return after_collective(mb);
}

/* The collective of the current stage completed: do what follows it. */
static weft_status_t after_collective(weft_vocab_mb_t *mb)
{
    if (mb->state == WEFT__MB_C2) {
        weft_status_t st = WEFT_OK;
#ifdef WEFT_HAVE_CUDA
        if (mb->on_device) {
            st = weft__vxd_dx_upload(mb);
        }
#endif
        if (st == WEFT_OK) {
            st = weft__vx_dx_store(mb);
        }
        mb->state = st == WEFT_OK ? WEFT__MB_IDLE : WEFT__MB_FAILED;
        return st;
    }
    if (mb->algo == WEFT_VOCAB_NAIVE && mb->naive_stage == 1) {
        uint64_t t0 = weft__now_ns();
        if (mb->on_device) {
#ifdef WEFT_HAVE_CUDA
            weft_status_t st = weft__vxd_naive_sums(mb);
            if (st != WEFT_OK) {
                mb->state = WEFT__MB_FAILED;
                return st;
            }
#endif
        } else {
            weft__xent_dims_t d = weft__vocab_mb_dims(mb);
            weft__xent_naive_sums_cpu(&d, mb->labels, mb->y, mb->rec);
        }
        mb->stats.compute_ns += weft__now_ns() - t0;
        mb->naive_stage = 2;
        return start_allreduce(mb, mb->rec + mb->n, 2 * mb->n, WEFT_F32, WEFT_SUM);
    }
    return finish_c1(mb);
}

/*
 * The caller's request of a pass (C1, C2) is a compound request (comm/progress/req.c) over
 * the collective in flight, mb->req: its progress advances that collective and, once it
 * completed, runs what follows it (the loss after C1, the upload of ∇X after C2). It is
 * not handed to the progress thread, so that work runs in the caller's weft_test() /
 * weft_wait(), on the caller's thread (CUDA calls included). Its impl is the microbatch
 * while the pass is in flight; NULL once the pass ended, or once the microbatch was freed.
 * It belongs to no group (as the embedding's staged requests): the collective inside it
 * does, and reports the group's failures and edits.
 */
static weft_status_t pass_progress(weft_req_t *req)
{
    weft_vocab_mb_t *mb = weft__req_impl(req);
    if (mb == NULL) {
        return weft__error_at(weft__req_ctx(req), WEFT_ERR_REVOKED, WEFT_LOG_INFO,
                              "vocab: the microbatch of this pass request was freed in flight; "
                              "its collective was abandoned");
    }
    weft_status_t st = weft__req_advance(mb->req);
    if (st == WEFT_INPROGRESS) {
        return st;
    }
    /* What follows starts no collective here: NAIVE's second one was started by
     * weft_vocab_xent_merge_start, in program order on every rank. (A collective started
     * here would also be younger than this request, which weft__req_free_all must free
     * first.) */
    st = request_done(mb, st);
    WEFT_ASSERT(st != WEFT_INPROGRESS);
    mb->pass_req = NULL;
    weft__req_set_impl(req, NULL);
    return st;
}

/* Stop the pass in flight on @p mb, if any: its collective is abandoned (the group's epoch
 * revoked, comm/coll/common.c) and the microbatch starts again with S. */
static void pass_cancel(weft_vocab_mb_t *mb)
{
    bool in_flight = mb->req != NULL;
    weft_req_free(mb->req);
    mb->req = NULL;
    if (mb->pass_req != NULL) {
        weft__req_set_impl(mb->pass_req, NULL);
        mb->pass_req = NULL;
    }
    if (in_flight) {
        mb->state = WEFT__MB_FAILED;
    }
}

/* weft_req_free() of a pass request: one still in flight cancels its pass. */
static void pass_cleanup(weft_req_t *req)
{
    weft_vocab_mb_t *mb = weft__req_impl(req);
    if (mb != NULL) {
        pass_cancel(mb);
    }
}

/* The caller's side of a pass that @p st says is complete, failed or in flight. */
static weft_status_t pass_request(weft_vocab_mb_t *mb, weft_status_t st, weft_req_t **req)
{
    if (st != WEFT_INPROGRESS) {
        if (st == WEFT_OK) {
            *req = NULL;
        }
        return st;
    }
    weft_req_t *r = weft__req_new(mb->v->ctx, NULL);
    if (r == NULL) {
        pass_cancel(mb);
        return weft__error(mb->v->ctx, WEFT_ERR_NO_MEMORY, "vocab: no memory for a request");
    }
    weft__req_set_ops(r, pass_progress, pass_cleanup, mb);
    mb->pass_req = r;
    *req = r;
    return WEFT_INPROGRESS;
}

/* A pass that this rank cannot run: it refuses the collective the others run. */
static weft_status_t pass_refuse(weft_vocab_mb_t *mb, const char *pass, const char *why)
{
    weft__vocab_refuse(mb->v, false, false); /* the others are in the pass's collective */
    return weft__error(mb->v->ctx, WEFT_ERR_INVALID_ARG,
                       "vocab: %s %s (refused: %s fails on every rank)", pass, why, pass);
}

weft_status_t weft_vocab_xent_merge_start(weft_vocab_mb_t *mb, weft_req_t **req)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    if (mb == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (req == NULL) {
        if (mb->state == WEFT__MB_S_DONE) {
            mb->state = WEFT__MB_FAILED; /* this microbatch's C1 was the one refused */
        }
        return pass_refuse(mb, "C1", "without a request pointer");
    }
    if (mb->state != WEFT__MB_S_DONE) {
        return pass_refuse(mb, "C1", "must follow a completed S");
    }
    mb->state = WEFT__MB_C1;
    weft_status_t st;
    switch (mb->algo) {
    case WEFT_VOCAB_NAIVE:
        /* The sums depend on the max, so the max is waited for here, in program order:
         * starting the sums later from progress would let ranks with several microbatches
         * in flight start their collectives in different orders. */
        mb->naive_stage = 1;
        st = start_allreduce(mb, mb->rec, mb->n, WEFT_F32, WEFT_MAX);
        if (st == WEFT_INPROGRESS && mb->naive_stage == 1) {
            st = request_done(mb, weft_wait(mb->req, WEFT_TIMEOUT_DEFAULT));
        }
        break;
    case WEFT_VOCAB_ALG1:
        st = start_allreduce(mb, mb->rec, mb->n, WEFT_DTYPE_USER, mb->v->op_alg1);
        break;
    default:
        st = start_allreduce(mb, mb->rec, mb->n, WEFT_DTYPE_USER, mb->v->op_alg2);
        break;
    }
    return pass_request(mb, st, req);
}

/* Handle the completion status @p st of the collective in flight. */
static weft_status_t request_done(weft_vocab_mb_t *mb, weft_status_t st)
{
    mb->stats.comm_ns += weft__now_ns() - mb->coll_start_ns;
    weft_req_free(mb->req);
    mb->req = NULL;
    if (st != WEFT_OK) {
        mb->state = WEFT__MB_FAILED;
        return st;
    }
    return after_collective(mb);
}

weft_status_t weft_vocab_xent_loss(const weft_vocab_mb_t *mb, float *loss_tok, float *loss)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    if (mb == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (!mb->have_loss || mb->state == WEFT__MB_FAILED) {
        return weft__error(mb->v->ctx, WEFT_ERR_INVALID_ARG,
                           "vocab: loss before the C1 request completed");
    }
    if (loss_tok != NULL && mb->n > 0) {
        if (weft__vocab_is_device(loss_tok)) {
#ifdef WEFT_HAVE_CUDA
            weft_status_t st = weft__vxd_copy(mb->v, loss_tok, mb->loss, mb->n * sizeof(float));
            if (st != WEFT_OK) {
                return st;
            }
#endif
        } else {
            memcpy(loss_tok, mb->loss, mb->n * sizeof(float));
        }
    }
    if (loss != NULL) {
        double l = mb->loss_sum;
        if (mb->reduction == WEFT_VOCAB_MEAN) {
            l = mb->n_valid > 0 ? l / (double)mb->n_valid : 0.0;
        }
        *loss = (float)l;
    }
    return WEFT_OK;
}

/* Token weights from the upstream gradient (host or device memory). */
static weft_status_t t_token_weights(weft_vocab_mb_t *mb, const float *grad)
{
    size_t count = mb->reduction == WEFT_VOCAB_NONE ? mb->n : 1;
    float g1;
    const float *g = grad;
    if (count > 0 && weft__vocab_is_device(grad)) {
#ifdef WEFT_HAVE_CUDA
        /* wtok doubles as the landing buffer: weights are computed in place below. */
        float *dst = count == 1 ? &g1 : mb->wtok;
        weft_status_t st = weft__vxd_copy(mb->v, dst, grad, count * sizeof(float));
        if (st != WEFT_OK) {
            return st;
        }
        g = dst;
#endif
    }
    for (size_t j = 0; j < mb->n; j++) {
        mb->wtok[j] = weft__xent_token_weight(mb->reduction, g, j, mb->labels[j], mb->n_valid);
    }
    (void)g1;
    return WEFT_OK;
}

weft_status_t weft_vocab_xent_grad(weft_vocab_mb_t *mb, const float *grad, void *dx, void *dw)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    if (mb == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    weft_ctx_t *ctx = mb->v->ctx;
    if (mb->state != WEFT__MB_C1_DONE) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "vocab: T must follow a completed C1");
    }
    if (grad == NULL || (mb->n > 0 && dx == NULL) || dw == NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "vocab: T: NULL buffer");
    }
    if ((mb->n > 0 && weft__vocab_is_device(dx) != (int)mb->on_device) ||
        weft__vocab_is_device(dw) != (int)mb->on_device) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "vocab: T: ∇X and ∇W must be in the memory X and W are in");
    }
    float *dxf, *dwf;
    weft_status_t st = t_token_weights(mb, grad);
    if (st != WEFT_OK || (st = weft__vx_t_views(mb, dx, dw, &dxf, &dwf)) != WEFT_OK) {
        return st;
    }
    mb->dx = dxf;
    uint64_t t0 = weft__now_ns();
    if (mb->on_device) {
#ifdef WEFT_HAVE_CUDA
        if ((st = weft__vxd_t(mb, dxf, dwf)) != WEFT_OK) {
            return st;
        }
#endif
    } else {
        weft__xent_dims_t d = weft__vocab_mb_dims(mb);
        weft__xent_t_cpu(&d, mb->algo, mb->v->range.padded_length, mb->x, mb->w, mb->labels,
                         mb->wtok, mb->y, mb->coef, mb->mloc, mb->rec, dxf, dwf, mb->accumulate_dw);
    }
    if ((st = weft__vx_t_store(mb)) != WEFT_OK) {
        return st;
    }
    mb->stats.compute_ns += weft__now_ns() - t0;
    mb->state = WEFT__MB_T_DONE;
    return WEFT_OK;
}

weft_status_t weft_vocab_xent_dx_reduce_start(weft_vocab_mb_t *mb, weft_req_t **req)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    if (mb == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (mb->state != WEFT__MB_T_DONE || req == NULL) {
        const char *why = req == NULL ? "without a request pointer" : "must follow a completed T";
        if (mb->state == WEFT__MB_T_DONE) {
            mb->state = WEFT__MB_FAILED; /* this microbatch's C2 was the one refused */
        }
        if (mb->algo != WEFT_VOCAB_ALG2) {
            return pass_refuse(mb, "C2", why);
        }
        return weft__error(mb->v->ctx, WEFT_ERR_INVALID_ARG, "vocab: C2 %s", why);
    }
    if (mb->algo == WEFT_VOCAB_ALG2) {
        mb->state = WEFT__MB_IDLE; /* ∇X is complete after T: nothing to communicate */
        *req = NULL;
        return WEFT_OK;
    }
    mb->state = WEFT__MB_C2;
    float *buf = mb->on_device ? mb->dx_host : mb->dx;
    weft_status_t st = start_allreduce(mb, buf, mb->n * mb->v->hidden, WEFT_F32, WEFT_SUM);
    return pass_request(mb, st, req);
}

weft_status_t weft_vocab_xent_forward(weft_vocab_mb_t *mb, const void *x, const void *w,
                                      const int64_t *labels, size_t n, float *loss_tok, float *loss)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    weft_status_t st = weft_vocab_xent_logits(mb, x, w, labels, n);
    if (st != WEFT_OK && mb != NULL) {
        weft__vocab_refuse(mb->v, false, true); /* this rank's C1, which the others run */
        return st;
    }
    if (st == WEFT_OK) {
        weft_req_t *req = NULL;
        st = weft_vocab_xent_merge_start(mb, &req);
        st = weft__blocking(st, req);
    }
    if (st == WEFT_OK) {
        st = weft_vocab_xent_loss(mb, loss_tok, loss);
    }
    return st;
}

weft_status_t weft_vocab_xent_backward(weft_vocab_mb_t *mb, const float *grad, void *dx, void *dw)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    weft_status_t st = weft_vocab_xent_grad(mb, grad, dx, dw);
    if (st != WEFT_OK && mb != NULL) {
        if (mb->algo != WEFT_VOCAB_ALG2) {
            weft__vocab_refuse(mb->v, false, true); /* this rank's C2, which the others run */
        }
        return st;
    }
    if (st == WEFT_OK) {
        weft_req_t *req = NULL;
        st = weft_vocab_xent_dx_reduce_start(mb, &req);
        st = weft__blocking(st, req);
    }
    return st;
}

weft_status_t weft_vocab_mb_stats(const weft_vocab_mb_t *mb, weft_vocab_mb_stats_t *stats)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    if (mb == NULL || stats == NULL ||
        stats->size < offsetof(weft_vocab_mb_stats_t, comm_bytes) + sizeof(size_t)) {
        return WEFT_ERR_INVALID_ARG;
    }
    size_t size = stats->size;
    *stats = mb->stats;
    stats->size = size;
    return WEFT_OK;
}

static weft_status_t xent_memory(const weft_vocab_t *vocab, weft_vocab_algo_t algo, size_t n,
                                 size_t block, weft_vocab_mem_t *mem)
{
    if (vocab == NULL || mem == NULL || (unsigned)algo >= WEFT_VOCAB_ALGO_COUNT ||
        mem->size < offsetof(weft_vocab_mem_t, peak) + sizeof(size_t)) {
        return WEFT_ERR_INVALID_ARG;
    }
    size_t f = sizeof(float), h = vocab->hidden;
    size_t rows = block > 0 && block < vocab->range.length ? block : vocab->range.length;
    size_t logits = n * rows * f; /* Y, then exp(Y - m): kept until T (one block's: scratch) */
    size_t rec = n * weft__rec_floats(algo, h) * f;
    size_t mloc = algo == WEFT_VOCAB_NAIVE ? 0 : n * f;
    size_t stats = 2 * n * f;                           /* loss and coef */
    size_t d = algo == WEFT_VOCAB_ALG2 ? n * h * f : 0; /* D = A/S - B until T */
    size_t xf = vocab->dtype != WEFT_F32 ? n * h * f : 0; /* float32 X of bf16/f16 */
    mem->s_to_c1 = logits + rec + mloc + xf;
    mem->c1_to_t = logits + stats + d + xf;
    mem->peak = mem->s_to_c1 > mem->c1_to_t ? mem->s_to_c1 : mem->c1_to_t;
    return WEFT_OK;
}

weft_status_t weft_vocab_xent_memory(const weft_vocab_t *vocab, weft_vocab_algo_t algo, size_t n,
                                     weft_vocab_mem_t *mem)
{
    WEFT_API_LOCK(vocab != NULL ? vocab->ctx : NULL);
    return xent_memory(vocab, algo, n, 0, mem);
}

weft_status_t weft_vocab_mb_memory(const weft_vocab_mb_t *mb, size_t n, weft_vocab_mem_t *mem)
{
    WEFT_API_LOCK(mb != NULL ? mb->v->ctx : NULL);
    if (mb == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    return xent_memory(mb->v, mb->algo, n, mb->block, mem);
}
