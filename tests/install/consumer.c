/*
 * A program built against an installed weft: an allreduce of 1 from every rank, and the
 * vocabulary-parallel output layer on zero weights, whose loss is log(V) on every token.
 * Linked statically, it pulls in what those need: UCX, hwloc, OpenSSL, OpenBLAS and, in
 * a CUDA build, the CUDA runtime (memory-type detection).
 */
#include <math.h>
#include <stdio.h>

#include <weft/weft.h>

enum { VOCAB = 8, HIDDEN = 4, TOKENS = 2 };

static weft_status_t vocab_loss(weft_group_t *g, float *loss)
{
    weft_vocab_params_t vp = {.size = sizeof(vp), .vocab_size = VOCAB, .hidden = HIDDEN};
    weft_vocab_mb_params_t mp = {.size = sizeof(mp), .algo = WEFT_VOCAB_ALG2, .max_tokens = TOKENS};
    static float w[VOCAB * HIDDEN], dw[VOCAB * HIDDEN], x[TOKENS * HIDDEN], dx[TOKENS * HIDDEN];
    const int64_t labels[TOKENS] = {1, VOCAB - 1};
    const float grad = 1;
    weft_vocab_t *v = NULL;
    weft_vocab_mb_t *mb = NULL;
    weft_status_t st = weft_vocab_create(g, &vp, &v);
    if (st == WEFT_OK) {
        st = weft_vocab_mb_create(v, &mp, &mb);
    }
    if (st == WEFT_OK) {
        st = weft_vocab_xent_forward(mb, x, w, labels, TOKENS, NULL, loss);
    }
    if (st == WEFT_OK) {
        st = weft_vocab_xent_backward(mb, &grad, dx, dw);
    }
    weft_vocab_mb_free(mb);
    weft_vocab_free(v);
    return st;
}

int main(void)
{
    weft_ctx_t *ctx;
    weft_group_t *g;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        return 1;
    }
    weft_ctx_world(ctx, &g);
    int size, is_cuda = -1;
    weft_group_size(g, &size);
    float x = 1, loss = 0;
    weft_status_t st = weft_allreduce(g, &x, &x, 1, WEFT_F32, WEFT_SUM);
    if (st == WEFT_OK) {
        st = weft_memory_is_cuda(&x, &is_cuda);
    }
    if (st == WEFT_OK) {
        st = vocab_loss(g, &loss);
    }
    if (st != WEFT_OK) {
        fprintf(stderr, "consumer: %s: %s\n", weft_status_str(st), weft_last_error(ctx));
    }
    weft_finalize(ctx);
    return st == WEFT_OK && x == (float)size && is_cuda == 0 && fabsf(loss - logf(VOCAB)) < 1e-4f
               ? 0
               : 1;
}
