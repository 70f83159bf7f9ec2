/*
 * Checks shared by the multi-rank vocab tests (include after cmocka.h): a rank's shard of
 * a full weight matrix and the comparison of a run's outputs with a reference.
 */
#ifndef WEFT_TESTS_VOCAB_CHECK_H
#define WEFT_TESTS_VOCAB_CHECK_H

#include <math.h>
#include <stdio.h>

#include "vocab/vocab_ref.h"

/* This rank's shard of W: padded, padding rows NaN (they must never be read). */
static inline float *shard_of(const xcase_t *c, const weft_vocab_range_t *r)
{
    float *w = malloc(r->padded_length * c->h * sizeof(float) + 4);
    for (size_t i = 0; i < r->padded_length * c->h; i++) {
        w[i] = NAN;
    }
    memcpy(w, c->w + r->start * c->h, r->length * c->h * sizeof(float));
    return w;
}

/* Compare a run's outputs with the reference; dw holds this rank's padded shard. */
static inline void check_outputs(int rank, int size, const xcase_t *c, const xref_t *ref,
                                 const weft_vocab_range_t *r, const float *loss_tok, float loss,
                                 const float *dx, const float *dw, const char *what)
{
    double e_lt = rel_err_loss(loss_tok, ref->loss_tok, c->n);
    double e_l = rel_err_loss(&loss, &ref->loss, 1);
    double e_dx = rel_err_f(dx, ref->dx, c->n * c->h);
    /* ∇W relative to the whole reference's scale, compared on this rank's rows. */
    double scale = 1e-30, err = 0.0;
    for (size_t i = 0; i < c->V * c->h; i++) {
        scale = fabs(ref->dw[i]) > scale ? fabs(ref->dw[i]) : scale;
    }
    for (size_t i = 0; i < r->length * c->h; i++) {
        double e = fabs((double)dw[i] - ref->dw[r->start * c->h + i]);
        err = isnan(dw[i]) ? INFINITY : (e > err ? e : err);
    }
    for (size_t i = r->length * c->h; i < r->padded_length * c->h; i++) {
        assert_true(dw[i] == 0.0f); /* padding rows: zero gradient */
    }
    double e_dw = err / scale;
    if (e_lt > REF_TOL || e_l > REF_TOL || e_dx > REF_TOL || e_dw > REF_TOL) {
        print_error("rank %d/%d %s V=%zu: loss_tok %.3g loss %.3g dx %.3g dw %.3g\n", rank, size,
                    what, c->V, e_lt, e_l, e_dx, e_dw);
        fail();
    }
}

#endif
