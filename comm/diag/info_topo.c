/*
 * The WEFT_INFO_TOPOLOGY section of weft_info_print(): the GPUs, NICs and links of this
 * host (or of an XML file standing for it), and for a buffer in host and CUDA memory the
 * transport chosen towards itself, a peer on this host and a peer on another host, with
 * the rule that chose it (transports/select.h decides).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "comm/diag/info.h"
#include "comm/device/memtype.h"
#include "transports/select.h"
#include "transports/transport.h"

static void print_gpu_links(FILE *out, const weft_topo_summary_t *s)
{
    fprintf(out, "GPU links (NVn: NVLink n GB/s; else the PCIe path: PIX one switch, PXB several\n"
                 "bridges, PHB host bridge, NODE same NUMA node, SYS across sockets):\n      ");
    for (int j = 0; j < s->ngpus; j++) {
        fprintf(out, " %6d", j);
    }
    fprintf(out, "\n");
    for (int i = 0; i < s->ngpus; i++) {
        fprintf(out, "  [%d] ", i);
        for (int j = 0; j < s->ngpus; j++) {
            char cell[16];
            if (i == j) {
                snprintf(cell, sizeof(cell), "X");
            } else if (s->nvlink_mbps[i][j] > 0) {
                snprintf(cell, sizeof(cell), "NV%u", (unsigned)(s->nvlink_mbps[i][j] / 1000));
            } else {
                snprintf(cell, sizeof(cell), "%s",
                         weft__topo_path_name((weft_topo_path_t)s->gpu_path[i][j]));
            }
            fprintf(out, " %6s", cell);
        }
        fprintf(out, "\n");
    }
}

static void print_gpus(FILE *out, const weft_topo_summary_t *s)
{
    if (s->ngpus == 0) {
        fprintf(out, "GPUs: none (no NVIDIA PCI device of class 0300/0302)\n");
        return;
    }
    fprintf(out, "GPUs:\n");
    for (int i = 0; i < s->ngpus; i++) {
        const weft_topo_gpu_t *g = &s->gpus[i];
        fprintf(out, "  [%d] %s  %-6s %s, NUMA %d%s\n", i, g->busid, g->name[0] ? g->name : "-",
                g->model, g->numa, i == s->my_gpu ? "   <- this process" : "");
    }
    print_gpu_links(out, s);
}

static void print_nics(FILE *out, const weft_topo_summary_t *s)
{
    if (s->nnics == 0) {
        fprintf(out, "NICs: none\n");
        return;
    }
    fprintf(out, "NICs:\n");
    for (int k = 0; k < s->nnics; k++) {
        const weft_topo_nic_t *n = &s->nics[k];
        fprintf(out, "  [%d] %-10s %-12s %s, NUMA %d, %s\n", k, n->name,
                n->netdev[0] ? n->netdev : "-", n->busid, n->numa,
                n->rdma ? "RDMA (GPUDirect RDMA possible)" : "no RDMA");
    }
    for (int i = 0; i < s->ngpus; i++) {
        weft_topo_path_t path = WEFT_PATH_UNKNOWN;
        int k = weft__topo_nearest_rdma_nic(s, i, &path);
        if (k >= 0) {
            fprintf(out, "  GPU %d -> nearest RDMA NIC %s, path %s%s\n", i, s->nics[k].name,
                    weft__topo_path_name(path),
                    path <= WEFT_PATH_PXB ? " (near: GPUDirect RDMA)" : " (far)");
        }
    }
}

static void print_host(FILE *out, const weft_topo_summary_t *s)
{
    fprintf(out, "Host %s: %d NUMA node(s), %d PU(s)%s\n", s->hostname, s->numa_nodes, s->pus,
            (s->flags & WEFT_TOPO_FROM_XML) ? ", read from an XML file" : "");
    print_gpus(out, s);
    print_nics(out, s);
}

/* The GPU this process drives: the one asked for, else the current CUDA device, else the
 * first; -2 when the one asked for is not on the host. */
static int pick_gpu(const weft_topo_summary_t *s, const weft_info_params_t *p, const char **how)
{
    if (p->flags & WEFT_INFO_TOPOLOGY_GPU) {
        *how = "as asked";
        return p->gpu < s->ngpus ? p->gpu : -2;
    }
#ifdef WEFT_HAVE_CUDA
    int dev = 0;
    char busid[32];
    if (weft__cuda_device_count() > 0 && cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetPCIBusId(busid, (int)sizeof(busid), dev) == cudaSuccess) {
        int i = weft__topo_find_gpu(s, busid);
        if (i >= 0) {
            *how = "the current CUDA device";
            return i;
        }
    }
    (void)cudaGetLastError();
#endif
    *how = s->ngpus > 0 ? "assumed (no CUDA device of this list is visible)" : "none";
    return s->ngpus > 0 ? 0 : -1;
}

static void print_choice(FILE *out, const char *peer, const weft_topo_summary_t *me,
                         const weft_topo_summary_t *other, int self, weft_tsel_override_t ov)
{
    static const char *const mem_names[] = {"host", "CUDA"};
    /* Without a GPU on this host no CUDA buffer can exist: only host rows then. */
    int last = me->ngpus > 0 ? WEFT_MEM_CUDA : WEFT_MEM_HOST;
    for (int mt = WEFT_MEM_HOST; mt <= last; mt++) {
        weft_tsel_t d;
        if (weft__tsel_decide(me, other, self, (weft_memtype_t)mt, ov, &d) != WEFT_OK) {
            continue;
        }
        fprintf(out, "  %-24s %-4s buffer -> %s%s\n      rule %s: %s\n", peer, mem_names[mt],
                d.status == WEFT_OK ? weft__tsel_transport_name(d.transport) : "unsupported",
                d.staged ? " (staged through host memory)" : "", d.rule, d.why);
    }
}

/* Where the topology loader says what went wrong: into the report, not stderr. */
typedef struct topo_log_sink {
    FILE *out;
    int errors; /* lines at WEFT_LOG_ERROR written */
} topo_log_sink_t;

static void topo_log(void *arg, int level, const char *fmt, va_list ap)
{
    topo_log_sink_t *sink = arg;
    if (level > WEFT_LOG_WARN) {
        return;
    }
    fputs(level == WEFT_LOG_ERROR ? "Topology error: " : "Topology warning: ", sink->out);
    vfprintf(sink->out, fmt, ap);
    fputc('\n', sink->out);
    sink->errors += level == WEFT_LOG_ERROR;
}

static weft_status_t load_summary(FILE *out, const char *xml, weft_topo_summary_t *s)
{
    topo_log_sink_t sink = {.out = out};
    weft_status_t status = weft__topo_load(xml, topo_log, &sink, s);
    if (status != WEFT_OK && sink.errors == 0) {
        fprintf(out, "Topology error: cannot read the topology%s%s: %s\n", xml ? " of " : "",
                xml ? xml : " of this host", weft_status_str(status));
    }
    return status;
}

/* A peer on another host: from @p peer_xml, or a twin of this host. */
static weft_status_t other_host(FILE *out, const char *peer_xml, const weft_topo_summary_t *me,
                                weft_topo_summary_t *s)
{
    if (peer_xml == NULL) {
        *s = *me;
        snprintf(s->hostname, sizeof(s->hostname), "another-host");
        snprintf(s->host_id, sizeof(s->host_id), "another-boot");
        return WEFT_OK;
    }
    weft_status_t status = load_summary(out, peer_xml, s);
    if (status == WEFT_OK) {
        s->my_gpu = s->ngpus == 0 ? -1 : me->my_gpu >= 0 && me->my_gpu < s->ngpus ? me->my_gpu : 0;
    }
    return status;
}

static void print_decisions(FILE *out, const weft_topo_summary_t *me,
                            const weft_topo_summary_t *twin, const weft_topo_summary_t *far,
                            weft_tsel_override_t ov)
{
    char why[256];
    fprintf(out, "\nTransport choice (WEFT_TRANSPORT=%s):\n", weft__tsel_override_name(ov));
    if (weft__tsel_check_override(me, ov, weft__tl_ucx.available(), why, sizeof(why)) != WEFT_OK) {
        fprintf(out, "  %s: weft_init would fail with WEFT_ERR_UNSUPPORTED.\n", why);
    }
    if (me->ngpus == 0) {
        fprintf(out,
                "  CPU-only host (no NVIDIA GPU): host buffers go through UCX (shared memory on\n"
                "  this host, the network between hosts) and the self transport to itself;\n"
                "  no CUDA buffer can exist here, so NCCL is never chosen.\n");
    }
    print_choice(out, "itself", me, me, 1, ov);
    print_choice(out, "a peer on this host", me, twin, 0, ov);
    fprintf(out, "  (peer on this host drives GPU %s)\n",
            twin->my_gpu >= 0 ? twin->gpus[twin->my_gpu].busid : "none");
    print_choice(out, "a peer on another host", me, far, 0, ov);
    fprintf(out, "  (other host: %s, GPU %s)\n", far->hostname,
            far->my_gpu >= 0 ? far->gpus[far->my_gpu].busid : "none");
}

weft_status_t weft__info_topology(FILE *out, const weft_info_params_t *p)
{
    weft_tsel_override_t ov = WEFT_TSEL_AUTO;
    const char *xml = p->topo_xml;
    const char *how = "";
    weft_status_t status;
    if (xml == NULL) {
        xml = weft__info_setting("WEFT_TOPO_XML");
        xml = xml != NULL && xml[0] != '\0' ? xml : NULL;
    }
    const char *ov_text = weft__info_setting("WEFT_TRANSPORT");
    if (ov_text != NULL && weft__tsel_parse_override(ov_text, &ov) != WEFT_OK) {
        fprintf(out, "Topology error: WEFT_TRANSPORT=%s is not auto, ucx or nccl\n", ov_text);
        return WEFT_ERR_INVALID_ARG;
    }
    /* This host, a peer on it, a peer on another host: too large for the stack. */
    weft_topo_summary_t *s = calloc(3, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    status = load_summary(out, xml, &s[0]);
    if (status != WEFT_OK) {
        goto out;
    }
    s[0].my_gpu = pick_gpu(&s[0], p, &how);
    if (s[0].my_gpu == -2) {
        fprintf(out, "Topology error: GPU %d is not on host %s, which has %d GPU(s)\n", p->gpu,
                s[0].hostname, s[0].ngpus);
        status = WEFT_ERR_INVALID_ARG;
        goto out;
    }
    print_host(out, &s[0]);
    if (s[0].ngpus > 0) {
        fprintf(out, "This process drives GPU %d (%s)\n", s[0].my_gpu, how);
    }
    s[1] = s[0];
    if (s[0].ngpus > 1) {
        s[1].my_gpu = (s[0].my_gpu + 1) % s[0].ngpus;
    }
    status = other_host(out, p->peer_xml, &s[0], &s[2]);
    if (status != WEFT_OK) {
        goto out;
    }
    print_decisions(out, &s[0], &s[1], &s[2], ov);
out:
    free(s);
    return status;
}
