/*
 * Topology discovery with hwloc: condenses the PCI tree of one host into a
 * weft_topo_summary_t (GPUs, NICs, PCIe paths, NVLink bandwidth) and (un)packs it.
 */
#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transports/select.h"
#include "util/host_id.h"
#include "weft/core.h"

#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_CLASS_VGA 0x0300
#define PCI_CLASS_3D 0x0302
#define MAX_TREE_DEPTH 128

/* Working state of one discovery: the summary and the hwloc objects behind it. */
typedef struct topo_build {
    hwloc_topology_t t;
    weft_topo_summary_t *s;
    hwloc_obj_t gpu_obj[WEFT_TOPO_MAX_GPUS];
    hwloc_obj_t nic_obj[WEFT_TOPO_MAX_NICS];
    weft_topo_log_fn log;
    void *log_arg;
} topo_build_t;

static void topo_log(const topo_build_t *b, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void topo_log(const topo_build_t *b, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (b->log != NULL) {
        b->log(b->log_arg, level, fmt, ap);
    } else if (level <= WEFT_LOG_WARN) {
        fputs("[weft] topology: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

static void copy_str(char dst[WEFT_TOPO_STR], const char *src)
{
    snprintf(dst, WEFT_TOPO_STR, "%s", src != NULL ? src : "");
}

const char *weft__topo_path_name(weft_topo_path_t p)
{
    static const char *const names[] = {"PIX", "PXB", "PHB", "NODE", "SYS", "unknown"};
    return (unsigned)p <= WEFT_PATH_UNKNOWN ? names[p] : "unknown";
}

/* ---- locality ---- */

static int obj_numa(hwloc_topology_t t, hwloc_obj_t obj)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, obj);
    if (anc == NULL || anc->nodeset == NULL || hwloc_bitmap_weight(anc->nodeset) != 1) {
        return -1; /* attached to the whole machine: no single nearest node */
    }
    return hwloc_bitmap_first(anc->nodeset);
}

static int is_bridge(hwloc_obj_t o)
{
    return o->type == HWLOC_OBJ_BRIDGE;
}

/* PCI bridges strictly between @p from and its ancestor @p to. */
static int bridges_between(hwloc_obj_t from, hwloc_obj_t to)
{
    int n = 0;
    for (hwloc_obj_t o = from->parent; o != NULL && o != to; o = o->parent) {
        n += is_bridge(o);
    }
    return n;
}

/*
 * Path class between two PCI devices. hwloc_get_common_ancestor_obj() relies on object
 * depths, which are negative (special) for I/O objects, so the ancestor is found by
 * walking parents instead.
 */
static weft_topo_path_t pci_path(hwloc_obj_t a, hwloc_obj_t b)
{
    hwloc_obj_t anc[MAX_TREE_DEPTH];
    int n = 0;
    for (hwloc_obj_t o = a; o != NULL && n < MAX_TREE_DEPTH; o = o->parent) {
        anc[n++] = o;
    }
    hwloc_obj_t common = NULL;
    for (hwloc_obj_t o = b; o != NULL && common == NULL; o = o->parent) {
        for (int i = 0; i < n; i++) {
            if (anc[i] == o) {
                common = o;
                break;
            }
        }
    }
    if (common == NULL) {
        return WEFT_PATH_UNKNOWN;
    }
    if (common == a || common == b || common->type == HWLOC_OBJ_PCI_DEVICE) {
        return WEFT_PATH_PIX;
    }
    if (is_bridge(common)) {
        if (common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
            return WEFT_PATH_PHB;
        }
        return (bridges_between(a, common) == 0 && bridges_between(b, common) == 0) ? WEFT_PATH_PIX
                                                                                    : WEFT_PATH_PXB;
    }
    /* Different host bridges: one NUMA node above both, or the whole machine. */
    if (common->nodeset != NULL && hwloc_bitmap_weight(common->nodeset) <= 1) {
        return WEFT_PATH_NODE;
    }
    return WEFT_PATH_SYS;
}

/* ---- devices ---- */

static void format_busid(hwloc_obj_t pci, char out[WEFT_TOPO_STR])
{
    const struct hwloc_pcidev_attr_s *p = &pci->attr->pcidev;
    snprintf(out, WEFT_TOPO_STR, "%04x:%02x:%02x.%x", (unsigned)p->domain, (unsigned)p->bus,
             (unsigned)p->dev, (unsigned)p->func);
}

static int is_nvidia_gpu(hwloc_obj_t pci)
{
    const struct hwloc_pcidev_attr_s *p = &pci->attr->pcidev;
    return p->vendor_id == PCI_VENDOR_NVIDIA &&
           (p->class_id == PCI_CLASS_3D || p->class_id == PCI_CLASS_VGA);
}

static void add_gpu(topo_build_t *b, hwloc_obj_t pci)
{
    weft_topo_summary_t *s = b->s;
    if (s->ngpus == WEFT_TOPO_MAX_GPUS) {
        topo_log(b, WEFT_LOG_WARN, "more than %d GPUs on this host; ignoring the rest",
                 WEFT_TOPO_MAX_GPUS);
        return;
    }
    weft_topo_gpu_t *g = &s->gpus[s->ngpus];
    format_busid(pci, g->busid);
    g->numa = obj_numa(b->t, pci);
    const char *model = hwloc_obj_get_info_by_name(pci, "PCIDevice");
    /* The CUDA and NVML backends name the GPU; prefer CUDA's name, NVML's otherwise. */
    for (hwloc_obj_t o = pci->io_first_child; o != NULL; o = o->next_sibling) {
        if (o->type != HWLOC_OBJ_OS_DEVICE) {
            continue;
        }
        const char *m = hwloc_obj_get_info_by_name(o, "GPUModel");
        if (m != NULL) {
            model = m;
        }
        if (g->name[0] == '\0' || strncmp(o->name, "cuda", 4) == 0) {
            copy_str(g->name, o->name);
        }
    }
    if (model != NULL) {
        copy_str(g->model, model);
    } else {
        snprintf(g->model, WEFT_TOPO_STR, "[%04x:%04x]", pci->attr->pcidev.vendor_id,
                 pci->attr->pcidev.device_id);
    }
    b->gpu_obj[s->ngpus++] = pci;
}

static void add_nic(topo_build_t *b, hwloc_obj_t pci)
{
    weft_topo_summary_t *s = b->s;
    weft_topo_nic_t nic;
    memset(&nic, 0, sizeof(nic));
    int found = 0;
    for (hwloc_obj_t o = pci->io_first_child; o != NULL; o = o->next_sibling) {
        if (o->type != HWLOC_OBJ_OS_DEVICE || o->name == NULL) {
            continue;
        }
        if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
            copy_str(nic.name, o->name);
            nic.rdma = 1;
            found = 1;
        } else if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
            if (nic.netdev[0] == '\0') {
                copy_str(nic.netdev, o->name);
            }
            found = 1;
        }
    }
    if (!found) {
        return; /* not a NIC the OS can use (or a GPU, a disk...) */
    }
    if (s->nnics == WEFT_TOPO_MAX_NICS) {
        topo_log(b, WEFT_LOG_WARN, "more than %d NICs on this host; ignoring the rest",
                 WEFT_TOPO_MAX_NICS);
        return;
    }
    if (nic.name[0] == '\0') {
        copy_str(nic.name, nic.netdev);
    }
    format_busid(pci, nic.busid);
    nic.numa = obj_numa(b->t, pci);
    s->nics[s->nnics] = nic;
    b->nic_obj[s->nnics++] = pci;
}

static int gpu_of_obj(const topo_build_t *b, hwloc_obj_t obj)
{
    while (obj != NULL && obj->type != HWLOC_OBJ_PCI_DEVICE) {
        if (obj->type != HWLOC_OBJ_OS_DEVICE) {
            return -1; /* a PU, a NUMA node: not a GPU */
        }
        obj = obj->parent;
    }
    for (int i = 0; obj != NULL && i < b->s->ngpus; i++) {
        if (b->gpu_obj[i] == obj) {
            return i;
        }
    }
    return -1;
}

/*
 * NVLink bandwidth from hwloc's "NVLinkBandwidth" distances (set by its NVML backend,
 * MB/s). With NVSwitches the matrix also holds switch ports: merge them and take the
 * transitive closure, so that GPU-to-GPU entries carry the bandwidth through the switch.
 */
static void read_nvlink(topo_build_t *b)
{
    struct hwloc_distances_s *d = NULL;
    unsigned nr = 1;
    if (hwloc_distances_get_by_name(b->t, "NVLinkBandwidth", &nr, &d, 0) != 0 || nr == 0) {
        return;
    }
    int foreign = 0;
    for (unsigned i = 0; i < d->nbobjs; i++) {
        foreign |= gpu_of_obj(b, d->objs[i]) < 0;
    }
    if (foreign) {
        (void)hwloc_distances_transform(b->t, d, HWLOC_DISTANCES_TRANSFORM_MERGE_SWITCH_PORTS, NULL,
                                        0);
        (void)hwloc_distances_transform(b->t, d, HWLOC_DISTANCES_TRANSFORM_TRANSITIVE_CLOSURE, NULL,
                                        0);
    }
    for (unsigned i = 0; i < d->nbobjs; i++) {
        int gi = gpu_of_obj(b, d->objs[i]);
        for (unsigned j = 0; gi >= 0 && j < d->nbobjs; j++) {
            int gj = gpu_of_obj(b, d->objs[j]);
            if (gj >= 0 && gj != gi) {
                uint64_t v = d->values[i * d->nbobjs + j];
                b->s->nvlink_mbps[gi][gj] = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
            }
        }
    }
    hwloc_distances_release(b->t, d);
}

static void fill_paths(topo_build_t *b)
{
    weft_topo_summary_t *s = b->s;
    for (int i = 0; i < s->ngpus; i++) {
        for (int j = 0; j < s->ngpus; j++) {
            s->gpu_path[i][j] = (uint8_t)pci_path(b->gpu_obj[i], b->gpu_obj[j]);
        }
        for (int k = 0; k < s->nnics; k++) {
            s->gpu_nic_path[i][k] = (uint8_t)pci_path(b->gpu_obj[i], b->nic_obj[k]);
        }
    }
}

static void read_host(topo_build_t *b, int from_xml)
{
    weft_topo_summary_t *s = b->s;
    const char *host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(b->t), "HostName");
    if (host != NULL) {
        copy_str(s->hostname, host);
    } else if (gethostname(s->hostname, sizeof(s->hostname) - 1) != 0) {
        copy_str(s->hostname, "unknown");
    }
    if (from_xml) {
        return; /* the file's host, not this one: its host id is unknown */
    }
    /* Containers on one machine may share a hostname with another machine's, and
     * network namespaces of one machine may differ in nothing else: weft's host id
     * tells them apart (util/host_id.h), as it does for shared memory. */
    char id[WEFT__HOST_ID_LEN];
    weft__host_id(id);
    copy_str(s->host_id, id);
}

static void summarize(topo_build_t *b, int from_xml)
{
    weft_topo_summary_t *s = b->s;
    s->my_gpu = -1;
    s->flags = from_xml ? WEFT_TOPO_FROM_XML : 0;
#ifdef WEFT_HAVE_CUDA
    s->flags |= WEFT_TOPO_CUDA_BUILT;
#endif
#ifdef WEFT_HAVE_NCCL
    s->flags |= WEFT_TOPO_NCCL_BUILT;
#endif
    s->numa_nodes = hwloc_get_nbobjs_by_type(b->t, HWLOC_OBJ_NUMANODE);
    s->pus = hwloc_get_nbobjs_by_type(b->t, HWLOC_OBJ_PU);
    read_host(b, from_xml);
    for (hwloc_obj_t p = hwloc_get_next_pcidev(b->t, NULL); p != NULL;
         p = hwloc_get_next_pcidev(b->t, p)) {
        if (is_nvidia_gpu(p)) {
            add_gpu(b, p);
        } else {
            add_nic(b, p);
        }
    }
    fill_paths(b);
    read_nvlink(b);
}

weft_status_t weft__topo_load(const char *xml_path, weft_topo_log_fn log, void *log_arg,
                              weft_topo_summary_t *out)
{
    weft_status_t status = WEFT_OK;
    topo_build_t b = {.log = log, .log_arg = log_arg};

    if (out == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    b.s = calloc(1, sizeof(*b.s));
    if (b.s == NULL) {
        topo_log(&b, WEFT_LOG_ERROR, "cannot allocate the topology summary");
        return WEFT_ERR_NO_MEMORY;
    }
    if (hwloc_topology_init(&b.t) != 0) {
        topo_log(&b, WEFT_LOG_ERROR, "hwloc_topology_init failed: %s", strerror(errno));
        status = WEFT_ERR_NO_MEMORY;
        goto err_free_summary;
    }
    /* GPUs, NICs and the bridges above them are "important"; other PCI devices are not. */
    hwloc_topology_set_io_types_filter(b.t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* hwloc's Linux backend reads the PCI tree from sysfs by itself; the libpciaccess
     * "pci" component would add only device names, is slower, and leaks at unload. */
    (void)hwloc_topology_set_components(b.t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
    if (xml_path != NULL && hwloc_topology_set_xml(b.t, xml_path) != 0) {
        topo_log(&b, WEFT_LOG_ERROR, "cannot use topology file %s: %s", xml_path, strerror(errno));
        status = WEFT_ERR_IO;
        goto err_destroy;
    }
    if (hwloc_topology_load(b.t) != 0) {
        topo_log(&b, WEFT_LOG_ERROR, "cannot load the hwloc topology%s%s: %s",
                 xml_path != NULL ? " from " : "", xml_path != NULL ? xml_path : "",
                 strerror(errno));
        status = WEFT_ERR_IO;
        goto err_destroy;
    }
    summarize(&b, xml_path != NULL);
    *out = *b.s;
err_destroy:
    hwloc_topology_destroy(b.t);
err_free_summary:
    free(b.s);
    return status;
}

/* One hex field of a bus id: 1..max_digits hex digits, then @p sep. */
static const char *parse_hex_field(const char *p, size_t max_digits, char sep, unsigned *v)
{
    size_t n = strspn(p, "0123456789abcdefABCDEF");
    if (n == 0 || n > max_digits || p[n] != sep) {
        return NULL;
    }
    *v = (unsigned)strtoul(p, NULL, 16);
    return p + n + (sep != '\0');
}

/* "dddd:bb:dd.f" with a domain of 4 (hwloc) or 8 (CUDA) digits, any case. */
static int parse_busid(const char *text, unsigned v[4])
{
    const char *p = text;
    if (p == NULL || (p = parse_hex_field(p, 8, ':', &v[0])) == NULL ||
        (p = parse_hex_field(p, 2, ':', &v[1])) == NULL ||
        (p = parse_hex_field(p, 2, '.', &v[2])) == NULL ||
        parse_hex_field(p, 1, '\0', &v[3]) == NULL) {
        return -1;
    }
    return 0;
}

int weft__topo_find_gpu(const weft_topo_summary_t *s, const char *busid)
{
    unsigned want[4], have[4];
    if (s == NULL || parse_busid(busid, want) != 0) {
        return -1;
    }
    for (int i = 0; i < s->ngpus && i < WEFT_TOPO_MAX_GPUS; i++) {
        if (parse_busid(s->gpus[i].busid, have) == 0 && memcmp(want, have, sizeof(want)) == 0) {
            return i;
        }
    }
    return -1;
}

int weft__topo_nearest_rdma_nic(const weft_topo_summary_t *s, int gpu, weft_topo_path_t *path)
{
    int best = -1;
    if (s == NULL || gpu < 0 || gpu >= s->ngpus) {
        return -1;
    }
    for (int k = 0; k < s->nnics; k++) {
        if (s->nics[k].rdma && (best < 0 || s->gpu_nic_path[gpu][k] < s->gpu_nic_path[gpu][best])) {
            best = k;
        }
    }
    if (best >= 0 && path != NULL) {
        *path = (weft_topo_path_t)s->gpu_nic_path[gpu][best];
    }
    return best;
}

/* ---- serialization: little-endian, strings as one length byte and the bytes ---- */

static const char topo_magic[4] = {'W', 'T', 'P', '1'};

typedef struct packer {
    uint8_t *p;
    size_t cap, len;
    int bad;
} packer_t;

static void put_bytes(packer_t *w, const void *src, size_t n)
{
    if (w->bad || n > w->cap - w->len) {
        w->bad = 1;
        return;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void put_uint(packer_t *w, uint64_t v, size_t bytes)
{
    uint8_t b[8];
    for (size_t i = 0; i < bytes; i++) {
        b[i] = (uint8_t)(v >> (8 * i));
    }
    put_bytes(w, b, bytes);
}

static void put_str(packer_t *w, const char *s)
{
    size_t n = strnlen(s, WEFT_TOPO_STR - 1);
    put_uint(w, n, 1);
    put_bytes(w, s, n);
}

static void get_bytes(packer_t *r, void *dst, size_t n)
{
    if (r->bad || n > r->cap - r->len) {
        r->bad = 1;
        memset(dst, 0, n);
        return;
    }
    memcpy(dst, r->p + r->len, n);
    r->len += n;
}

static uint64_t get_uint(packer_t *r, size_t bytes)
{
    uint8_t b[8];
    uint64_t v = 0;
    get_bytes(r, b, bytes);
    for (size_t i = 0; i < bytes; i++) {
        v |= (uint64_t)b[i] << (8 * i);
    }
    return v;
}

static void get_str(packer_t *r, char dst[WEFT_TOPO_STR])
{
    size_t n = (size_t)get_uint(r, 1);
    if (n >= WEFT_TOPO_STR) {
        r->bad = 1;
        n = 0;
    }
    get_bytes(r, dst, n);
    dst[n] = '\0';
    if (strlen(dst) != n) {
        r->bad = 1; /* an embedded NUL would hide the rest of the field */
    }
}

static int16_t get_i16(packer_t *r)
{
    uint16_t u = (uint16_t)get_uint(r, 2);
    return u <= INT16_MAX ? (int16_t)u : (int16_t)(-(int32_t)(UINT16_MAX - u) - 1);
}

static int summary_consistent(const weft_topo_summary_t *s)
{
    return s->ngpus >= 0 && s->ngpus <= WEFT_TOPO_MAX_GPUS && s->nnics >= 0 &&
           s->nnics <= WEFT_TOPO_MAX_NICS && s->my_gpu >= -1 && s->my_gpu < s->ngpus;
}

static uint16_t clamp_u16(int v)
{
    return v < 0 ? 0 : v > UINT16_MAX ? UINT16_MAX : (uint16_t)v;
}

weft_status_t weft__topo_pack(const weft_topo_summary_t *s, void *buf, size_t cap, size_t *len)
{
    packer_t w = {.p = buf, .cap = cap};
    if (s == NULL || buf == NULL || len == NULL || !summary_consistent(s)) {
        return WEFT_ERR_INVALID_ARG;
    }
    put_bytes(&w, topo_magic, sizeof(topo_magic));
    put_uint(&w, s->flags, 4);
    put_uint(&w, clamp_u16(s->numa_nodes), 2);
    put_uint(&w, clamp_u16(s->pus), 2);
    put_uint(&w, (uint64_t)s->ngpus, 1);
    put_uint(&w, (uint64_t)s->nnics, 1);
    put_uint(&w, (uint8_t)(s->my_gpu + 1), 1);
    put_str(&w, s->hostname);
    put_str(&w, s->host_id);
    for (int i = 0; i < s->ngpus; i++) {
        put_str(&w, s->gpus[i].busid);
        put_str(&w, s->gpus[i].name);
        put_str(&w, s->gpus[i].model);
        put_uint(&w, (uint16_t)s->gpus[i].numa, 2);
    }
    for (int k = 0; k < s->nnics; k++) {
        put_str(&w, s->nics[k].busid);
        put_str(&w, s->nics[k].name);
        put_str(&w, s->nics[k].netdev);
        put_uint(&w, (uint16_t)s->nics[k].numa, 2);
        put_uint(&w, s->nics[k].rdma != 0, 1);
    }
    for (int i = 0; i < s->ngpus; i++) {
        put_bytes(&w, s->gpu_path[i], (size_t)s->ngpus);
        put_bytes(&w, s->gpu_nic_path[i], (size_t)s->nnics);
        for (int j = 0; j < s->ngpus; j++) {
            put_uint(&w, s->nvlink_mbps[i][j], 4);
        }
    }
    if (w.bad) {
        return WEFT_ERR_INVALID_ARG;
    }
    *len = w.len;
    return WEFT_OK;
}

static int paths_valid(const uint8_t *p, int n)
{
    for (int i = 0; i < n; i++) {
        if (p[i] > WEFT_PATH_UNKNOWN) {
            return 0;
        }
    }
    return 1;
}

static void unpack_devices(packer_t *r, weft_topo_summary_t *s)
{
    for (int i = 0; i < s->ngpus && !r->bad; i++) {
        get_str(r, s->gpus[i].busid);
        get_str(r, s->gpus[i].name);
        get_str(r, s->gpus[i].model);
        s->gpus[i].numa = get_i16(r);
    }
    for (int k = 0; k < s->nnics && !r->bad; k++) {
        get_str(r, s->nics[k].busid);
        get_str(r, s->nics[k].name);
        get_str(r, s->nics[k].netdev);
        s->nics[k].numa = get_i16(r);
        uint64_t rdma = get_uint(r, 1);
        r->bad |= rdma > 1;
        s->nics[k].rdma = (int)rdma;
    }
    for (int i = 0; i < s->ngpus && !r->bad; i++) {
        get_bytes(r, s->gpu_path[i], (size_t)s->ngpus);
        get_bytes(r, s->gpu_nic_path[i], (size_t)s->nnics);
        r->bad |=
            !paths_valid(s->gpu_path[i], s->ngpus) || !paths_valid(s->gpu_nic_path[i], s->nnics);
        for (int j = 0; j < s->ngpus; j++) {
            s->nvlink_mbps[i][j] = (uint32_t)get_uint(r, 4);
        }
    }
}

weft_status_t weft__topo_unpack(const void *buf, size_t len, weft_topo_summary_t *out)
{
    packer_t r = {.p = (uint8_t *)buf, .cap = len};
    char magic[sizeof(topo_magic)];
    weft_topo_summary_t *s;

    if (buf == NULL || out == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    get_bytes(&r, magic, sizeof(magic));
    r.bad |= memcmp(magic, topo_magic, sizeof(magic)) != 0;
    s->flags = (unsigned)get_uint(&r, 4);
    s->numa_nodes = (int)get_uint(&r, 2);
    s->pus = (int)get_uint(&r, 2);
    s->ngpus = (int)get_uint(&r, 1);
    s->nnics = (int)get_uint(&r, 1);
    s->my_gpu = (int)get_uint(&r, 1) - 1;
    r.bad |= !summary_consistent(s);
    get_str(&r, s->hostname);
    get_str(&r, s->host_id);
    if (!r.bad) {
        unpack_devices(&r, s);
    }
    weft_status_t status = (r.bad || r.len != len) ? WEFT_ERR_PROTOCOL : WEFT_OK;
    if (status == WEFT_OK) {
        *out = *s;
    }
    free(s);
    return status;
}
