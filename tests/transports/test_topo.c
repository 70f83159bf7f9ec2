/*
 * Topology discovery on checked-in hwloc XML files in tests/transports/topologies (written by
 * gen_topologies.py) and the summary's serialization. Expected values are read off the
 * generator's machine descriptions, not computed by the code under test.
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

static const char *xml_dir = ".";

static void quiet_log(void *arg, int level, const char *fmt, va_list ap)
{
    (void)arg, (void)level, (void)fmt, (void)ap;
}

static weft_topo_summary_t *load(const char *name)
{
    char path[1024];
    weft_topo_summary_t *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    snprintf(path, sizeof(path), "%s/%s", xml_dir, name);
    assert_int_equal(weft__topo_load(path, NULL, NULL, s), WEFT_OK);
    return s;
}

static int nic_index(const weft_topo_summary_t *s, const char *name)
{
    for (int k = 0; k < s->nnics; k++) {
        if (strcmp(s->nics[k].name, name) == 0) {
            return k;
        }
    }
    fail_msg("NIC %s not found", name);
    return -1;
}

/* ---- edge cases first ---- */

static void test_missing_and_invalid_files(void **state)
{
    (void)state;
    weft_topo_summary_t s;
    char path[1024];
    memset(&s, 0x5a, sizeof(s));
    snprintf(path, sizeof(path), "%s/does-not-exist.xml", xml_dir);
    assert_int_equal(weft__topo_load(path, quiet_log, NULL, &s), WEFT_ERR_IO);
    /* A file that is not a topology: the generator script itself. */
    snprintf(path, sizeof(path), "%s/gen_topologies.py", xml_dir);
    assert_int_equal(weft__topo_load(path, quiet_log, NULL, &s), WEFT_ERR_IO);
    assert_int_equal(((unsigned char *)&s)[0], 0x5a); /* output untouched on failure */
    assert_int_equal(weft__topo_load(path, quiet_log, NULL, NULL), WEFT_ERR_INVALID_ARG);
}

static void test_cpu_only(void **state)
{
    (void)state;
    weft_topo_summary_t *s = load("cpuonly.xml");
    assert_string_equal(s->hostname, "cpu-1");
    assert_string_equal(s->host_id, "");
    assert_true(s->flags & WEFT_TOPO_FROM_XML);
    assert_int_equal(s->numa_nodes, 1);
    assert_int_equal(s->pus, 2);
    assert_int_equal(s->ngpus, 0);
    assert_int_equal(s->my_gpu, -1);
    assert_int_equal(s->nnics, 1);
    assert_string_equal(s->nics[0].name, "eth0");
    assert_string_equal(s->nics[0].netdev, "eth0");
    assert_string_equal(s->nics[0].busid, "0000:00:03.0");
    assert_int_equal(s->nics[0].rdma, 0);
    assert_int_equal(s->nics[0].numa, 0);
    assert_int_equal(weft__topo_nearest_rdma_nic(s, 0, NULL), -1);
    free(s);
}

static void test_dgx_gpus_and_nvlink(void **state)
{
    (void)state;
    weft_topo_summary_t *s = load("dgx8-a.xml");
    assert_string_equal(s->hostname, "dgx-a");
    assert_int_equal(s->numa_nodes, 2);
    assert_int_equal(s->pus, 16);
    assert_int_equal(s->ngpus, 8);
    /* Bus ids 0x12, 0x13 (switch 0), 0x32, 0x33 (switch 1) on socket 0; 0x52.. on 1. */
    static const char *const busids[8] = {"0000:12:00.0", "0000:13:00.0", "0000:32:00.0",
                                          "0000:33:00.0", "0000:52:00.0", "0000:53:00.0",
                                          "0000:72:00.0", "0000:73:00.0"};
    for (int i = 0; i < 8; i++) {
        char cuda[32];
        snprintf(cuda, sizeof(cuda), "cuda%d", i);
        assert_string_equal(s->gpus[i].busid, busids[i]);
        assert_string_equal(s->gpus[i].name, cuda);
        assert_string_equal(s->gpus[i].model, "NVIDIA A100-SXM4-40GB");
        assert_int_equal(s->gpus[i].numa, i < 4 ? 0 : 1);
    }
    assert_int_equal(s->gpu_path[0][0], WEFT_PATH_PIX);
    assert_int_equal(s->gpu_path[0][1], WEFT_PATH_PIX);  /* one switch port */
    assert_int_equal(s->gpu_path[0][2], WEFT_PATH_NODE); /* two host bridges, one socket */
    assert_int_equal(s->gpu_path[0][4], WEFT_PATH_SYS);
    assert_int_equal(s->gpu_path[7][3], WEFT_PATH_SYS);
    assert_int_equal(s->gpu_path[6][7], WEFT_PATH_PIX);
    /* Hybrid cube mesh: 1 or 2 links of 25 GB/s inside a quad, 2 links to i+4. */
    assert_int_equal(s->nvlink_mbps[0][1], 25000);
    assert_int_equal(s->nvlink_mbps[0][2], 50000);
    assert_int_equal(s->nvlink_mbps[0][4], 50000);
    assert_int_equal(s->nvlink_mbps[4][0], 50000);
    assert_int_equal(s->nvlink_mbps[0][5], 0);
    assert_int_equal(s->nvlink_mbps[3][6], 0);
    assert_int_equal(s->nvlink_mbps[5][6], 25000);
    assert_int_equal(s->nvlink_mbps[2][2], 0); /* the diagonal is not a link */
    free(s);
}

static void test_dgx_nics(void **state)
{
    (void)state;
    weft_topo_summary_t *s = load("dgx8-a.xml");
    assert_int_equal(s->nnics, 5);
    for (int n = 0; n < 4; n++) {
        char name[32], netdev[32];
        snprintf(name, sizeof(name), "mlx5_%d", n);
        snprintf(netdev, sizeof(netdev), "ib%d", n);
        int k = nic_index(s, name);
        assert_string_equal(s->nics[k].netdev, netdev);
        assert_int_equal(s->nics[k].rdma, 1);
        assert_int_equal(s->nics[k].numa, n < 2 ? 0 : 1);
        /* NIC n sits in the switch of GPUs 2n and 2n+1. */
        weft_topo_path_t path = WEFT_PATH_UNKNOWN;
        assert_int_equal(weft__topo_nearest_rdma_nic(s, 2 * n, &path), k);
        assert_int_equal(path, WEFT_PATH_PIX);
        assert_int_equal(weft__topo_nearest_rdma_nic(s, 2 * n + 1, &path), k);
    }
    int eth = nic_index(s, "enp193s0f0");
    assert_int_equal(s->nics[eth].rdma, 0);
    assert_string_equal(s->nics[eth].busid, "0000:c1:00.0");
    assert_int_equal(s->gpu_nic_path[0][eth], WEFT_PATH_NODE);
    assert_int_equal(s->gpu_nic_path[4][eth], WEFT_PATH_SYS);
    assert_int_equal(s->gpu_nic_path[0][nic_index(s, "mlx5_1")], WEFT_PATH_NODE);
    assert_int_equal(s->gpu_nic_path[0][nic_index(s, "mlx5_3")], WEFT_PATH_SYS);
    free(s);
}

static void test_pcie_gpus_found_by_pci_class(void **state)
{
    (void)state;
    weft_topo_summary_t *s = load("pcie2.xml");
    assert_string_equal(s->hostname, "ws-1");
    assert_int_equal(s->ngpus, 2);
    assert_string_equal(s->gpus[0].busid, "0000:01:00.0");
    assert_string_equal(s->gpus[1].busid, "0000:02:00.0");
    assert_string_equal(s->gpus[0].name, ""); /* no CUDA/NVML OS devices in this file */
    assert_string_equal(s->gpus[0].model, "GA102 [GeForce RTX 3090]");
    assert_int_equal(s->gpu_path[0][1], WEFT_PATH_PHB); /* two root ports */
    assert_int_equal(s->nvlink_mbps[0][1], 0);
    assert_int_equal(s->nnics, 1);
    assert_string_equal(s->nics[0].name, "enp5s0");
    assert_int_equal(s->nics[0].rdma, 0);
    assert_int_equal(s->gpu_nic_path[1][0], WEFT_PATH_PHB);
    assert_int_equal(weft__topo_nearest_rdma_nic(s, 0, NULL), -1);
    free(s);
}

static void test_far_nic(void **state)
{
    (void)state;
    weft_topo_summary_t *s = load("farnic.xml");
    weft_topo_path_t path = WEFT_PATH_PIX;
    assert_int_equal(s->ngpus, 2);
    assert_int_equal(s->nnics, 1);
    assert_int_equal(weft__topo_nearest_rdma_nic(s, 1, &path), 0);
    assert_int_equal(path, WEFT_PATH_SYS);
    assert_int_equal(s->gpu_path[0][1], WEFT_PATH_PHB);
    assert_int_equal(s->gpus[0].numa, 0);
    assert_int_equal(s->nics[0].numa, 1);
    free(s);
}

static void test_find_gpu(void **state)
{
    (void)state;
    weft_topo_summary_t *s = load("dgx8-a.xml");
    assert_int_equal(weft__topo_find_gpu(s, "0000:12:00.0"), 0);
    assert_int_equal(weft__topo_find_gpu(s, "00000000:73:00.0"), 7); /* CUDA's format */
    assert_int_equal(weft__topo_find_gpu(s, "0000:7A:00.0"), -1);
    assert_int_equal(weft__topo_find_gpu(s, "0000:33:00.0"), 3);
    assert_int_equal(weft__topo_find_gpu(s, "0000:33:00.1"), -1);
    assert_int_equal(weft__topo_find_gpu(s, "not a bus id"), -1);
    assert_int_equal(weft__topo_find_gpu(s, "0000:33:00.0x"), -1);
    assert_int_equal(weft__topo_find_gpu(s, "0000:33:0x0.0"), -1);
    assert_int_equal(weft__topo_find_gpu(s, "0000:72:00.0"), 6);
    assert_int_equal(weft__topo_find_gpu(s, "0000:012:00.0"), -1);
    assert_int_equal(weft__topo_find_gpu(s, NULL), -1);
    free(s);
}

/* Discovery of the machine running the test: whatever it has, the summary is sane. */
static void test_discover_this_host(void **state)
{
    (void)state;
    weft_topo_summary_t *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    assert_int_equal(weft__topo_load(NULL, quiet_log, NULL, s), WEFT_OK);
    assert_true(s->hostname[0] != '\0');
    assert_false(s->flags & WEFT_TOPO_FROM_XML);
    assert_true(s->pus >= 1);
    assert_true(s->numa_nodes >= 1);
    assert_in_range(s->ngpus, 0, WEFT_TOPO_MAX_GPUS);
    assert_int_equal(s->my_gpu, -1);
#ifdef WEFT_HAVE_NCCL
    assert_true(s->flags & WEFT_TOPO_NCCL_BUILT);
#endif
    free(s);
}

static void test_path_names(void **state)
{
    (void)state;
    assert_string_equal(weft__topo_path_name(WEFT_PATH_PIX), "PIX");
    assert_string_equal(weft__topo_path_name(WEFT_PATH_SYS), "SYS");
    assert_string_equal(weft__topo_path_name((weft_topo_path_t)42), "unknown");
}

/* ---- serialization ---- */

static void roundtrip(const char *name, int my_gpu)
{
    weft_topo_summary_t *s = load(name);
    weft_topo_summary_t *back = calloc(1, sizeof(*back));
    uint8_t buf[WEFT_TOPO_PACKED_MAX];
    size_t len = 0;
    assert_non_null(back);
    s->my_gpu = my_gpu;
    assert_int_equal(weft__topo_pack(s, buf, sizeof(buf), &len), WEFT_OK);
    assert_true(len > 4 && len <= sizeof(buf));
    assert_int_equal(weft__topo_unpack(buf, len, back), WEFT_OK);
    assert_memory_equal(s, back, sizeof(*s));
    /* Every strict prefix and one extra byte are rejected. */
    for (size_t cut = 0; cut < len; cut++) {
        assert_int_equal(weft__topo_unpack(buf, cut, back), WEFT_ERR_PROTOCOL);
    }
    buf[len] = 0;
    assert_int_equal(weft__topo_unpack(buf, len + 1, back), WEFT_ERR_PROTOCOL);
    /* A buffer one byte short is refused by the packer. */
    assert_int_equal(weft__topo_pack(s, buf, len - 1, &len), WEFT_ERR_INVALID_ARG);
    free(back);
    free(s);
}

static void test_pack_roundtrip(void **state)
{
    (void)state;
    roundtrip("dgx8-a.xml", 5);
    roundtrip("pcie2.xml", 0);
    roundtrip("farnic.xml", -1);
    roundtrip("cpuonly.xml", -1);
}

static void test_pack_rejects_bad_input(void **state)
{
    (void)state;
    weft_topo_summary_t *s = load("dgx8-a.xml");
    weft_topo_summary_t *back = calloc(1, sizeof(*back));
    uint8_t buf[WEFT_TOPO_PACKED_MAX];
    size_t len = 0;
    assert_non_null(back);
    assert_int_equal(weft__topo_pack(s, buf, sizeof(buf), &len), WEFT_OK);

    uint8_t bad[WEFT_TOPO_PACKED_MAX];
    memcpy(bad, buf, len);
    bad[0] = 'X'; /* magic */
    assert_int_equal(weft__topo_unpack(bad, len, back), WEFT_ERR_PROTOCOL);
    memcpy(bad, buf, len);
    bad[12] = WEFT_TOPO_MAX_GPUS + 1; /* ngpus, after magic, flags, numa, pus */
    assert_int_equal(weft__topo_unpack(bad, len, back), WEFT_ERR_PROTOCOL);
    memcpy(bad, buf, len);
    bad[14] = 9 + 1; /* my_gpu + 1 = 10 > ngpus */
    assert_int_equal(weft__topo_unpack(bad, len, back), WEFT_ERR_PROTOCOL);

    /* Flipping any byte may give another valid summary, but never a crash or an
     * out-of-range field. */
    for (size_t i = 0; i < len; i++) {
        memcpy(bad, buf, len);
        bad[i] ^= 0xff;
        memset(back, 0, sizeof(*back));
        weft_status_t st = weft__topo_unpack(bad, len, back);
        assert_true(st == WEFT_OK || st == WEFT_ERR_PROTOCOL);
        if (st == WEFT_OK) {
            assert_in_range(back->ngpus, 0, WEFT_TOPO_MAX_GPUS);
            assert_in_range(back->nnics, 0, WEFT_TOPO_MAX_NICS);
            assert_true(back->my_gpu >= -1 && back->my_gpu < back->ngpus);
            assert_true(strlen(back->hostname) < WEFT_TOPO_STR);
        }
    }

    s->my_gpu = 8; /* out of range: refused */
    assert_int_equal(weft__topo_pack(s, buf, sizeof(buf), &len), WEFT_ERR_INVALID_ARG);
    s->my_gpu = -1;
    assert_int_equal(weft__topo_pack(NULL, buf, sizeof(buf), &len), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft__topo_unpack(NULL, 10, back), WEFT_ERR_INVALID_ARG);
    free(back);
    free(s);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        xml_dir = argv[1];
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_and_invalid_files),
        cmocka_unit_test(test_cpu_only),
        cmocka_unit_test(test_dgx_gpus_and_nvlink),
        cmocka_unit_test(test_dgx_nics),
        cmocka_unit_test(test_pcie_gpus_found_by_pci_class),
        cmocka_unit_test(test_far_nic),
        cmocka_unit_test(test_find_gpu),
        cmocka_unit_test(test_discover_this_host),
        cmocka_unit_test(test_path_names),
        cmocka_unit_test(test_pack_roundtrip),
        cmocka_unit_test(test_pack_rejects_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
