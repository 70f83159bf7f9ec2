/*
 * Inside the same-host stream mechanisms (transports/stream.h).
 */
#ifndef WEFT_TL_STREAM_IMPL_H
#define WEFT_TL_STREAM_IMPL_H

#include <stdbool.h>

#include "transports/stream.h"

/* What every mechanism needs of @p peer: on this host, host memory on both sides, not
 * refused, and a pid that fits a pid_t where known. */
bool weft__tl_stream_host_peer(const weft_tl_stream_peer_t *peer);

#endif
