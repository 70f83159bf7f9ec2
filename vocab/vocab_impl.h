/*
 * Internals of vocab/: the handle and microbatch layouts, the per-token statistics
 * record and its merge operator, and the compute kernels of the passes (CPU here,
 * CUDA in xent_cuda.c / kernels.cu).
 *
 * The CPU kernels are pure functions of their arguments (no communication, no
 * context), so a test can run the passes of P shards in one process and merge their
 * records with the same operator the collective uses.
 */
#ifndef WEFT_VOCAB_IMPL_H
#define WEFT_VOCAB_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/cuda.h"
#include "weft/vocab.h"

struct weft_vocab {
    weft_ctx_t *ctx;
    weft_group_t *group;
    int rank, nranks;
    size_t vocab_size, hidden, align;
    weft_vocab_range_t range;
    weft_op_t op_alg1; /* merges {m, s, t} records */
    weft_op_t op_alg2; /* merges {m, s, t, A[h], B[h]} records */
    int n_mb;          /* live microbatch states */
    weft_dtype_t dtype; /* of X, W, ∇X, ∇W: WEFT_F32, WEFT_BF16 or WEFT_F16 */
    /* bf16/f16 (xent_dtype.c): float32 copies of W and ∇W [padded_length * h], in the
     * memory of the last call that used them. */
    float *wf, *dwf;
    bool wf_dev, dwf_dev;
};

/* ---- collectives (vocab/coll.c) ---- */
/* The collective of a pass on host buffers: a rank that refused its part of it (below)
 * makes it fail with WEFT_ERR_INVALID_ARG on every rank. Starts as weft_iallreduce() and
 * weft_ibroadcast() (WEFT_F32) do. */
weft_status_t weft__vocab_iallreduce(weft_vocab_t *v, void *buf, size_t count,
                                     weft_dtype_t dtype, weft_op_t op, weft_req_t **req);
weft_status_t weft__vocab_ibroadcast(weft_vocab_t *v, void *buf, size_t count, int root,
                                     weft_req_t **req);
/* This rank rejected its arguments of a pass whose collective the others run (an
 * allreduce, or a broadcast): it joins that collective as a refusal (the error it
 * returns is the caller's). @p blocking: the refusal ends before this returns. */
void weft__vocab_refuse(weft_vocab_t *v, bool broadcast, bool blocking);

/* ---- the statistics record ---- */
/*
 * ALG1/ALG2 merge one record per token (array of structures):
 *   m      local row max of the logits
 *   s      Σ exp(Y - m) over the shard
 *   t      the target's logit where the shard owns the target, else 0
 *   A[h]   ALG2: Σ_v exp(Y_v - m) W_v  (unnormalised, rescales like s)
 *   B[h]   ALG2: W[target] where owned, else 0
 * Merging two records: M = max, s = s1 e^{m1-M} + s2 e^{m2-M}, A likewise, t and B add.
 * An empty shard has m = -inf and s = 0; its factor is 0, never exp(-inf + inf).
 *
 * NAIVE uses a structure of arrays instead, so that plain MAX and SUM reduce it:
 *   [0, n) row max (reduced with MAX), [n, 2n) sum-exp and [2n, 3n) target logit (SUM).
 */
#define WEFT__REC_M 0
#define WEFT__REC_S 1
#define WEFT__REC_T 2
#define WEFT__REC_A 3

/* Floats of the record of one token (NAIVE: 3 per token in the SoA layout). */
static inline size_t weft__rec_floats(weft_vocab_algo_t algo, size_t h)
{
    return algo == WEFT_VOCAB_ALG2 ? 3 + 2 * h : 3;
}

/* The weft_user_reduce_fn of the records; arg points to the size_t h (ALG2) or is NULL
 * (ALG1: records of 3 floats). */
void weft__rec_merge(void *inout, const void *in, size_t count, void *arg);

/* ---- CPU kernels of the passes ---- */
typedef struct weft__xent_dims {
    size_t n;     /* tokens */
    size_t h;     /* hidden size */
    size_t start; /* first vocabulary id of the shard */
    size_t len;   /* real rows of the shard */
    size_t vocab; /* V, the whole vocabulary's real entries */
    float ls;     /* label smoothing ε (0: none) */
    size_t block; /* ALG1/ALG2: rows of logits at a time (xent_blocked.c); 0: all */
} weft__xent_dims_t;

/* Whether @p d's passes go block by block (a block shorter than the shard). */
static inline bool weft__xent_blocked(const weft__xent_dims_t *d)
{
    return d->block > 0 && d->block < d->len;
}

/*
 * Label smoothing. The target distribution is q = (1 - ε) onehot + ε / V, so the loss is
 * logsumexp(Y) - Σ_v q_v Y_v and the gradient softmax(Y) - q. Σ_v q_v Y_v adds over the
 * shards like the target logit, so each shard sends t = (1 - ε) Y_label (where it owns
 * the label) + ε / V Σ_{its v} Y_v in the record's target field, and the merge, the loss
 * (M - t + log S) and the collectives stay as they are. Likewise ALG2's B_i is
 * (1 - ε) W_i[label] + ε / V Σ_{its v} W_v, and T subtracts q from p.
 */
static inline float weft__ls_keep(const weft__xent_dims_t *d)
{
    return 1.0f - d->ls;
}
static inline float weft__ls_spread(const weft__xent_dims_t *d)
{
    return d->ls / (float)d->vocab;
}

/*
 * Pass S. y [n*len] receives the logits (NAIVE) or exp(Y - m) (ALG1/ALG2); rec [n*rec]
 * the records (NAIVE: only the row max part); mloc [n] the local row max (ALG1/ALG2);
 * wsum [h] is scratch for ALG2 with label smoothing (else unused, may be NULL). Where
 * weft__xent_blocked(d), it runs the blocked S (y [n*block] scratch).
 */
void weft__xent_s_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo, const float *x,
                      const float *w, const int64_t *labels, float *y, float *rec, float *mloc,
                      float *wsum);

/* NAIVE between its two collectives: rec[0, n) holds the global max; turns y into
 * exp(Y - M) and fills the sum-exp and target parts of rec. */
void weft__xent_naive_sums_cpu(const weft__xent_dims_t *d, const int64_t *labels, float *y,
                               float *rec);

/*
 * After C1: per-token loss [n] (0 for ignored tokens) and coef [n], the factor that turns
 * the kept y into probabilities (p = y * coef). ALG2: rewrites A[h] of each record into
 * D = A / S - B in place. Returns the loss sum in double.
 */
double weft__xent_finish_c1_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo,
                                const int64_t *labels, float *rec, const float *mloc, float *loss,
                                float *coef);

/* Weight of token j in the gradient: upstream gradient, reduction and ignore mask. */
static inline float weft__xent_token_weight(weft_vocab_reduction_t red, const float *grad, size_t j,
                                            int64_t label, size_t n_valid)
{
    if (label < 0) {
        return 0.0f;
    }
    switch (red) {
    case WEFT_VOCAB_MEAN:
        return n_valid > 0 ? grad[0] / (float)n_valid : 0.0f;
    case WEFT_VOCAB_SUM:
        return grad[0];
    default:
        return grad[j];
    }
}

/*
 * Pass T. wtok [n] are the token weights; y [n*len] is turned into G in place;
 * dw [padded_len*h] written (or accumulated); dx [n*h] written: the partial G W_i for
 * NAIVE/ALG1, the complete wtok * D for ALG2 (D in rec, see above). Where
 * weft__xent_blocked(d), it runs the blocked T, which reads the local maxima mloc of S
 * (unused otherwise).
 */
void weft__xent_t_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo, size_t padded_len,
                      const float *x, const float *w, const int64_t *labels, const float *wtok,
                      float *y, const float *coef, const float *mloc, const float *rec, float *dx,
                      float *dw, bool accumulate);

/* S and T block by block (xent_blocked.c), for weft__xent_blocked(d) and ALG1/ALG2
 * (weft__xent_s_cpu and weft__xent_t_cpu call them): the same records and outputs, with
 * y [n * block] scratch. */
void weft__xent_s_blocked_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo, const float *x,
                              const float *w, const int64_t *labels, float *y, float *rec,
                              float *mloc, float *wsum);
void weft__xent_t_blocked_cpu(const weft__xent_dims_t *d, weft_vocab_algo_t algo, size_t padded_len,
                              const float *x, const float *w, const int64_t *labels,
                              const float *wtok, float *y, const float *coef, const float *mloc,
                              const float *rec, float *dx, float *dw, bool accumulate);

/* Number of labels >= 0; -1 if one is >= vocab_size. */
int64_t weft__count_valid_labels(const int64_t *labels, size_t n, size_t vocab_size);

/* ---- microbatch state ---- */
typedef enum weft__mb_state {
    WEFT__MB_IDLE = 0, /* no microbatch, or the last one finished */
    WEFT__MB_S_DONE,   /* S ran; C1 next */
    WEFT__MB_C1,       /* C1 in flight (its request is pass_req) */
    WEFT__MB_C1_DONE,  /* loss known; T next */
    WEFT__MB_T_DONE,   /* T ran; C2 next */
    WEFT__MB_C2,       /* C2 in flight (its request is pass_req) */
    WEFT__MB_FAILED,   /* a collective failed; S starts over */
} weft__mb_state_t;

struct weft__vocab_dev; /* CUDA buffers (xent_cuda.c) */

struct weft_vocab_mb {
    weft_vocab_t *v;
    weft_vocab_algo_t algo;
    weft_vocab_reduction_t reduction;
    size_t max_tokens;
    bool accumulate_dw;
    float label_smoothing;
    size_t block; /* rows of logits at a time; 0: the whole shard */
    weft__mb_state_t state;
    int naive_stage; /* C1 of NAIVE: 1 = max in flight, 2 = sums in flight */
    weft_req_t *req;      /* the collective in flight, NULL if none or inline */
    weft_req_t *pass_req; /* the caller's request of the pass in flight (C1, C2), or NULL */
    /* The current microbatch. x and w: the float32 views the kernels read (the caller's
     * buffers for a float32 vocabulary, copies otherwise, xent_dtype.c). */
    const float *x, *w;
    const void *x_user, *w_user;
    void *dx_user, *dw_user;
    float *xf, *dxf; /* bf16/f16: float32 X [max_tokens * h] and ∇X, per microbatch */
    bool xf_dev, dxf_dev;
    const int64_t *labels; /* host view: the caller's, or labels_host */
    const void *labels_user;
    size_t n;
    size_t n_valid;
    bool on_device;
    float *dx; /* the caller's ∇X, reduced in place by C2 */
    double loss_sum;
    bool have_loss;              /* C1 completed for the current microbatch */
    weft_vocab_mb_stats_t stats; /* of the current microbatch */
    uint64_t coll_start_ns;      /* when the collective in flight started */
    /* Host buffers, sized for max_tokens, allocated on first use. */
    float *y; /* [max_tokens * len] logits / exp / G (CPU path); [max_tokens * block] blocked */
    float *rec;                       /* [max_tokens * rec] the records C1 reduces */
    float *mloc, *loss, *coef, *wtok; /* [max_tokens] each */
    int64_t *labels_host;             /* [max_tokens] copy of device labels */
    float *dx_host;                   /* [max_tokens * h] staging of ∇X for C2 (CUDA path) */
    float *wsum;                      /* [h] ALG2 with label smoothing: Σ of W_i's rows */
    struct weft__vocab_dev *dev;
};

/* The dimensions of @p mb's current microbatch, for the kernels. */
static inline weft__xent_dims_t weft__vocab_mb_dims(const weft_vocab_mb_t *mb)
{
    weft__xent_dims_t d = {.n = mb->n,
                           .h = mb->v->hidden,
                           .start = mb->v->range.start,
                           .len = mb->v->range.length,
                           .vocab = mb->v->vocab_size,
                           .ls = mb->label_smoothing,
                           .block = mb->block};
    return d;
}

/* ---- bf16 and f16 vocabularies (xent_dtype.c) ---- */
/* Bytes of one element of X, W and their gradients. */
size_t weft__vocab_elem_size(const weft_vocab_t *v);
/* S: float32 views of the caller's X and W in mb->x, mb->w (n set, memory type known). */
weft_status_t weft__vx_s_views(weft_vocab_mb_t *mb, const void *x, const void *w);
/* T: W's view again, and the float32 buffers ∇X and ∇W are computed into (the caller's
 * for float32; with accumulate_dw the caller's ∇W is loaded first). */
weft_status_t weft__vx_t_views(weft_vocab_mb_t *mb, void *dx, void *dw, float **dxf, float **dwf);
/* After T: ∇W, and ALG2's (complete) ∇X, rounded into the caller's buffers. */
weft_status_t weft__vx_t_store(weft_vocab_mb_t *mb);
/* After C2 (or T for ALG2): ∇X rounded into the caller's buffer. */
weft_status_t weft__vx_dx_store(weft_vocab_mb_t *mb);
void weft__vx_free_mb(weft_vocab_mb_t *mb);
void weft__vx_free_vocab(weft_vocab_t *v);

/* ---- memory type of a buffer ---- */
/* 1 for CUDA device (or managed) memory, 0 for host memory or NULL. */
static inline int weft__vocab_is_device(const void *p)
{
    int cuda = 0;
    return p != NULL && weft_memory_is_cuda(p, &cuda) == WEFT_OK && cuda;
}

#ifdef WEFT_HAVE_CUDA
/* The device path of the passes (xent_cuda.c); records and statistics go through the
 * host buffers of @p mb, which the collectives reduce. */
weft_status_t weft__vxd_s(weft_vocab_mb_t *mb);
weft_status_t weft__vxd_naive_sums(weft_vocab_mb_t *mb);
weft_status_t weft__vxd_t(weft_vocab_mb_t *mb, float *dx, float *dw);
weft_status_t weft__vxd_dx_upload(weft_vocab_mb_t *mb);
/* Device buffers of xent_dtype.c, and conversion between float32 and @p dtype (bf16,
 * f16) of @p count elements: to_f32 reads dtype at src, else writes it at dst. */
weft_status_t weft__vxd_alloc_buf(const weft_vocab_t *v, size_t bytes, float **out);
void weft__vxd_free_buf(float *p);
weft_status_t weft__vxd_convert(const weft_vocab_t *v, weft_dtype_t dtype, bool to_f32, void *dst,
                                const void *src, size_t count);
/* Copy between any memories, ordered on the vocabulary's group stream. */
weft_status_t weft__vxd_copy(const weft_vocab_t *v, void *dst, const void *src, size_t bytes);
void weft__vxd_free(weft_vocab_mb_t *mb);
/* Embedding on device buffers; ids_user may be host or device memory, ids_host is a
 * checked host view of the same ids. */
weft_status_t weft__vxd_embed_lookup(const weft_vocab_t *v, const float *table,
                                     const int64_t *ids_user, const int64_t *ids_host, size_t n,
                                     float *out);
weft_status_t weft__vxd_embed_scatter(const weft_vocab_t *v, const float *grad_out,
                                      const int64_t *ids_user, const int64_t *ids_host, size_t n,
                                      float *grad_table);
#endif

#endif
