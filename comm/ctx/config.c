/*
 * The settings table. Each entry is a WEFT_* environment variable with a default, one
 * line of documentation, where it lands in weft_config_t and how it is parsed. This table
 * is the only place a setting is defined: weft-info --config lists it as is.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm/ctx/config.h"
#include "comm/core_impl.h"
#include "comm/fault.h"

extern char **environ;

typedef weft_status_t (*config_parse_fn)(const char *text, void *field);
typedef void (*config_print_fn)(const void *field, char *buf, size_t len);

typedef struct config_field {
    weft_config_entry_t entry;
    size_t offset;
    config_parse_fn parse;
    config_print_fn print;
} config_field_t;

static const char *const log_level_names[] = {"error", "warn", "info", "debug", "trace"};

static weft_status_t parse_log_level(const char *text, void *field)
{
    for (int i = 0; i <= WEFT_LOG_TRACE; i++) {
        if (strcasecmp(text, log_level_names[i]) == 0) {
            *(weft_log_level_t *)field = (weft_log_level_t)i;
            return WEFT_OK;
        }
    }
    return WEFT_ERR_INVALID_ARG;
}

static void print_log_level(const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s", log_level_names[*(const weft_log_level_t *)field]);
}

/* A non-negative integer with an optional K/M/G (binary) suffix. */
static weft_status_t parse_u64_suffixed(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)text[0])) {
        return WEFT_ERR_INVALID_ARG;
    }
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0) {
        return WEFT_ERR_INVALID_ARG;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end != '\0' || (shift > 0 && v > (UINT64_MAX >> shift))) {
        return WEFT_ERR_INVALID_ARG;
    }
    *out = (uint64_t)v << shift;
    return WEFT_OK;
}

static weft_status_t parse_u64(const char *text, void *field)
{
    return parse_u64_suffixed(text, (uint64_t *)field);
}

static void print_u64(const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRIu64, *(const uint64_t *)field);
}

static weft_status_t parse_size(const char *text, void *field)
{
    uint64_t v;
    weft_status_t st = parse_u64_suffixed(text, &v);
    if (st == WEFT_OK) {
        *(size_t *)field = (size_t)v;
    }
    return st;
}

static void print_size(const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%zu", *(const size_t *)field);
}

static weft_status_t parse_int(const char *text, void *field)
{
    uint64_t v;
    weft_status_t st = parse_u64_suffixed(text, &v);
    if (st == WEFT_OK && v > INT32_MAX) {
        st = WEFT_ERR_INVALID_ARG;
    }
    if (st == WEFT_OK) {
        *(int *)field = (int)v;
    }
    return st;
}

static void print_int(const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%d", *(const int *)field);
}

/* A count, or "auto" (-1): decided at init from the ranks per host and the cores. */
static weft_status_t parse_spins(const char *text, void *field)
{
    if (strcasecmp(text, "auto") == 0) {
        *(int *)field = -1;
        return WEFT_OK;
    }
    return parse_int(text, field);
}

static void print_spins(const void *field, char *buf, size_t len)
{
    if (*(const int *)field < 0) {
        snprintf(buf, len, "auto");
    } else {
        print_int(field, buf, len);
    }
}

static weft_status_t parse_transport(const char *text, void *field)
{
    static const char *const names[] = {"auto", "ucx", "nccl"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(text, names[i]) == 0) {
            snprintf((char *)field, sizeof(((weft_config_t *)0)->transport), "%s", names[i]);
            return WEFT_OK;
        }
    }
    return WEFT_ERR_INVALID_ARG;
}

/* A store-key prefix: letters, digits, '-', '_' and '.', 1 to 31 of them. */
static weft_status_t parse_ns(const char *text, void *field)
{
    size_t n = strlen(text);
    if (n == 0 || n >= sizeof(((weft_config_t *)0)->ns)) {
        return WEFT_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)text[i]) && strchr("-_.", text[i]) == NULL) {
            return WEFT_ERR_INVALID_ARG;
        }
    }
    memcpy(field, text, n + 1);
    return WEFT_OK;
}

static weft_status_t parse_connect(const char *text, void *field)
{
    static const char *const names[] = {"lazy", "local", "all"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(text, names[i]) == 0) {
            snprintf((char *)field, sizeof(((weft_config_t *)0)->connect), "%s", names[i]);
            return WEFT_OK;
        }
    }
    return WEFT_ERR_INVALID_ARG;
}

static weft_status_t parse_onoff(const char *text, void *field)
{
    if (strcasecmp(text, "on") == 0 || strcmp(text, "1") == 0) {
        *(int *)field = 1;
    } else if (strcasecmp(text, "off") == 0 || strcmp(text, "0") == 0) {
        *(int *)field = 0;
    } else {
        return WEFT_ERR_INVALID_ARG;
    }
    return WEFT_OK;
}

static void print_onoff(const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s", *(const int *)field ? "on" : "off");
}

static void print_ns(const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s", (const char *)field);
}

static void print_string(const void *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s", (const char *)field);
}

/* A file path; empty means none. */
static weft_status_t parse_path(const char *text, void *field)
{
    size_t n = strlen(text);
    if (n >= sizeof(((weft_config_t *)0)->topo_xml)) {
        return WEFT_ERR_INVALID_ARG;
    }
    memcpy(field, text, n + 1);
    return WEFT_OK;
}
#define print_path print_string

/* An IPv4 or IPv6 address literal (no host names: nothing to resolve at start-up). */
static weft_status_t parse_ip(const char *text, void *field)
{
    unsigned char bin[sizeof(struct in6_addr)];
    size_t n = strlen(text);
    if (n >= sizeof(((weft_config_t *)0)->boot_addr)) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (n > 0 && inet_pton(AF_INET, text, bin) != 1 && inet_pton(AF_INET6, text, bin) != 1) {
        return WEFT_ERR_INVALID_ARG;
    }
    memcpy(field, text, n + 1);
    return WEFT_OK;
}
#define print_ip print_string

/* WEFT_DEBUG_FAULTS (comm/fault.h): checked where weft_init uses it (builds without
 * NDEBUG), kept as text everywhere (weft_init warns that it is ignored). */
static weft_status_t parse_faults(const char *text, void *field)
{
    size_t room = sizeof(((weft_config_t *)0)->debug_faults);
#ifndef NDEBUG
    weft__faults_t scratch;
    memset(&scratch, 0, sizeof(scratch));
    if (strlen(text) >= room || weft__faults_parse(text, &scratch) != WEFT_OK) {
        return WEFT_ERR_INVALID_ARG;
    }
#endif
    snprintf((char *)field, room, "%s", text);
    return WEFT_OK;
}
#define print_faults print_string

#define FIELD(name_, deflt_, doc_, member_, kind_)                                             \
    {                                                                                          \
        .entry = {.name = name_, .deflt = deflt_, .doc = doc_},                                \
        .offset = offsetof(weft_config_t, member_), .parse = parse_##kind_,                    \
        .print = print_##kind_,                                                                \
    }
#define parse_string parse_transport

static const config_field_t config_table[] = {
    FIELD("WEFT_LOG_LEVEL", "warn", "Log verbosity: error, warn, info, debug or trace.",
          log_level, log_level),
    FIELD("WEFT_TIMEOUT_MS", "300000",
          "Timeout of blocking calls in milliseconds; they return WEFT_ERR_TIMEOUT after it.",
          timeout_ms, u64),
    FIELD("WEFT_CONNECT_TIMEOUT_MS", "60000",
          "How long weft_init waits for the store and for the other ranks to arrive (ms).",
          connect_timeout_ms, u64),
    FIELD("WEFT_FINALIZE_TIMEOUT_MS", "10000",
          "How long weft_finalize waits for the other members to finalize too (ms; 0: do "
          "not wait). Leaving together keeps a departure from looking like a failure.",
          finalize_timeout_ms, u64),
    FIELD("WEFT_TRANSPORT", "auto",
          "Transport for peers: auto (chosen from the topology), ucx or nccl.", transport,
          string),
    FIELD("WEFT_HEARTBEAT_MS", "100",
          "Interval of liveness heartbeats between group members (ms).", heartbeat_ms, u64),
    FIELD("WEFT_FAILURE_TIMEOUT_MS", "2000",
          "A member silent for this long is declared failed (ms). Once the store is lost, "
          "waits on peers give up after this long too (nothing can tell a hung member then).",
          failure_timeout_ms, u64),
    FIELD("WEFT_COLL_SMALL_MAX", "16K",
          "Collectives on messages up to this many bytes use latency-optimised algorithms.",
          coll_small_max, size),
    FIELD("WEFT_COLL_CHUNK", "1M",
          "Pipelining chunk of bandwidth-optimised (ring) collectives, in bytes.", coll_chunk,
          size),
    FIELD("WEFT_COLL_NET_SMALL_MAX", "32K",
          "WEFT_COLL_SMALL_MAX for groups that span several hosts: the network's latency "
          "is tens of microseconds, so recursive doubling, log2(P) steps moving the whole "
          "vector, beats the ring's 2(P-1) steps up to larger vectors than over shared "
          "memory. Must be equal on all ranks.",
          coll_net_small_max, size),
    FIELD("WEFT_COLL_NET_CHUNK", "64K",
          "Pipelining chunk of ring collectives over groups that span several hosts, in "
          "bytes: each chunk crosses the network in one message, and smaller ones keep "
          "every link of the ring busy at once. Must be equal on all ranks.",
          coll_net_chunk, size),
    FIELD("WEFT_COLL_HIER_MAX", "128K",
          "Allreduces above the latency size and up to this many bytes, on a group over "
          "several hosts with several members on some host, reduce within each host, "
          "allreduce among one leader per host and send the result back within each host; "
          "larger ones (and 0: all) take the sliced allreduce of WEFT_COLL_HIER_SEGMENT "
          "where every host has as many members, else the flat ring. Must be equal on all "
          "ranks.",
          coll_hier_max, size),
    FIELD("WEFT_COLL_HIER_SEGMENT", "128K",
          "Larger allreduces on a group over several hosts with the same number (>= 2) of "
          "members on each: every member reduces a slice within its host, allreduces it "
          "with one member of each other host and gathers the slices within its host, in "
          "segments of this many bytes that overlap (0: the flat ring). Must be equal on all "
          "ranks.",
          coll_hier_segment, size),
    FIELD("WEFT_COLL_SHM", "on",
          "on: groups whose members share one host run their collectives through a shared "
          "memory segment; off: over the transport's messages. Must be equal on all ranks.",
          coll_shm, onoff),
    FIELD("WEFT_SHM_SMALL_MAX", "4K",
          "Shared-memory collectives whose data per rank fits this many bytes carry it in "
          "one step through the segment's slots (latency path).",
          shm_small_max, size),
    FIELD("WEFT_SHM_BCAST_EAGER", "on",
          "on: the root of a shared-memory broadcast carried in the slots returns once its "
          "data is posted, and a disagreement that only the others can see fails the "
          "group's next collective that is not such a broadcast, on every rank; off: every "
          "rank waits for every header, so each broadcast reports its own disagreement. "
          "Must be equal on all ranks.",
          shm_bcast_eager, onoff),
    FIELD("WEFT_SHM_CHUNK", "256K",
          "Pipelining chunk of shared-memory collectives, in bytes per rank and buffer.",
          shm_chunk, size),
    FIELD("WEFT_SHM_STREAM_MIN", "4M",
          "Shared-memory collectives write outputs of at least this many bytes with "
          "non-temporal stores, which skip reading the destination into the caches.",
          shm_stream_min, size),
    FIELD("WEFT_PROGRESS_THREAD", "on",
          "on: a thread per context advances nonblocking operations (weft_i*, migrations) "
          "while the caller is outside weft; public calls then take the context's lock. "
          "off: operations advance only inside weft calls (weft_test, weft_wait, ...).",
          progress_thread, onoff),
    FIELD("WEFT_PROGRESS_IDLE", "on",
          "on: the progress thread runs at idle priority (SCHED_IDLE): it uses only cores "
          "that no other thread wants, so background work never delays the caller's own "
          "threads, and advances at full speed while they compute on a GPU, sleep or wait; "
          "off: normal priority, for hosts whose other threads keep every core busy.",
          progress_idle, onoff),
    FIELD("WEFT_PROGRESS_SLEEP_US", "100",
          "Longest pause of the progress thread between passes once nothing moves "
          "(microseconds): lower advances faster, higher leaves more CPU to the caller.",
          progress_sleep_us, u64),
    FIELD("WEFT_MIGRATE_CHUNK", "256K",
          "Parameter migration moves data in chunks of at most this many bytes (at least "
          "one row of a tensor's innermost dimension); small operations slip between them. "
          "Must be equal on all ranks (a migration checks it).",
          migrate_chunk, size),
    FIELD("WEFT_MIGRATE_CMA", "on",
          "on: between ranks on one host, a migration's receiver reads each chunk straight "
          "from the sender's memory (cross-memory attach, transports/stream_cma.c), outside "
          "the context's lock; where "
          "that is not permitted the chunk is sent again as a message. off: always messages.",
          migrate_cma, onoff),
    FIELD("WEFT_MIGRATE_SHM", "on",
          "on: between ranks on one host that has a core for each of the job's ranks there, "
          "a migration stream of 128 chunks or more goes through a shared-memory ring the "
          "receiver offers (the sender checksums each piece and copies it in from its "
          "cache; the receiver copies it out and checks it); elsewhere, or where the ring "
          "cannot be made or mapped, WEFT_MIGRATE_CMA applies. Must be equal on all ranks "
          "(a migration checks it).",
          migrate_shm, onoff),
    FIELD("WEFT_MIGRATE_WINDOW", "4",
          "Chunks of a migration in flight at once between two members.",
          migrate_window, size),
    FIELD("WEFT_YIELD_SPINS", "auto",
          "Progress polls without news before a waiting rank starts yielding the CPU; auto: "
          "2000 (tens of microseconds), or 0 when this host runs more ranks than it has "
          "cores.",
          yield_spins, spins),
    FIELD("WEFT_NAMESPACE", "weft",
          "Prefix of this context's keys in the store; contexts with different namespaces "
          "can share one store (weftrun publishes deaths, and fences lapsed leases, under the "
          "namespace of its own environment, the ranks').",
          ns, ns),
    FIELD("WEFT_TOPO_XML", "",
          "hwloc XML file used as this host's topology instead of discovering it (tests, "
          "simulated machines); empty: discover.",
          topo_xml, path),
    FIELD("WEFT_NCCL_LIBRARY", "libnccl.so.2",
          "NCCL library opened (dlopen) the first time CUDA buffers go through NCCL: a name "
          "is searched like any shared library, a path is used as is. Not found: NCCL is "
          "unavailable and CUDA collectives say so. Read once per process.",
          nccl_library, path),
    FIELD("WEFT_PMIX_LIBRARY", "libpmix.so.2",
          "PMIx library opened (dlopen) when srun --mpi=pmix or mpirun started the process "
          "without WEFT_STORE: a name is searched like any shared library, a path is used as "
          "is. Read once per process.",
          pmix_library, path),
    FIELD("WEFT_CURL_LIBRARY", "libcurl.so.4",
          "libcurl opened (dlopen) at the first connection to an etcd store "
          "(WEFT_STORE=etcd://...): a name is searched like any shared library, a path is "
          "used as is. Read once per process, by the store client itself.",
          curl_library, path),
    FIELD("WEFT_BOOT_ADDR", "",
          "IP address on which rank 0 of a job started through PMIx serves the job's store; "
          "empty: the loopback when the job holds one host, else the first IPv4 address of "
          "an interface that is up.",
          boot_addr, ip),
    FIELD("WEFT_DEBUG_FAULTS", "",
          "Debug and sanitizer builds only (builds with NDEBUG ignore it, with a warning): "
          "test faults switched on at weft_init, a comma-separated list of cma_refuse "
          "(reads of a sender's memory fail), ring_refuse[=1|2] (senders cannot map / "
          "receivers cannot make a same-host ring), snap_share_fail (a restore's plan "
          "cannot be shared with newcomers); see comm/fault.h.",
          debug_faults, faults),
    {
        .entry = {.name = "WEFT_CONNECT",
                  .deflt = "local",
                  .doc = "Peers connected at init and on admission: local (same host), all, or "
                         "lazy (on first use). Eager connections keep set-up out of the first "
                         "collective after a repair."},
        .offset = offsetof(weft_config_t, connect),
        .parse = parse_connect,
        .print = print_ns,
    },
};
#define CONFIG_COUNT (sizeof(config_table) / sizeof(config_table[0]))

/* Variables that are not settings but are not unknown either: the launcher's, and
 * WEFT_LIBRARY, where the Python binding looks for libweft.so first. */
const char *const weft__env_known[] = {
    "WEFT_RANK",  "WEFT_WORLD_SIZE", "WEFT_LOCAL_RANK",     "WEFT_LOCAL_SIZE",
    "WEFT_STORE", "WEFT_JOB_TOKEN",  "WEFT_JOB_TOKEN_FILE", "WEFT_MEMBER_SECRET_FD",
    "WEFT_JOIN",  "WEFT_LIBRARY",    "WEFT_NODE_LEASE",     NULL,
};

static int is_known(const char *name, size_t len)
{
    for (size_t i = 0; i < CONFIG_COUNT; i++) {
        if (strlen(config_table[i].entry.name) == len &&
            strncmp(config_table[i].entry.name, name, len) == 0) {
            return 1;
        }
    }
    for (size_t i = 0; weft__env_known[i] != NULL; i++) {
        if (strlen(weft__env_known[i]) == len && strncmp(weft__env_known[i], name, len) == 0) {
            return 1;
        }
    }
    return 0;
}

static void warn_unknown(const weft_logger_t *lg)
{
    for (char **env = environ; env != NULL && *env != NULL; env++) {
        const char *eq = strchr(*env, '=');
        if (strncmp(*env, "WEFT_", 5) != 0 || eq == NULL) {
            continue;
        }
        if (!is_known(*env, (size_t)(eq - *env))) {
            WEFT_WARN(lg, "unknown setting %.*s ignored (weft-info --config lists them all)",
                      (int)(eq - *env), *env);
        }
    }
}

weft_status_t weft__config_load(weft_config_t *cfg, const weft_logger_t *lg)
{
    weft_config_t tmp;
    /* A failed weft_init has no context to hold the reason: it goes to the log and to
     * weft_last_error(NULL). */
    char why[512];
    memset(&tmp, 0, sizeof(tmp));
    for (size_t i = 0; i < CONFIG_COUNT; i++) {
        const config_field_t *f = &config_table[i];
        void *field = (char *)&tmp + f->offset;
        weft_status_t st = f->parse(f->entry.deflt, field);
        if (st != WEFT_OK) {
            snprintf(why, sizeof(why), "internal: bad default '%s' for %s", f->entry.deflt,
                     f->entry.name);
            WEFT_ERROR(lg, "%s", why);
            return weft__error_noctx(st, "%s", why);
        }
        const char *env = getenv(f->entry.name);
        if (env != NULL && f->parse(env, field) != WEFT_OK) {
            snprintf(why, sizeof(why), "%s='%s' is not valid: %s (default %s)", f->entry.name, env,
                     f->entry.doc, f->entry.deflt);
            WEFT_ERROR(lg, "%s", why);
            return weft__error_noctx(WEFT_ERR_INVALID_ARG, "%s", why);
        }
    }
    warn_unknown(lg);
    *cfg = tmp;
    return WEFT_OK;
}

const char *weft__config_value(const weft_config_t *cfg, size_t index, char *buf, size_t buflen)
{
    if (index >= CONFIG_COUNT) {
        return NULL;
    }
    config_table[index].print((const char *)cfg + config_table[index].offset, buf, buflen);
    return buf;
}

const weft_config_entry_t *weft_config_entry(const weft_ctx_t *ctx, size_t index,
                                             const char **value)
{
    (void)ctx;
    if (index >= CONFIG_COUNT) {
        return NULL;
    }
    const weft_config_entry_t *e = &config_table[index].entry;
    if (value != NULL) {
        const char *env = getenv(e->name);
        *value = env != NULL ? env : e->deflt;
    }
    return e;
}
