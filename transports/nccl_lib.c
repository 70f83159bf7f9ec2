/*
 * NCCL loaded on first use: libweft has no libnccl in its DT_NEEDED, so a host-only job
 * never loads it and a machine without it still runs everything else. The library
 * (WEFT_NCCL_LIBRARY, default libnccl.so.2) is opened once per process and its
 * functions resolved into one table; a missing library or function is reported once
 * and available() says 0.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transports/nccl.h"
#include "weft/core.h"

/* Process-wide by nature (one copy of NCCL per process), written once under
 * pthread_once and read-only afterwards. */
static struct {
    weft_nccl_lib_t fn;
    void *handle;
    int ok; /* every mandatory function resolved */
    char path[512];
    char error[512];
} nccl;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void nccl_load(void)
{
    const char *name = getenv(WEFT_NCCL_LIBRARY_ENV);
    if (name == NULL || name[0] == '\0') {
        name = WEFT_NCCL_LIBRARY_DEFAULT;
    }
    snprintf(nccl.path, sizeof(nccl.path), "%s", name);
    nccl.handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (nccl.handle == NULL) {
        const char *why = dlerror();
        snprintf(nccl.error, sizeof(nccl.error), "NCCL library not found: %s",
                 why != NULL ? why : name);
        return;
    }
    const char *missing = NULL;
#define RESOLVE(field, sym, mandatory)                                                             \
    do {                                                                                           \
        *(void **)&nccl.fn.field = dlsym(nccl.handle, sym);                                        \
        if (nccl.fn.field == NULL && (mandatory) && missing == NULL) {                             \
            missing = sym;                                                                         \
        }                                                                                          \
    } while (0)
    RESOLVE(GetVersion, "ncclGetVersion", 1);
    RESOLVE(GetUniqueId, "ncclGetUniqueId", 1);
    RESOLVE(GetErrorString, "ncclGetErrorString", 1);
    RESOLVE(GetLastError, "ncclGetLastError", 1);
    RESOLVE(CommInitRankConfig, "ncclCommInitRankConfig", 1);
    RESOLVE(CommFinalize, "ncclCommFinalize", 1);
    RESOLVE(CommDestroy, "ncclCommDestroy", 1);
    RESOLVE(CommAbort, "ncclCommAbort", 1);
    RESOLVE(CommGetAsyncError, "ncclCommGetAsyncError", 1);
    RESOLVE(AllReduce, "ncclAllReduce", 1);
    RESOLVE(Broadcast, "ncclBroadcast", 1);
    RESOLVE(AllGather, "ncclAllGather", 1);
    RESOLVE(ReduceScatter, "ncclReduceScatter", 1);
    RESOLVE(Send, "ncclSend", 1);
    RESOLVE(Recv, "ncclRecv", 1);
    RESOLVE(GroupStart, "ncclGroupStart", 1);
    RESOLVE(GroupEnd, "ncclGroupEnd", 1);
#ifdef WEFT_NCCL_SHRINK
    RESOLVE(CommShrink, "ncclCommShrink", 0);
#endif
#ifdef WEFT_NCCL_REVOKE
    RESOLVE(CommRevoke, "ncclCommRevoke", 0);
#endif
#undef RESOLVE
    if (missing != NULL) {
        snprintf(nccl.error, sizeof(nccl.error), "NCCL library %s lacks %s", name, missing);
        return;
    }
    if (nccl.fn.GetVersion(&nccl.fn.version) != ncclSuccess) {
        nccl.fn.version = 0;
    }
#ifdef WEFT_NCCL_SHRINK
    if (nccl.fn.version < NCCL_VERSION(2, 27, 0)) {
        nccl.fn.CommShrink = NULL; /* a symbol of that name, but not the 2.27 semantics */
    }
#endif
#ifdef WEFT_NCCL_REVOKE
    if (nccl.fn.version < NCCL_VERSION(2, 28, 0)) {
        nccl.fn.CommRevoke = NULL;
    }
#endif
    nccl.ok = 1;
}

const weft_nccl_lib_t *weft__nccl_lib(void)
{
    pthread_once(&load_once, nccl_load);
    return nccl.ok ? &nccl.fn : NULL;
}

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probed_devices; /* written once under probe_once */

static void probe_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        n = 0;
        (void)cudaGetLastError(); /* no driver or no device: not an error for us */
    }
    probed_devices = n;
}

int weft__nccl_available(void)
{
    if (weft__nccl_lib() == NULL) {
        return 0;
    }
    pthread_once(&probe_once, probe_devices);
    return probed_devices > 0;
}

int weft__nccl_version(void)
{
    const weft_nccl_lib_t *lib = weft__nccl_lib();
    return lib != NULL ? lib->version : 0;
}

const char *weft__nccl_repair_mode(void)
{
#ifdef WEFT_NCCL_SHRINK
    const weft_nccl_lib_t *lib = weft__nccl_lib();
    if (lib != NULL && lib->CommShrink != NULL) {
        return "shrink";
    }
#endif
    return "rebuild";
}

const char *weft__nccl_unavailable_why(void)
{
    if (weft__nccl_lib() == NULL) {
        return nccl.error;
    }
    pthread_once(&probe_once, probe_devices);
    return probed_devices > 0 ? "" : "no CUDA device is visible";
}

const char *weft__nccl_status(char *buf, size_t n)
{
    const weft_nccl_lib_t *lib = weft__nccl_lib();
    if (buf == NULL || n == 0) {
        return "";
    }
    if (lib == NULL) {
        snprintf(buf, n, "%s", nccl.error);
        return buf;
    }
    int v = lib->version, major = v / 10000, minor = (v / 100) % 100;
    if (v < 10000) { /* the encoding of 2.8 and older: X*1000 + Y*100 + Z */
        major = v / 1000;
        minor = (v / 100) % 10;
    }
    snprintf(buf, n, "loaded %s version %d.%d.%d, repair by %s", nccl.path, major, minor, v % 100,
             weft__nccl_repair_mode());
    return buf;
}

weft_status_t weft__nccl_unique_id(void *id)
{
    ncclUniqueId uid;
    const weft_nccl_lib_t *lib = weft__nccl_lib();
    if (id == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (lib == NULL) {
        weft__nccl_log(NULL, WEFT_LOG_ERROR, "%s", nccl.error);
        return WEFT_ERR_UNSUPPORTED;
    }
    ncclResult_t r = lib->GetUniqueId(&uid);
    if (r != ncclSuccess) {
        weft__nccl_log(NULL, WEFT_LOG_ERROR, "ncclGetUniqueId: %s", lib->GetErrorString(r));
        return WEFT_ERR_TRANSPORT;
    }
    memcpy(id, uid.internal, sizeof(uid.internal));
    return WEFT_OK;
}
