/*
 * Vocabulary-parallel input embedding: forward lookup in the own shard plus a sum over
 * the group (pass IF); backward broadcast of ∇out (pass IB) and the local scatter-add.
 *
 * Device buffers are reduced through a host copy: a compound request stages the data
 * down, runs the collective on the host copy and puts the result back when it completes.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/ctx.h"
#include "vocab/vocab_impl.h"

/* Host copy of the ids when they live on the device (freed by the caller), checked. */
static weft_status_t ids_host_view(weft_vocab_t *v, const int64_t *ids, size_t n,
                                   const int64_t **view, int64_t **copy)
{
    *copy = NULL;
    *view = ids;
    if (n > 0 && weft__vocab_is_device(ids)) {
#ifdef WEFT_HAVE_CUDA
        if ((*copy = malloc(n * sizeof(int64_t))) == NULL) {
            return weft__error(v->ctx, WEFT_ERR_NO_MEMORY, "vocab: no memory for %zu ids", n);
        }
        weft_status_t st = weft__vxd_copy(v, *copy, ids, n * sizeof(int64_t));
        if (st != WEFT_OK) {
            free(*copy);
            *copy = NULL;
            return st;
        }
        *view = *copy;
#endif
    }
    for (size_t j = 0; j < n; j++) {
        if ((*view)[j] < 0 || (uint64_t)(*view)[j] >= v->vocab_size) {
            free(*copy);
            *copy = NULL;
            return weft__error(v->ctx, WEFT_ERR_INVALID_ARG,
                               "vocab: embedding id %lld outside [0, %zu)", (long long)(*view)[j],
                               v->vocab_size);
        }
    }
    return WEFT_OK;
}

/* Row of the own shard that holds @p id, or -1. */
static inline long shard_row(const weft_vocab_t *v, int64_t id)
{
    uint64_t u = (uint64_t)id;
    if (u < v->range.start || u - v->range.start >= v->range.length) {
        return -1;
    }
    return (long)(u - v->range.start);
}

#ifdef WEFT_HAVE_CUDA
/* A collective on a host copy of device data: down (optional), reduce, up (optional). */
typedef struct staged {
    const weft_vocab_t *v;
    weft_req_t *inner;
    float *host;
    float *dev;
    size_t bytes;
    bool upload;
} staged_t;

static weft_status_t staged_progress(weft_req_t *req)
{
    staged_t *s = req->impl;
    weft_status_t st = weft__req_advance(s->inner);
    if (st == WEFT_OK && s->upload) {
        st = weft__vxd_copy(s->v, s->dev, s->host, s->bytes);
    }
    return st;
}

static void staged_cleanup(weft_req_t *req)
{
    staged_t *s = req->impl;
    if (s != NULL) {
        weft_req_free(s->inner);
        free(s->host);
        free(s);
    }
}

/*
 * Run @p kind (0: all-reduce sum, 1: broadcast from @p root) on the device buffer @p dev
 * of @p count floats through a host copy.
 */
static weft_status_t staged_start(weft_vocab_t *v, float *dev, size_t count, int kind, int root,
                                  weft_req_t **req)
{
    size_t bytes = count * sizeof(float);
    staged_t *s = calloc(1, sizeof(*s));
    float *host = malloc(bytes > 0 ? bytes : 1);
    weft_status_t st = WEFT_ERR_NO_MEMORY;
    if (s == NULL || host == NULL) {
        st = weft__error(v->ctx, st, "vocab: no memory to stage %zu bytes", bytes);
        goto err_free;
    }
    if ((kind == 0 || v->rank == root) && (st = weft__vxd_copy(v, host, dev, bytes)) != WEFT_OK) {
        goto err_free;
    }
    weft_req_t *inner = NULL;
    st = kind == 0 ? weft_iallreduce(v->group, host, host, count, WEFT_F32, WEFT_SUM, &inner)
                   : weft_ibroadcast(v->group, host, count, WEFT_F32, root, &inner);
    if (st != WEFT_INPROGRESS) {
        if (st == WEFT_OK && (kind == 0 || v->rank != root)) {
            st = weft__vxd_copy(v, dev, host, bytes);
        }
        weft_req_free(inner);
        free(host);
        free(s);
        *req = NULL;
        return st;
    }
    weft_req_t *outer = weft__req_new(v->ctx, NULL);
    if (outer == NULL) {
        weft_req_free(inner);
        st = weft__error(v->ctx, WEFT_ERR_NO_MEMORY, "vocab: no memory for a request");
        goto err_free;
    }
    *s = (staged_t){.v = v,
                    .inner = inner,
                    .host = host,
                    .dev = dev,
                    .bytes = bytes,
                    .upload = kind == 0 || v->rank != root};
    outer->impl = s;
    outer->progress = staged_progress;
    outer->cleanup = staged_cleanup;
    *req = outer;
    return WEFT_INPROGRESS;

err_free:
    free(host);
    free(s);
    return st;
}
#endif

weft_status_t weft_vocab_iembed_forward(weft_vocab_t *vocab, const float *table, const int64_t *ids,
                                        size_t n, float *out, weft_req_t **req)
{
    if (vocab == NULL || req == NULL || (n > 0 && (ids == NULL || out == NULL)) ||
        (vocab->range.length > 0 && table == NULL)) {
        return WEFT_ERR_INVALID_ARG;
    }
    const int64_t *hid;
    int64_t *copy;
    weft_status_t st = ids_host_view(vocab, ids, n, &hid, &copy);
    if (st != WEFT_OK) {
        return st;
    }
    size_t h = vocab->hidden;
    bool dev = n > 0 && weft__vocab_is_device(out);
    if (dev) {
#ifdef WEFT_HAVE_CUDA
        st = weft__vxd_embed_lookup(vocab, table, ids, hid, n, out);
        if (st == WEFT_OK) {
            st = staged_start(vocab, out, n * h, 0, 0, req);
        }
#endif
        free(copy);
        return st;
    }
    for (size_t j = 0; j < n; j++) {
        long row = shard_row(vocab, hid[j]);
        if (row >= 0) {
            memcpy(out + j * h, table + (size_t)row * h, h * sizeof(float));
        } else {
            memset(out + j * h, 0, h * sizeof(float));
        }
    }
    free(copy);
    *req = NULL;
    return weft_iallreduce(vocab->group, out, out, n * h, WEFT_F32, WEFT_SUM, req);
}

weft_status_t weft_vocab_embed_forward(weft_vocab_t *vocab, const float *table, const int64_t *ids,
                                       size_t n, float *out)
{
    weft_req_t *req = NULL;
    weft_status_t st = weft_vocab_iembed_forward(vocab, table, ids, n, out, &req);
    return weft__blocking(st, req);
}

weft_status_t weft_vocab_iembed_grad_bcast(weft_vocab_t *vocab, float *grad_out, size_t n, int root,
                                           weft_req_t **req)
{
    if (vocab == NULL || req == NULL || (n > 0 && grad_out == NULL) || root < 0 ||
        root >= vocab->nranks) {
        return WEFT_ERR_INVALID_ARG;
    }
    size_t count = n * vocab->hidden;
    if (n > 0 && weft__vocab_is_device(grad_out)) {
#ifdef WEFT_HAVE_CUDA
        return staged_start(vocab, grad_out, count, 1, root, req);
#endif
    }
    *req = NULL;
    return weft_ibroadcast(vocab->group, grad_out, count, WEFT_F32, root, req);
}

weft_status_t weft_vocab_embed_grad_scatter(weft_vocab_t *vocab, const float *grad_out,
                                            const int64_t *ids, size_t n, float *grad_table)
{
    if (vocab == NULL || (n > 0 && (grad_out == NULL || ids == NULL)) ||
        (vocab->range.length > 0 && grad_table == NULL)) {
        return WEFT_ERR_INVALID_ARG;
    }
    const int64_t *hid;
    int64_t *copy;
    weft_status_t st = ids_host_view(vocab, ids, n, &hid, &copy);
    if (st != WEFT_OK) {
        return st;
    }
    size_t h = vocab->hidden;
    if (n > 0 && weft__vocab_is_device(grad_table)) {
#ifdef WEFT_HAVE_CUDA
        st = weft__vxd_embed_scatter(vocab, grad_out, ids, hid, n, grad_table);
#endif
        free(copy);
        return st;
    }
    for (size_t j = 0; j < n; j++) {
        long row = shard_row(vocab, hid[j]);
        if (row < 0) {
            continue;
        }
        float *dst = grad_table + (size_t)row * h;
        const float *src = grad_out + j * h;
        for (size_t k = 0; k < h; k++) {
            dst[k] += src[k];
        }
    }
    free(copy);
    return WEFT_OK;
}

weft_status_t weft_vocab_embed_backward(weft_vocab_t *vocab, float *grad_out, const int64_t *ids,
                                        size_t n, int root, float *grad_table)
{
    if (vocab == NULL || root < -1) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (root >= 0) {
        weft_req_t *req = NULL;
        weft_status_t st = weft_vocab_iembed_grad_bcast(vocab, grad_out, n, root, &req);
        st = weft__blocking(st, req);
        if (st != WEFT_OK) {
            return st;
        }
    }
    return weft_vocab_embed_grad_scatter(vocab, grad_out, ids, n, grad_table);
}
