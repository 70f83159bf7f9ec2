/*
 * weft_info_print(): the summary (what this weft was built with and what it can use
 * here) and the settings table. The topology section is in info_topo.c.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "comm/device/cublas_lazy.h"
#endif

#include "comm/coll/coll.h"
#include "comm/diag/info.h"
#include "comm/device/memtype.h"
#include "transports/transport.h"
#include "weft/core.h"
#ifdef WEFT_HAVE_NCCL
#include "transports/nccl.h"
#endif

#define INFO_SECTIONS                                                                              \
    (WEFT_INFO_SUMMARY | WEFT_INFO_CONFIG | WEFT_INFO_TOPOLOGY | WEFT_INFO_ALGORITHMS)
#define INFO_FLAGS (INFO_SECTIONS | WEFT_INFO_TOPOLOGY_GPU)

const char *weft__info_setting(const char *name)
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

static void print_cuda(FILE *out)
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
    fprintf(out, "CUDA:        built, runtime %d.%d linked in\n", rt / 1000, (rt % 1000) / 10);
    if (drv > 0) {
        fprintf(out, "CUDA driver: found, version %d.%d, %d device(s) visible\n", drv / 1000,
                (drv % 1000) / 10, weft__cuda_device_count());
    } else {
        fprintf(out, "CUDA driver: not found (libcuda.so.1): every buffer is host memory\n");
    }
    const char *blas = weft__cublas_library();
    if (blas != NULL) {
        fprintf(out, "cuBLAS:      found (%s)\n", blas);
    } else {
        fprintf(out, "cuBLAS:      not found (libcublas.so.13 or .12): vocabulary primitives "
                     "on CUDA buffers fail\n");
    }
#else
    fprintf(out, "CUDA:        not built\n");
#endif
}

static void print_nccl(FILE *out)
{
#ifdef WEFT_HAVE_NCCL
    /* The library is opened here if no one did yet; its absence is no error. */
    char status[640];
    const char *mode = weft__nccl_repair_mode();
    fprintf(out, "NCCL:        built, %s\n", weft__nccl_status(status, sizeof(status)));
    fprintf(out, "NCCL repair: %s (%s)\n", mode,
            strcmp(mode, "shrink") == 0
                ? "a group that loses members shrinks its communicator with ncclCommShrink"
                : "a group that loses members builds a new communicator from a new id");
#else
    fprintf(out, "NCCL:        not built\n");
#endif
}

static void print_summary(FILE *out)
{
    fprintf(out, "weft %s\n", weft_version(NULL, NULL, NULL));
    fprintf(out, "Transports (built, in preference order):\n");
    for (size_t i = 0; weft__transports[i] != NULL; i++) {
        const weft_transport_t *t = weft__transports[i];
        int usable = t->available();
        fprintf(out, "  %-6s %s\n", t->name, usable ? "usable" : "not usable on this machine");
    }
    print_cuda(out);
    print_nccl(out);
    const char *ov = weft__info_setting("WEFT_TRANSPORT");
    fprintf(out, "WEFT_TRANSPORT=%s (weft-info --topology shows what it chooses here)\n",
            ov != NULL ? ov : "auto");
}

static void print_config(FILE *out)
{
    const weft_config_entry_t *e;
    const char *value = NULL;
    for (size_t i = 0; (e = weft_config_entry(NULL, i, &value)) != NULL; i++) {
        int changed = getenv(e->name) != NULL;
        fprintf(out, "%s=%s%s\n", e->name, value != NULL ? value : "",
                changed ? "   (set in the environment)" : "");
        fprintf(out, "    default: %s\n    %s\n", e->deflt[0] != '\0' ? e->deflt : "(empty)",
                e->doc);
    }
}

/* WEFT_OK when @p p asks for something that can be printed. */
static weft_status_t check_params(const weft_info_params_t *p)
{
    if (p->size < offsetof(weft_info_params_t, gpu) + sizeof(p->gpu)) {
        return WEFT_ERR_INVALID_ARG;
    }
    if ((p->flags & ~(unsigned)INFO_FLAGS) != 0) {
        return WEFT_ERR_INVALID_ARG;
    }
    int topo = (p->flags & WEFT_INFO_TOPOLOGY) != 0;
    if (!topo &&
        (p->topo_xml != NULL || p->peer_xml != NULL || (p->flags & WEFT_INFO_TOPOLOGY_GPU) != 0)) {
        return WEFT_ERR_INVALID_ARG;
    }
    if ((p->flags & WEFT_INFO_TOPOLOGY_GPU) != 0 && p->gpu < 0) {
        return WEFT_ERR_INVALID_ARG;
    }
    return WEFT_OK;
}

weft_status_t weft_info_print(FILE *out, const weft_info_params_t *params)
{
    weft_info_params_t p = {.size = sizeof(p), .flags = WEFT_INFO_SUMMARY};
    weft_status_t status = WEFT_OK;
    if (out == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (params != NULL) {
        status = check_params(params);
        if (status != WEFT_OK) {
            return status;
        }
        p = *params;
        if ((p.flags & INFO_SECTIONS) == 0) {
            p.flags |= WEFT_INFO_SUMMARY;
        }
    }
    const char *sep = "";
    if (p.flags & WEFT_INFO_SUMMARY) {
        print_summary(out);
        sep = "\n";
    }
    if (p.flags & WEFT_INFO_CONFIG) {
        fputs(sep, out);
        print_config(out);
        sep = "\n";
    }
    if (p.flags & WEFT_INFO_TOPOLOGY) {
        fputs(sep, out);
        status = weft__info_topology(out, &p);
        sep = "\n";
    }
    if ((p.flags & WEFT_INFO_ALGORITHMS) && status == WEFT_OK) {
        weft_config_t cfg;
        fputs(sep, out);
        status = weft__config_load(&cfg, NULL);
        if (status == WEFT_OK) {
            weft__coll_rules_print(out, &cfg);
        } else {
            fprintf(out, "Collective algorithms: %s\n", weft_last_error(NULL));
        }
    }
    if (fflush(out) != 0 || ferror(out)) {
        return status != WEFT_OK ? status : WEFT_ERR_IO;
    }
    return status;
}
