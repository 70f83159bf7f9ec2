/* The launcher is not the library either. */
#include "transports/transport.h"

void stop(const weft_tl_msg_ops_t *ops, void *tl)
{
    ops->flush(tl);
}
