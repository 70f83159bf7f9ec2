/* A program built against an installed weft: allreduce of 1 from every rank. */
#include <stdio.h>

#include <weft/weft.h>

int main(void)
{
    weft_ctx_t *ctx;
    weft_group_t *g;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        return 1;
    }
    weft_ctx_world(ctx, &g);
    int size;
    weft_group_size(g, &size);
    float x = 1;
    weft_status_t st = weft_allreduce(g, &x, &x, 1, WEFT_F32, WEFT_SUM);
    weft_finalize(ctx);
    return st == WEFT_OK && x == (float)size ? 0 : 1;
}
