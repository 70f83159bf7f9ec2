/*
 * Fencing. When a rank stops renewing its liveness lease while its connection to the
 * store stays open (hung, stopped, or starved for longer than WEFT_FAILURE_TIMEOUT_MS),
 * the store publishes its failure and the members go on without it. From then on it is
 * not a member, whatever it does: weftrun kills it (SIGKILL to its process group) so
 * that it cannot wake up later and act on stale state. Its end is then handled like any
 * death (published, replaced under --elastic --replace), except that when it was fenced
 * before the job began to finish, its end does not fail the finishing job: it had
 * stopped being a member before.
 *
 * The store calls weftrun_fence_on_lapse() on its own thread; the member id travels to
 * the supervisor's poll loop through a pipe.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/weftrun.h"

weft_status_t weftrun_fence_init(weftrun_job_t *job)
{
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
        WEFT_ERROR(job->lg, "pipe: %m");
        return WEFT_ERR_IO;
    }
    job->fence_rd = p[0];
    job->fence_wr = p[1];
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
    size_t plen = strlen(WEFTRUN_FAILED_PREFIX);
    if (strncmp(key, WEFTRUN_FAILED_PREFIX, plen) != 0) {
        return; /* a lease of some other namespace: not a process of this job */
    }
    char *end;
    long id = strtol(key + plen, &end, 10);
    if (end == key + plen || *end != '\0' || id < 0 || id > INT32_MAX) {
        return;
    }
    int32_t v = (int32_t)id;
    /* A full pipe holds thousands of ids already; losing one only skips a kill. */
    ssize_t unused = write(job->fence_wr, &v, sizeof(v));
    (void)unused;
}

static void fence(weftrun_job_t *job, int id)
{
    if (id >= job->nslots) {
        return;
    }
    weftrun_slot_t *s = &job->slots[id];
    if (s->state != WEFTRUN_SLOT_RUNNING || s->fenced) {
        return;
    }
    s->fenced = true;
    s->fenced_early = !job->finishing;
    WEFT_WARN(job->lg,
              "rank %d (pid %d) stopped renewing its liveness lease and was declared failed; "
              "killing it, as it is no longer a member",
              s->rank, (int)s->pid);
    weftrun_signal_slot(s, SIGKILL);
}

void weftrun_fence_read(weftrun_job_t *job)
{
    int32_t id;
    while (read(job->fence_rd, &id, sizeof(id)) == (ssize_t)sizeof(id)) {
        fence(job, id);
    }
}
