/*
 * Inside the migration engine: a migration's state (streams of chunks per peer and
 * direction, slots of chunks in flight, the close), shared by engine.c (start, the
 * stages, free), engine_stream.c (chunks, slots, jobs, local copies) and engine_close.c.
 */
#ifndef WEFT_MIGRATE_ENGINE_IMPL_H
#define WEFT_MIGRATE_ENGINE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/core.h"
#include "comm/fault.h"
#include "comm/progress/job.h"
#include "migrate/engine/engine.h"
#include "migrate/engine/ring.h"
#include "transports/select.h"

/* In a verdict's count: the receiver could not read the sender's memory (CMA). */
#define VERDICT_NO_CMA (1u << 31)

enum { ST_CHUNKS, ST_VERDICT, ST_DONE };
enum { STAGE_AGREE, STAGE_MOVE, STAGE_CLOSE };

/* A slot's stage, per direction. Send: the job gathers (if staged) and checksums, then the
 * header (and, without CMA, the data) go out. Receive: the header comes; then either this
 * member reads the data from the sender's memory (CMA) in the job, or a data message
 * comes and the job checks it; the job also scatters a staged chunk. */
enum { SL_FREE, SL_JOB, SL_SENDING, SL_HDR, SL_DATA };

/* A stream's shared-memory ring (migrate/engine/ring.h): not decided yet (the first pass of
 * round 0 decides, alike on both members); not for this stream; the sender waits for
 * the offer; in use; offered and answered, but there is none. */
enum { RING_UNDECIDED, RING_NONE, RING_WAIT, RING_ON, RING_OFF };

typedef struct slot {
    weft_job_t job; /* first: the job's run() finds its slot */
    int32_t chunk;  /* index into the stream's chunks; -1: free */
    int phase;
    struct mig *m;
    struct stream *s;
    weft_req_t *hdr, *data;
    /* checksum, length, sender pid and address (CMA) or 0, ring chunk number + 1 or 0 */
    uint64_t hdr_buf[5];
    uint64_t ring_q;     /* the chunk's number in the stream's ring + 1; 0: not in it */
    uint8_t *staging;    /* when the chunk is not contiguous in the packed buffer */
    uint8_t *ptr;        /* where the data is (user buffer or staging) */
    size_t recvd;
    bool cma;         /* send: the receiver reads it; receive: read it from the sender */
    bool contig;      /* the chunk is contiguous in the user's buffer (ptr points there) */
    bool copy_failed; /* send: the chunk could not be read (device memory) */
    bool good;        /* receive: the job found the checksum right and placed the data */
    bool cma_failed;  /* receive: the sender's memory could not be read */
} slot_t;

typedef struct stream {
    int rank, member;
    bool send;
    weft_mig_chunk_t *chunks;
    uint32_t nchunks;
    size_t cap;
    uint32_t *work; /* chunks of this round */
    uint32_t nwork, next, done;
    uint32_t *bad; /* receiver: bad chunks of this round */
    uint8_t *ok;   /* receiver: ok[k] once chunk k arrived and its checksum matched */
    uint32_t nbad;
    uint32_t *verdict; /* [0]: count (| VERDICT_NO_CMA), then chunk numbers */
    weft_req_t *vreq;
    int round, phase;
    int staged;      /* slots holding a staging buffer */
    bool cma_failed; /* receiver: a read of the sender's memory failed (sent again by message) */
    /* What this member knows of the peer (refused once a verdict says a read or a ring
     * failed), and the stream's part of every question about a chunk's path
     * (transports/select.h: weft__select_chunk_path decides). */
    weft_tl_stream_peer_t peer;
    weft_chunk_path_query_t paths;
    int ring_state;  /* RING_* */
    weft_mig_ring_t *ring; /* taken from the context's (migrate/engine/ring_cache.c), or NULL */
    weft_mig_offer_t *offer; /* the ring's offer, sent or received (its own block) */
    weft_req_t *offer_req;
    uint64_t ring_seq; /* sender: chunks put in the ring so far */
    weft_status_t err;
    slot_t *slots;
} stream_t;

struct mig_nccl; /* nccl_path.c */

typedef struct mig {
    weft_group_t *g;
    weft__faults_t *faults; /* the context's test faults and path counters (comm/fault.h) */
    const weft_plan_t *plan;
    const uint8_t *old_buf;
    const uint8_t *resume_buf; /* a failed migration's new buffer (weft_migrate_resume) */
    uint8_t *new_buf;
    uint8_t *new_buf1;       /* destination regions of buffer 1 (weft__mig_ext_t) */
    const uint8_t *old_buf2; /* source regions of buffer 2 (weft__mig_ext_t) */
    /* Run before the close once this member's transfers are done (weft__mig_ext_t). */
    weft_status_t (*before_close)(void *arg);
    void *before_arg;
    bool before_done;
    weft_status_t before_err;          /* its result */
    bool old_dev, resume_dev, new_dev; /* CUDA buffers: every chunk is staged on the host */
    bool any_dev;                      /* jobs run at once, on the caller's thread */
    bool local_err;                    /* a local copy failed (device memory) */
    weft_job_t local_job;              /* the local copy in progress (chunk local_cur) */
    uint32_t local_cur;
    bool local_busy;
    size_t chunk, window, max_staged, staged;
    uint32_t tag_id;
    int stage;
    bool gated;       /* priorities given: post nothing below the highest waiting */
    /* mine (key, ~key, bad arguments, a chunk to or from another member in host memory
     * here, such chunks all in device memory here), then the maxima */
    int64_t agree[10];
    uint64_t nccl_seq;     /* the collective count at the start: keys the NCCL id */
    int cuda_dev;          /* the device of its CUDA buffers (any thread may progress it) */
    bool nccl;             /* round 0 of every stream goes GPU to GPU (nccl_path.c) */
    bool nccl_done;        /* ... and is finished: the verdicts may go */
    struct mig_nccl *np;
    bool bad_args;    /* this member's arguments were refused (why[] says how) */
    int32_t close_in, close_out;
    int32_t *close_vals;     /* rank 0: every member's result */
    weft_req_t **close_reqs; /* [group size] */
    bool close_bcast;        /* rank 0 has sent the result */
    weft_req_t *child;
    stream_t *streams;
    int nstreams;
    weft_mig_chunk_t *local;
    uint32_t nlocal, local_next;
    size_t local_cap;
    bool local_stream; /* local copies write with non-temporal stores (WEFT__MIG_STREAM_MIN) */
    char why[256]; /* the first stream error of this member */
} mig_t;

static inline uint32_t payload(const mig_t *m, int round, bool hdr, uint32_t seq)
{
    return ((uint32_t)round << 25) | ((uint32_t)hdr << 24) | (m->tag_id << WEFT_MIG_SEQ_BITS) |
           (seq & WEFT_MIG_VERDICT);
}

static inline const weft__xfer_t *xfer_of(const mig_t *m, const weft_mig_chunk_t *c)
{
    return &m->plan->xfers[c->x];
}

/* The buffer a transfer's source region lies in. */
static inline const uint8_t *src_base(const mig_t *m, const weft__xfer_t *x)
{
    return x->src_buf == 2 ? m->old_buf2 : x->src_buf == 1 ? m->resume_buf : m->old_buf;
}

/* The buffer a transfer's destination region lies in. */
static inline uint8_t *dst_base(const mig_t *m, const weft__xfer_t *x)
{
    return x->dst_buf == 1 ? m->new_buf1 : m->new_buf;
}

static inline bool src_dev(const mig_t *m, const weft__xfer_t *x)
{
    return x->src_buf == 2 ? false : x->src_buf == 1 ? m->resume_dev : m->old_dev;
}

/* weft__box_copy where @p dev says either side is device memory; false (and the reason
 * in m->why) when a device copy failed. */
bool weft__mig_move_box(mig_t *m, bool dev, void *dst, const weft_box_t *dst_box, const void *src,
                        const weft_box_t *src_box, const weft_box_t *b, int nd, size_t elem);

/* engine_stream.c: fill the facts of @p s that every question about its chunks' paths
 * shares (s->peer, s->paths), once its chunks are cut. */
void weft__mig_stream_paths(mig_t *m, stream_t *s);
/* engine_stream.c: advance stream @p s (posting nothing below priority @p gate when the
 * migration is gated); WEFT_INPROGRESS, WEFT_OK once it is done, or an error. */
weft_status_t weft__mig_stream_progress(mig_t *m, stream_t *s, int gate);
/* Local copies one chunk at a time, each a job; true once all are done. */
bool weft__mig_local_step(mig_t *m, int gate);
/* The highest priority any stream or the local copies still has to post. */
int weft__mig_max_waiting_prio(const mig_t *m);

/* nccl_path.c (NCCL builds): the first round of every stream's chunks as steps, each one
 * NCCL group of this member's k-th chunk of every stream, checksummed on host copies;
 * ok[] and bad[] of the receiving streams are filled as with messages. init: WEFT_OK or
 * WEFT_ERR_NO_MEMORY; progress: WEFT_INPROGRESS, WEFT_OK once every step is done (sets
 * nccl_done), or an error; free: never blocks on work a dead peer holds up. */
weft_status_t weft__mig_nccl_init(mig_t *m);
/* Run @p fn(m) with m->cuda_dev current on this thread (the progress thread's may be
 * another), then restore the thread's device. */
weft_status_t weft__mig_on_device(mig_t *m, weft_status_t (*fn)(mig_t *m));
weft_status_t weft__mig_nccl_progress(mig_t *m);
void weft__mig_nccl_free(mig_t *m);

/* engine_close.c: start the close (every member's worst status to group rank 0, the
 * minimum back), and advance it: WEFT_OK once every message of it is done. */
weft_status_t weft__mig_start_close(mig_t *m);
weft_status_t weft__mig_close_progress(mig_t *m);

#endif
