/*
 * Migrations of CUDA buffers: chunks are staged through host memory on both sides (the
 * checksums are computed there), and moved between host and device with the CUDA
 * runtime. Built only with CUDA (device_cuda.c); without it no buffer is device memory.
 */
#ifndef WEFT_MIGRATE_DEVICE_H
#define WEFT_MIGRATE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "weft/migrate.h"

/* weft__box_copy where either side may be device memory (cudaMemcpy, any direction).
 * false on a CUDA error, with its text in @p why. */
bool weft__mig_dev_copy(void *dst, const weft_box_t *dst_box, const void *src,
                        const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem,
                        char *why, size_t why_len);

#endif
