/*
 * The problem the example trainer solves, apart from weft: fit a vector w[DIM] to a
 * target by momentum SGD (m = beta m + g; w -= lr m) on a global batch of BATCH samples
 * per step. Sample j of step s is the target seen through noise that depends on
 * (element, j, s) only, so the gradient of a sample does not depend on which member
 * computes it.
 *
 * The arithmetic does not depend on the data-parallel width either, so that a run that
 * changes width reproduces a run without failures bit for bit. The global batch is cut
 * into BLOCKS blocks of BATCH / BLOCKS consecutive samples, a number fixed whatever the
 * width. A member computes the gradient sum of whole blocks (toy_block_sum: the samples
 * of a block added in order, in float); the block sums are exchanged, and each element of
 * the gradient is the sum of its block sums in block order, scaled by 1 / BATCH
 * (toy_gradient). Float addition is not associative, but this order is the same at
 * every width. Everything is elementwise from there (toy_update), so computing one
 * partition gives the bits that computing the whole vector gives.
 *
 * toy_reference() is the whole run in one process without failures, through the same
 * functions: what an elastic run must reproduce exactly. The functions live in
 * toy_problem.c, compiled once, so the reference and the trainer run the same code.
 */
#ifndef WEFT_EXAMPLE_TOY_PROBLEM_H
#define WEFT_EXAMPLE_TOY_PROBLEM_H

#include <stdint.h>

#define DIM 4096  /* parameters */
#define BATCH 32  /* samples per step */
#define BLOCKS 16 /* blocks of the global batch, BATCH / BLOCKS samples each */
#define LR 0.05f  /* learning rate */
#define BETA 0.9f /* momentum */

/* Fill the target. Call once before anything else. */
void toy_init(void);

/* Mean square distance of w to the target. */
float toy_loss(const float *w);

/* sum[i] = the sum over the samples of block @p block of step @p step, in sample order,
 * of the gradient of (w_i - y_i)^2, i.e. 2 (w_i - y_i). */
void toy_block_sum(const float *w, int32_t step, int block, float *sum);

/* grad[i] = (the block sums added in block order) / BATCH, for i < n: blocks[b] is
 * block b's sum over the same n elements (the whole vector, or one partition of it). */
void toy_gradient(const float *const blocks[BLOCKS], uint64_t n, float *grad);

/* m = BETA m + g, then w -= LR m, on @p n elements (a partition or the whole vector). */
void toy_update(float *w, float *m, const float *g, uint64_t n);

/* w and m after @p steps steps from w = m = 0, on the whole batch in one process. */
void toy_reference(int32_t steps, float *w, float *m);

#endif
