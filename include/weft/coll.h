/**
 * @file coll.h
 * @brief Datatypes, reduction operators and collective operations on a group.
 *
 * Every collective has a blocking form (waits with the context's default timeout) and a
 * nonblocking twin `weft_i...` that returns a request. All members of the group must
 * call the same collectives in the same order. Ranks that disagree on count, dtype, op
 * or root get WEFT_ERR_MISMATCH on every rank. A rank whose own arguments are invalid
 * gets WEFT_ERR_INVALID_ARG and still takes part, as a refusal: the other ranks get
 * WEFT_ERR_MISMATCH at once, not at their timeout, even if the refusing rank does not
 * call weft again for a while, and the group stays usable. Passing the same pointer as
 * send and receive buffer means "in place" where the description says it is allowed.
 *
 * Outstanding collectives on one group may be waited in any order; collectives on
 * different groups never interfere.
 */
#ifndef WEFT_COLL_H
#define WEFT_COLL_H

#include "weft/export.h"
#include "weft/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Element types. */
typedef enum weft_dtype {
    WEFT_F32 = 0,
    WEFT_F64 = 1,
    WEFT_F16 = 2,  /**< IEEE binary16; reductions accumulate in float. */
    WEFT_BF16 = 3, /**< bfloat16; reductions accumulate in float. */
    WEFT_I32 = 4,
    WEFT_I64 = 5,
    WEFT_U8 = 6,
    WEFT_DTYPE_USER = 7, /**< Opaque elements of a user operator's elem_size. */
    WEFT_DTYPE_COUNT
} weft_dtype_t;

/** @brief Size in bytes of one element of @p dtype; 0 for WEFT_DTYPE_USER or invalid. */
WEFT_API size_t weft_dtype_size(weft_dtype_t dtype);

/** @brief Name such as "f32"; "?" if invalid. */
WEFT_API const char *weft_dtype_name(weft_dtype_t dtype);

/**
 * @brief Reduction operators. Values from WEFT_OP_USER_FIRST up are created with
 * weft_op_create() and valid only with WEFT_DTYPE_USER.
 */
typedef int weft_op_t;
#define WEFT_SUM 0
#define WEFT_PROD 1
#define WEFT_MAX 2
#define WEFT_MIN 3
/** The sum divided by the number of ranks reduced over (the group's size), on every rank
 * that receives a result (allreduce, reduce_scatter, reduce's root): floating-point types
 * divide the sum (half types in float, then round), integer types divide their wrapped
 * sum, rounding toward zero. */
#define WEFT_AVG 4
#define WEFT_OP_USER_FIRST 16

/** @brief Name such as "sum"; "user" for created operators; "?" if invalid. */
WEFT_API const char *weft_op_name(weft_op_t op);

/**
 * @brief A user reduction: combine @p count elements of @p in into @p inout
 * (inout[i] = inout[i] (op) in[i]). Must be associative and commutative:
 * weft may combine partial results in any order.
 */
typedef void (*weft_user_reduce_fn)(void *inout, const void *in, size_t count, void *arg);

/** @brief Parameters of weft_op_create(). Zero-initialise, then set @c size. */
typedef struct weft_op_params {
    size_t size;                 /**< sizeof(weft_op_params_t). */
    weft_user_reduce_fn fn;      /**< The combining function; required. */
    size_t elem_size;            /**< Bytes per element; required, > 0. */
    void *arg;                   /**< Passed to fn. */
} weft_op_params_t;

/**
 * @brief Register an associative, commutative user operator on a context.
 *
 * Every rank must create the same operators in the same order, so the returned values
 * agree across ranks (mismatch detection compares them).
 * @param[out] op Set on success.
 * @return WEFT_OK, WEFT_ERR_INVALID_ARG, WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_op_create(weft_ctx_t *ctx, const weft_op_params_t *params,
                                      weft_op_t *op);

/** @brief Forget a user operator; collectives using it must have completed. */
WEFT_API weft_status_t weft_op_free(weft_ctx_t *ctx, weft_op_t op);

/**
 * @brief recvbuf[i] = op over ranks of sendbuf[i], on every rank. In place allowed.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG; WEFT_ERR_MISMATCH; peer errors; WEFT_ERR_TIMEOUT.
 */
WEFT_API weft_status_t weft_allreduce(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                      size_t count, weft_dtype_t dtype, weft_op_t op);
/** @brief Nonblocking weft_allreduce(); *req is NULL when it completed inline. */
WEFT_API weft_status_t weft_iallreduce(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                       size_t count, weft_dtype_t dtype, weft_op_t op,
                                       weft_req_t **req);

/**
 * @brief Reduce size*count elements and leave block r (count elements) on rank r.
 * In place: sendbuf == recvbuf means the input is in recvbuf (size*count elements) and
 * the result is written at its start.
 */
WEFT_API weft_status_t weft_reduce_scatter(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                           size_t count, weft_dtype_t dtype, weft_op_t op);
WEFT_API weft_status_t weft_ireduce_scatter(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                            size_t count, weft_dtype_t dtype, weft_op_t op,
                                            weft_req_t **req);

/**
 * @brief Gather @p count elements from every rank into recvbuf (size*count) in rank
 * order. In place: sendbuf == recvbuf + rank*count*elem.
 */
WEFT_API weft_status_t weft_allgather(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                      size_t count, weft_dtype_t dtype);
WEFT_API weft_status_t weft_iallgather(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                       size_t count, weft_dtype_t dtype, weft_req_t **req);

/** @brief Copy @p count elements of @p buf on @p root to every rank's @p buf. */
WEFT_API weft_status_t weft_broadcast(weft_group_t *g, void *buf, size_t count, weft_dtype_t dtype,
                                      int root);
WEFT_API weft_status_t weft_ibroadcast(weft_group_t *g, void *buf, size_t count, weft_dtype_t dtype,
                                       int root, weft_req_t **req);

/** @brief Reduce into @p recvbuf on @p root only (recvbuf ignored elsewhere). In place
 * on root allowed. */
WEFT_API weft_status_t weft_reduce(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                   size_t count, weft_dtype_t dtype, weft_op_t op, int root);
WEFT_API weft_status_t weft_ireduce(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                    size_t count, weft_dtype_t dtype, weft_op_t op, int root,
                                    weft_req_t **req);

/** @brief Block j of sendbuf (count elements) goes to rank j; block i of recvbuf comes
 * from rank i. Not in place. */
WEFT_API weft_status_t weft_alltoall(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype);
WEFT_API weft_status_t weft_ialltoall(weft_group_t *g, const void *sendbuf, void *recvbuf,
                                      size_t count, weft_dtype_t dtype, weft_req_t **req);

/**
 * @brief Variable-size all-to-all: sendcounts[j] elements at sdispls[j] go to rank j;
 * recvcounts[i] elements from rank i land at rdispls[i] (counts and displacements in
 * elements). A rank's recvcounts[i] must equal rank i's sendcounts[me]
 * (else WEFT_ERR_MISMATCH on the two ranks involved).
 */
WEFT_API weft_status_t weft_alltoallv(weft_group_t *g, const void *sendbuf,
                                      const size_t *sendcounts, const size_t *sdispls,
                                      void *recvbuf, const size_t *recvcounts,
                                      const size_t *rdispls, weft_dtype_t dtype);
WEFT_API weft_status_t weft_ialltoallv(weft_group_t *g, const void *sendbuf,
                                       const size_t *sendcounts, const size_t *sdispls,
                                       void *recvbuf, const size_t *recvcounts,
                                       const size_t *rdispls, weft_dtype_t dtype, weft_req_t **req);

/** @brief Return once every member has entered the barrier. */
WEFT_API weft_status_t weft_barrier(weft_group_t *g);
WEFT_API weft_status_t weft_ibarrier(weft_group_t *g, weft_req_t **req);

/**
 * @brief Number of collective operations started on @p g since it was created
 * (each nonblocking start or blocking call counts once). Used to verify how many
 * communication barriers an algorithm issues.
 */
WEFT_API weft_status_t weft_group_coll_count(const weft_group_t *g, uint64_t *count);

#ifdef __cplusplus
}
#endif
#endif
