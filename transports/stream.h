/*
 * Same-host bulk copies: the operating-system mechanisms that move a large transfer's
 * bytes between two processes of one host without a message transport in between.
 *
 * Each mechanism is one weft_tl_stream_ops_t, and its kind is which capability tables
 * it fills (libfabric's fi_ops_msg / fi_ops_rma):
 *   - stream_cma.c   (weft__tl_stream_cma): `read`, the reader copies from a peer's memory
 *     by pid with process_vm_readv(2) (cross-memory attach, one copy);
 *   - stream_memfd.c (weft__tl_stream_memfd): `shm`, one process makes memory with
 *     memfd_create(2) and offers it; the peer maps the offer through pidfd_open(2) and
 *     pidfd_getfd(2), which asks the same permission as process_vm_readv (ptrace
 *     attach), and both then copy through it.
 * These tables only move bytes or make memory: what is copied when, and over which
 * protocol (a ring's slots and counters, checksums, resends), belongs to their caller;
 * which mechanism a chunk takes is decided in transports/select.c
 * (weft__select_chunk_path), which asks each table's can_reach().
 *
 * Every entry is thread-safe and keeps no state between calls. On failure an entry sets
 * errno to the system call's reason (the caller may log it with %m) and writes none of
 * its output parameters. Like every transport header, this one includes only public weft
 * headers.
 */
#ifndef WEFT_TL_STREAM_H
#define WEFT_TL_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transports/transport.h"
#include "weft/status.h"

/* What the caller knows of the peer, for can_reach(). */
typedef struct weft_tl_stream_peer {
    size_t size;    /* sizeof(weft_tl_stream_peer_t) */
    bool same_host; /* the caller's word: the peer runs on this host (util/host_id.h) */
    /* The peer's process id; 0 when not known yet (it comes with the peer's first chunk
     * header or offer, and each call that needs it takes it as an argument). */
    uint64_t pid;
    weft_memtype_t mem; /* the bytes on this side */
    /* The bytes on the peer's side, as far as this side knows: a side that cannot know
     * passes WEFT_MEM_HOST and the peer, which knows, refuses what it cannot take. */
    weft_memtype_t peer_mem;
    /* The peer found this kind of access not permitted (a read or a mapping failed). */
    bool refused;
} weft_tl_stream_peer_t;

/* Memory made by shm->create() (fd >= 0: the maker holds it open to be offered) or mapped
 * by shm->map() (fd -1). base NULL: none. */
typedef struct weft_tl_stream_region {
    void *base;
    size_t len;
    int fd;
} weft_tl_stream_region_t;

/* What the maker of a region sends the peer that maps it: plain integers, the same on
 * every platform. */
typedef struct weft_tl_stream_offer {
    uint64_t pid;    /* the maker's process id */
    uint64_t handle; /* its descriptor of the memory */
    uint64_t len;    /* bytes */
} weft_tl_stream_offer_t;

/* Reads of a peer's memory. */
typedef struct weft_tl_stream_read_ops {
    size_t size; /* sizeof(weft_tl_stream_read_ops_t) */
    /*
     * Copy @p len bytes at address @p remote_addr of process @p pid into @p local, all of
     * them (an interrupted or short transfer is continued). WEFT_OK;
     * WEFT_ERR_INVALID_ARG (pid out of range, or an address not mapped there: EFAULT,
     * EINVAL); WEFT_ERR_UNSUPPORTED (not permitted: EPERM, EACCES, or not built: ENOSYS);
     * WEFT_ERR_PEER_FAILED (no such process: ESRCH); WEFT_ERR_NO_MEMORY; WEFT_ERR_IO
     * (anything else, or the region ended early). Nothing is logged; @p local may be
     * partly written on failure.
     */
    weft_status_t (*read)(uint64_t pid, uint64_t remote_addr, void *local, size_t len);
} weft_tl_stream_read_ops_t;

/* Memory shared by offer. */
typedef struct weft_tl_stream_shm_ops {
    size_t size; /* sizeof(weft_tl_stream_shm_ops_t) */
    /*
     * Make @p len bytes of shared memory, zeroed, all of it allocated now (a full memory
     * cgroup is an error here, never a fault later), mapped read-write at region->base;
     * fill @p offer for the peer. WEFT_OK, WEFT_ERR_INVALID_ARG (len 0),
     * WEFT_ERR_NO_MEMORY (ENOMEM, ENOSPC), WEFT_ERR_UNSUPPORTED (not built), WEFT_ERR_IO.
     */
    weft_status_t (*create)(size_t len, weft_tl_stream_region_t *region,
                            weft_tl_stream_offer_t *offer);
    /*
     * Map the memory a peer offered, read-write, all of it now. WEFT_OK;
     * WEFT_ERR_INVALID_ARG (an offer out of range, or one whose memory is shorter than it
     * says: EINVAL); WEFT_ERR_UNSUPPORTED (not permitted: EPERM, EACCES; or the kernel has
     * no pidfd_getfd: ENOSYS); WEFT_ERR_PEER_FAILED (the maker is gone or closed it:
     * ESRCH, EBADF); WEFT_ERR_NO_MEMORY; WEFT_ERR_IO.
     */
    weft_status_t (*map)(const weft_tl_stream_offer_t *offer, weft_tl_stream_region_t *mapping);
    /* Unmap a region made or mapped here and close what it holds; NULL base is a no-op.
     * The region is reset (base NULL, fd -1). */
    void (*unmap)(weft_tl_stream_region_t *region);
} weft_tl_stream_shm_ops_t;

typedef struct weft_tl_stream_ops {
    size_t size; /* sizeof(weft_tl_stream_ops_t) */
    const char *name;
    /* Whether this mechanism can move bytes to or from @p peer: on this host, host memory
     * on both sides, not refused, a pid in range where known, and built for this system. */
    bool (*can_reach)(const weft_tl_stream_peer_t *peer);
    const weft_tl_stream_read_ops_t *read; /* reads of a peer's memory; NULL: not this kind */
    const weft_tl_stream_shm_ops_t *shm;   /* shared memory by offer; NULL: not this kind */
} weft_tl_stream_ops_t;

extern const weft_tl_stream_ops_t weft__tl_stream_cma;
extern const weft_tl_stream_ops_t weft__tl_stream_memfd;

/* A status for a failed system call's errno, as the entries above list them. */
weft_status_t weft__tl_stream_status(int err);

#endif
