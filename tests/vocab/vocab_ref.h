/*
 * Test helpers of vocab/: deterministic inputs and an unsharded float64 reference of
 * softmax cross-entropy over logits X Wᵀ (loss per token, reduced loss, ∇X, ∇W), written
 * from the textbook formulas and independent of the library's kernels.
 */
#ifndef WEFT_TESTS_VOCAB_REF_H
#define WEFT_TESTS_VOCAB_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "weft/vocab.h"

/* ---- inputs ---- */
typedef struct xcase {
    size_t n, h, V;
    float *x;        /* [n*h] */
    float *w;        /* [V*h] */
    int64_t *labels; /* [n] */
} xcase_t;

static inline uint64_t ref_rng(uint64_t *s)
{
    /* splitmix64: reproducible on every rank without communication */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float ref_uniform(uint64_t *s)
{
    return (float)((double)(ref_rng(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static inline void xcase_alloc(xcase_t *c, size_t n, size_t h, size_t V)
{
    c->n = n;
    c->h = h;
    c->V = V;
    c->x = calloc(n * h + 1, sizeof(float));
    c->w = calloc(V * h + 1, sizeof(float));
    c->labels = calloc(n + 1, sizeof(int64_t));
}

static inline void xcase_free(xcase_t *c)
{
    free(c->x);
    free(c->w);
    free(c->labels);
}

/*
 * Random case: entries uniform with the given scale (logits of a few units), labels
 * uniform over [0, V) except every @p ignore_every-th token (0: none), which is -100.
 */
static inline void xcase_random(xcase_t *c, size_t n, size_t h, size_t V, float scale,
                                size_t ignore_every, uint64_t seed)
{
    xcase_alloc(c, n, h, V);
    uint64_t s = seed;
    for (size_t i = 0; i < n * h; i++) {
        c->x[i] = scale * ref_uniform(&s);
    }
    for (size_t i = 0; i < V * h; i++) {
        c->w[i] = scale * ref_uniform(&s);
    }
    for (size_t j = 0; j < n; j++) {
        c->labels[j] = (int64_t)(ref_rng(&s) % V);
        if (ignore_every > 0 && j % ignore_every == ignore_every - 1) {
            c->labels[j] = -100;
        }
    }
}

/*
 * Logits of +-1e4 that float32 represents exactly: X = (1, k/16, ...) and
 * W = (c_v, l/16, ...) with c_v in {+1e4, -1e4, 0}, so X Wᵀ is exact in any summation
 * order and the float and double paths see the same logits.
 */
static inline void xcase_extreme(xcase_t *c, size_t n, size_t h, size_t V, uint64_t seed)
{
    xcase_alloc(c, n, h, V);
    uint64_t s = seed;
    for (size_t j = 0; j < n; j++) {
        c->x[j * h] = 1.0f;
        for (size_t k = 1; k < h; k++) {
            c->x[j * h + k] = (float)((int)(ref_rng(&s) % 33) - 16) / 16.0f;
        }
        c->labels[j] = (int64_t)(ref_rng(&s) % V);
    }
    for (size_t v = 0; v < V; v++) {
        static const float big[] = {1e4f, -1e4f, 0.0f, -1e4f};
        c->w[v * h] = big[ref_rng(&s) % 4];
        for (size_t k = 1; k < h; k++) {
            c->w[v * h + k] = (float)((int)(ref_rng(&s) % 33) - 16) / 16.0f;
        }
    }
    c->labels[n - 1] = -100;
}

/* ---- reference ---- */
typedef struct xref {
    double *loss_tok; /* [n] */
    double loss;      /* reduced (sum for NONE) */
    double *dx;       /* [n*h] */
    double *dw;       /* [V*h] */
} xref_t;

static inline void xref_free(xref_t *r)
{
    free(r->loss_tok);
    free(r->dx);
    free(r->dw);
}

/*
 * grad: 1 value (MEAN, SUM) or n values (NONE). eps: label smoothing, as PyTorch's: the
 * target distribution q is (1 - eps) on the label plus eps / V everywhere, the loss
 * -Σ_v q_v log p_v and its gradient with respect to the logits p - q.
 */
static inline void xref_compute_ls(const xcase_t *c, weft_vocab_reduction_t red, const float *grad,
                                   double eps, xref_t *r)
{
    size_t n = c->n, h = c->h, V = c->V;
    r->loss_tok = calloc(n + 1, sizeof(double));
    r->dx = calloc(n * h + 1, sizeof(double));
    r->dw = calloc(V * h + 1, sizeof(double));
    double *logit = calloc(V, sizeof(double));
    size_t valid = 0;
    for (size_t j = 0; j < n; j++) {
        valid += c->labels[j] >= 0;
    }
    double total = 0.0;
    for (size_t j = 0; j < n; j++) {
        if (c->labels[j] < 0) {
            continue;
        }
        double mx = -INFINITY;
        for (size_t v = 0; v < V; v++) {
            double acc = 0.0;
            for (size_t k = 0; k < h; k++) {
                acc += (double)c->x[j * h + k] * (double)c->w[v * h + k];
            }
            logit[v] = acc;
            mx = acc > mx ? acc : mx;
        }
        double se = 0.0;
        for (size_t v = 0; v < V; v++) {
            se += exp(logit[v] - mx);
        }
        double lse = mx + log(se);
        size_t t = (size_t)c->labels[j];
        r->loss_tok[j] = 0.0;
        for (size_t v = 0; v < V; v++) {
            double q = (v == t ? 1.0 - eps : 0.0) + eps / (double)V;
            r->loss_tok[j] -= q * (logit[v] - lse);
        }
        total += r->loss_tok[j];
        double wj = red == WEFT_VOCAB_MEAN  ? (double)grad[0] / (double)valid
                    : red == WEFT_VOCAB_SUM ? (double)grad[0]
                                            : (double)grad[j];
        for (size_t v = 0; v < V; v++) {
            double q = (v == t ? 1.0 - eps : 0.0) + eps / (double)V;
            double g = wj * (exp(logit[v] - lse) - q);
            for (size_t k = 0; k < h; k++) {
                r->dx[j * h + k] += g * (double)c->w[v * h + k];
                r->dw[v * h + k] += g * (double)c->x[j * h + k];
            }
        }
    }
    r->loss = red == WEFT_VOCAB_MEAN ? (valid > 0 ? total / (double)valid : 0.0) : total;
    free(logit);
}

static inline void xref_compute(const xcase_t *c, weft_vocab_reduction_t red, const float *grad,
                                xref_t *r)
{
    xref_compute_ls(c, red, grad, 0.0, r);
}

/* ---- comparison ---- */
/*
 * Error of @p a against @p ref relative to the reference's largest magnitude (the
 * tolerance scale of a tensor; a floor of 1e-30 keeps an all-zero reference exact).
 * NaN anywhere gives +inf.
 */
static inline double rel_err_f(const float *a, const double *ref, size_t count)
{
    double scale = 1e-30, err = 0.0;
    for (size_t i = 0; i < count; i++) {
        scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
    }
    for (size_t i = 0; i < count; i++) {
        if (isnan(a[i])) {
            return INFINITY;
        }
        double e = fabs((double)a[i] - ref[i]);
        err = e > err ? e : err;
    }
    return err / scale;
}

/* Per-element relative error of a loss (|a - r| / max(|r|, 1)). */
static inline double rel_err_loss(const float *a, const double *ref, size_t count)
{
    double err = 0.0;
    for (size_t i = 0; i < count; i++) {
        if (isnan(a[i])) {
            return INFINITY;
        }
        double e = fabs((double)a[i] - ref[i]) / (fabs(ref[i]) > 1.0 ? fabs(ref[i]) : 1.0);
        err = e > err ? e : err;
    }
    return err;
}

#define REF_TOL 1e-5

#endif
