/*
 * The problem the example trainer solves, apart from weft: fit a vector w[DIM] to a
 * target by momentum SGD (m = beta m + g; w -= lr m) on a global batch of BATCH samples
 * per step. Sample j of step s is the target seen through noise that depends on
 * (element, j, s) only, so the gradient of a sample does not depend on which member
 * computes it, and the trajectory does not depend on how the batch is split.
 *
 * toy_reference() is the whole run in one process without failures, in double: what an
 * elastic run must reproduce, up to the order of its float sums.
 */
#ifndef WEFT_EXAMPLE_TOY_PROBLEM_H
#define WEFT_EXAMPLE_TOY_PROBLEM_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DIM 4096  /* parameters */
#define BATCH 32  /* samples per step, split over the members: at most BATCH members */
#define LR 0.05f  /* learning rate */
#define BETA 0.9f /* momentum */

static float toy_targets[DIM];

static inline void toy_init(void)
{
    for (int i = 0; i < DIM; i++) {
        toy_targets[i] = sinf(0.01f * (float)i);
    }
}

/* Noise in [-0.05, 0.05) on element i of sample j at step s. */
static inline float toy_noise(int i, uint64_t sample, int32_t step)
{
    uint32_t h =
        (uint32_t)i * 2654435761u ^ (uint32_t)sample * 2246822519u ^ (uint32_t)step * 3266489917u;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    return ((float)(h % 1000) / 1000.0f - 0.5f) * 0.1f;
}

/* Mean square distance of w to the target. */
static inline float toy_loss(const float *w)
{
    double l = 0;
    for (int i = 0; i < DIM; i++) {
        double d = w[i] - toy_targets[i];
        l += d * d;
    }
    return (float)(l / DIM);
}

/* grad = scale * the sum, over samples [first, first + n) of step s, of the gradient of
 * sum_i (w_i - y_i)^2, i.e. 2 (w - y). */
static inline void toy_gradient(const float *w, int32_t step, uint64_t first, uint64_t n,
                                float scale, float *grad)
{
    memset(grad, 0, DIM * sizeof(float));
    for (uint64_t j = first; j < first + n; j++) {
        for (int i = 0; i < DIM; i++) {
            grad[i] += 2.0f * (w[i] - (toy_targets[i] + toy_noise(i, j, step)));
        }
    }
    for (int i = 0; i < DIM; i++) {
        grad[i] *= scale;
    }
}

/* w and m after @p steps steps from w = m = 0, on the whole batch in one process. */
static inline void toy_reference(int32_t steps, double *w, double *m)
{
    static double g[DIM];
    memset(w, 0, DIM * sizeof(double));
    memset(m, 0, DIM * sizeof(double));
    for (int32_t s = 0; s < steps; s++) {
        memset(g, 0, sizeof(g));
        for (uint64_t j = 0; j < BATCH; j++) {
            for (int i = 0; i < DIM; i++) {
                g[i] += 2.0 * (w[i] - ((double)toy_targets[i] + toy_noise(i, j, s)));
            }
        }
        for (int i = 0; i < DIM; i++) {
            m[i] = BETA * m[i] + g[i] / BATCH;
            w[i] -= LR * m[i];
        }
    }
}

#endif
