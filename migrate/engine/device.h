/*
 * Migrations of CUDA buffers: chunks are staged through host memory on both sides (the
 * checksums are computed there), and moved between host and device with the CUDA
 * runtime; or, where NCCL carries them, gathered and scattered device to device
 * (nccl_path.c). Built only with CUDA (device_cuda.c); without it no buffer is device memory.
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

/* The CUDA device @p ptr lives on, else the calling thread's current device (0 if none). */
int weft__mig_dev_of(const void *ptr);

/* The same, each run enqueued with cudaMemcpyAsync on @p stream (a cudaStream_t); the
 * caller synchronizes the stream before it relies on the copy. */
bool weft__mig_dev_copy_on(void *stream, void *dst, const weft_box_t *dst_box, const void *src,
                           const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem,
                           char *why, size_t why_len);

#endif
