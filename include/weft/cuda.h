/**
 * @file cuda.h
 * @brief CUDA buffers: memory-type detection and the stream a group's GPU work runs on.
 *
 * weft detects the memory type of every buffer (never assumes it). Allreduce,
 * broadcast, allgather and reduce-scatter accept CUDA device buffers; the transport comes
 * from the topology: NCCL between GPUs of one host (NVLink or PCIe) and between hosts
 * whose GPUs have GPUDirect-capable NICs nearby, otherwise staging through pinned host
 * memory and the host collectives (docs/transport-selection.md; `weft-info --topology`
 * prints the decision and the rule behind it). Where the group's decision is NCCL but
 * the NCCL library cannot be loaded, they return WEFT_ERR_UNSUPPORTED ("NCCL library
 * not found: ..." in weft_last_error()). The other collectives return
 * WEFT_ERR_UNSUPPORTED on CUDA buffers, and so do point-to-point messages, which carry
 * host memory only; one host and one CUDA buffer in a call: WEFT_ERR_INVALID_ARG.
 *
 * Work on CUDA buffers is enqueued on the group's CUDA stream; a request on such
 * buffers completes when the work has finished on the GPU. These calls exist in every
 * build; without CUDA support they report host memory and accept only a NULL stream.
 */
#ifndef WEFT_CUDA_H
#define WEFT_CUDA_H

#include "weft/export.h"
#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Set the CUDA stream (a cudaStream_t) on which work on CUDA buffers of @p g is
 * enqueued from now on. Operations already started stay on their stream.
 * @param[in] g      The group.
 * @param[in] stream A cudaStream_t of the device this process drives, or NULL for the
 *                   legacy default stream (the initial setting).
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG for a NULL group; WEFT_ERR_UNSUPPORTED for a
 *         non-NULL stream in a build without CUDA; WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_group_set_cuda_stream(weft_group_t *g, void *stream);

/**
 * @brief The CUDA stream set with weft_group_set_cuda_stream().
 * @param[out] stream Set on success; NULL means the legacy default stream.
 * @return WEFT_OK or WEFT_ERR_INVALID_ARG.
 */
WEFT_API weft_status_t weft_group_cuda_stream(const weft_group_t *g, void **stream);

/**
 * @brief Whether @p ptr points into CUDA device memory (cudaMalloc, or managed memory).
 *
 * Pinned host memory (cudaMallocHost) and ordinary memory count as host memory. Cheap
 * in processes that never loaded the CUDA driver: no CUDA initialisation happens then.
 * @param[out] is_cuda 1 for CUDA device memory, 0 for host memory.
 * @return WEFT_OK, or WEFT_ERR_INVALID_ARG for a NULL @p is_cuda.
 */
WEFT_API weft_status_t weft_memory_is_cuda(const void *ptr, int *is_cuda);

#ifdef __cplusplus
}
#endif
#endif
