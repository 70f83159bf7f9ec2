/*
 * --elastic: a process that dies does not stop the job. Its death is published as always
 * (weft/failed/<member id>, by the caller), the members repair their groups in place, and
 * under --replace a new process is started here to take its place: the same command with
 * WEFT_JOIN=1 and the next unused member id, which the members admit with
 * weft_group_grow() or weft_group_repair(). The job is stopped only when a death leaves
 * fewer than --min processes running.
 *
 * A job is running until its first process exits 0, then finishing: the members are done
 * with their work, so nobody would admit a replacement any more (it would wait in
 * weft_group_join() until its own timeout, die, and be replaced again), and a process
 * that fails now failed the end of the job rather than its course. Such a death is not
 * replaced and its status becomes weftrun's (the first one wins); the others are left to
 * finish. A process fenced before (weftrun_fence.c) is the exception: it had stopped
 * being a member when its lease lapsed; so is one that a member had reported failed
 * (weft/failed/<id>) before the first exit 0: a process killed with SIGKILL closes its
 * sockets before it becomes a zombie, so the survivors may detect it, repair and exit
 * before weftrun can reap it.
 *
 * A process that exits WEFT_EXIT_JOB_FAILED (weft/core.h) is no death at all: it says
 * that the job failed (the trainer lost its state), so replacing it or letting the others
 * finish would make a failed job look like a success. weftrun_supervise.c stops the job
 * with its status before any of this is consulted.
 */
#include <signal.h>
#include <stdio.h>

#include "launcher/weftrun.h"

void weftrun_elastic_finishing(weftrun_job_t *job, const char *why)
{
    if (job->finishing) {
        return;
    }
    job->finishing = true;
    /* Members that others reported failed before this exit are out of the group, even
     * when their process is reaped only after it. */
    for (int i = 0; i < job->nslots; i++) {
        weftrun_slot_t *o = &job->slots[i];
        char key[64];
        snprintf(key, sizeof(key), "%s%d", job->failed_prefix, o->rank);
        o->reported_early = o->state == WEFTRUN_SLOT_RUNNING && weftrun_store_has(job, key);
    }
    WEFT_INFO(job->lg,
              "%s: the job is finishing; a death from now on is not replaced and "
              "fails the job",
              why);
}

void weftrun_elastic_on_success(weftrun_job_t *job, const weftrun_slot_t *s)
{
    if (job->finishing) {
        return;
    }
    char why[64];
    snprintf(why, sizeof(why), "rank %d exited 0", s->rank);
    weftrun_elastic_finishing(job, why);
    /* The other nodes' ranks are done with their work as well. */
    if (job->nodes != NULL) {
        weftrun_nodes_publish(job, "weftrun/finishing", -1, "");
    }
}
static void stop_too_few(weftrun_job_t *job, const weftrun_slot_t *s, const weftrun_death_t *d)
{
    WEFT_ERROR(job->lg, "rank %d (pid %d) %s; %d process(es) left, fewer than --min %d: %s",
               s->rank, (int)s->pid, d->text, job->nrunning, job->opts->min_alive,
               job->nrunning > 0 ? "stopping the job" : "the job fails");
    weftrun_begin_stop(job, WEFTRUN_STOP_TOO_FEW, d->code, SIGTERM);
}

/* A death at the end of the job counts: the first one gives weftrun's exit status. */
static void fail_while_finishing(weftrun_job_t *job, const weftrun_slot_t *s,
                                 const weftrun_death_t *d)
{
    if (!job->have_failure) {
        job->have_failure = true;
        job->exit_code = d->code;
    }
    WEFT_ERROR(job->lg,
               "rank %d (pid %d) %s after the job began to finish (a process had exited 0): "
               "not replaced, and the job fails; %d process(es) left to finish",
               s->rank, (int)s->pid, d->text, job->nrunning);
}

/* Start the replacement of @p s; false when it could not be started (already logged). */
static bool replace(weftrun_job_t *job, const weftrun_slot_t *s, const weftrun_death_t *d)
{
    weftrun_slot_t *r;
    int id;
    if (weftrun_new_member_id(job, &id) != WEFT_OK ||
        weftrun_start_slot(job, id, s->local_rank, s->rank, &r) != WEFT_OK) {
        return false;
    }
    job->restarts++;
    WEFT_WARN(job->lg,
              "rank %d (pid %d) %s; started rank %d (pid %d) to join in its place "
              "(replacement %d of at most %d)",
              s->rank, (int)s->pid, d->text, r->rank, (int)r->pid, job->restarts,
              job->opts->max_restarts);
    return true;
}

/*
 * A fenced process was sent SIGKILL and is no member any more: its replacement need not
 * wait for the reap. Under load the kernel can take seconds to tear down a large address
 * space after SIGKILL, and the members would wait in weft_group_grow() all that time.
 * Only the plain case is taken here; a fence that leaves the job finishing, stopping or
 * out of replacements is judged when the process is reaped, as before.
 */
void weftrun_elastic_on_fenced(weftrun_job_t *job, weftrun_slot_t *s)
{
    const weftrun_opts_t *o = job->opts;
    if (!o->elastic || !o->replace || job->finishing || job->stop_reason != WEFTRUN_STOP_NONE ||
        job->restarts >= o->max_restarts || s->replaced) {
        return;
    }
    weftrun_death_t d = {.code = 128 + SIGKILL};
    snprintf(d.text, sizeof(d.text), "was declared failed and killed");
    s->replaced = replace(job, s, &d);
}

void weftrun_elastic_on_death(weftrun_job_t *job, const weftrun_slot_t *s, const weftrun_death_t *d)
{
    if (s->replaced) {
        /* Its replacement was counted and started when it was fenced. */
        WEFT_WARN(job->lg, "rank %d (pid %d) %s; it was replaced when it was declared failed",
                  s->rank, (int)s->pid, d->text);
        return;
    }
    if (s->exec_errno != 0) {
        /* Every replacement would fail the same way: the program cannot be run at all. */
        WEFT_ERROR(job->lg, "rank %d could not run the program; stopping the job", s->rank);
        weftrun_begin_stop(job, WEFTRUN_STOP_RANK_FAILED, d->code, SIGTERM);
        return;
    }
    if (job->finishing && (s->fenced_early || s->reported_early)) {
        /* Declared or reported failed before the job began to finish: repaired away. */
        WEFT_WARN(job->lg,
                  "rank %d (pid %d) %s; it was no longer a member, so the job does "
                  "not fail for it",
                  s->rank, (int)s->pid, d->text);
        return;
    }
    if (job->finishing) {
        fail_while_finishing(job, s, d);
        return;
    }
    const weftrun_opts_t *o = job->opts;
    bool can_replace = o->replace && job->restarts < o->max_restarts;
    /* Count the replacement before starting it, so that none is started only to be
     * stopped at once. */
    if (job->nrunning + (can_replace ? 1 : 0) < o->min_alive) {
        stop_too_few(job, s, d);
        return;
    }
    if (can_replace && replace(job, s, d)) {
        return;
    }
    if (job->nrunning < o->min_alive) {
        stop_too_few(job, s, d); /* its replacement could not be started */
        return;
    }
    const char *why = !o->replace   ? ""
                      : can_replace ? "; its replacement could not be started"
                                    : "; not replaced: --max-restarts reached";
    WEFT_WARN(job->lg, "rank %d (pid %d) %s%s; %d process(es) keep going", s->rank, (int)s->pid,
              d->text, why, job->nrunning);
}
