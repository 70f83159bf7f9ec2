/* A call through a table held by value. */
#include "transports/bulk.h"

int move(weft_tl_bulk_ops_t tbl, void *dst, const void *src, size_t len)
{
    return tbl.copy(dst, src, len);
}
