/*
 * Same-host migration rings (migrate/ring.h): a memfd made and offered by the receiver,
 * mapped by the sender through pidfd_getfd(2).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The streaming state's layout (stable since xxHash 0.8.0), for a state on the stack. */
#define XXH_STATIC_LINKING_ONLY
#include "migrate/ring.h"
#include "migrate/xxh.h"

#define PIECE (16u << 10) /* checksummed and copied while in the first-level cache */

_Atomic uint64_t weft__ring_made = 0, weft__ring_mapped = 0;

bool weft__ring_fits(size_t slot, uint32_t nchunks)
{
    return slot > 0 && nchunks / WEFT_RING_SHARE >= WEFT_RING_MIN_SLOTS &&
           WEFT_RING_MIN_SLOTS * slot <= WEFT_RING_MAX_TOTAL;
}

uint32_t weft__ring_slots(size_t slot, uint32_t nchunks, size_t window)
{
    size_t least = window + 1 > WEFT_RING_MIN_SLOTS ? window + 1 : WEFT_RING_MIN_SLOTS;
    least = least > WEFT_RING_MAX_SLOTS ? WEFT_RING_MAX_SLOTS : least;
    size_t most = WEFT_RING_BYTES / slot;
    most = most > WEFT_RING_MAX_SLOTS ? WEFT_RING_MAX_SLOTS : most;
    size_t n = nchunks / WEFT_RING_SHARE;
    n = n < most ? n : most;
    return (uint32_t)(n > least ? n : least);
}

static size_t ring_len(size_t chunk, uint32_t slots)
{
    return WEFT_RING_HDR + (size_t)slots * chunk;
}

bool weft__ring_make(weft_mig_ring_t *r, size_t chunk, uint32_t slots, weft_mig_offer_t *offer)
{
    memset(offer, 0, sizeof(*offer));
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    size_t len = ring_len(chunk, slots);
    int fd = memfd_create("weft-migrate", MFD_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    /* All of it now: a full memory cgroup is an error here, never a SIGBUS later. */
    int err = ftruncate(fd, (off_t)len) != 0 ? errno : posix_fallocate(fd, 0, (off_t)len);
    void *p = err == 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)
                       : MAP_FAILED;
    if (p == MAP_FAILED) {
        err = err != 0 ? err : errno;
        close(fd);
        errno = err;
        return false;
    }
    r->base = p;
    r->len = len;
    r->chunk = chunk;
    r->slots = slots;
    r->fd = fd;
    offer->pid = (uint64_t)getpid();
    offer->fd = (uint64_t)fd;
    offer->len = len;
    offer->slots = slots;
    static _Atomic uint64_t next_id = 1;
    r->id = offer->id = next_id++;
    weft__ring_made++;
    return true;
}

bool weft__ring_map(weft_mig_ring_t *r, const weft_mig_offer_t *offer, size_t chunk)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    if (offer->slots < 2 || offer->slots > WEFT_RING_MAX_SLOTS ||
        offer->len != ring_len(chunk, (uint32_t)offer->slots) || offer->fd > INT32_MAX ||
        offer->pid == 0 || offer->pid > INT32_MAX) {
        errno = EINVAL;
        return false;
    }
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)offer->pid, 0);
    if (pidfd < 0) {
        return false;
    }
    int fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)offer->fd, 0);
    int err = errno;
    close(pidfd);
    if (fd < 0) {
        errno = err;
        return false;
    }
    struct stat sb;
    void *p = MAP_FAILED;
    if (fstat(fd, &sb) != 0) {
        err = errno;
    } else if ((size_t)sb.st_size < offer->len) {
        err = EINVAL; /* not the ring offered: mapping past its end would fault */
    } else {
        p = mmap(NULL, offer->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        err = errno;
    }
    close(fd); /* the mapping keeps the memory */
    if (p == MAP_FAILED) {
        errno = err;
        return false;
    }
    r->base = p;
    r->len = offer->len;
    r->chunk = chunk;
    r->slots = (uint32_t)offer->slots;
    r->id = offer->id;
    weft__ring_mapped++;
    return true;
#else
    (void)chunk;
    errno = ENOSYS;
    return false;
#endif
}

void weft__ring_free(weft_mig_ring_t *r)
{
    if (r->base != NULL) {
        munmap(r->base, r->len);
    }
    if (r->fd >= 0) {
        close(r->fd);
    }
    memset(r, 0, sizeof(*r));
    r->fd = -1;
}

uint64_t weft__hash_copy(void *dst, const void *src, size_t n, bool after)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    uint8_t *d = dst;
    const uint8_t *s = src;
    for (size_t o = 0; o < n; o += PIECE) {
        size_t k = n - o < PIECE ? n - o : PIECE;
        if (!after) {
            XXH3_64bits_update(&st, s + o, k);
        }
        memcpy(d + o, s + o, k);
        if (after) {
            XXH3_64bits_update(&st, d + o, k);
        }
    }
    return XXH3_64bits_digest(&st);
}
