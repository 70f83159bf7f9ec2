/*
 * What the same-host stream mechanisms (transports/stream.h) share: the status of a
 * failed system call, and the conditions every one of them puts on a peer.
 */
#include <errno.h>
#include <stdint.h>

#include "transports/stream.h"
#include "transports/stream_impl.h"

weft_status_t weft__tl_stream_status(int err)
{
    switch (err) {
    case EFAULT:
    case EINVAL:
        return WEFT_ERR_INVALID_ARG;
    case EPERM:
    case EACCES:
    case ENOSYS:
        return WEFT_ERR_UNSUPPORTED;
    case ESRCH:
    case EBADF:
        return WEFT_ERR_PEER_FAILED;
    case ENOMEM:
    case ENOSPC:
        return WEFT_ERR_NO_MEMORY;
    default:
        return WEFT_ERR_IO;
    }
}

bool weft__tl_stream_host_peer(const weft_tl_stream_peer_t *peer)
{
    return peer != NULL && peer->size >= sizeof(*peer) && peer->same_host &&
           peer->mem == WEFT_MEM_HOST && peer->peer_mem == WEFT_MEM_HOST && !peer->refused &&
           peer->pid <= INT32_MAX;
}
