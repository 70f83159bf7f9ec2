/*
 * pmix_twice: two contexts one after the other in each process of a job that a PMIx
 * server started (mpirun, srun --mpi=pmix) without WEFT_STORE; each checks an allreduce
 * against the sum every rank can compute. Exits 0 when both agree, 1 with a message.
 */
#include <stdio.h>
#include <stdlib.h>

#include "weft/weft.h"

static int run_once(int round)
{
    weft_ctx_t *ctx = NULL;
    weft_group_t *world;
    int rank, size;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st != WEFT_OK) {
        fprintf(stderr, "pmix_twice: weft_init (context %d): %s\n", round,
                weft_last_error(NULL));
        return 1;
    }
    weft_ctx_world(ctx, &world);
    weft_group_rank(world, &rank);
    weft_group_size(world, &size);
    double v[3] = {rank + 1.0, 2.0 * rank, round}, sum[3];
    st = weft_allreduce(world, v, sum, 3, WEFT_F64, WEFT_SUM);
    double want0 = size * (size + 1) / 2.0, want1 = size * (size - 1.0);
    int bad = st != WEFT_OK || sum[0] != want0 || sum[1] != want1 || sum[2] != round * size;
    if (bad) {
        fprintf(stderr, "pmix_twice: rank %d of %d, context %d: %s, got %g %g %g\n", rank, size,
                round, weft_status_str(st), sum[0], sum[1], sum[2]);
    } else if (rank == 0) {
        printf("pmix_twice: context %d of %d ranks: allreduce correct\n", round, size);
    }
    weft_finalize(ctx);
    return bad;
}

int main(void)
{
    return run_once(1) || run_once(2);
}
