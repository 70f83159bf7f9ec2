/*
 * weft-info: what this weft was built with, what it can use here, its settings, and
 * the topology it sees with the transport it would choose for each kind of peer and
 * buffer, and why.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "vocab/cublas_lazy.h"
#endif

#include "comm/memtype.h"
#include "transports/select.h"
#include "transports/transport.h"
#include "weft/cuda.h"
#include "weft/weft.h"
#ifdef WEFT_HAVE_NCCL
#include "transports/nccl.h"
#endif

typedef struct options {
    int config, topology;
    const char *xml, *peer_xml;
    int gpu; /* -2: from the CUDA device or the first GPU */
} options_t;

static void usage(FILE *f)
{
    fprintf(f, "Usage: weft-info [OPTION]...\n"
               "Show how weft was built and what it can use on this machine.\n"
               "\n"
               "  (no option)       version, transports built and usable, CUDA and NCCL\n"
               "      --config      every WEFT_* setting: value in effect, default, meaning\n"
               "      --topology    GPUs, NICs, NUMA nodes and links of this host, and the\n"
               "                    transport chosen for each kind of peer and buffer, and why\n"
               "      --xml FILE    with --topology: read this hwloc XML file instead of the\n"
               "                    host (default: the WEFT_TOPO_XML setting)\n"
               "      --peer-xml FILE  with --topology: the other host is this XML file\n"
               "                    (default: a host like this one)\n"
               "      --gpu N       with --topology: this process drives GPU N of the list\n"
               "      --version     the version only\n"
               "  -h, --help        this text\n");
}

/* The value in effect of setting @p name (environment or default), or NULL. */
static const char *setting(const char *name)
{
    const char *value = NULL;
    const weft_config_entry_t *e;
    for (size_t i = 0; (e = weft_config_entry(NULL, i, &value)) != NULL; i++) {
        if (strcmp(e->name, name) == 0) {
            return value;
        }
    }
    return NULL;
}

/* ---- default listing ---- */

static void print_cuda(void)
{
#ifdef WEFT_HAVE_CUDA
    int rt = 0, drv = 0;
    (void)cudaRuntimeGetVersion(&rt);
    if (cudaDriverGetVersion(&drv) != cudaSuccess) {
        drv = 0;
        (void)cudaGetLastError();
    }
    /* The runtime is inside libweft (linked statically); the driver and cuBLAS are
     * loaded when first needed, and a machine without them runs on host memory. */
    printf("CUDA:        built, runtime %d.%d linked in\n", rt / 1000, (rt % 1000) / 10);
    if (drv > 0) {
        printf("CUDA driver: found, version %d.%d, %d device(s) visible\n", drv / 1000,
               (drv % 1000) / 10, weft__cuda_device_count());
    } else {
        printf("CUDA driver: not found (libcuda.so.1): every buffer is host memory\n");
    }
    const char *blas = weft__cublas_library();
    if (blas != NULL) {
        printf("cuBLAS:      found (%s)\n", blas);
    } else {
        printf("cuBLAS:      not found (libcublas.so.13 or .12): vocabulary primitives on "
               "CUDA buffers fail\n");
    }
#else
    printf("CUDA:        not built\n");
#endif
#ifdef WEFT_HAVE_NCCL
    int v = weft__nccl_version();
    printf("NCCL:        built (library %d.%d.%d)\n", v / 10000, (v / 100) % 100, v % 100);
#else
    printf("NCCL:        not built\n");
#endif
}

static int print_summary(void)
{
    printf("weft %s\n", weft_version(NULL, NULL, NULL));
    printf("Transports (built, in preference order):\n");
    for (size_t i = 0; weft__transports[i] != NULL; i++) {
        const weft_transport_ops_t *t = weft__transports[i];
        int usable = t->available != NULL && t->available();
        printf("  %-6s %s\n", t->name, usable ? "usable" : "not usable on this machine");
    }
    print_cuda();
    const char *ov = setting("WEFT_TRANSPORT");
    printf("WEFT_TRANSPORT=%s (weft-info --topology shows what it chooses here)\n",
           ov != NULL ? ov : "auto");
    return 0;
}

/* ---- --config ---- */

static int print_config(void)
{
    const weft_config_entry_t *e;
    const char *value = NULL;
    for (size_t i = 0; (e = weft_config_entry(NULL, i, &value)) != NULL; i++) {
        int changed = getenv(e->name) != NULL;
        printf("%s=%s%s\n", e->name, value != NULL ? value : "",
               changed ? "   (set in the environment)" : "");
        printf("    default: %s\n    %s\n", e->deflt[0] != '\0' ? e->deflt : "(empty)", e->doc);
    }
    return 0;
}

/* ---- --topology ---- */

static void print_gpus(const weft_topo_summary_t *s)
{
    if (s->ngpus == 0) {
        printf("GPUs: none (no NVIDIA PCI device of class 0300/0302)\n");
        return;
    }
    printf("GPUs:\n");
    for (int i = 0; i < s->ngpus; i++) {
        const weft_topo_gpu_t *g = &s->gpus[i];
        printf("  [%d] %s  %-6s %s, NUMA %d%s\n", i, g->busid, g->name[0] ? g->name : "-", g->model,
               g->numa, i == s->my_gpu ? "   <- this process" : "");
    }
    printf("GPU links (NVn: NVLink n GB/s; else the PCIe path: PIX one switch, PXB several\n"
           "bridges, PHB host bridge, NODE same NUMA node, SYS across sockets):\n      ");
    for (int j = 0; j < s->ngpus; j++) {
        printf(" %6d", j);
    }
    printf("\n");
    for (int i = 0; i < s->ngpus; i++) {
        printf("  [%d] ", i);
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
            printf(" %6s", cell);
        }
        printf("\n");
    }
}

static void print_nics(const weft_topo_summary_t *s)
{
    if (s->nnics == 0) {
        printf("NICs: none\n");
        return;
    }
    printf("NICs:\n");
    for (int k = 0; k < s->nnics; k++) {
        const weft_topo_nic_t *n = &s->nics[k];
        printf("  [%d] %-10s %-12s %s, NUMA %d, %s\n", k, n->name, n->netdev[0] ? n->netdev : "-",
               n->busid, n->numa, n->rdma ? "RDMA (GPUDirect RDMA possible)" : "no RDMA");
    }
    for (int i = 0; i < s->ngpus; i++) {
        weft_topo_path_t path = WEFT_PATH_UNKNOWN;
        int k = weft__topo_nearest_rdma_nic(s, i, &path);
        if (k >= 0) {
            printf("  GPU %d -> nearest RDMA NIC %s, path %s%s\n", i, s->nics[k].name,
                   weft__topo_path_name(path),
                   path <= WEFT_PATH_PXB ? " (near: GPUDirect RDMA)" : " (far)");
        }
    }
}

static void print_host(const weft_topo_summary_t *s)
{
    printf("Host %s: %d NUMA node(s), %d PU(s)%s\n", s->hostname, s->numa_nodes, s->pus,
           (s->flags & WEFT_TOPO_FROM_XML) ? ", read from an XML file" : "");
    print_gpus(s);
    print_nics(s);
}

/* The GPU this process drives: --gpu, else the current CUDA device, else the first. */
static int pick_gpu(const weft_topo_summary_t *s, int requested, const char **how)
{
    if (requested >= 0) {
        *how = "--gpu";
        return requested < s->ngpus ? requested : -2;
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

static void print_choice(const char *peer, const weft_topo_summary_t *me,
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
        printf("  %-24s %-4s buffer -> %s%s\n      rule %s: %s\n", peer, mem_names[mt],
               d.status == WEFT_OK ? weft__tsel_transport_name(d.transport) : "unsupported",
               d.staged ? " (staged through host memory)" : "", d.rule, d.why);
    }
}

static int load_summary(const char *xml, weft_topo_summary_t *s)
{
    if (weft__topo_load(xml, NULL, NULL, s) != WEFT_OK) {
        fprintf(stderr, "weft-info: cannot read the topology%s%s\n", xml ? " of " : "",
                xml ? xml : "");
        return -1;
    }
    return 0;
}

/* A peer on another host: from --peer-xml, or a twin of this host. */
static int other_host(const options_t *o, const weft_topo_summary_t *me, weft_topo_summary_t *s)
{
    if (o->peer_xml == NULL) {
        *s = *me;
        snprintf(s->hostname, sizeof(s->hostname), "another-host");
        snprintf(s->host_id, sizeof(s->host_id), "another-boot");
        return 0;
    }
    if (load_summary(o->peer_xml, s) != 0) {
        return -1;
    }
    s->my_gpu = s->ngpus == 0 ? -1 : me->my_gpu >= 0 && me->my_gpu < s->ngpus ? me->my_gpu : 0;
    return 0;
}

static void print_decisions(const weft_topo_summary_t *me, const weft_topo_summary_t *twin,
                            const weft_topo_summary_t *far, weft_tsel_override_t ov)
{
    char why[256];
    printf("\nTransport choice (WEFT_TRANSPORT=%s):\n", weft__tsel_override_name(ov));
    if (weft__tsel_check_override(me, ov, weft__tl_ucx.available(), why, sizeof(why)) != WEFT_OK) {
        printf("  %s: weft_init would fail with WEFT_ERR_UNSUPPORTED.\n", why);
    }
    if (me->ngpus == 0) {
        printf("  CPU-only host (no NVIDIA GPU): host buffers go through UCX (shared memory on\n"
               "  this host, the network between hosts) and the self transport to itself;\n"
               "  no CUDA buffer can exist here, so NCCL is never chosen.\n");
    }
    print_choice("itself", me, me, 1, ov);
    print_choice("a peer on this host", me, twin, 0, ov);
    printf("  (peer on this host drives GPU %s)\n",
           twin->my_gpu >= 0 ? twin->gpus[twin->my_gpu].busid : "none");
    print_choice("a peer on another host", me, far, 0, ov);
    printf("  (other host: %s, GPU %s)\n", far->hostname,
           far->my_gpu >= 0 ? far->gpus[far->my_gpu].busid : "none");
}

static int print_topology(const options_t *o)
{
    weft_tsel_override_t ov = WEFT_TSEL_AUTO;
    const char *xml = o->xml;
    const char *how = "";
    int rc = 1;
    if (xml == NULL) {
        xml = setting("WEFT_TOPO_XML");
        xml = xml != NULL && xml[0] != '\0' ? xml : NULL;
    }
    const char *ov_text = setting("WEFT_TRANSPORT");
    if (ov_text != NULL && weft__tsel_parse_override(ov_text, &ov) != WEFT_OK) {
        fprintf(stderr, "weft-info: WEFT_TRANSPORT=%s is not auto, ucx or nccl\n", ov_text);
        return 1;
    }
    weft_topo_summary_t *s = calloc(3, sizeof(*s));
    if (s == NULL || load_summary(xml, &s[0]) != 0) {
        goto out;
    }
    s[0].my_gpu = pick_gpu(&s[0], o->gpu, &how);
    if (s[0].my_gpu == -2) {
        fprintf(stderr, "weft-info: --gpu %d: the host has %d GPU(s)\n", o->gpu, s[0].ngpus);
        goto out;
    }
    print_host(&s[0]);
    if (s[0].ngpus > 0) {
        printf("This process drives GPU %d (%s)\n", s[0].my_gpu, how);
    }
    s[1] = s[0];
    if (s[0].ngpus > 1) {
        s[1].my_gpu = (s[0].my_gpu + 1) % s[0].ngpus;
    }
    if (other_host(o, &s[0], &s[2]) != 0) {
        goto out;
    }
    print_decisions(&s[0], &s[1], &s[2], ov);
    rc = 0;
out:
    free(s);
    return rc;
}

/* Fill @p o from the command line. Returns -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, options_t *o)
{
    enum { OPT_VERSION = 256, OPT_CONFIG, OPT_TOPOLOGY, OPT_XML, OPT_PEER_XML, OPT_GPU };
    static const struct option longopts[] = {
        {"version", no_argument, NULL, OPT_VERSION},
        {"config", no_argument, NULL, OPT_CONFIG},
        {"topology", no_argument, NULL, OPT_TOPOLOGY},
        {"xml", required_argument, NULL, OPT_XML},
        {"peer-xml", required_argument, NULL, OPT_PEER_XML},
        {"gpu", required_argument, NULL, OPT_GPU},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_VERSION:
            printf("weft %s\n", weft_version(NULL, NULL, NULL));
            return 0;
        case OPT_CONFIG:
            o->config = 1;
            break;
        case OPT_TOPOLOGY:
            o->topology = 1;
            break;
        case OPT_XML:
            o->xml = optarg;
            break;
        case OPT_PEER_XML:
            o->peer_xml = optarg;
            break;
        case OPT_GPU:
            o->gpu = (int)strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || o->gpu < 0) {
                fprintf(stderr, "weft-info: --gpu needs a GPU index, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-info: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if ((o->xml != NULL || o->peer_xml != NULL || o->gpu != -2) && !o->topology) {
        fprintf(stderr, "weft-info: --xml, --peer-xml and --gpu go with --topology\n");
        return 2;
    }
    return -1;
}

int main(int argc, char **argv)
{
    options_t o = {.gpu = -2};
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0) {
        return rc;
    }
    rc = 0;
    if (!o.config && !o.topology) {
        rc = print_summary();
    }
    if (o.config) {
        rc |= print_config();
    }
    if (o.topology) {
        if (o.config) {
            printf("\n");
        }
        rc |= print_topology(&o);
    }
    return rc;
}
