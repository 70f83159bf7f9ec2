/*
 * The transport decision on summaries of checked-in XML topologies: a DGX-like host (8
 * GPUs on NVLink, 4 InfiniBand NICs), a PCIe-only workstation with 2 GPUs, a host whose
 * only RDMA NIC sits on the other socket, a CPU-only host, and pairs of hosts. Each case
 * states the expected transport and rule by hand, from the machine descriptions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "transports/select.h"

#define ALL_BUILT (WEFT_TOPO_CUDA_BUILT | WEFT_TOPO_NCCL_BUILT)

static const char *xml_dir = ".";

typedef struct hosts {
    weft_topo_summary_t dgx_a, dgx_b, pcie, farnic, cpu;
} hosts_t;

static void load(const char *name, weft_topo_summary_t *s)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", xml_dir, name);
    assert_int_equal(weft__topo_load(path, NULL, NULL, s), WEFT_OK);
    /* The decision reads build flags from the summary; fix them so the expectations do
     * not depend on how this test binary was built. */
    s->flags = (s->flags & WEFT_TOPO_FROM_XML) | ALL_BUILT;
}

static int setup(void **state)
{
    hosts_t *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return -1;
    }
    load("dgx8-a.xml", &h->dgx_a);
    load("dgx8-b.xml", &h->dgx_b);
    load("pcie2.xml", &h->pcie);
    load("farnic.xml", &h->farnic);
    load("cpuonly.xml", &h->cpu);
    *state = h;
    return 0;
}

static int teardown(void **state)
{
    free(*state);
    return 0;
}

/* A copy of @p s describing a rank that drives GPU @p gpu with build @p flags. */
static weft_topo_summary_t *rank_on(const weft_topo_summary_t *s, int gpu, unsigned flags)
{
    static weft_topo_summary_t slots[32]; /* enough for one test function */
    static int next;
    weft_topo_summary_t *r = &slots[next++ % 32];
    *r = *s;
    r->my_gpu = gpu;
    r->flags = (s->flags & WEFT_TOPO_FROM_XML) | flags;
    return r;
}

static weft_tsel_t decide(const weft_topo_summary_t *me, const weft_topo_summary_t *peer, int self,
                          weft_memtype_t mt, weft_tsel_override_t ov)
{
    weft_tsel_t d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(weft__tsel_decide(me, peer, self, mt, ov, &d), WEFT_OK);
    assert_non_null(d.rule);
    assert_true(strlen(d.why) > 10);
    return d;
}

static void expect(const weft_topo_summary_t *me, const weft_topo_summary_t *peer, int self,
                   weft_memtype_t mt, weft_tsel_override_t ov, weft_tsel_transport_t t, int staged,
                   const char *rule, const char *why_part)
{
    weft_tsel_t d = decide(me, peer, self, mt, ov);
    if (d.transport != t || d.staged != staged || strcmp(d.rule, rule) != 0 ||
        (why_part != NULL && strstr(d.why, why_part) == NULL)) {
        fail_msg("got %s%s by rule %s (%s); expected %s%s by rule %s with \"%s\"",
                 weft__tsel_transport_name(d.transport), d.staged ? " staged" : "", d.rule, d.why,
                 weft__tsel_transport_name(t), staged ? " staged" : "", rule,
                 why_part != NULL ? why_part : "");
    }
    assert_int_equal(d.status, t == WEFT_TSEL_NONE ? WEFT_ERR_UNSUPPORTED : WEFT_OK);
}

/* ---- argument edge cases ---- */

static void test_invalid_arguments(void **state)
{
    hosts_t *h = *state;
    weft_tsel_t d;
    memset(&d, 0x33, sizeof(d));
    assert_int_equal(weft__tsel_decide(NULL, &h->cpu, 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, &d),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__tsel_decide(&h->cpu, NULL, 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, &d),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__tsel_decide(&h->cpu, &h->cpu, 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, NULL),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__tsel_decide(&h->cpu, &h->cpu, 0, (weft_memtype_t)2, WEFT_TSEL_AUTO, &d),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(
        weft__tsel_decide(&h->cpu, &h->cpu, 0, WEFT_MEM_HOST, (weft_tsel_override_t)7, &d),
        WEFT_ERR_INVALID_ARG);
    weft_topo_summary_t *bad = rank_on(&h->pcie, 2, ALL_BUILT); /* only 2 GPUs */
    assert_int_equal(weft__tsel_decide(bad, &h->pcie, 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, &d),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(((unsigned char *)&d)[0], 0x33); /* untouched */
}

static void test_parse_override(void **state)
{
    (void)state;
    weft_tsel_override_t ov = (weft_tsel_override_t)99;
    assert_int_equal(weft__tsel_parse_override("auto", &ov), WEFT_OK);
    assert_int_equal(ov, WEFT_TSEL_AUTO);
    assert_int_equal(weft__tsel_parse_override("UCX", &ov), WEFT_OK);
    assert_int_equal(ov, WEFT_TSEL_FORCE_UCX);
    assert_int_equal(weft__tsel_parse_override("Nccl", &ov), WEFT_OK);
    assert_int_equal(ov, WEFT_TSEL_FORCE_NCCL);
    assert_int_equal(weft__tsel_parse_override("", &ov), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__tsel_parse_override("mpi", &ov), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__tsel_parse_override("nccl2", &ov), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__tsel_parse_override(NULL, &ov), WEFT_ERR_INVALID_ARG);
    assert_int_equal(ov, WEFT_TSEL_FORCE_NCCL); /* untouched by failures */
    assert_string_equal(weft__tsel_override_name(WEFT_TSEL_FORCE_UCX), "ucx");
    assert_string_equal(weft__tsel_transport_name(WEFT_TSEL_NCCL), "nccl");
}

/* ---- CPU-only host ---- */

static void test_cpu_only_host(void **state)
{
    hosts_t *h = *state;
    weft_topo_summary_t *me = rank_on(&h->cpu, -1, ALL_BUILT);
    weft_topo_summary_t *twin = rank_on(&h->cpu, -1, ALL_BUILT);
    weft_topo_summary_t *other = rank_on(&h->dgx_a, -1, ALL_BUILT);
    expect(me, me, 1, WEFT_MEM_HOST, WEFT_TSEL_AUTO, WEFT_TSEL_SELF, 0, "host-self", NULL);
    expect(me, twin, 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 0, "host-same-host", "cpu-1");
    expect(me, other, 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 0, "host-network",
           "cpu-1 -> dgx-a");
    /* A CUDA buffer where no GPU is known: staged, or impossible when NCCL is forced. */
    expect(me, twin, 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 1, "no-nccl",
           "no GPU is known");
    expect(me, me, 1, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_SELF, 1, "no-nccl", NULL);
    expect(me, twin, 0, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_NCCL, WEFT_TSEL_NONE, 0,
           "forced-nccl-impossible", "WEFT_TRANSPORT=nccl");
    /* Built without CUDA: a CUDA buffer cannot be moved at all. */
    weft_topo_summary_t *plain = rank_on(&h->cpu, -1, 0);
    expect(plain, twin, 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_NONE, 0, "cuda-not-built",
           "without CUDA");
    expect(plain, twin, 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 0, "host-same-host", NULL);
}

/* ---- DGX-like host ---- */

static void test_dgx_same_host(void **state)
{
    hosts_t *h = *state;
    weft_topo_summary_t *g0 = rank_on(&h->dgx_a, 0, ALL_BUILT);
    expect(g0, rank_on(&h->dgx_a, 1, ALL_BUILT), 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_NCCL,
           0, "nvlink", "25.0 GB/s");
    expect(g0, rank_on(&h->dgx_a, 4, ALL_BUILT), 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_NCCL,
           0, "nvlink", "50.0 GB/s");
    /* GPUs 0 and 5: no NVLink in the cube mesh, PCIe across the sockets. */
    expect(g0, rank_on(&h->dgx_a, 5, ALL_BUILT), 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_NCCL,
           0, "same-host-shm", "SYS");
    expect(g0, rank_on(&h->dgx_a, 0, ALL_BUILT), 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 1,
           "same-gpu", "0000:12:00.0");
    expect(g0, rank_on(&h->dgx_a, 0, ALL_BUILT), 0, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_NCCL,
           WEFT_TSEL_NONE, 0, "same-gpu", "one GPU per rank");
    expect(g0, g0, 1, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_NCCL, 0, "cuda-self", NULL);
    expect(g0, rank_on(&h->dgx_a, 3, ALL_BUILT), 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 0,
           "host-same-host", NULL);
    /* Host buffers ignore a forced NCCL, and say so. */
    expect(g0, rank_on(&h->dgx_a, 3, ALL_BUILT), 0, WEFT_MEM_HOST, WEFT_TSEL_FORCE_NCCL,
           WEFT_TSEL_UCX, 0, "host-same-host", "CUDA buffers only");
}

static void test_dgx_overrides(void **state)
{
    hosts_t *h = *state;
    weft_topo_summary_t *g0 = rank_on(&h->dgx_a, 0, ALL_BUILT);
    expect(g0, rank_on(&h->dgx_a, 1, ALL_BUILT), 0, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_UCX,
           WEFT_TSEL_UCX, 1, "forced-ucx", "WEFT_TRANSPORT=ucx");
    expect(g0, g0, 1, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_UCX, WEFT_TSEL_SELF, 1, "forced-ucx", NULL);
    expect(g0, rank_on(&h->dgx_a, 1, ALL_BUILT), 0, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_NCCL,
           WEFT_TSEL_NCCL, 0, "nvlink", NULL);
    /* The peer's weft lacks NCCL: staged when automatic, impossible when forced. */
    weft_topo_summary_t *no_nccl = rank_on(&h->dgx_a, 1, WEFT_TOPO_CUDA_BUILT);
    expect(g0, no_nccl, 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 1, "no-nccl",
           "NCCL is not built");
    expect(g0, no_nccl, 0, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_NCCL, WEFT_TSEL_NONE, 0,
           "forced-nccl-impossible", "NCCL is not built");
    /* The peer drives no GPU. */
    expect(g0, rank_on(&h->dgx_a, -1, ALL_BUILT), 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_UCX,
           1, "no-nccl", "no GPU");
}

/* ---- PCIe-only and far-NIC hosts ---- */

static void test_pcie_host(void **state)
{
    hosts_t *h = *state;
    weft_topo_summary_t *g0 = rank_on(&h->pcie, 0, ALL_BUILT);
    expect(g0, rank_on(&h->pcie, 1, ALL_BUILT), 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_NCCL, 0,
           "pcie-p2p", "PHB");
    expect(g0, rank_on(&h->pcie, 1, ALL_BUILT), 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 0,
           "host-same-host", "ws-1");
    expect(rank_on(&h->farnic, 1, ALL_BUILT), rank_on(&h->farnic, 0, ALL_BUILT), 0, WEFT_MEM_CUDA,
           WEFT_TSEL_AUTO, WEFT_TSEL_NCCL, 0, "pcie-p2p", NULL);
}

/* ---- two hosts ---- */

static void test_two_hosts(void **state)
{
    hosts_t *h = *state;
    weft_topo_summary_t *a = rank_on(&h->dgx_a, 2, ALL_BUILT);
    weft_topo_summary_t *b = rank_on(&h->dgx_b, 7, ALL_BUILT);
    expect(a, b, 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_NCCL, 0, "gpudirect",
           "NIC mlx5_1 PIX on dgx-a");
    expect(b, a, 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_NCCL, 0, "gpudirect",
           "NIC mlx5_3 PIX on dgx-b");
    expect(a, b, 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 0, "host-network",
           "dgx-a -> dgx-b");
    expect(a, b, 0, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_UCX, WEFT_TSEL_UCX, 1, "forced-ucx", NULL);

    /* The workstation has no RDMA NIC: no GPUDirect path to or from it. */
    weft_topo_summary_t *ws = rank_on(&h->pcie, 1, ALL_BUILT);
    expect(a, ws, 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 1, "no-gpudirect",
           "no RDMA-capable NIC on ws-1");
    expect(a, ws, 0, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_NCCL, WEFT_TSEL_NCCL, 0, "forced-nccl-network",
           NULL);
    /* An RDMA NIC on the other socket does not count. */
    weft_topo_summary_t *far = rank_on(&h->farnic, 0, ALL_BUILT);
    expect(far, b, 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 1, "no-gpudirect",
           "NIC mlx5_0 SYS on farnic-1");

    /* The same hostname on different boots is two hosts. */
    weft_topo_summary_t *a2 = rank_on(&h->dgx_a, 3, ALL_BUILT);
    snprintf(a2->host_id, sizeof(a2->host_id), "another-boot");
    expect(a, a2, 0, WEFT_MEM_HOST, WEFT_TSEL_AUTO, WEFT_TSEL_UCX, 0, "host-network", NULL);
}

/* Two ranks must reach the same decision about each other, or a collective hangs. */
static void test_symmetry(void **state)
{
    hosts_t *h = *state;
    const weft_topo_summary_t *hs[] = {&h->dgx_a, &h->dgx_b, &h->pcie, &h->farnic, &h->cpu};
    const unsigned builds[] = {ALL_BUILT, WEFT_TOPO_CUDA_BUILT};
    weft_topo_summary_t *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    int cases = 0;
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < 5; i++) {
        for (size_t j = 0; j < 5; j++) {
            for (int ga = -1; ga < hs[i]->ngpus; ga += 3) {
                for (int gb = -1; gb < hs[j]->ngpus; gb += 2) {
                    for (int bf = 0; bf < 4; bf++) {
                        *a = *hs[i], *b = *hs[j];
                        a->my_gpu = ga, b->my_gpu = gb;
                        a->flags = builds[bf & 1], b->flags = builds[bf >> 1];
                        for (int mt = 0; mt < 2; mt++) {
                            for (int ov = 0; ov < 3; ov++) {
                                weft_tsel_t ab =
                                    decide(a, b, 0, (weft_memtype_t)mt, (weft_tsel_override_t)ov);
                                weft_tsel_t ba =
                                    decide(b, a, 0, (weft_memtype_t)mt, (weft_tsel_override_t)ov);
                                if (ab.transport != ba.transport || ab.staged != ba.staged ||
                                    strcmp(ab.rule, ba.rule) != 0) {
                                    fail_msg("asymmetric: %s vs %s", ab.why, ba.why);
                                }
                                cases++;
                            }
                        }
                    }
                }
            }
        }
    }
    assert_true(cases > 1000);
    free(a);
    free(b);
}

/* ---- groups ---- */

/* The reference: every pair of members, by brute force. */
static void brute_force_group(const weft_topo_summary_t *const *m, int n, weft_memtype_t mt,
                              weft_tsel_override_t ov, int *any_error, int *all_nccl)
{
    *any_error = 0;
    *all_nccl = 1;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            if (i == j && n > 1) {
                continue;
            }
            weft_tsel_t d = decide(m[i], m[j], i == j, mt, ov);
            *any_error |= d.status != WEFT_OK;
            *all_nccl &= d.transport == WEFT_TSEL_NCCL;
        }
    }
}

static weft_tsel_t decide_group(const weft_topo_summary_t *const *m, int n, weft_memtype_t mt,
                                weft_tsel_override_t ov)
{
    weft_tsel_t d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(weft__tsel_decide_group(m, n, mt, ov, &d), WEFT_OK);
    return d;
}

static void test_group_edge_cases(void **state)
{
    hosts_t *h = *state;
    weft_tsel_t d;
    const weft_topo_summary_t *one[1] = {rank_on(&h->dgx_a, 6, ALL_BUILT)};
    assert_int_equal(weft__tsel_decide_group(NULL, 1, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, &d),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__tsel_decide_group(one, 0, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, &d),
                     WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__tsel_decide_group(one, 1, (weft_memtype_t)5, WEFT_TSEL_AUTO, &d),
                     WEFT_ERR_INVALID_ARG);
    const weft_topo_summary_t *with_null[2] = {one[0], NULL};
    assert_int_equal(weft__tsel_decide_group(with_null, 2, WEFT_MEM_CUDA, WEFT_TSEL_AUTO, &d),
                     WEFT_ERR_INVALID_ARG);
    d = decide_group(one, 1, WEFT_MEM_CUDA, WEFT_TSEL_AUTO);
    assert_int_equal(d.transport, WEFT_TSEL_NCCL);
    assert_string_equal(d.rule, "cuda-self");
    d = decide_group(one, 1, WEFT_MEM_HOST, WEFT_TSEL_AUTO);
    assert_int_equal(d.transport, WEFT_TSEL_SELF);
}

static void test_group_two_dgx(void **state)
{
    hosts_t *h = *state;
    weft_topo_summary_t *ranks = calloc(18, sizeof(*ranks));
    const weft_topo_summary_t *m[18];
    assert_non_null(ranks);
    for (int i = 0; i < 16; i++) {
        ranks[i] = i < 8 ? h->dgx_a : h->dgx_b;
        ranks[i].my_gpu = i % 8;
        m[i] = &ranks[i];
    }
    weft_tsel_t d = decide_group(m, 16, WEFT_MEM_CUDA, WEFT_TSEL_AUTO);
    assert_int_equal(d.transport, WEFT_TSEL_NCCL);
    assert_non_null(strstr(d.why, "every pair of the 16 members"));
    d = decide_group(m, 16, WEFT_MEM_HOST, WEFT_TSEL_AUTO);
    assert_int_equal(d.transport, WEFT_TSEL_UCX);
    assert_int_equal(d.staged, 0);
    d = decide_group(m, 16, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_UCX);
    assert_int_equal(d.transport, WEFT_TSEL_UCX);
    assert_int_equal(d.staged, 1);

    /* A workstation without RDMA joins: the whole group stages. */
    ranks[16] = h->pcie;
    ranks[16].my_gpu = 0;
    m[16] = &ranks[16];
    d = decide_group(m, 17, WEFT_MEM_CUDA, WEFT_TSEL_AUTO);
    assert_int_equal(d.transport, WEFT_TSEL_UCX);
    assert_int_equal(d.staged, 1);
    assert_string_equal(d.rule, "no-gpudirect");
    assert_non_null(strstr(d.why, "not every pair of the 17 members"));

    /* Two ranks on one GPU: staged when automatic, impossible when NCCL is forced. */
    ranks[16] = h->dgx_a;
    ranks[16].my_gpu = 3;
    d = decide_group(m, 17, WEFT_MEM_CUDA, WEFT_TSEL_AUTO);
    assert_string_equal(d.rule, "same-gpu");
    assert_int_equal(d.staged, 1);
    d = decide_group(m, 17, WEFT_MEM_CUDA, WEFT_TSEL_FORCE_NCCL);
    assert_int_equal(d.status, WEFT_ERR_UNSUPPORTED);
    assert_int_equal(d.transport, WEFT_TSEL_NONE);
    free(ranks);
}

/* Random member mixes against the brute-force reference, and order independence. */
static void test_group_matches_all_pairs(void **state)
{
    hosts_t *h = *state;
    const weft_topo_summary_t *hs[] = {&h->dgx_a, &h->dgx_b, &h->pcie, &h->farnic, &h->cpu};
    const unsigned builds[] = {ALL_BUILT, ALL_BUILT, ALL_BUILT, WEFT_TOPO_CUDA_BUILT};
    enum { MAX_N = 12 };
    weft_topo_summary_t *ranks = calloc(MAX_N, sizeof(*ranks));
    const weft_topo_summary_t *m[MAX_N], *rev[MAX_N];
    unsigned seed = 12345;
    int saw[3] = {0, 0, 0};
    assert_non_null(ranks);
    for (int iter = 0; iter < 300; iter++) {
        int n = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % MAX_N;
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            const weft_topo_summary_t *host = hs[(seed >> 8) % (iter % 3 == 0 ? 5 : 2)];
            ranks[i] = *host;
            ranks[i].my_gpu =
                host->ngpus > 0 ? (int)((seed >> 4) % (unsigned)(host->ngpus + 1)) - 1 : -1;
            if (iter % 2 == 0 && ranks[i].my_gpu < 0 && host->ngpus > 0) {
                ranks[i].my_gpu = 0;
            }
            ranks[i].flags = builds[(seed >> 20) % (iter % 4 == 0 ? 4 : 3)];
            m[i] = &ranks[i];
            rev[n - 1 - i] = &ranks[i];
        }
        for (int mt = 0; mt < 2; mt++) {
            for (int ov = 0; ov < 3; ov++) {
                int any_error, all_nccl;
                brute_force_group(m, n, (weft_memtype_t)mt, (weft_tsel_override_t)ov, &any_error,
                                  &all_nccl);
                weft_tsel_t d = decide_group(m, n, (weft_memtype_t)mt, (weft_tsel_override_t)ov);
                weft_tsel_t r = decide_group(rev, n, (weft_memtype_t)mt, (weft_tsel_override_t)ov);
                if ((d.status != WEFT_OK) != any_error ||
                    (d.transport == WEFT_TSEL_NCCL) != all_nccl) {
                    fail_msg("n=%d mt=%d ov=%d: group says %s (%s), pairs say error=%d nccl=%d", n,
                             mt, ov, weft__tsel_transport_name(d.transport), d.why, any_error,
                             all_nccl);
                }
                assert_int_equal(d.transport, r.transport);
                assert_int_equal(d.staged, r.staged);
                assert_int_equal(d.status, r.status);
                saw[any_error ? 0 : all_nccl ? 1 : 2]++;
            }
        }
    }
    /* The mixes reached every outcome. */
    assert_true(saw[0] > 0 && saw[1] > 0 && saw[2] > 0);
    free(ranks);
}

/* ---- overrides checked at init ---- */

static void test_check_override(void **state)
{
    hosts_t *h = *state;
    char why[256] = "";
    weft_topo_summary_t *dgx = rank_on(&h->dgx_a, 0, ALL_BUILT);
    assert_int_equal(weft__tsel_check_override(dgx, WEFT_TSEL_AUTO, 1, why, sizeof(why)), WEFT_OK);
    assert_int_equal(weft__tsel_check_override(dgx, WEFT_TSEL_FORCE_NCCL, 1, why, sizeof(why)),
                     WEFT_OK);
    assert_int_equal(weft__tsel_check_override(dgx, WEFT_TSEL_FORCE_UCX, 1, why, sizeof(why)),
                     WEFT_OK);
    assert_string_equal(why, "");

    weft_topo_summary_t *cpu = rank_on(&h->cpu, -1, ALL_BUILT);
    assert_int_equal(weft__tsel_check_override(cpu, WEFT_TSEL_FORCE_NCCL, 1, why, sizeof(why)),
                     WEFT_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "no NVIDIA GPU"));
    assert_non_null(strstr(why, "cpu-1"));

    weft_topo_summary_t *no_nccl = rank_on(&h->dgx_a, 0, WEFT_TOPO_CUDA_BUILT);
    assert_int_equal(weft__tsel_check_override(no_nccl, WEFT_TSEL_FORCE_NCCL, 1, why, sizeof(why)),
                     WEFT_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "built without NCCL"));
    weft_topo_summary_t *plain = rank_on(&h->dgx_a, 0, 0);
    assert_int_equal(weft__tsel_check_override(plain, WEFT_TSEL_FORCE_NCCL, 1, why, sizeof(why)),
                     WEFT_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "without CUDA and NCCL"));

    assert_int_equal(weft__tsel_check_override(cpu, WEFT_TSEL_FORCE_UCX, 0, why, sizeof(why)),
                     WEFT_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "UCX"));
    assert_int_equal(weft__tsel_check_override(cpu, WEFT_TSEL_AUTO, 0, NULL, 0), WEFT_OK);
    assert_int_equal(weft__tsel_check_override(NULL, WEFT_TSEL_AUTO, 1, NULL, 0),
                     WEFT_ERR_INVALID_ARG);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        xml_dir = argv[1];
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_parse_override),
        cmocka_unit_test(test_cpu_only_host),
        cmocka_unit_test(test_dgx_same_host),
        cmocka_unit_test(test_dgx_overrides),
        cmocka_unit_test(test_pcie_host),
        cmocka_unit_test(test_two_hosts),
        cmocka_unit_test(test_symmetry),
        cmocka_unit_test(test_group_edge_cases),
        cmocka_unit_test(test_group_two_dgx),
        cmocka_unit_test(test_group_matches_all_pairs),
        cmocka_unit_test(test_check_override),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
