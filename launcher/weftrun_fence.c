/*
 * Fencing. When a rank stops renewing its liveness lease while its connection to the
 * store stays open (hung, stopped, or starved for longer than WEFT_FAILURE_TIMEOUT_MS),
 * the store publishes its failure and the members go on without it. From then on it is
 * not a member, whatever it does: weftrun kills it (SIGKILL to its process group) so
 * that it cannot wake up later and act on stale state. Its end is then handled like any
 * death (published, replaced under --elastic --replace), except that when it was fenced
 * before the job began to finish, its end does not fail the finishing job: it had
 * stopped being a member before, and that its replacement starts at once rather than
 * when it is reaped: on a busy CPU the kernel can take seconds to unmap a large process
 * after SIGKILL, and the members would wait for the replacement all that time.
 *
 * The store calls weftrun_fence_on_lapse() on its own thread; the member id travels to
 * the supervisor's poll loop through a pipe.
 */
#include <fcntl.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/weftrun.h"
#include "util/parse.h"

weft_status_t weftrun_fence_init(weftrun_job_t *job)
{
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
        WEFT_ERROR(job->lg, "pipe: %m");
        return WEFT_ERR_IO;
    }
    job->fence_rd = p[0];
    job->fence_wr = p[1];
    /* The ranks inherit this environment, so their lease uses the same setting (main()
     * read it through the ranks' own settings table). As the lease's TTL: at least 1 ms. */
    job->stop_fence_ms = job->cfg.failure_timeout_ms > 0 ? job->cfg.failure_timeout_ms : 1;
    return WEFT_OK;
}

void weftrun_fence_close(weftrun_job_t *job)
{
    if (job->fence_rd >= 0) {
        close(job->fence_rd);
    }
    if (job->fence_wr >= 0) {
        close(job->fence_wr);
    }
    job->fence_rd = job->fence_wr = -1;
}

void weftrun_fence_on_lapse(void *arg, const char *key)
{
    weftrun_job_t *job = arg;
    size_t plen = strlen(job->failed_prefix);
    if (strncmp(key, job->failed_prefix, plen) != 0) {
        return; /* a lease of some other namespace: not a process of this job */
    }
    int64_t id;
    if (!weft__parse_i64(key + plen, 0, INT32_MAX, &id)) {
        return;
    }
    int32_t v = (int32_t)id;
    /* A full pipe holds thousands of ids already; losing one only skips a kill. */
    ssize_t unused = write(job->fence_wr, &v, sizeof(v));
    (void)unused;
}

static void fence_slot(weftrun_job_t *job, weftrun_slot_t *s, const char *why)
{
    if (s->state != WEFTRUN_SLOT_RUNNING || s->fenced) {
        return;
    }
    s->fenced = true;
    s->fenced_early = !job->finishing;
    WEFT_WARN(job->lg, "rank %d (pid %d) %s; killing it, as it is no longer a member", s->rank,
              (int)s->pid, why);
    weftrun_signal_slot(s, SIGKILL);
    weftrun_elastic_on_fenced(job, s);
}

void weftrun_fence_id(weftrun_job_t *job, int id, const char *why)
{
    for (int i = 0; i < job->nslots; i++) {
        if (job->slots[i].rank == id) {
            fence_slot(job, &job->slots[i], why);
            return;
        }
    }
}

/* A lapsed lease: the rank is killed here, or by the node running it. */
static void fence(weftrun_job_t *job, int id)
{
    bool mine = false;
    for (int i = 0; i < job->nslots && !mine; i++) {
        mine = job->slots[i].rank == id;
    }
    if (mine) {
        weftrun_fence_id(job, id, "stopped renewing its liveness lease and was declared failed");
    } else if (job->nodes != NULL) {
        char key[64];
        snprintf(key, sizeof(key), "weftrun/fence/%d", id);
        weftrun_nodes_publish(job, key, -1, "");
    }
}

/*
 * A stopped process (SIGSTOP, SIGTSTP) holds no lease before it has claimed its member id
 * in weft_init, nor after weft_finalize disarmed it, so the store cannot declare it failed
 * then: the others would wait for it at start-up until WEFT_CONNECT_TIMEOUT_MS, and the
 * job would never end. weftrun sees the stop itself (SIGCHLD) and fences the process once
 * it has stayed stopped for WEFT_FAILURE_TIMEOUT_MS, as the lease would have.
 */
uint64_t weftrun_fence_stopped(weftrun_job_t *job, uint64_t now)
{
    uint64_t next = 0;
    for (int i = 0; i < job->nslots; i++) {
        weftrun_slot_t *s = &job->slots[i];
        if (s->state != WEFTRUN_SLOT_RUNNING || s->stopped_since_ms == 0 || s->fenced ||
            job->stop_fence_ms == 0) {
            continue;
        }
        uint64_t due = s->stopped_since_ms + job->stop_fence_ms;
        if (now >= due) {
            fence_slot(job, s, "stayed stopped for longer than WEFT_FAILURE_TIMEOUT_MS");
        } else if (next == 0 || due < next) {
            next = due;
        }
    }
    return next;
}

void weftrun_fence_read(weftrun_job_t *job)
{
    int32_t id;
    while (read(job->fence_rd, &id, sizeof(id)) == (ssize_t)sizeof(id)) {
        fence(job, id);
    }
}
