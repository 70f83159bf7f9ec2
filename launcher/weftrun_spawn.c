/*
 * Starting a rank: resolve the program once, build the rank's environment, fork and
 * exec. weftrun has threads (the store server), so the child between fork() and exec()
 * only makes async-signal-safe calls: everything that allocates is done before fork().
 */
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "comm/store/proto.h"
#include "launcher/weftrun.h"

extern char **environ;

/*
 * The variables weftrun sets; the same names inherited from weftrun's caller are dropped.
 * RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE repeat the WEFT_ values under the names
 * torchrun uses, so PyTorch scripts read them unchanged. A rank gets no token: its own
 * member secret and the job's data key come through a pipe whose descriptor
 * WEFT_MEMBER_SECRET_FD names (secret_pipe below); with --share-token it gets the job
 * token in WEFT_JOB_TOKEN instead. WEFT_JOB_TOKEN_FILE inherited from weftrun's caller is
 * dropped. The last two are set only for some ranks: WEFT_NODE_LEASE for a rank that this
 * node's lease covers (on etcd: weftrun_nodes_rank_started), WEFT_JOIN for replacements
 * (an inherited WEFT_JOIN=1 would make every rank of a new job wait to join a group that
 * nobody has created). WEFTRUN_LIBDIR names the lib folder beside weftrun's own bin folder
 * when it holds libweft.so (the build tree's and an install's layout): the Python package,
 * installed anywhere, loads the library of the weftrun that started it (python/weft/_lib.py).
 */
static const char *const rank_env_names[] = {
    "WEFT_RANK",
    "WEFT_WORLD_SIZE",
    "WEFT_LOCAL_RANK",
    "WEFT_LOCAL_SIZE",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "WEFT_STORE",
    "WEFT_MEMBER_SECRET_FD",
    "WEFT_JOB_TOKEN",
    "WEFT_NODE_LEASE",
    "WEFT_JOIN",
    "WEFTRUN_LIBDIR",
    "WEFT_JOB_TOKEN_FILE", /* the last dropped, never set */
};
#define N_RANK_ENV (sizeof(rank_env_names) / sizeof(rank_env_names[0]))
#define N_RANK_SET (N_RANK_ENV - 1)

static bool is_executable_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

weft_status_t weftrun_resolve_program(const char *name, const weft_logger_t *lg, char **path)
{
    if (strchr(name, '/') != NULL) {
        struct stat st;
        const char *why = NULL;
        if (stat(name, &st) != 0) {
            why = strerror(errno);
        } else if (S_ISDIR(st.st_mode)) {
            why = "is a directory";
        } else if (!S_ISREG(st.st_mode) || access(name, X_OK) != 0) {
            why = "not an executable file";
        }
        if (why != NULL) {
            WEFT_ERROR(lg, "cannot run '%s': %s", name, why);
            return WEFT_ERR_INVALID_ARG;
        }
        char *p = strdup(name);
        if (p == NULL) {
            WEFT_ERROR(lg, "out of memory");
            return WEFT_ERR_NO_MEMORY;
        }
        *path = p;
        return WEFT_OK;
    }
    const char *search = getenv("PATH");
    if (search == NULL) {
        search = "/bin:/usr/bin";
    }
    size_t nlen = strlen(name);
    for (const char *dir = search;;) {
        const char *end = strchr(dir, ':');
        size_t dlen = end != NULL ? (size_t)(end - dir) : strlen(dir);
        /* An empty entry of PATH means the current directory, as for execvp(). */
        char *cand = malloc(dlen + nlen + 3);
        if (cand == NULL) {
            WEFT_ERROR(lg, "out of memory");
            return WEFT_ERR_NO_MEMORY;
        }
        if (dlen == 0) {
            memcpy(cand, "./", 2);
            memcpy(cand + 2, name, nlen + 1);
        } else {
            memcpy(cand, dir, dlen);
            cand[dlen] = '/';
            memcpy(cand + dlen + 1, name, nlen + 1);
        }
        if (is_executable_file(cand)) {
            *path = cand;
            return WEFT_OK;
        }
        free(cand);
        if (end == NULL) {
            break;
        }
        dir = end + 1;
    }
    WEFT_ERROR(lg, "cannot run '%s': command not found in PATH", name);
    return WEFT_ERR_INVALID_ARG;
}

static bool is_rank_var(const char *entry)
{
    for (size_t i = 0; i < N_RANK_ENV; i++) {
        size_t n = strlen(rank_env_names[i]);
        if (strncmp(entry, rank_env_names[i], n) == 0 && entry[n] == '=') {
            return true;
        }
    }
    return false;
}

static void free_env(char **env)
{
    if (env == NULL) {
        return;
    }
    for (char **e = env; *e != NULL; e++) {
        free(*e);
    }
    free(env);
}

/* The lib folder beside the folder of this weftrun, if it holds libweft.so; else "". */
static void launcher_libdir(char *out, size_t len)
{
    char exe[PATH_MAX], lib[PATH_MAX + 32];
    out[0] = '\0';
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        return;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == NULL) {
        return;
    }
    *slash = '\0'; /* the bin folder */
    if (snprintf(lib, sizeof(lib), "%.*s/../lib/libweft.so", PATH_MAX - 1, exe) >=
        (int)sizeof(lib)) {
        return;
    }
    char real[PATH_MAX];
    if (realpath(lib, real) == NULL || (slash = strrchr(real, '/')) == NULL) {
        return;
    }
    *slash = '\0';
    if (strlen(real) < len) {
        memcpy(out, real, strlen(real) + 1);
    }
}

/* weftrun's environment without the rank variables, then this slot's values of them;
 * @p entry: its WEFT_NODE_LEASE, NULL if it holds a lease of its own. */
static weft_status_t build_rank_env(const weftrun_job_t *job, const weftrun_slot_t *slot,
                                    const char *entry, int secret_fd, char ***out)
{
    size_t n = 0;
    while (environ[n] != NULL) {
        n++;
    }
    char **env = calloc(n + N_RANK_ENV + 1, sizeof(*env));
    if (env == NULL) {
        goto err_nomem;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_rank_var(environ[i]) && (env[k++] = strdup(environ[i])) == NULL) {
            goto err_nomem;
        }
    }
    /* The rank is the member id; the world size the job's (--nnodes x -n), and the local
     * size this node's -n. A replacement takes the local rank of the member it replaces
     * (it takes that member's place here: its GPU, its share of the cores). The world
     * size stays the job's: it names the job the replacement joins, not the current
     * group. */
    char rank_text[16], size_text[16], local_text[16], lsize_text[16], fd_text[16];
    snprintf(fd_text, sizeof(fd_text), "%d", secret_fd);
    snprintf(rank_text, sizeof(rank_text), "%d", slot->rank);
    snprintf(size_text, sizeof(size_text), "%d", job->world_size);
    snprintf(local_text, sizeof(local_text), "%d", slot->local_rank);
    snprintf(lsize_text, sizeof(lsize_text), "%d", job->opts->nranks);
    char libdir[PATH_MAX];
    launcher_libdir(libdir, sizeof(libdir));
    const char *const values[N_RANK_SET] = {rank_text,
                                            size_text,
                                            local_text,
                                            lsize_text,
                                            rank_text,
                                            size_text,
                                            local_text,
                                            lsize_text,
                                            job->store_addr,
                                            secret_fd >= 0 ? fd_text : NULL,
                                            secret_fd >= 0 ? NULL : job->token,
                                            entry,
                                            slot->replaces >= 0 ? "1" : NULL,
                                            libdir[0] != '\0' ? libdir : NULL};
    for (size_t i = 0; i < N_RANK_SET; i++) {
        if (values[i] != NULL && asprintf(&env[k++], "%s=%s", rank_env_names[i], values[i]) < 0) {
            env[k - 1] = NULL;
            goto err_nomem;
        }
    }
    *out = env;
    return WEFT_OK;
err_nomem:
    WEFT_ERROR(job->lg, "out of memory building the environment of rank %d", slot->rank);
    free_env(env);
    return WEFT_ERR_NO_MEMORY;
}

/* What the child needs, prepared before fork(). */
typedef struct child_setup {
    const char *path;
    char **argv;
    char **envp;
    int stdin_fd;  /* -1: inherit */
    int out_fd;    /* -1: inherit */
    int err_fd;    /* -1: inherit */
    int report_fd; /* write end of the exec-error pipe (close-on-exec) */
    pid_t parent;
    const sigset_t *mask;
    const cpu_set_t *cpus; /* --cpu-bind core: the rank's CPU; NULL: weftrun's own set */
    int secret_fd;         /* read end of the rank's secret pipe, kept across exec; -1: none */
} child_setup_t;

/*
 * The rank's secrets, in a pipe it reads once at weft_init (comm/ctx/bootstrap.c): the
 * line weft__store_member_line makes of the token for its id. Written whole before fork (it is far
 * below a pipe's capacity), the write end closed, so that the rank reads it to its end. *rfd: the
 * read end (close-on-exec; the child clears that on its copy).
 */
static weft_status_t secret_pipe(const weftrun_job_t *job, int id, int *rfd)
{
    char line[WEFT__STORE_MEMBER_LINE];
    int p[2] = {-1, -1};
    int n = weft__store_member_line(job->token, id, line);
    weft_status_t st = n < 0 ? WEFT_ERR_INVALID_ARG : WEFT_OK;
    if (st == WEFT_OK && pipe2(p, O_CLOEXEC) != 0) {
        WEFT_ERROR(job->lg, "pipe: %m");
        st = WEFT_ERR_IO;
    }
    if (st == WEFT_OK && write(p[1], line, (size_t)n) != (ssize_t)n) {
        WEFT_ERROR(job->lg, "cannot hand rank %d its secret: %m", id);
        st = WEFT_ERR_IO;
    }
    OPENSSL_cleanse(line, sizeof(line));
    if (p[1] >= 0) {
        close(p[1]);
    }
    if (st != WEFT_OK) {
        if (p[0] >= 0) {
            close(p[0]);
        }
        return st;
    }
    *rfd = p[0];
    return WEFT_OK;
}

/* --cpu-bind core: the local_rank-th CPU weftrun may run on, when the node's ranks fit
 * the CPUs; false otherwise (said once). */
static bool rank_cpu(weftrun_job_t *job, int local_rank, cpu_set_t *set)
{
    static bool said;
    cpu_set_t allowed;
    if (!job->opts->cpu_bind || sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
        return false;
    }
    if (job->opts->nranks > CPU_COUNT(&allowed) || local_rank < 0) {
        if (!said) {
            said = true;
            WEFT_WARN(job->lg, "--cpu-bind core: %d ranks on %d CPUs; the ranks are not pinned",
                      job->opts->nranks, CPU_COUNT(&allowed));
        }
        return false;
    }
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &allowed) && seen++ == local_rank) {
            CPU_ZERO(set);
            CPU_SET(cpu, set);
            return true;
        }
    }
    return false;
}

/* Runs in the forked child: async-signal-safe calls only. Never returns. */
static void child_exec(const child_setup_t *cs)
{
    /* Its own process group: a Ctrl-C reaches weftrun alone, which forwards it once. */
    setpgid(0, 0);
    /* Die with weftrun even if weftrun is killed with SIGKILL; mind the race. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != cs->parent) {
        _exit(WEFTRUN_EXIT_FAILED);
    }
    /* weftrun's handlers would write into weftrun's signal pipe: back to the defaults
     * (and SIGPIPE, which weftrun ignores) before the signals are let in again. */
    weftrun_signals_reset_in_child();
    sigprocmask(SIG_SETMASK, cs->mask, NULL);
    if (cs->cpus != NULL) {
        (void)sched_setaffinity(0, sizeof(*cs->cpus), cs->cpus); /* a hint: run unpinned */
    }
    if ((cs->stdin_fd >= 0 && dup2(cs->stdin_fd, 0) < 0) ||
        (cs->out_fd >= 0 && dup2(cs->out_fd, 1) < 0) ||
        (cs->err_fd >= 0 && dup2(cs->err_fd, 2) < 0)) {
        goto fail;
    }
    /* weftrun's own descriptors (store sockets, pipes of other ranks) stay out; the
     * rank's own secret pipe goes with it. */
    if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++) {
            fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
    }
    if (cs->secret_fd >= 0 && fcntl(cs->secret_fd, F_SETFD, 0) != 0) {
        goto fail;
    }
    execve(cs->path, cs->argv, cs->envp);
fail:;
    int err = errno;
    ssize_t unused = write(cs->report_fd, &err, sizeof(err));
    (void)unused;
    _exit(WEFTRUN_EXIT_NOT_FOUND);
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Pipes for --tag-output: [0] read end kept by weftrun, [1] the rank's stdout/stderr. */
static weft_status_t open_output_pipes(const weftrun_job_t *job, int out[2], int err[2])
{
    if (pipe2(out, O_CLOEXEC) != 0) {
        WEFT_ERROR(job->lg, "pipe: %m");
        return WEFT_ERR_IO;
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
        WEFT_ERROR(job->lg, "pipe: %m");
        close_fd(&out[0]);
        close_fd(&out[1]);
        return WEFT_ERR_IO;
    }
    /* The rank blocks when weftrun is behind; weftrun never blocks on a rank. */
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    return WEFT_OK;
}

/* Block until the child has exec'ed (the pipe closes) or reports why it could not. */
static int read_exec_errno(int fd)
{
    int err = 0;
    ssize_t n;
    do {
        n = read(fd, &err, sizeof(err));
    } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(err) ? err : 0;
}

weft_status_t weftrun_spawn_rank(weftrun_job_t *job, weftrun_slot_t *slot)
{
    int out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1}, devnull = -1, secret = -1;
    sigset_t mask;
    char **envp = NULL, lease_var[128];
    bool covered = weftrun_nodes_rank_started(job, slot->rank, lease_var, sizeof(lease_var));
    weft_status_t status =
        job->opts->member_secrets ? secret_pipe(job, slot->rank, &secret) : WEFT_OK;
    if (status != WEFT_OK) {
        return status;
    }
    status = build_rank_env(job, slot, covered ? lease_var : NULL, secret, &envp);
    if (status != WEFT_OK) {
        close_fd(&secret);
        return status;
    }
    status = WEFT_ERR_IO;
    if (pipe2(report, O_CLOEXEC) != 0) {
        WEFT_ERROR(job->lg, "pipe: %m");
        goto out;
    }
    if (slot->rank != 0 || isatty(0)) {
        devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devnull < 0) {
            WEFT_ERROR(job->lg, "cannot open /dev/null: %m");
            goto out;
        }
    }
    if (job->opts->tag_output && open_output_pipes(job, out, err) != WEFT_OK) {
        goto out;
    }
    cpu_set_t cpu;
    bool pinned = rank_cpu(job, slot->local_rank, &cpu);
    child_setup_t cs = {
        .cpus = pinned ? &cpu : NULL,
        .path = job->prog_path,
        .argv = job->opts->argv,
        .envp = envp,
        .stdin_fd = devnull,
        .out_fd = out[1],
        .err_fd = err[1],
        .report_fd = report[1],
        .parent = getpid(),
        .mask = &mask,
        .secret_fd = secret,
    };
    /* Signals wait until the child has dropped weftrun's handlers (see child_exec). */
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &mask);
    pid_t pid = fork();
    if (pid != 0) {
        sigprocmask(SIG_SETMASK, &mask, NULL);
    }
    if (pid < 0) {
        WEFT_ERROR(job->lg, "cannot start rank %d: fork: %m", slot->rank);
        goto out;
    }
    if (pid == 0) {
        child_exec(&cs);
    }
    /* Also here, so that signalling the group cannot precede the child's setpgid(). */
    setpgid(pid, pid);
    close_fd(&report[1]);
    slot->pid = pid;
    slot->state = WEFTRUN_SLOT_RUNNING;
    slot->exec_errno = read_exec_errno(report[0]);
    if (slot->exec_errno != 0) {
        WEFT_ERROR(job->lg, "rank %d: cannot execute '%s': %s", slot->rank, job->prog_path,
                   strerror(slot->exec_errno));
    }
    if (job->opts->tag_output) {
        weftrun_stream_init(&slot->out, out[0], 1);
        weftrun_stream_init(&slot->err, err[0], 2);
        out[0] = err[0] = -1;
    }
    WEFT_DEBUG(job->lg, "rank %d started, pid %d%s", slot->rank, (int)pid,
               slot->replaces >= 0 ? " (a replacement, WEFT_JOIN=1)" : "");
    status = WEFT_OK;
out:
    close_fd(&out[0]);
    close_fd(&out[1]);
    close_fd(&err[0]);
    close_fd(&err[1]);
    close_fd(&report[0]);
    close_fd(&report[1]);
    close_fd(&devnull);
    close_fd(&secret);
    free_env(envp);
    return status;
}
