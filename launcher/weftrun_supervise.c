/*
 * The supervisor: starts the ranks, then waits in poll() on the self-pipe of signals
 * (SIGCHLD and the signals to forward), the output pipes of --tag-output and the nearest
 * deadline. A rank's abnormal exit is published in the store before anything else
 * happens, so that ranks watching weft/failed/ hear of it before they are told to stop
 * (or, under --elastic, before a replacement asks to join them).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher/weftrun.h"
#include "weft/core.h"

void weftrun_signal_slot(weftrun_slot_t *s, int sig)
{
    if (s->group_gone) {
        return;
    }
    if (kill(-s->pid, sig) != 0) {
        if (s->state == WEFTRUN_SLOT_RUNNING) {
            kill(s->pid, sig);
        } else if (errno == ESRCH) {
            s->group_gone = true; /* reaped and no member left: its id is free for reuse */
        }
    }
}

/* Signal the process group of every rank that was started. */
static void signal_ranks(weftrun_job_t *job, int sig, bool running_only)
{
    for (int i = 0; i < job->nslots; i++) {
        weftrun_slot_t *s = &job->slots[i];
        if (s->state == WEFTRUN_SLOT_EMPTY || (running_only && s->state != WEFTRUN_SLOT_RUNNING)) {
            continue;
        }
        /* A reaped rank's group may still hold its children; signal it too when stopping. */
        weftrun_signal_slot(s, sig);
    }
}

void weftrun_begin_stop(weftrun_job_t *job, weftrun_stop_reason_t reason, int exit_code, int sig)
{
    if (job->stop_reason != WEFTRUN_STOP_NONE) {
        return;
    }
    job->stop_reason = reason;
    job->exit_code = exit_code;
    signal_ranks(job, sig, false);
    /* Without --elastic a job stops as a whole: the other nodes stop too. With it each
     * node decides for its own ranks, but a job that failed fails on every node. */
    bool whole_job = !job->opts->elastic || reason == WEFTRUN_STOP_JOB_FAILED;
    if (job->nodes != NULL && whole_job && reason != WEFTRUN_STOP_REMOTE) {
        static const char *const why[] = {
            [WEFTRUN_STOP_RANK_FAILED] = "a rank failed",
            [WEFTRUN_STOP_TOO_FEW] = "too few ranks left",
            [WEFTRUN_STOP_SIGNAL] = "weftrun was signalled",
            [WEFTRUN_STOP_TIMEOUT] = "--timeout",
            [WEFTRUN_STOP_LAUNCH_FAILED] = "a rank could not be started",
            [WEFTRUN_STOP_JOB_FAILED] = "a rank said the job failed",
        };
        weftrun_nodes_publish(job, "weftrun/stop", exit_code, why[reason]);
    }
    job->kill_at_ms = weft__now_ms() + job->opts->grace_ms;
    if (job->kill_at_ms == 0) {
        job->kill_at_ms = 1;
    }
}

static void kill_now(weftrun_job_t *job)
{
    if (job->nrunning > 0) {
        WEFT_WARN(job->lg, "killing the remaining %d rank(s) with SIGKILL", job->nrunning);
    }
    signal_ranks(job, SIGKILL, false);
    job->kill_at_ms = 0;
}

static void publish_failure(weftrun_job_t *job, const weftrun_slot_t *s, const char *what)
{
    char key[64];
    snprintf(key, sizeof(key), "%s%d", job->failed_prefix, s->rank);
    weft_status_t st = weftrun_store_set(job, key, what);
    if (st != WEFT_OK) {
        WEFT_WARN(job->lg, "cannot publish %s in the store: %s", key, weft_status_str(st));
    }
}

static void describe_death(int wstatus, weftrun_death_t *d)
{
    if (WIFSIGNALED(wstatus)) {
        int sig = WTERMSIG(wstatus);
        d->code = 128 + sig;
        snprintf(d->what, sizeof(d->what), "signal %d", sig);
        snprintf(d->text, sizeof(d->text), "was killed by signal %d (%s)", sig, strsignal(sig));
    } else {
        d->code = WEXITSTATUS(wstatus);
        snprintf(d->what, sizeof(d->what), "exit %d", d->code);
        snprintf(d->text, sizeof(d->text), "exited with status %d", d->code);
    }
}

static void on_rank_exit(weftrun_job_t *job, weftrun_slot_t *s, int wstatus)
{
    s->wstatus = wstatus;
    job->nrunning--;
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
        s->state = WEFTRUN_SLOT_EXITED;
        WEFT_DEBUG(job->lg, "rank %d (pid %d) exited normally", s->rank, (int)s->pid);
        weftrun_nodes_rank_ended(job, s->rank, true);
        /* One that was declared failed first was no member any more: its end is no
         * sign that the members are done. */
        if (job->opts->elastic && !s->fenced_early) {
            weftrun_elastic_on_success(job, s);
        }
        return;
    }
    s->state = WEFTRUN_SLOT_FAILED;
    weftrun_death_t d;
    describe_death(wstatus, &d);
    if (s->fenced && WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) {
        snprintf(d.text, sizeof(d.text), "was killed after it was declared failed");
    }
    /* Always first: ranks learn of the death from the store, not from our SIGTERM. */
    publish_failure(job, s, d.what);
    weftrun_nodes_rank_ended(job, s->rank, false);
    if (job->stop_reason != WEFTRUN_STOP_NONE) {
        WEFT_DEBUG(job->lg, "rank %d (pid %d) %s while stopping", s->rank, (int)s->pid, d.text);
        return;
    }
    if (WIFEXITED(wstatus) && d.code == WEFT_EXIT_JOB_FAILED) {
        /* Not a death but the job's end, whatever the mode: nobody replaces it, and the
         * job fails even if the processes left (replacements that find it over) exit 0. */
        WEFT_ERROR(job->lg,
                   "rank %d (pid %d) exited with status %d (WEFT_EXIT_JOB_FAILED): it says "
                   "the job failed; stopping the job",
                   s->rank, (int)s->pid, d.code);
        weftrun_begin_stop(job, WEFTRUN_STOP_JOB_FAILED, d.code, SIGTERM);
        return;
    }
    if (job->opts->elastic) {
        weftrun_elastic_on_death(job, s, &d);
        return;
    }
    if (!job->have_failure) {
        job->have_failure = true;
        job->exit_code = d.code;
    }
    if (job->opts->keep_going) {
        WEFT_ERROR(job->lg, "rank %d (pid %d) %s; the others keep going", s->rank, (int)s->pid,
                   d.text);
        return;
    }
    WEFT_ERROR(job->lg, "rank %d (pid %d) %s; stopping the job", s->rank, (int)s->pid, d.text);
    weftrun_begin_stop(job, WEFTRUN_STOP_RANK_FAILED, d.code, SIGTERM);
}

static weftrun_slot_t *slot_of_pid(weftrun_job_t *job, pid_t pid)
{
    for (int i = 0; i < job->nslots; i++) {
        if (job->slots[i].state == WEFTRUN_SLOT_RUNNING && job->slots[i].pid == pid) {
            return &job->slots[i];
        }
    }
    return NULL;
}

/* Whether an end is a clean exit (status 0). */
static bool clean_exit(int wstatus)
{
    return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

/*
 * SIGCHLD notices merge, so reap until nothing is left to reap. Ends reaped together are
 * handled failures first: waitpid() hands zombies over in no particular order, and a rank
 * that exited 0 in the same instant as another died (having repaired around it) must not
 * make that death look as if it came after the job began to finish.
 */
static void reap_ranks(weftrun_job_t *job)
{
    struct {
        weftrun_slot_t *slot;
        int wstatus;
    } ended[64];
    int nended = 0;
    bool more = true;
    while (more) {
        int wstatus;
        pid_t pid = waitpid(-1, &wstatus, WNOHANG | WUNTRACED | WCONTINUED);
        if (pid < 0 && errno == EINTR) {
            continue;
        }
        more = pid > 0;
        weftrun_slot_t *s = more ? slot_of_pid(job, pid) : NULL;
        if (s != NULL && WIFSTOPPED(wstatus)) {
            s->stopped_since_ms = s->stopped_since_ms != 0 ? s->stopped_since_ms : weft__now_ms();
        } else if (s != NULL && WIFCONTINUED(wstatus)) {
            s->stopped_since_ms = 0;
        } else if (s != NULL) {
            /* Just reaped: a group with no member left frees its id, which the kernel may
             * give to an unrelated process (a group leader) from now on. */
            s->group_gone = kill(-pid, 0) != 0 && errno == ESRCH;
            ended[nended].slot = s;
            ended[nended++].wstatus = wstatus;
        }
        if (nended == (int)(sizeof(ended) / sizeof(ended[0])) || (!more && nended > 0)) {
            for (int pass = 0; pass < 2; pass++) { /* failures, then clean exits */
                for (int i = 0; i < nended; i++) {
                    if (clean_exit(ended[i].wstatus) == (pass == 1)) {
                        on_rank_exit(job, ended[i].slot, ended[i].wstatus);
                    }
                }
            }
            nended = 0;
        }
    }
}

static void on_signal(weftrun_job_t *job, int sig)
{
    if (sig == SIGCHLD) {
        reap_ranks(job);
        return;
    }
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        /* A batch system's warning (preemption, time limit): the ranks decide what to do. */
        WEFT_WARN(job->lg, "%s: forwarded to the ranks; the job goes on", strsignal(sig));
        signal_ranks(job, sig, true);
        return;
    }
    if (job->stop_reason == WEFTRUN_STOP_NONE) {
        /* SIGHUP is UCX's debug signal (UCX_DEBUG_SIGNO): a rank would not stop on it. */
        int to_ranks = sig == SIGHUP ? SIGTERM : sig;
        WEFT_WARN(job->lg, "%s: stopping the ranks with %s", strsignal(sig),
                  to_ranks == SIGTERM ? "SIGTERM" : "SIGINT");
        weftrun_begin_stop(job, WEFTRUN_STOP_SIGNAL, 128 + sig, to_ranks);
    } else {
        /* Asked twice: the user does not want to wait for the grace period. */
        kill_now(job);
    }
}

static void read_signals(weftrun_job_t *job)
{
    int sig;
    while ((sig = weftrun_next_signal(job->sigfd)) != 0) {
        on_signal(job, sig);
    }
}

/* Milliseconds poll() may sleep: until the nearest deadline, or -1 for none. */
static int poll_timeout(const weftrun_job_t *job, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    if (job->deadline_ms != 0 && job->stop_reason == WEFTRUN_STOP_NONE) {
        next = job->deadline_ms;
    }
    if (job->kill_at_ms != 0 && job->kill_at_ms < next) {
        next = job->kill_at_ms;
    }
    if (job->stop_fence_at_ms != 0 && job->stop_fence_at_ms < next) {
        next = job->stop_fence_at_ms;
    }
    if (job->lease_at_ms != 0 && job->lease_at_ms < next) {
        next = job->lease_at_ms;
    }
    if (next == UINT64_MAX) {
        return -1;
    }
    return next <= now ? 0 : next - now > INT_MAX ? INT_MAX : (int)(next - now);
}

static void check_deadlines(weftrun_job_t *job)
{
    uint64_t now = weft__now_ms();
    if (job->deadline_ms != 0 && now >= job->deadline_ms && job->stop_reason == WEFTRUN_STOP_NONE) {
        uint64_t started = job->deadline_ms - job->opts->timeout_ms;
        WEFT_ERROR(job->lg, "the job timed out after %.3g s (--timeout); stopping all ranks",
                   (double)(now - started) / 1000.0);
        weftrun_begin_stop(job, WEFTRUN_STOP_TIMEOUT, WEFTRUN_EXIT_TIMEOUT, SIGTERM);
    }
    if (job->kill_at_ms != 0 && now >= job->kill_at_ms) {
        kill_now(job);
    }
    job->stop_fence_at_ms = weftrun_fence_stopped(job, now);
    job->lease_at_ms = weftrun_nodes_tick(job, now);
}

/* Register the open output streams in @p pfds after the signal and fence pipes and the
 * other nodes' news (-1, which poll() skips, in a one-node job); returns the count. */
static nfds_t collect_fds(weftrun_job_t *job, struct pollfd *pfds, weftrun_stream_t **streams,
                          int *ranks)
{
    nfds_t n = 0;
    pfds[n++] = (struct pollfd){.fd = job->sigfd, .events = POLLIN};
    pfds[n++] = (struct pollfd){.fd = job->fence_rd, .events = POLLIN};
    pfds[n++] = (struct pollfd){.fd = weftrun_nodes_fd(job), .events = POLLIN};
    for (int i = 0; i < job->nslots; i++) {
        weftrun_stream_t *pair[2] = {&job->slots[i].out, &job->slots[i].err};
        for (int k = 0; k < 2; k++) {
            if (pair[k]->fd >= 0) {
                streams[n] = pair[k];
                ranks[n] = job->slots[i].rank;
                pfds[n++] = (struct pollfd){.fd = pair[k]->fd, .events = POLLIN};
            }
        }
    }
    return n;
}

static weft_status_t supervise(weftrun_job_t *job)
{
    /* Room for every slot a replacement may take, so the arrays never grow. */
    size_t cap = 3 + 2 * (size_t)job->max_slots;
    struct pollfd *pfds = calloc(cap, sizeof(*pfds));
    weftrun_stream_t **streams = calloc(cap, sizeof(*streams));
    int *ranks = calloc(cap, sizeof(*ranks));
    weft_status_t status = WEFT_OK;
    if (pfds == NULL || streams == NULL || ranks == NULL) {
        WEFT_ERROR(job->lg, "out of memory");
        status = WEFT_ERR_NO_MEMORY;
        goto out;
    }
    while (job->nrunning > 0) {
        nfds_t n = collect_fds(job, pfds, streams, ranks);
        int rc = poll(pfds, n, poll_timeout(job, weft__now_ms()));
        if (rc < 0 && errno != EINTR) {
            WEFT_ERROR(job->lg, "poll: %m");
            status = WEFT_ERR_IO;
            goto out;
        }
        for (nfds_t i = 3; rc > 0 && i < n; i++) {
            if (pfds[i].revents != 0) {
                weftrun_stream_pump(streams[i], ranks[i]);
            }
        }
        /* Reaping may start a replacement: the next collect_fds() adds its pipes. */
        if (rc > 0 && pfds[0].revents != 0) {
            read_signals(job);
        }
        if (rc > 0 && pfds[1].revents != 0) {
            weftrun_fence_read(job);
        }
        if (rc > 0 && pfds[2].revents != 0) {
            weftrun_nodes_read(job);
        }
        check_deadlines(job);
    }
out:
    free(pfds);
    free(streams);
    free(ranks);
    return status;
}

weft_status_t weftrun_new_member_id(weftrun_job_t *job, int *id)
{
    if (job->nodes != NULL) {
        return weftrun_nodes_new_id(job, id);
    }
    /* One node: the ids after the ranks, in the order of the replacements. */
    *id = job->world_size + (job->nslots - job->opts->nranks);
    return WEFT_OK;
}

weft_status_t weftrun_start_slot(weftrun_job_t *job, int id, int local_rank, int replaces,
                                 weftrun_slot_t **slot)
{
    if (job->nslots >= job->max_slots) {
        return WEFT_ERR_NO_MEMORY; /* callers check first: the table is sized for the job */
    }
    weftrun_slot_t *s = &job->slots[job->nslots];
    *s = (weftrun_slot_t){.rank = id, .local_rank = local_rank, .replaces = replaces};
    weftrun_stream_init(&s->out, -1, 1);
    weftrun_stream_init(&s->err, -1, 2);
    weft_status_t status = weftrun_spawn_rank(job, s);
    if (status != WEFT_OK) {
        return status; /* nothing started: the id stays free for the next one */
    }
    job->nslots++;
    job->nrunning++;
    *slot = s;
    return WEFT_OK;
}

static weft_status_t start_ranks(weftrun_job_t *job)
{
    for (int i = 0; i < job->opts->nranks && job->stop_reason == WEFTRUN_STOP_NONE; i++) {
        weftrun_slot_t *s;
        /* A node started again: its ranks join with new ids, in its lost ranks' places. */
        int id = job->rank_base + i, replaces = -1;
        if (job->replacement_node) {
            replaces = id;
            if (weftrun_new_member_id(job, &id) != WEFT_OK) {
                return WEFT_ERR_NO_MEMORY;
            }
        }
        weft_status_t status = weftrun_start_slot(job, id, i, replaces, &s);
        if (status != WEFT_OK) {
            return status;
        }
        /* The program will not start for the others either; its exit stops the job. */
        if (s->exec_errno != 0) {
            break;
        }
    }
    return WEFT_OK;
}

int weftrun_run_job(weftrun_job_t *job)
{
    const weftrun_opts_t *o = job->opts;
    job->max_slots = o->nranks + (o->elastic && o->replace ? o->max_restarts : 0);
    job->slots = calloc((size_t)job->max_slots, sizeof(*job->slots));
    if (job->slots == NULL) {
        WEFT_ERROR(job->lg, "out of memory for %d ranks", job->max_slots);
        return WEFTRUN_EXIT_FAILED;
    }
    /* Orphans of the ranks (a shell's children) become ours and are reaped, not left as
     * zombies where init does not reap; waitpid() then returns pids of no slot. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (job->opts->timeout_ms != 0) {
        job->deadline_ms = weft__now_ms() + job->opts->timeout_ms;
    }
    job->lease_at_ms = weftrun_nodes_tick(job, weft__now_ms());
    if (start_ranks(job) != WEFT_OK) {
        weftrun_begin_stop(job, WEFTRUN_STOP_LAUNCH_FAILED, WEFTRUN_EXIT_FAILED, SIGTERM);
    }
    if (supervise(job) != WEFT_OK) {
        /* Cannot wait for the ranks any more: make sure none outlives weftrun. */
        job->exit_code = WEFTRUN_EXIT_FAILED;
        signal_ranks(job, SIGKILL, true);
    }
    /* A stopped job leaves nothing behind: not even what the ranks started themselves. */
    if (job->stop_reason != WEFTRUN_STOP_NONE) {
        signal_ranks(job, SIGKILL, false);
    }
    /* What the ranks wrote before exiting is in the pipes; pass it on. */
    for (int i = 0; i < job->nslots; i++) {
        weftrun_stream_drain(&job->slots[i].out, job->slots[i].rank);
        weftrun_stream_drain(&job->slots[i].err, job->slots[i].rank);
    }
    int rc = job->exit_code;
    free(job->slots);
    job->slots = NULL;
    return rc;
}
