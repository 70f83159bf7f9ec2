/*
 * Datatypes and reduction operators: sizes and names, and the table of user operators a
 * context holds. A user operator's value is WEFT_OP_USER_FIRST + its slot in
 * ctx->user_ops; freed slots are reused lowest first, so ranks that create and free the
 * same operators in the same order get the same values (mismatch detection compares
 * them).
 */
#include <stdlib.h>
#include <string.h>

#include "comm/core_impl.h"

size_t weft_dtype_size(weft_dtype_t dtype)
{
    switch (dtype) {
    case WEFT_F32:
        return 4;
    case WEFT_F64:
        return 8;
    case WEFT_F16:
        return 2;
    case WEFT_BF16:
        return 2;
    case WEFT_I32:
        return 4;
    case WEFT_I64:
        return 8;
    case WEFT_U8:
        return 1;
    case WEFT_DTYPE_USER:
    case WEFT_DTYPE_COUNT:
        break;
    }
    return 0;
}

const char *weft_dtype_name(weft_dtype_t dtype)
{
    switch (dtype) {
    case WEFT_F32:
        return "f32";
    case WEFT_F64:
        return "f64";
    case WEFT_F16:
        return "f16";
    case WEFT_BF16:
        return "bf16";
    case WEFT_I32:
        return "i32";
    case WEFT_I64:
        return "i64";
    case WEFT_U8:
        return "u8";
    case WEFT_DTYPE_USER:
        return "user";
    case WEFT_DTYPE_COUNT:
        break;
    }
    return "?";
}

const char *weft_op_name(weft_op_t op)
{
    switch (op) {
    case WEFT_SUM:
        return "sum";
    case WEFT_PROD:
        return "prod";
    case WEFT_MAX:
        return "max";
    case WEFT_MIN:
        return "min";
    case WEFT_AVG:
        return "avg";
    default:
        break;
    }
    /* Without a context we cannot tell a live user operator from a freed one. */
    return op >= WEFT_OP_USER_FIRST ? "user" : "?";
}

/* Largest number of user operators one context may hold; keeps op values in int range. */
#define MAX_USER_OPS 65536

weft_status_t weft_op_create(weft_ctx_t *ctx, const weft_op_params_t *params, weft_op_t *op)
{
    WEFT_API_LOCK((weft_ctx_t *)ctx);
    if (ctx == NULL || op == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (params == NULL || params->size < offsetof(weft_op_params_t, arg) + sizeof(void *) ||
        params->fn == NULL || params->elem_size == 0) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG,
                           "weft_op_create: params need size, fn and elem_size > 0");
    }
    int slot = 0;
    while (slot < ctx->n_user_ops && ctx->user_ops[slot].in_use) {
        slot++;
    }
    if (slot == ctx->n_user_ops) {
        if (slot >= MAX_USER_OPS) {
            return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_op_create: %d user operators exist",
                               slot);
        }
        weft_user_op_t *ops = realloc(ctx->user_ops, sizeof(*ops) * (size_t)(slot + 1));
        if (ops == NULL) {
            return weft__error(ctx, WEFT_ERR_NO_MEMORY, "weft_op_create: no memory");
        }
        ctx->user_ops = ops;
        ctx->n_user_ops = slot + 1;
    }
    weft_user_op_t *u = &ctx->user_ops[slot];
    memset(u, 0, sizeof(*u));
    /* Copy only the fields this version knows; a newer caller's extra fields are ignored. */
    u->params.size = sizeof(u->params);
    u->params.fn = params->fn;
    u->params.elem_size = params->elem_size;
    u->params.arg = params->arg;
    u->in_use = true;
    *op = WEFT_OP_USER_FIRST + slot;
    return WEFT_OK;
}

weft_status_t weft_op_free(weft_ctx_t *ctx, weft_op_t op)
{
    WEFT_API_LOCK((weft_ctx_t *)ctx);
    if (ctx == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (weft__user_op(ctx, op) == NULL) {
        return weft__error(ctx, WEFT_ERR_INVALID_ARG, "weft_op_free: %d is not a user operator",
                           op);
    }
    ctx->user_ops[op - WEFT_OP_USER_FIRST].in_use = false;
    return WEFT_OK;
}

const weft_op_params_t *weft__user_op(const weft_ctx_t *ctx, weft_op_t op)
{
    if (ctx == NULL || op < WEFT_OP_USER_FIRST || op - WEFT_OP_USER_FIRST >= ctx->n_user_ops) {
        return NULL;
    }
    const weft_user_op_t *u = &ctx->user_ops[op - WEFT_OP_USER_FIRST];
    return u->in_use ? &u->params : NULL;
}
