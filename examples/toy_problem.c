/* The example trainer's problem and its float arithmetic (see toy_problem.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "toy_problem.h"

#define PER_BLOCK (BATCH / BLOCKS)

_Static_assert(BATCH % BLOCKS == 0, "a block is a whole number of samples");

static float toy_targets[DIM];

void toy_init(void)
{
    for (int i = 0; i < DIM; i++) {
        toy_targets[i] = sinf(0.01f * (float)i);
    }
}

/* Noise in [-0.05, 0.05) on element i of sample j at step s. */
static float toy_noise(int i, uint64_t sample, int32_t step)
{
    uint32_t h =
        (uint32_t)i * 2654435761u ^ (uint32_t)sample * 2246822519u ^ (uint32_t)step * 3266489917u;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    return ((float)(h % 1000) / 1000.0f - 0.5f) * 0.1f;
}

float toy_loss(const float *w)
{
    double l = 0;
    for (int i = 0; i < DIM; i++) {
        double d = w[i] - toy_targets[i];
        l += d * d;
    }
    return (float)(l / DIM);
}

void toy_block_sum(const float *w, int32_t step, int block, float *sum)
{
    memset(sum, 0, DIM * sizeof(float));
    for (uint64_t j = (uint64_t)block * PER_BLOCK; j < (uint64_t)(block + 1) * PER_BLOCK; j++) {
        for (int i = 0; i < DIM; i++) {
            sum[i] += 2.0f * (w[i] - (toy_targets[i] + toy_noise(i, j, step)));
        }
    }
}

void toy_gradient(const float *const blocks[BLOCKS], uint64_t n, float *grad)
{
    memcpy(grad, blocks[0], n * sizeof(float));
    for (int b = 1; b < BLOCKS; b++) {
        for (uint64_t i = 0; i < n; i++) {
            grad[i] += blocks[b][i];
        }
    }
    for (uint64_t i = 0; i < n; i++) {
        grad[i] /= (float)BATCH;
    }
}

void toy_update(float *w, float *m, const float *g, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        m[i] = BETA * m[i] + g[i];
        w[i] -= LR * m[i];
    }
}

void toy_reference(int32_t steps, float *w, float *m)
{
    float *sums = malloc((size_t)BLOCKS * DIM * sizeof(float));
    float *g = malloc(DIM * sizeof(float));
    const float *blocks[BLOCKS];
    memset(w, 0, DIM * sizeof(float));
    memset(m, 0, DIM * sizeof(float));
    if (sums == NULL || g == NULL) {
        abort(); /* a few hundred KiB */
    }
    for (int b = 0; b < BLOCKS; b++) {
        blocks[b] = sums + (size_t)b * DIM;
    }
    for (int32_t s = 0; s < steps; s++) {
        for (int b = 0; b < BLOCKS; b++) {
            toy_block_sum(w, s, b, sums + (size_t)b * DIM);
        }
        toy_gradient(blocks, DIM, g);
        toy_update(w, m, g, DIM);
    }
    free(sums);
    free(g);
}
