/*
 * weftrun: start N local ranks of a weft job, host their rendezvous store, supervise
 * them. This file holds main(), the store set-up and --store-only; the command line is
 * in weftrun_args.c, the process management in weftrun_spawn.c, weftrun_output.c and
 * weftrun_supervise.c.
 */
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/store/proto.h"
#include "launcher/weftrun.h"
#include "util/parse.h"


static bool is_wildcard_addr(const char *a)
{
    return strcmp(a, "0.0.0.0") == 0 || strcmp(a, "::") == 0;
}

/*
 * host:port under which clients reach the store. A wildcard bind is reached through the
 * loopback by local ranks and through the host name from elsewhere.
 */
static void format_store_addr(const char *bind_addr, int port, bool for_remote, char *out,
                              size_t outlen)
{
    char host[256];
    if (!is_wildcard_addr(bind_addr)) {
        snprintf(host, sizeof(host), "%s", bind_addr);
    } else if (!for_remote || gethostname(host, sizeof(host)) != 0) {
        snprintf(host, sizeof(host), "%s", strchr(bind_addr, ':') ? "::1" : "127.0.0.1");
    }
    host[sizeof(host) - 1] = '\0';
    /* An IPv6 literal needs brackets so the last ':' still splits off the port. */
    if (strchr(host, ':') != NULL && host[0] != '[') {
        snprintf(out, outlen, "[%s]:%d", host, port);
    } else {
        snprintf(out, outlen, "%s:%d", host, port);
    }
}

/* Name the job's segments in /dev/shm as its ranks on this host will. */
static void name_shm_job(weftrun_job_t *job)
{
    char data[65];
    weft_status_t st = weft__store_data_hex(job->token, data);
    if (st == WEFT_OK) {
        st = weft__shm_job_id(job->store_addr, data, job->shm_job);
    }
    OPENSSL_cleanse(data, sizeof(data));
    if (st != WEFT_OK) {
        WEFT_WARN(job->lg, "cannot name the job's shared-memory segments: they are not "
                           "removed at its end");
        job->shm_job[0] = '\0';
    }
}

/* The token the user gave, or a new one when this weftrun alone hands it out. */
static weft_status_t take_token(weftrun_job_t *job)
{
    if (job->opts->token != NULL) {
        snprintf(job->token, sizeof(job->token), "%s", job->opts->token);
        return WEFT_OK;
    }
    weft_status_t status = weft__store_make_token(job->token);
    if (status != WEFT_OK) {
        WEFT_ERROR(job->lg, "cannot make a job token: %s", weft_status_str(status));
    }
    return status;
}

/*
 * The store takes a descriptor per rank (and per rank still authenticating): raise the
 * soft limit on open files to the hard one, and say so when even that is short of what
 * the job may need (@p ranks; 0: not known, a --store-only store).
 */
static void raise_open_files(const weft_logger_t *lg, int ranks)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
            WEFT_DEBUG(lg, "open files: soft limit raised from %llu to %llu",
                       (unsigned long long)was, (unsigned long long)rl.rlim_cur);
        } else {
            rl.rlim_cur = was;
        }
    }
    rlim_t need = (rlim_t)ranks + WEFT__STORE_MAX_UNAUTH + 64;
    if (ranks > 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        WEFT_WARN(lg,
                  "open files: this process may open %llu, and the store needs one per rank "
                  "(%d) and more: raise the hard limit (ulimit -Hn, limits.conf) to at least "
                  "%llu",
                  (unsigned long long)rl.rlim_cur, ranks, (unsigned long long)need);
    }
}

static weft_status_t start_store(weftrun_job_t *job)
{
    const weftrun_opts_t *o = job->opts;
    raise_open_files(job->lg, o->store_only ? 0 : job->world_size);
    int port = o->store != NULL ? atoi(strrchr(o->store, ':') + 1) : o->port;
    weft_store_server_params_t sp = {
        .size = sizeof(sp),
        .bind_addr = o->bind_addr,
        .port = port,
        .token = job->token,
        .logger = job->lg,
        .on_lapse = o->store_only ? NULL : weftrun_fence_on_lapse,
        .on_lapse_arg = job,
    };
    weft_status_t status = weft__store_server_start(&sp, &job->server);
    if (status != WEFT_OK) {
        WEFT_ERROR(job->lg, "cannot start the store on %s port %d: %s", o->bind_addr, port,
                   weft_status_str(status));
        return status;
    }
    /* Ranks get the address the user gave, the same on every node. */
    if (o->store != NULL) {
        snprintf(job->store_addr, sizeof(job->store_addr), "%s", o->store);
    } else {
        format_store_addr(o->bind_addr, weft__store_server_port(job->server), o->store_only,
                          job->store_addr, sizeof(job->store_addr));
    }
    WEFT_INFO(job->lg, "store listening at %s", job->store_addr);
    return WEFT_OK;
}

/*
 * The job is over, however it ended: remove its shared-memory segments, which ranks that
 * died before all members attached leave in /dev/shm. Under --store-only the ranks were
 * started by others and may outlive the store, so their job lock decides
 * (comm/shm/shm_job.h); otherwise every rank has been reaped. Ranks given the store address
 * spelled otherwise than printed name their segments otherwise; the job lock's rules
 * remove those.
 */
static void shm_clean_at_end(const weftrun_job_t *job)
{
    if (job->shm_job[0] != '\0') {
        weft__shm_clean_job(WEFT_SHM_DIR, job->shm_job, !job->opts->store_only, job->lg);
    }
}

/*
 * One line when -n is far above the CPUs weftrun may run on: the job works (waiting ranks
 * yield the CPU), but every rank waits for a core, so it is slow and its timings say
 * little. Twice the CPUs, not once: a few more ranks than cores is a common way to test.
 */
static void warn_oversubscription(const weftrun_opts_t *o, const weft_logger_t *lg)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return;
    }
    int cpus = CPU_COUNT(&set);
    if (cpus > 0 && o->nranks > 2 * cpus) {
        WEFT_WARN(lg,
                  "-n %d starts %d ranks on the %d CPU(s) this host lets weftrun use: the ranks "
                  "take turns on the cores (waits yield, so the job runs, but slowly, and its "
                  "timings mean little)",
                  o->nranks, o->nranks, cpus);
    }
}

/*
 * weftrun started several times by an MPI launcher without --nnodes: every copy starts a
 * job of its own (the ranks no longer hold the outer launcher's variables against
 * weftrun's: launchers nest). Say so, and how to make one job of them. Slurm is left out:
 * an sbatch script's environment has SLURM_NTASKS without srun having started anything.
 */
static void warn_nested_launch(const weftrun_opts_t *o, const weft_logger_t *lg)
{
    static const char *const sizes[][3] = {
        {"mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
        {"mpiexec", "PMI_SIZE", "PMI_RANK"},
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && o->nnodes == 1; i++) {
        const char *v = getenv(sizes[i][1]);
        int64_t n;
        if (v != NULL && weft__parse_i64(v, 2, INT32_MAX, &n)) {
            WEFT_WARN(lg,
                      "this weftrun is one of %lld started by %s (%s=%s) but --nnodes is 1: "
                      "each starts a job of its own. For one job over them give --nnodes "
                      "%lld --node-rank $%s --store HOST:PORT and a --token-file",
                      (long long)n, sizes[i][0], sizes[i][1], v, (long long)n, sizes[i][2]);
            return;
        }
    }
}

/*
 * The ranks inherit weftrun's environment, and weft_init refuses a WEFT_* setting that
 * does not parse: refuse it here, before any rank starts, rather than start ranks that
 * each fail (and under --elastic --replace are replaced until --max-restarts runs out).
 * weft__config_load's error names the variable, its value, what it takes and its
 * default. Unknown WEFT_* variables are the ranks' to warn about, once each.
 */
static bool read_settings(weftrun_job_t *job)
{
    weft_logger_t quiet = *job->lg;
    quiet.level = WEFT_LOG_ERROR;
    if (weft__config_load(&job->cfg, &quiet) == WEFT_OK) {
        return true;
    }
    WEFT_ERROR(job->lg, "no rank started: every rank would refuse this setting in weft_init; "
                        "fix or unset it (weft-info --config lists the settings)");
    return false;
}

static int serve_store_only_on(weftrun_job_t *job, const char *token_file)
{
    printf("WEFT_STORE=%s\nWEFT_JOB_TOKEN_FILE=%s\n", job->store_addr, token_file);
    if (fflush(stdout) != 0) {
        WEFT_ERROR(job->lg, "cannot write the store address to stdout: %m");
        return WEFTRUN_EXIT_FAILED;
    }
    uint64_t start = weft__now_ms();
    if (!weftrun_wait_for_signal(job->sigfd, job->opts->timeout_ms, job->lg)) {
        WEFT_ERROR(job->lg, "the store timed out after %.3g s (--timeout)",
                   (double)(weft__now_ms() - start) / 1000.0);
        return WEFTRUN_EXIT_TIMEOUT;
    }
    return 0;
}

/*
 * Where the ranks that others start read the token: never stdout, which ends up in logs
 * and terminals. The --token-file when there is one; else a new file, 0600 in a 0700
 * folder of its own (mkdtemp, under TMPDIR), which @p made names for its removal.
 */
static bool token_file_for_ranks(weftrun_job_t *job, char *path, size_t len, char *made,
                                 size_t made_len)
{
    made[0] = '\0';
    if (job->opts->token_file != NULL) {
        if (realpath(job->opts->token_file, path) == NULL) { /* path holds PATH_MAX */
            WEFT_ERROR(job->lg, "cannot resolve the token file %s: %m", job->opts->token_file);
            return false;
        }
        return true;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(made, made_len, "%s/weft-store-XXXXXX", tmp != NULL && tmp[0] == '/' ? tmp : "/tmp");
    if (mkdtemp(made) == NULL) {
        WEFT_ERROR(job->lg, "cannot make a folder for the token file in %s: %m", made);
        made[0] = '\0';
        return false;
    }
    snprintf(path, len, "%s/token", made);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    size_t n = strlen(job->token);
    bool ok = fd >= 0 && write(fd, job->token, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    if (fd >= 0 && close(fd) != 0) {
        ok = false;
    }
    if (!ok) {
        WEFT_ERROR(job->lg, "cannot write the token file %s: %m", path);
    }
    return ok;
}

static void remove_token_file(const char *made)
{
    if (made[0] != '\0') {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/token", made);
        unlink(path);
        rmdir(made);
    }
}

static int serve_store_only(weftrun_job_t *job)
{
    char path[PATH_MAX + 16], made[PATH_MAX];
    if (!token_file_for_ranks(job, path, sizeof(path), made, sizeof(made))) {
        remove_token_file(made);
        return WEFTRUN_EXIT_FAILED;
    }
    int rc = serve_store_only_on(job, path);
    remove_token_file(made);
    return rc;
}

int main(int argc, char **argv)
{
    /* weftrun holds the job token, from which every member's secret derives, and its
     * ranks run as the same user: none of them may read its memory or environment
     * (/proc/PID/mem, /proc/PID/environ, ptrace attach). Non-dumpable before the token is
     * read; the ranks become dumpable again when they exec. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    weftrun_opts_t opts;
    int rc = weftrun_parse_args(argc, argv, &opts);
    if (rc >= 0) {
        return rc;
    }
    weft_logger_t lg = {
        .level = opts.verbose >= 2   ? WEFT_LOG_DEBUG
                 : opts.verbose == 1 ? WEFT_LOG_INFO
                                     : WEFT_LOG_WARN,
        .rank = -1,
        .prefix = "weftrun",
    };
    char prefix[32];
    if (opts.nnodes > 1) {
        snprintf(prefix, sizeof(prefix), "weftrun node %d", opts.node_rank);
        lg.prefix = prefix;
    }
    weftrun_job_t job = {
        .opts = &opts,
        .lg = &lg,
        .world_size = opts.nnodes * opts.nranks,
        .rank_base = opts.node_rank * opts.nranks,
        .sigfd = -1,
        .fence_rd = -1,
        .fence_wr = -1,
    };

    /* --store-only starts no rank: the settings are those of the ranks others start. */
    if (!opts.store_only && !read_settings(&job)) {
        return WEFTRUN_EXIT_USAGE;
    }
    /* Deaths are published, and leases lapse, under the ranks' key namespace. */
    snprintf(job.failed_prefix, sizeof(job.failed_prefix), WEFTRUN_FAILED_FMT,
             job.cfg.ns[0] != '\0' ? job.cfg.ns : "weft");
    if (!opts.store_only && weftrun_resolve_program(opts.argv[0], &lg, &job.prog_path) != WEFT_OK) {
        return WEFTRUN_EXIT_NOT_FOUND;
    }
    if (!opts.store_only) {
        warn_oversubscription(&opts, &lg);
        warn_nested_launch(&opts, &lg);
    }
    if (weftrun_signals_init(&job.sigfd, &lg) != WEFT_OK) {
        rc = WEFTRUN_EXIT_FAILED;
        goto out;
    }
    /* A node that does not serve the store connects to the one given. */
    bool serving = opts.store_only || (opts.node_rank == 0 && !opts.external_store);
    if (!serving) {
        snprintf(job.store_addr, sizeof(job.store_addr), "%s", opts.store);
    }
    if (weftrun_fence_init(&job) != WEFT_OK || take_token(&job) != WEFT_OK ||
        (serving && start_store(&job) != WEFT_OK)) {
        rc = WEFTRUN_EXIT_FAILED;
        goto out;
    }
    name_shm_job(&job);
    /* What jobs that no longer run left in /dev/shm (weftrun killed, ranks started by
     * hand that all died) goes before this one starts. */
    weft__shm_sweep(WEFT_SHM_DIR, &lg);
    if (opts.store_only) {
        rc = serve_store_only(&job);
    } else if ((opts.nnodes > 1 || opts.external_store) && weftrun_nodes_start(&job) != WEFT_OK) {
        rc = WEFTRUN_EXIT_FAILED;
    } else {
        rc = weftrun_run_job(&job);
    }
    rc = weftrun_nodes_finish(&job, rc);
    weft__store_server_stop(job.server);
    shm_clean_at_end(&job);
out:
    if (job.sigfd >= 0) {
        close(job.sigfd);
    }
    weftrun_fence_close(&job);
    free(job.prog_path);
    OPENSSL_cleanse(job.token, sizeof(job.token));
    OPENSSL_cleanse(opts.token_buf, sizeof(opts.token_buf));
    return rc;
}
