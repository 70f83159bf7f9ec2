/*
 * Collectives on CUDA buffers staged through host memory, for groups whose agreed
 * transport decision has no NCCL path (the rules marked "staged" in
 * docs/transport-selection.md): the input is copied to a pinned host buffer on the
 * group's stream, the host collective runs on it (every member of such a group stages,
 * so the host collectives match), and the result is copied back on the same stream.
 *
 * The copy in is waited for at the start (the host collective must read finished data,
 * and must start in call order so that sequence numbers agree); the copy back is
 * enqueued when the host collective completes, and the request completes when the copy
 * back has finished on the GPU, which is when a blocking call returns. Built only with
 * CUDA.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>

#include "comm/coll/coll.h"
#include "comm/device/memtype.h"

typedef struct staged {
    weft_req_t *inner; /* the host collective; NULL once it completed */
    char *host;        /* pinned: [recv extent][send block when not in place] */
    void *dst;         /* the caller's recvbuf */
    size_t back;       /* bytes copied back: the result */
    cudaStream_t stream;
    cudaEvent_t ev; /* recorded after the copy back; NULL until then */
} staged_t;

/* Bytes of input and result of @p a, or false for a kind that is not staged. */
static bool staged_sizes(const weft_group_t *g, const weft_coll_args_t *a, size_t *in, size_t *out)
{
    size_t block = a->count * weft_dtype_size(a->dtype);
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_BROADCAST:
        *in = *out = block;
        return true;
    case WEFT_COLL_ALLGATHER:
        *in = block;
        *out = (size_t)g->size * block;
        return true;
    case WEFT_COLL_REDUCE_SCATTER:
        *in = (size_t)g->size * block;
        *out = block;
        return true;
    default:
        return false;
    }
}

static weft_status_t cuda_failed(weft_ctx_t *ctx, const char *name, const char *what, cudaError_t e)
{
    (void)cudaGetLastError();
    return weft__error(ctx, WEFT_ERR_TRANSPORT, "%s staged through host memory: %s: %s", name, what,
                       cudaGetErrorString(e));
}

/* Free the state; waits for a copy back still reading the pinned buffer. */
static void staged_free(staged_t *s)
{
    if (s->inner != NULL) {
        weft_req_free(s->inner);
    }
    if (s->ev != NULL) {
        (void)cudaEventSynchronize(s->ev);
        (void)cudaEventDestroy(s->ev);
    }
    if (s->host != NULL) {
        (void)cudaFreeHost(s->host);
    }
    (void)cudaGetLastError();
    free(s);
}

/* Enqueue the copy back after the host collective finished, and an event after it. */
static weft_status_t copy_back(weft_ctx_t *ctx, staged_t *s)
{
    cudaError_t e = cudaMemcpyAsync(s->dst, s->host, s->back, cudaMemcpyHostToDevice, s->stream);
    if (e == cudaSuccess) {
        e = cudaEventCreateWithFlags(&s->ev, cudaEventDisableTiming);
    }
    if (e == cudaSuccess) {
        e = cudaEventRecord(s->ev, s->stream);
    }
    return e == cudaSuccess ? WEFT_INPROGRESS : cuda_failed(ctx, "collective", "copy back", e);
}

static weft_status_t staged_progress(weft_req_t *req)
{
    staged_t *s = req->impl;
    if (s->inner != NULL) {
        weft_status_t st = weft__req_advance(s->inner);
        if (st != WEFT_OK) {
            return st; /* WEFT_INPROGRESS, or the host collective's error */
        }
        weft_req_free(s->inner);
        s->inner = NULL;
        return copy_back(req->ctx, s);
    }
    cudaError_t e = cudaEventQuery(s->ev);
    if (e == cudaErrorNotReady) {
        return WEFT_INPROGRESS;
    }
    return e == cudaSuccess ? WEFT_OK : cuda_failed(req->ctx, "collective", "copy back", e);
}

static void staged_cleanup(weft_req_t *req)
{
    staged_free(req->impl);
    req->impl = NULL;
}

/* Pinned host buffers holding the input; *hsend / *hrecv stand for sendbuf / recvbuf. */
static weft_status_t stage_in(weft_group_t *g, const weft_coll_args_t *a, size_t in, size_t out,
                              staged_t *s, const void **hsend, void **hrecv)
{
    const char *sb = a->sendbuf, *rb = a->recvbuf;
    /* In place: sendbuf lies in recvbuf's extent (the rules of include/weft/coll.h);
     * the host buffers keep that layout. */
    bool in_place = sb != NULL && rb != NULL && sb >= rb && sb < rb + (out > in ? out : in);
    size_t off = in_place ? (size_t)(sb - rb) : 0;
    size_t extent = in_place ? (off + in > out ? off + in : out) : out;
    size_t total = extent + (in_place || sb == NULL ? 0 : in);
    cudaError_t e = cudaMallocHost((void **)&s->host, total > 0 ? total : 1);
    if (e != cudaSuccess) {
        s->host = NULL;
        return cuda_failed(g->ctx, a->name, "pinned host buffer", e);
    }
    if (in_place) {
        e = cudaMemcpyAsync(s->host, rb, extent, cudaMemcpyDeviceToHost, s->stream);
    } else if (sb != NULL) {
        e = cudaMemcpyAsync(s->host + extent, sb, in, cudaMemcpyDeviceToHost, s->stream);
    }
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize(s->stream);
    }
    if (e != cudaSuccess) {
        return cuda_failed(g->ctx, a->name, "copy to host", e);
    }
    *hrecv = s->host;
    *hsend = in_place ? (const void *)(s->host + off) : sb != NULL ? s->host + extent : NULL;
    return WEFT_OK;
}

bool weft__coll_can_stage(const weft_group_t *g, const weft_coll_args_t *a)
{
    size_t in, out;
    return staged_sizes(g, a, &in, &out) && weft_dtype_size(a->dtype) > 0;
}

weft_status_t weft__coll_staged_start(weft_group_t *g, const weft_coll_args_t *a, weft_req_t **req)
{
    size_t in, out;
    if (!staged_sizes(g, a, &in, &out)) {
        return weft__error(g->ctx, WEFT_ERR_UNSUPPORTED, "%s on CUDA buffers is not staged",
                           a->name);
    }
    staged_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory to stage", a->name);
    }
    s->stream = (cudaStream_t)weft__group_cuda_stream(g);
    s->dst = a->recvbuf;
    s->back = out;
    weft_coll_args_t ha = *a;
    weft_status_t st = stage_in(g, a, in, out, s, &ha.sendbuf, &ha.recvbuf);
    weft_req_t *r = NULL;
    if (st == WEFT_OK) {
        st = weft__coll_start(g, &ha, &s->inner); /* host buffers: the host path */
    }
    if (st == WEFT_OK) { /* completed inline */
        s->inner = NULL;
        st = copy_back(g->ctx, s);
    }
    if (st == WEFT_INPROGRESS && (r = weft__req_new(g->ctx, g)) == NULL) {
        st = weft__error(g->ctx, WEFT_ERR_NO_MEMORY, "%s: no memory for a request", a->name);
    }
    if (st != WEFT_INPROGRESS) {
        staged_free(s);
        return st;
    }
    r->bytes = out;
    r->impl = s;
    r->progress = staged_progress;
    r->cleanup = staged_cleanup;
    *req = r;
    return WEFT_INPROGRESS;
}
