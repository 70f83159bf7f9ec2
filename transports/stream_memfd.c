/*
 * Shared memory by offer (transports/stream.h): the maker makes anonymous memory with
 * memfd_create(2) and maps it; its offer is its pid and the memfd's number, and the peer
 * takes a duplicate of that descriptor with pidfd_open(2) + pidfd_getfd(2) (ptrace-attach
 * permission, as process_vm_readv) and maps it too. Nothing has a name in a file system,
 * so nothing is left behind when either process dies.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "transports/stream.h"
#include "transports/stream_impl.h"

#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
#define HAVE_PIDFD_GETFD 1
#else
#define HAVE_PIDFD_GETFD 0
#endif

static bool memfd_can_reach(const weft_tl_stream_peer_t *peer)
{
    return HAVE_PIDFD_GETFD && weft__tl_stream_host_peer(peer);
}

static void region_reset(weft_tl_stream_region_t *r)
{
    r->base = NULL;
    r->len = 0;
    r->fd = -1;
}

static weft_status_t memfd_create_region(size_t len, weft_tl_stream_region_t *region,
                                         weft_tl_stream_offer_t *offer)
{
    if (len == 0) {
        errno = EINVAL;
        return WEFT_ERR_INVALID_ARG;
    }
    int fd = memfd_create("weft-stream", MFD_CLOEXEC);
    if (fd < 0) {
        return weft__tl_stream_status(errno);
    }
    /* All of it now: a full memory cgroup is an error here, never a SIGBUS later. */
    int err = ftruncate(fd, (off_t)len) != 0 ? errno : posix_fallocate(fd, 0, (off_t)len);
    void *p = err == 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)
                       : MAP_FAILED;
    if (p == MAP_FAILED) {
        err = err != 0 ? err : errno;
        close(fd);
        errno = err;
        return weft__tl_stream_status(err);
    }
    region->base = p;
    region->len = len;
    region->fd = fd;
    offer->pid = (uint64_t)getpid();
    offer->handle = (uint64_t)fd;
    offer->len = len;
    return WEFT_OK;
}

#if HAVE_PIDFD_GETFD
/* A duplicate of descriptor @p handle of process @p pid; -1 (errno) when not. */
static int take_fd(uint64_t pid, uint64_t handle)
{
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pidfd < 0) {
        return -1;
    }
    int fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)handle, 0);
    int err = errno;
    close(pidfd);
    errno = err;
    return fd;
}
#endif

static weft_status_t memfd_map(const weft_tl_stream_offer_t *offer,
                               weft_tl_stream_region_t *mapping)
{
    if (offer->pid == 0 || offer->pid > INT32_MAX || offer->handle > INT32_MAX || offer->len == 0) {
        errno = EINVAL;
        return WEFT_ERR_INVALID_ARG;
    }
#if HAVE_PIDFD_GETFD
    int fd = take_fd(offer->pid, offer->handle);
    if (fd < 0) {
        return weft__tl_stream_status(errno);
    }
    struct stat sb;
    void *p = MAP_FAILED;
    int err;
    if (fstat(fd, &sb) != 0) {
        err = errno;
    } else if (!S_ISREG(sb.st_mode) || sb.st_nlink != 0 || sb.st_uid != geteuid() ||
               fcntl(fd, F_GET_SEALS) < 0) {
        /* The peer names a descriptor of its own: only an anonymous memory file (memfd,
         * no name on any file system, this user's) is memory it may have us write into,
         * not a file it holds open. */
        err = EPERM;
    } else if ((uint64_t)sb.st_size < offer->len) {
        err = EINVAL; /* not the memory offered: mapping past its end would fault */
    } else {
        p = mmap(NULL, (size_t)offer->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                 0);
        err = errno;
    }
    close(fd); /* the mapping keeps the memory */
    if (p == MAP_FAILED) {
        errno = err;
        return weft__tl_stream_status(err);
    }
    mapping->base = p;
    mapping->len = (size_t)offer->len;
    mapping->fd = -1;
    return WEFT_OK;
#else
    (void)mapping;
    errno = ENOSYS;
    return WEFT_ERR_UNSUPPORTED;
#endif
}

static void memfd_unmap(weft_tl_stream_region_t *region)
{
    if (region->base != NULL) {
        munmap(region->base, region->len);
    }
    if (region->fd >= 0) {
        close(region->fd);
    }
    region_reset(region);
}

static const weft_tl_stream_shm_ops_t memfd_shm_ops = {
    .size = sizeof(weft_tl_stream_shm_ops_t),
    .create = memfd_create_region,
    .map = memfd_map,
    .unmap = memfd_unmap,
};

const weft_tl_stream_ops_t weft__tl_stream_memfd = {
    .size = sizeof(weft_tl_stream_ops_t),
    .name = "memfd",
    .can_reach = memfd_can_reach,
    .read = NULL,
    .shm = &memfd_shm_ops,
};
