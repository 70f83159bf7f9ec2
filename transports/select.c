/*
 * Transport selection: a pure function of two topology summaries, a memory type and
 * the WEFT_TRANSPORT override. The rules, in the order they are tried, are documented
 * in docs/transport-selection.md; each decision names its rule and the facts it used.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "transports/select.h"

/* GPUDirect RDMA is counted on only when GPU and NIC share a PCIe switch hierarchy:
 * through the CPU root complex it is often slower than staging (NCCL's default too). */
#define GDR_MAX_PATH WEFT_PATH_PXB
/* PCIe peer-to-peer between GPUs works through one host bridge, not across sockets. */
#define P2P_MAX_PATH WEFT_PATH_PHB

weft_status_t weft__tsel_parse_override(const char *text, weft_tsel_override_t *ov)
{
    static const struct {
        const char *name;
        weft_tsel_override_t ov;
    } names[] = {
        {"auto", WEFT_TSEL_AUTO}, {"ucx", WEFT_TSEL_FORCE_UCX}, {"nccl", WEFT_TSEL_FORCE_NCCL}};
    if (text == NULL || ov == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(text, names[i].name) == 0) {
            *ov = names[i].ov;
            return WEFT_OK;
        }
    }
    return WEFT_ERR_INVALID_ARG;
}

const char *weft__tsel_override_name(weft_tsel_override_t ov)
{
    switch (ov) {
    case WEFT_TSEL_AUTO:
        return "auto";
    case WEFT_TSEL_FORCE_UCX:
        return "ucx";
    case WEFT_TSEL_FORCE_NCCL:
        return "nccl";
    }
    return "?";
}

const char *weft__tsel_transport_name(weft_tsel_transport_t t)
{
    switch (t) {
    case WEFT_TSEL_NONE:
        return "none";
    case WEFT_TSEL_SELF:
        return "self";
    case WEFT_TSEL_UCX:
        return "ucx";
    case WEFT_TSEL_NCCL:
        return "nccl";
    }
    return "?";
}

static void choose(weft_tsel_t *d, weft_tsel_transport_t t, int staged, const char *rule,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void choose(weft_tsel_t *d, weft_tsel_transport_t t, int staged, const char *rule,
                   const char *fmt, ...)
{
    va_list ap;
    d->status = t == WEFT_TSEL_NONE ? WEFT_ERR_UNSUPPORTED : WEFT_OK;
    d->transport = t;
    d->staged = staged;
    d->rule = rule;
    va_start(ap, fmt);
    vsnprintf(d->why, sizeof(d->why), fmt, ap);
    va_end(ap);
}

static void append(weft_tsel_t *d, const char *text)
{
    size_t n = strlen(d->why);
    snprintf(d->why + n, sizeof(d->why) - n, "%s", text);
}

static int same_host(const weft_topo_summary_t *a, const weft_topo_summary_t *b)
{
    return strcmp(a->hostname, b->hostname) == 0 && strcmp(a->host_id, b->host_id) == 0;
}

static int nccl_built(const weft_topo_summary_t *s)
{
    return (s->flags & WEFT_TOPO_NCCL_BUILT) != 0;
}

static const char *my_gpu_busid(const weft_topo_summary_t *s)
{
    return s->my_gpu >= 0 ? s->gpus[s->my_gpu].busid : "none";
}

static void decide_host(const weft_topo_summary_t *me, const weft_topo_summary_t *peer,
                        int peer_is_self, weft_tsel_override_t ov, weft_tsel_t *d)
{
    if (peer_is_self) {
        choose(d, WEFT_TSEL_SELF, 0, "host-self",
               "host memory to this rank itself: copied by the self transport");
    } else if (same_host(me, peer)) {
        choose(d, WEFT_TSEL_UCX, 0, "host-same-host",
               "host memory, peer on the same host %s: UCX over shared memory", me->hostname);
    } else {
        choose(d, WEFT_TSEL_UCX, 0, "host-network",
               "host memory, peer on another host (%s -> %s): UCX over the network", me->hostname,
               peer->hostname);
    }
    if (ov == WEFT_TSEL_FORCE_NCCL) {
        append(d, " (WEFT_TRANSPORT=nccl applies to CUDA buffers only)");
    }
}

/* Describe how GPU @p s->my_gpu reaches the network, for rule texts. Nonzero if by GDR. */
static int gdr_near(const weft_topo_summary_t *s, char *text, size_t len)
{
    weft_topo_path_t path = WEFT_PATH_UNKNOWN;
    int nic = weft__topo_nearest_rdma_nic(s, s->my_gpu, &path);
    if (nic < 0) {
        snprintf(text, len, "no RDMA-capable NIC on %s", s->hostname);
        return 0;
    }
    snprintf(text, len, "GPU %s -> NIC %s %s on %s", my_gpu_busid(s), s->nics[nic].name,
             weft__topo_path_name(path), s->hostname);
    return path <= GDR_MAX_PATH;
}

static void decide_cuda_same_host(const weft_topo_summary_t *me, const weft_topo_summary_t *peer,
                                  weft_tsel_override_t ov, weft_tsel_t *d)
{
    int a = me->my_gpu, b = peer->my_gpu;
    if (a == b) {
        if (ov == WEFT_TSEL_FORCE_NCCL) {
            choose(d, WEFT_TSEL_NONE, 0, "same-gpu",
                   "WEFT_TRANSPORT=nccl, but both ranks drive GPU %s on %s and NCCL needs one "
                   "GPU per rank",
                   my_gpu_busid(me), me->hostname);
        } else {
            choose(d, WEFT_TSEL_UCX, 1, "same-gpu",
                   "CUDA buffer, both ranks drive GPU %s on %s (NCCL needs one GPU per rank): "
                   "staged through host memory, UCX over shared memory",
                   my_gpu_busid(me), me->hostname);
        }
        return;
    }
    uint32_t mbps = me->nvlink_mbps[a][b] > me->nvlink_mbps[b][a] ? me->nvlink_mbps[a][b]
                                                                  : me->nvlink_mbps[b][a];
    weft_topo_path_t path = (weft_topo_path_t)me->gpu_path[a][b];
    if (mbps > 0) {
        choose(d, WEFT_TSEL_NCCL, 0, "nvlink",
               "CUDA buffer, GPUs %s and %s on host %s are linked by NVLink (%.1f GB/s): NCCL",
               me->gpus[a].busid, me->gpus[b].busid, me->hostname, mbps / 1000.0);
    } else if (path <= P2P_MAX_PATH) {
        choose(d, WEFT_TSEL_NCCL, 0, "pcie-p2p",
               "CUDA buffer, GPUs %s and %s on host %s share a PCIe hierarchy (%s), no NVLink: "
               "NCCL with PCIe peer-to-peer",
               me->gpus[a].busid, me->gpus[b].busid, me->hostname, weft__topo_path_name(path));
    } else {
        choose(d, WEFT_TSEL_NCCL, 0, "same-host-shm",
               "CUDA buffer, GPUs %s and %s on host %s, no NVLink and the PCIe path crosses "
               "the CPUs (%s): NCCL through host shared memory",
               me->gpus[a].busid, me->gpus[b].busid, me->hostname, weft__topo_path_name(path));
    }
}

static void decide_cuda_network(const weft_topo_summary_t *me, const weft_topo_summary_t *peer,
                                weft_tsel_override_t ov, weft_tsel_t *d)
{
    char mine[160], theirs[160];
    int ok_me = gdr_near(me, mine, sizeof(mine));
    int ok_peer = gdr_near(peer, theirs, sizeof(theirs));
    if (ok_me && ok_peer) {
        choose(d, WEFT_TSEL_NCCL, 0, "gpudirect",
               "CUDA buffer between hosts with GPUDirect-capable NICs near both GPUs (%s; %s): "
               "NCCL",
               mine, theirs);
    } else if (ov == WEFT_TSEL_FORCE_NCCL) {
        choose(d, WEFT_TSEL_NCCL, 0, "forced-nccl-network",
               "WEFT_TRANSPORT=nccl: CUDA buffer between hosts without a GPUDirect path (%s; "
               "%s): NCCL, which stages through host memory itself",
               mine, theirs);
    } else {
        choose(d, WEFT_TSEL_UCX, 1, "no-gpudirect",
               "CUDA buffer between hosts without a GPUDirect path (%s; %s): staged through "
               "host memory, UCX over the network",
               mine, theirs);
    }
}

/* Self, or a peer: NCCL impossible for a reason both sides see (not built, no GPU). */
static int decide_cuda_no_nccl(const weft_topo_summary_t *me, const weft_topo_summary_t *peer,
                               int peer_is_self, weft_tsel_override_t ov, weft_tsel_t *d)
{
    const char *host = !nccl_built(me) || me->my_gpu < 0 ? me->hostname : peer->hostname;
    const char *what = NULL;
    if (!nccl_built(me) || !nccl_built(peer)) {
        what = "NCCL is not built in";
    } else if (me->my_gpu < 0 || peer->my_gpu < 0) {
        what = "no GPU is known for the rank";
    } else {
        return 0;
    }
    weft_tsel_transport_t staged_via = peer_is_self ? WEFT_TSEL_SELF : WEFT_TSEL_UCX;
    if (ov == WEFT_TSEL_FORCE_NCCL) {
        choose(d, WEFT_TSEL_NONE, 0, "forced-nccl-impossible", "WEFT_TRANSPORT=nccl, but %s on %s",
               what, host);
    } else {
        choose(d, staged_via, 1, "no-nccl", "CUDA buffer, %s on %s: staged through host memory, %s",
               what, host, peer_is_self ? "copied by the self transport" : "sent with UCX");
    }
    return 1;
}

static void decide_cuda(const weft_topo_summary_t *me, const weft_topo_summary_t *peer,
                        int peer_is_self, weft_tsel_override_t ov, weft_tsel_t *d)
{
    if (!(me->flags & WEFT_TOPO_CUDA_BUILT)) {
        choose(d, WEFT_TSEL_NONE, 0, "cuda-not-built",
               "CUDA buffer, but this weft was built without CUDA");
    } else if (ov == WEFT_TSEL_FORCE_UCX) {
        choose(d, peer_is_self ? WEFT_TSEL_SELF : WEFT_TSEL_UCX, 1, "forced-ucx",
               "WEFT_TRANSPORT=ucx: CUDA buffer staged through host memory, %s",
               peer_is_self ? "copied by the self transport" : "sent with UCX");
    } else if (decide_cuda_no_nccl(me, peer, peer_is_self, ov, d)) {
        /* decided */
    } else if (peer_is_self) {
        choose(d, WEFT_TSEL_NCCL, 0, "cuda-self", "CUDA buffer to this rank itself on GPU %s: NCCL",
               my_gpu_busid(me));
    } else if (same_host(me, peer)) {
        decide_cuda_same_host(me, peer, ov, d);
    } else {
        decide_cuda_network(me, peer, ov, d);
    }
}

static int summary_valid(const weft_topo_summary_t *s)
{
    return s->ngpus >= 0 && s->ngpus <= WEFT_TOPO_MAX_GPUS && s->nnics >= 0 &&
           s->nnics <= WEFT_TOPO_MAX_NICS && s->my_gpu >= -1 && s->my_gpu < s->ngpus;
}

weft_status_t weft__tsel_decide(const weft_topo_summary_t *me, const weft_topo_summary_t *peer,
                                int peer_is_self, weft_memtype_t mt, weft_tsel_override_t ov,
                                weft_tsel_t *out)
{
    weft_tsel_t d;
    if (me == NULL || peer == NULL || out == NULL || !summary_valid(me) || !summary_valid(peer) ||
        (mt != WEFT_MEM_HOST && mt != WEFT_MEM_CUDA) ||
        (ov != WEFT_TSEL_AUTO && ov != WEFT_TSEL_FORCE_UCX && ov != WEFT_TSEL_FORCE_NCCL)) {
        return WEFT_ERR_INVALID_ARG;
    }
    memset(&d, 0, sizeof(d));
    if (mt == WEFT_MEM_HOST) {
        decide_host(me, peer, peer_is_self, ov, &d);
    } else {
        decide_cuda(me, peer, peer_is_self, ov, &d);
    }
    *out = d;
    return WEFT_OK;
}

/* ---- groups ---- */

/* Everything a decision between two different hosts depends on, for one side. */
static unsigned network_signature(const weft_topo_summary_t *s)
{
    weft_topo_path_t path = WEFT_PATH_UNKNOWN;
    unsigned sig = s->flags & (WEFT_TOPO_CUDA_BUILT | WEFT_TOPO_NCCL_BUILT);
    if (s->my_gpu >= 0) {
        sig |= 0x4u;
        if (weft__topo_nearest_rdma_nic(s, s->my_gpu, &path) >= 0 && path <= GDR_MAX_PATH) {
            sig |= 0x8u;
        }
    }
    return sig;
}
#define NUM_SIGNATURES 16

typedef struct group_acc {
    weft_tsel_t first_other, first_nccl;
    int have_other, have_nccl, failed;
} group_acc_t;

static void acc_pair(group_acc_t *acc, const weft_topo_summary_t *a, const weft_topo_summary_t *b,
                     int self, weft_memtype_t mt, weft_tsel_override_t ov)
{
    weft_tsel_t d;
    if (acc->failed) {
        return;
    }
    (void)weft__tsel_decide(a, b, self, mt, ov, &d);
    if (d.status != WEFT_OK) {
        acc->first_other = d; /* an impossible pair decides for the whole group */
        acc->have_other = acc->failed = 1;
    } else if (d.transport == WEFT_TSEL_NCCL && !acc->have_nccl) {
        acc->first_nccl = d;
        acc->have_nccl = 1;
    } else if (d.transport != WEFT_TSEL_NCCL && !acc->have_other) {
        acc->first_other = d;
        acc->have_other = 1;
    }
}

/* Members that decide alike: one host, one GPU, one build. */
static int same_class(const weft_topo_summary_t *a, const weft_topo_summary_t *b)
{
    return a->my_gpu == b->my_gpu && a->flags == b->flags && same_host(a, b);
}

static void acc_network_pairs(group_acc_t *acc, const weft_topo_summary_t *const *cls, int k,
                              weft_memtype_t mt, weft_tsel_override_t ov)
{
    /* Per signature, members of up to two different hosts: enough to find a pair of
     * different hosts for any two signatures whenever one exists. */
    const weft_topo_summary_t *reps[NUM_SIGNATURES][2] = {{NULL}};
    for (int c = 0; c < k; c++) {
        const weft_topo_summary_t **r = reps[network_signature(cls[c])];
        if (r[0] == NULL) {
            r[0] = cls[c];
        } else if (r[1] == NULL && !same_host(r[0], cls[c])) {
            r[1] = cls[c];
        }
    }
    for (int s1 = 0; s1 < NUM_SIGNATURES; s1++) {
        for (int s2 = s1; s2 < NUM_SIGNATURES; s2++) {
            for (int i = 0; i < 2 && reps[s1][i] != NULL; i++) {
                const weft_topo_summary_t *b = NULL;
                for (int j = 0; j < 2 && b == NULL; j++) {
                    if (reps[s2][j] != NULL && !same_host(reps[s1][i], reps[s2][j])) {
                        b = reps[s2][j];
                    }
                }
                if (b != NULL) {
                    acc_pair(acc, reps[s1][i], b, 0, mt, ov);
                    break;
                }
            }
        }
    }
}

/* Prefix the rule text of @p out with what it means for the group. */
static void group_prefix(weft_tsel_t *out, const char *fmt, int n)
{
    char pair_why[sizeof(out->why)];
    memcpy(pair_why, out->why, sizeof(pair_why));
    snprintf(out->why, sizeof(out->why), fmt, n);
    append(out, pair_why);
}

static void group_result(const group_acc_t *acc, int n, weft_tsel_t *out)
{
    if (acc->have_other) {
        *out = acc->first_other;
        if (!acc->failed && acc->have_nccl) {
            group_prefix(out, "not every pair of the %d members can use NCCL: ", n);
        }
        return;
    }
    *out = acc->first_nccl;
    group_prefix(out, "NCCL between every pair of the %d members, e.g. ", n);
}

weft_status_t weft__tsel_decide_group(const weft_topo_summary_t *const *members, int n,
                                      weft_memtype_t mt, weft_tsel_override_t ov, weft_tsel_t *out)
{
    group_acc_t acc;
    weft_tsel_t probe;
    if (members == NULL || n < 1 || out == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    for (int i = 0; i < n; i++) {
        /* Validates every summary, the memory type and the override once. */
        if (members[i] == NULL ||
            weft__tsel_decide(members[i], members[i], 1, mt, ov, &probe) != WEFT_OK) {
            return WEFT_ERR_INVALID_ARG;
        }
    }
    if (n == 1) {
        *out = probe;
        return WEFT_OK;
    }
    const weft_topo_summary_t **cls = malloc(sizeof(*cls) * (size_t)n);
    int *count = calloc((size_t)n, sizeof(*count));
    if (cls == NULL || count == NULL) {
        free(cls);
        free(count);
        return WEFT_ERR_NO_MEMORY;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        int c = 0;
        while (c < k && !same_class(cls[c], members[i])) {
            c++;
        }
        if (c == k) {
            cls[k++] = members[i];
        }
        count[c]++;
    }
    memset(&acc, 0, sizeof(acc));
    for (int c = 0; c < k; c++) {
        if (count[c] > 1) {
            acc_pair(&acc, cls[c], cls[c], 0, mt, ov); /* two ranks of one class */
        }
        for (int c2 = c + 1; c2 < k; c2++) {
            if (same_host(cls[c], cls[c2])) {
                acc_pair(&acc, cls[c], cls[c2], 0, mt, ov);
            }
        }
    }
    acc_network_pairs(&acc, cls, k, mt, ov);
    group_result(&acc, n, out);
    free(cls);
    free(count);
    return WEFT_OK;
}

weft_status_t weft__tsel_check_override(const weft_topo_summary_t *me, weft_tsel_override_t ov,
                                        int ucx_available, char *why, size_t why_len)
{
    const char *reason = NULL;
    char buf[256];
    if (me == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (ov == WEFT_TSEL_FORCE_NCCL && !nccl_built(me)) {
        reason = (me->flags & WEFT_TOPO_CUDA_BUILT)
                     ? "WEFT_TRANSPORT=nccl, but this weft was built without NCCL"
                     : "WEFT_TRANSPORT=nccl, but this weft was built without CUDA and NCCL";
    } else if (ov == WEFT_TSEL_FORCE_NCCL && me->ngpus == 0) {
        snprintf(buf, sizeof(buf),
                 "WEFT_TRANSPORT=nccl, but host %s has no NVIDIA GPU in its topology",
                 me->hostname);
        reason = buf;
    } else if (ov == WEFT_TSEL_FORCE_UCX && !ucx_available) {
        reason = "WEFT_TRANSPORT=ucx, but the UCX transport cannot run on this machine";
    }
    if (reason == NULL) {
        return WEFT_OK;
    }
    if (why != NULL && why_len > 0) {
        snprintf(why, why_len, "%s", reason);
    }
    return WEFT_ERR_UNSUPPORTED;
}

/* ---- the path of a migration chunk ---- */

void weft__select_reach(const weft_tl_stream_peer_t *peer, weft_chunk_path_query_t *q)
{
    q->ring_reach = weft__tl_stream_memfd.can_reach(peer);
    q->cma_reach = weft__tl_stream_cma.can_reach(peer);
}

/* Whether the question @p q asks about the stream's ring is answered yes. */
static bool ring_path(const weft_chunk_path_query_t *q)
{
    switch (q->ring) {
    case WEFT_CHUNK_RING_UNDECIDED:
        return q->migrate_shm && q->ring_fits;
    case WEFT_CHUNK_RING_OFFER:
        return q->migrate_shm && q->ring_fits && q->ring_reach && !q->ring_refused &&
               !(q->receiver && q->oversubscribed);
    case WEFT_CHUNK_RING_ON:
        return q->ring_reach;
    case WEFT_CHUNK_RING_OFF:
        break;
    }
    return false;
}

weft_tl_path_t weft__select_chunk_path(const weft_chunk_path_query_t *q)
{
    if (q->nccl_round) {
        return WEFT_TL_PATH_NCCL;
    }
    if (!q->same_host) {
        return WEFT_TL_PATH_MSG;
    }
    if (ring_path(q)) {
        return WEFT_TL_PATH_RING;
    }
    if (q->migrate_cma && q->cma_reach && q->contiguous) {
        return WEFT_TL_PATH_CMA;
    }
    return WEFT_TL_PATH_MSG;
}

const char *weft__tl_path_name(weft_tl_path_t p)
{
    switch (p) {
    case WEFT_TL_PATH_MSG:
        return "msg";
    case WEFT_TL_PATH_CMA:
        return "cma";
    case WEFT_TL_PATH_RING:
        return "ring";
    case WEFT_TL_PATH_NCCL:
        return "nccl";
    }
    return "?";
}
