/*
 * weft_info_print() through the public API only: each section prints what it names and
 * nothing else, bad parameters print nothing and return WEFT_ERR_INVALID_ARG, and the
 * topology section reads XML files of machines this one is not.
 *   test_info TOPOLOGY_DIR
 * With WEFT_NCCL_LIBRARY naming a missing library, the NCCL line says why it is missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weft/weft.h"

static const char *topo_dir;

/* The report for @p params (NULL allowed) in a string to free; *status its result. */
static char *report(const weft_info_params_t *params, weft_status_t *status)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    *status = weft_info_print(f, params);
    assert_int_equal(fclose(f), 0);
    assert_non_null(text);
    return text;
}

/* @p name in the topology folder; the buffer is reused by the next call. */
static char *topo_path(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof(path), "%s/%s", topo_dir, name);
    return path;
}

static void test_bad_params(void **state)
{
    (void)state;
    weft_info_params_t ok = {.size = sizeof(ok), .flags = WEFT_INFO_SUMMARY};
    assert_int_equal(weft_info_print(NULL, &ok), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_info_print(NULL, NULL), WEFT_ERR_INVALID_ARG);

    weft_info_params_t bad[] = {
        {.size = 0, .flags = WEFT_INFO_SUMMARY},
        {.size = sizeof(size_t), .flags = WEFT_INFO_SUMMARY},
        {.size = sizeof(ok), .flags = 1u << 20},
        {.size = sizeof(ok), .flags = WEFT_INFO_SUMMARY | WEFT_INFO_TOPOLOGY_GPU},
        {.size = sizeof(ok), .flags = WEFT_INFO_CONFIG, .topo_xml = "x.xml"},
        {.size = sizeof(ok), .flags = WEFT_INFO_SUMMARY, .peer_xml = "x.xml"},
        {.size = sizeof(ok), .flags = WEFT_INFO_TOPOLOGY | WEFT_INFO_TOPOLOGY_GPU, .gpu = -1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        weft_status_t status;
        char *text = report(&bad[i], &status);
        assert_int_equal(status, WEFT_ERR_INVALID_ARG);
        assert_string_equal(text, ""); /* nothing printed */
        free(text);
    }
}

static void test_summary(void **state)
{
    (void)state;
    weft_info_params_t zero = {.size = sizeof(zero)}; /* no section: the summary */
    const weft_info_params_t *cases[] = {NULL, &zero};
    for (size_t i = 0; i < 2; i++) {
        weft_status_t status;
        char *text = report(cases[i], &status);
        assert_int_equal(status, WEFT_OK);
        char first[64];
        snprintf(first, sizeof(first), "weft %s\n", weft_version(NULL, NULL, NULL));
        assert_memory_equal(text, first, strlen(first));
        assert_non_null(
            strstr(text, "Transports (built, in preference order):\n  self   usable\n"));
        assert_non_null(strstr(text, "\n  ucx "));
        assert_non_null(strstr(text, "\nCUDA:        "));
        assert_non_null(strstr(text, "\nNCCL:        "));
        assert_non_null(strstr(text, "\nWEFT_TRANSPORT="));
        assert_null(strstr(text, "    default: ")); /* not the settings */
        assert_null(strstr(text, "Transport choice"));
        free(text);
    }
}

/* NCCL: built or not; when built, the library loaded or why not, and the repair mode. */
static void test_summary_nccl(void **state)
{
    (void)state;
    weft_status_t status;
    char *text = report(NULL, &status);
    assert_int_equal(status, WEFT_OK);
    const char *line = strstr(text, "\nNCCL:        ");
    assert_non_null(line);
    if (strncmp(line, "\nNCCL:        not built\n", 24) == 0) {
        assert_null(strstr(text, "NCCL repair:"));
        free(text);
        return;
    }
    assert_true(strncmp(line, "\nNCCL:        built, ", 21) == 0);
    const char *missing = getenv("WEFT_NCCL_LIBRARY");
    if (missing != NULL) { /* the CTest entry that names a library that is not there */
        assert_true(strncmp(line, "\nNCCL:        built, NCCL library not found: ", 45) == 0);
        assert_non_null(strstr(line, missing));
        assert_non_null(strstr(text, "\nNCCL repair: rebuild ("));
    } else {
        assert_true(strstr(text, "\nNCCL repair: shrink (") != NULL ||
                    strstr(text, "\nNCCL repair: rebuild (") != NULL);
    }
    free(text);
}

static void test_config(void **state)
{
    (void)state;
    weft_info_params_t p = {.size = sizeof(p), .flags = WEFT_INFO_CONFIG};
    weft_status_t status;
    char *text = report(&p, &status);
    assert_int_equal(status, WEFT_OK);
    const weft_config_entry_t *e;
    for (size_t i = 0; (e = weft_config_entry(NULL, i, NULL)) != NULL; i++) {
        char name[128];
        snprintf(name, sizeof(name), "%s=", e->name);
        assert_non_null(strstr(text, name));
    }
    assert_memory_equal(text, "WEFT_", 5); /* the settings alone */
    assert_non_null(strstr(text, "    default: "));
    assert_null(strstr(text, "Transports"));
    free(text);
}

static void test_topology_cpu_only(void **state)
{
    (void)state;
    weft_info_params_t p = {
        .size = sizeof(p), .flags = WEFT_INFO_TOPOLOGY, .topo_xml = topo_path("cpuonly.xml")};
    weft_status_t status;
    char *text = report(&p, &status);
    assert_int_equal(status, WEFT_OK);
    assert_memory_equal(text, "Host ", 5);
    assert_non_null(strstr(text, "read from an XML file"));
    assert_non_null(strstr(text, "GPUs: none"));
    assert_non_null(strstr(text, "CPU-only host"));
    assert_non_null(strstr(text, "rule host-self"));
    assert_non_null(strstr(text, "rule host-network"));
    assert_null(strstr(text, "CUDA buffer ->")); /* no GPU: host rows only */
    free(text);
}

static void test_topology_gpu(void **state)
{
    (void)state;
    weft_info_params_t p = {.size = sizeof(p),
                            .flags = WEFT_INFO_TOPOLOGY | WEFT_INFO_TOPOLOGY_GPU,
                            .topo_xml = topo_path("dgx8-a.xml"),
                            .gpu = 2};
    char peer[4096];
    snprintf(peer, sizeof(peer), "%s", topo_path("dgx8-b.xml"));
    p.peer_xml = peer;
    weft_status_t status;
    char *text = report(&p, &status);
    assert_int_equal(status, WEFT_OK);
    assert_non_null(strstr(text, "[2] 0000:32:00.0  cuda2 "));
    assert_non_null(strstr(text, "<- this process"));
    assert_non_null(strstr(text, "This process drives GPU 2"));
    assert_non_null(strstr(text, "GPU 2 -> nearest RDMA NIC mlx5_1, path PIX"));
    assert_non_null(strstr(text, "CUDA buffer ->"));
    free(text);

    p.gpu = 8; /* the host has 8 GPUs: 0 .. 7 */
    text = report(&p, &status);
    assert_int_equal(status, WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(text, "GPU 8 is not on host"));
    free(text);
}

static void test_topology_unreadable(void **state)
{
    (void)state;
    weft_info_params_t p = {
        .size = sizeof(p), .flags = WEFT_INFO_TOPOLOGY, .topo_xml = topo_path("no-such.xml")};
    weft_status_t status;
    char *text = report(&p, &status);
    assert_int_equal(status, WEFT_ERR_IO);
    assert_non_null(strstr(text, "Topology error: "));
    assert_non_null(strstr(text, "no-such.xml"));
    free(text);

    /* The other host unreadable: this host is printed, then why it stopped. */
    char peer[4096];
    snprintf(peer, sizeof(peer), "%s", topo_path("no-such.xml"));
    p.peer_xml = peer;
    p.topo_xml = topo_path("cpuonly.xml");
    text = report(&p, &status);
    assert_int_equal(status, WEFT_ERR_IO);
    assert_memory_equal(text, "Host ", 5);
    assert_non_null(strstr(text, "Topology error: "));
    assert_non_null(strstr(text, "no-such.xml"));
    assert_null(strstr(text, "Transport choice"));
    free(text);
}

static void test_topology_bad_override(void **state)
{
    (void)state;
    assert_int_equal(setenv("WEFT_TRANSPORT", "carrier-pigeon", 1), 0);
    weft_info_params_t p = {
        .size = sizeof(p), .flags = WEFT_INFO_TOPOLOGY, .topo_xml = topo_path("cpuonly.xml")};
    weft_status_t status;
    char *text = report(&p, &status);
    assert_int_equal(unsetenv("WEFT_TRANSPORT"), 0);
    assert_int_equal(status, WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(text, "WEFT_TRANSPORT=carrier-pigeon is not auto, ucx or nccl"));
    free(text);
}

/* Sections print in the order of the flags, one blank line between them. */
static void test_all_sections(void **state)
{
    (void)state;
    weft_info_params_t p = {.size = sizeof(p),
                            .flags = WEFT_INFO_TOPOLOGY | WEFT_INFO_CONFIG | WEFT_INFO_SUMMARY,
                            .topo_xml = topo_path("cpuonly.xml")};
    weft_status_t status;
    char *text = report(&p, &status);
    assert_int_equal(status, WEFT_OK);
    const char *summary = strstr(text, "Transports (built");
    const char *config = strstr(text, "\n\nWEFT_");
    const char *topo = strstr(text, "\n\nHost ");
    assert_non_null(summary);
    assert_non_null(config);
    assert_non_null(topo);
    assert_true(summary < config && config < topo);
    free(text);
}

/* The collectives' rule table, with the settings in effect: the latency limits it prints
 * are the alpha-beta crossover, base x (2(P-1) - L) / L minus the 32-byte header,
 * computed here on their own; a setting changes the table, a bad one is reported. */
static void test_algorithms(void **state)
{
    (void)state;
    weft_info_params_t p = {.size = sizeof(p), .flags = WEFT_INFO_ALGORITHMS};
    weft_status_t status;
    assert_int_equal(setenv("WEFT_COLL_NET_SMALL_MAX", "24K", 1), 0);
    char *text = report(&p, &status);
    assert_int_equal(status, WEFT_OK);
    assert_memory_equal(text, "Collective algorithms", 21);
    assert_null(strstr(text, "Transports (built")); /* the table alone */
    char want[160];
    /* 8 ranks: L = 3, 2(P-1) = 14: 24K / 3 x 11 = 90112 bytes, less the header. */
    snprintf(want, sizeof(want), "(WEFT_COLL_NET_SMALL_MAX=24K): P=2: %d, 4: %d, 8: %d,",
             24 * 1024 - 32, 24 * 1024 / 2 * 4 - 32, 24 * 1024 / 3 * 11 - 32);
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "WEFT_COLL_HIER_SEGMENT=128K, 4 in flight"));
    assert_non_null(strstr(text, "WEFT_COLL_NET_CHUNK=64K"));
    free(text);
    assert_int_equal(setenv("WEFT_COLL_HIER_SEGMENT", "0", 1), 0);
    text = report(&p, &status);
    assert_int_equal(status, WEFT_OK);
    assert_non_null(strstr(text, "WEFT_COLL_HIER_SEGMENT=0 turns slicing off"));
    free(text);
    assert_int_equal(setenv("WEFT_COLL_HIER_SEGMENT", "lots", 1), 0);
    text = report(&p, &status);
    assert_int_equal(status, WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(text, "WEFT_COLL_HIER_SEGMENT='lots' is not valid"));
    free(text);
    assert_int_equal(unsetenv("WEFT_COLL_HIER_SEGMENT"), 0);
    assert_int_equal(unsetenv("WEFT_COLL_NET_SMALL_MAX"), 0);
}

/* A stream that cannot be written: WEFT_ERR_IO. */
static void test_write_error(void **state)
{
    (void)state;
    FILE *f = fopen("/dev/full", "w");
    if (f == NULL) {
        skip();
    }
    assert_int_equal(weft_info_print(f, NULL), WEFT_ERR_IO);
    fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_info TOPOLOGY_DIR\n");
        return 2;
    }
    topo_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_params),          cmocka_unit_test(test_summary),
        cmocka_unit_test(test_summary_nccl),        cmocka_unit_test(test_config),
        cmocka_unit_test(test_topology_cpu_only),   cmocka_unit_test(test_topology_gpu),
        cmocka_unit_test(test_topology_unreadable), cmocka_unit_test(test_topology_bad_override),
        cmocka_unit_test(test_all_sections),        cmocka_unit_test(test_algorithms),
        cmocka_unit_test(test_write_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
