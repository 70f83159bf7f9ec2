/*
 * The collectives of the vocabulary passes (C1, C2, the embedding's IF and IB), and their
 * refusals. A rank that rejects its own arguments of a pass (a label >= V, a NULL buffer, a
 * pass out of order) still takes part in the pass's collective, as a refusal, and every
 * other rank then fails that collective with WEFT_ERR_INVALID_ARG as well (not
 * WEFT_ERR_MISMATCH, and not at its timeout): the whole group learns that a pass was
 * refused, and the error text on each rank says so.
 */
#include "comm/coll/start.h"
#include "vocab/vocab_impl.h"

static weft_coll_args_t args(enum weft_coll_kind kind, void *buf, size_t count, weft_dtype_t dtype,
                             weft_op_t op, int root)
{
    const char *name = kind == WEFT_COLL_BROADCAST ? "broadcast" : "allreduce";
    weft_coll_args_t a = weft__coll_args(kind, name, buf, buf, count, dtype, op, root);
    a.refused_status = WEFT_ERR_INVALID_ARG;
    return a;
}

weft_status_t weft__vocab_iallreduce(weft_vocab_t *v, void *buf, size_t count, weft_dtype_t dtype,
                                     weft_op_t op, weft_req_t **req)
{
    weft_coll_args_t a = args(WEFT_COLL_ALLREDUCE, buf, count, dtype, op, -1);
    return weft__coll_start(v->group, &a, req);
}

weft_status_t weft__vocab_ibroadcast(weft_vocab_t *v, void *buf, size_t count, int root,
                                     weft_req_t **req)
{
    weft_coll_args_t a = args(WEFT_COLL_BROADCAST, buf, count, v->dtype, -1, root);
    return weft__coll_start(v->group, &a, req);
}

void weft__vocab_refuse(weft_vocab_t *v, bool broadcast, bool blocking)
{
    weft_coll_args_t a = broadcast ? args(WEFT_COLL_BROADCAST, NULL, 0, WEFT_F32, -1, 0)
                                   : args(WEFT_COLL_ALLREDUCE, NULL, 0, WEFT_F32, WEFT_SUM, -1);
    weft__coll_refuse(v->group, &a, blocking);
}
