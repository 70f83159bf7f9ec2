/*
 * Reads of a peer's memory by pid (transports/stream.h): process_vm_readv(2), one copy
 * from the peer's pages into the reader's, no message and no help from the peer. The
 * kernel asks ptrace-attach permission (the same user, and Yama's ptrace_scope allowing
 * it); where that is refused, the caller's protocol falls back to messages.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "transports/stream.h"
#include "transports/stream_impl.h"

static bool cma_can_reach(const weft_tl_stream_peer_t *peer)
{
    return weft__tl_stream_host_peer(peer);
}

static weft_status_t cma_read(uint64_t pid, uint64_t remote_addr, void *local, size_t len)
{
    if (pid == 0 || pid > INT32_MAX) {
        errno = EINVAL;
        return WEFT_ERR_INVALID_ARG;
    }
    size_t got = 0;
    while (got < len) {
        struct iovec dst = {(char *)local + got, len - got};
        struct iovec src = {(void *)(uintptr_t)(remote_addr + got), len - got};
        ssize_t n = process_vm_readv((pid_t)pid, &dst, 1, &src, 1, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            if (n == 0) {
                errno = EIO; /* the peer's mapping ended inside the range */
            }
            return weft__tl_stream_status(errno);
        }
        got += (size_t)n;
    }
    return WEFT_OK;
}

static const weft_tl_stream_read_ops_t cma_read_ops = {
    .size = sizeof(weft_tl_stream_read_ops_t),
    .read = cma_read,
};

const weft_tl_stream_ops_t weft__tl_stream_cma = {
    .size = sizeof(weft_tl_stream_ops_t),
    .name = "cma",
    .can_reach = cma_can_reach,
    .read = &cma_read_ops,
    .shm = NULL,
};
