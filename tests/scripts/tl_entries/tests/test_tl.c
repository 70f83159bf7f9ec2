/* Tests call every entry; they are not the library. */
#include "transports/bulk.h"
#include "transports/transport.h"

void drive(const weft_tl_msg_ops_t *ops, const weft_tl_bulk_ops_t *bulk, void *tl)
{
    ops->flush(tl);
    bulk->wait(tl);
}
