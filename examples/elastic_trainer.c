/*
 * A tiny elastic data-parallel trainer: the loop a real trainer has around weft.
 *
 * Every rank holds the same parameters w (a vector) and fits them to a target by
 * gradient descent; each step every rank computes the gradient of its own slice of the
 * data, the gradients are averaged with an allreduce, and every rank applies the same
 * update. When a rank dies the allreduce fails on the survivors; they repair the world
 * group in place (which also admits processes waiting to join: weftrun --elastic
 * --replace starts them), resynchronise everyone from rank 0 and redo the step.
 *
 *   weftrun -n 4 --elastic --replace -- weft-example-trainer [--steps N]
 *           [--kill-rank R --kill-step S] [--wait-replacement MS]
 *   weft-example-trainer --version
 *
 * --kill-rank/--kill-step make member R kill itself (SIGKILL) at step S, to watch it
 * happen. --wait-replacement MS makes the survivors wait up to MS for replacements after a
 * loss, so that the job keeps its width (and global batch size). At the end rank 0 prints
 * the median step time before the first edit and after the last, and the loss; every
 * rank checks that all hold the same parameters, and the exit status is 0 when they do
 * and the loss went down.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "step_timer.h"

#define DIM 4096
#define ADMIT_EVERY 10

typedef struct trainer {
    weft_ctx_t *ctx;
    weft_group_t *world;
    float w[DIM];
    float grad[DIM];
    int32_t step;
    int32_t admitted_at; /* step of the last membership sync: no second admission then */
    int width;           /* ranks the job is meant to have (keeps the global batch) */
    int wait_ms;         /* --wait-replacement: how long to wait for a lost rank's successor */
    step_timer_t timer;
} trainer_t;

/* The target every rank fits; the "data" of rank r at step s perturbs it a little. */
static float target(int i)
{
    return sinf(0.01f * (float)i);
}

static float loss(const float *w)
{
    double l = 0;
    for (int i = 0; i < DIM; i++) {
        double d = w[i] - target(i);
        l += d * d;
    }
    return (float)(l / DIM);
}

/* Gradient of this rank's slice: the mean-square error against a noisy view of the
 * target. The noise depends on (member id, step) so every rank contributes differently;
 * it averages out across ranks. */
static void local_gradient(trainer_t *t, int member)
{
    for (int i = 0; i < DIM; i++) {
        unsigned h = (unsigned)(i * 2654435761u) ^ (unsigned)(member * 40503) ^
                     (unsigned)(t->step * 9973);
        float noise = ((float)(h % 1000) / 1000.0f - 0.5f) * 0.1f;
        t->grad[i] = 2.0f * (t->w[i] - (target(i) + noise));
    }
}

static int fail(trainer_t *t, const char *what, weft_status_t st)
{
    fprintf(stderr, "trainer: %s: %s: %s\n", what, weft_status_str(st), weft_last_error(t->ctx));
    return 1;
}

static int peer_lost(weft_status_t st)
{
    return st == WEFT_ERR_PEER_FAILED || st == WEFT_ERR_REVOKED;
}

/* After every membership edit, and only then: every member, old and new, takes the
 * step, the job's width and the parameters from rank 0. This is the first operation of
 * every epoch, so members can never be in different operations of one epoch. */
static weft_status_t sync_state(trainer_t *t)
{
    int32_t head[2] = {t->step, t->width};
    weft_status_t st = weft_broadcast(t->world, head, 2, WEFT_I32, 0);
    if (st == WEFT_OK) {
        st = weft_broadcast(t->world, t->w, DIM, WEFT_F32, 0);
    }
    if (st == WEFT_OK) {
        t->step = head[0];
        t->width = head[1];
        t->admitted_at = t->step; /* no second admission at this step */
        step_timer_edit(&t->timer);
    }
    return st;
}

/*
 * The recovery loop, as it must be written: repair (survivors agree on who is gone, and
 * processes already waiting to join are admitted), optionally wait for replacements
 * (an admission every member may call: the first decides for all), then resynchronise.
 * Any of these fails with WEFT_ERR_PEER_FAILED/WEFT_ERR_REVOKED if another member fails or
 * decides an edit meanwhile; the loop then starts over, and repair applies what the
 * others decided. Each round is caused by a death or an admission, so it ends.
 */
static weft_status_t recover(trainer_t *t)
{
    for (int round = 0; round < 256; round++) {
        weft_edit_info_t info = {.size = sizeof(info)};
        weft_status_t st = weft_group_repair(t->world, &info);
        if (st != WEFT_OK) {
            return st; /* WEFT_ERR_REVOKED: the others declared this member failed */
        }
        int rank, size;
        weft_group_rank(t->world, &rank);
        weft_group_size(t->world, &size);
        if (rank == 0 && info.n_removed > 0) {
            printf("step %d: lost %d member(s), %d -> %d ranks, epoch %u\n", t->step,
                   info.n_removed, info.old_size, info.new_size, info.new_epoch);
        }
        double deadline = step_timer_now() + 1e-3 * t->wait_ms;
        while (st == WEFT_OK && size < t->width && step_timer_now() < deadline) {
            weft_edit_info_t grown = {.size = sizeof(grown)};
            uint64_t left_ms = (uint64_t)(1e3 * (deadline - step_timer_now())) + 1;
            st = weft_group_grow(t->world, t->width - size, left_ms, &grown);
            weft_group_rank(t->world, &rank);
            weft_group_size(t->world, &size);
            if (st == WEFT_OK && rank == 0 && grown.new_epoch != grown.old_epoch) {
                printf("step %d: lost %d, admitted %d member(s), %d ranks, epoch %u\n", t->step,
                       grown.n_removed, grown.n_added, grown.new_size, grown.new_epoch);
            }
        }
        if (st == WEFT_OK) {
            st = sync_state(t);
        }
        if (!peer_lost(st)) {
            return st;
        }
    }
    return WEFT_ERR_PEER_FAILED;
}

/* Every ADMIT_EVERY steps, admit processes waiting to join, if any. Every member calls
 * it at the same step; if members see different joiners, the first to decide admits
 * them, and a member that saw none learns of it when its next collective fails. */
static weft_status_t admit_joiners(trainer_t *t)
{
    uint32_t before, after;
    weft_group_epoch(t->world, &before);
    weft_edit_info_t info = {.size = sizeof(info)};
    weft_status_t st = weft_group_grow(t->world, 0, 0, &info);
    t->admitted_at = t->step;
    weft_group_epoch(t->world, &after);
    if (st != WEFT_OK || after == before) {
        return st;
    }
    int rank;
    weft_group_rank(t->world, &rank);
    if (rank == 0) {
        printf("step %d: lost %d, admitted %d member(s), %d ranks, epoch %u\n", t->step,
               info.n_removed, info.n_added, info.new_size, info.new_epoch);
    }
    return sync_state(t);
}

/* Are all parameters equal on every rank? (max - min of a checksum over the group) */
static weft_status_t check_consistent(trainer_t *t, int *equal)
{
    double sum = 0;
    for (int i = 0; i < DIM; i++) {
        sum += t->w[i] * (double)(i + 1);
    }
    double lo = sum, hi = sum;
    weft_status_t st = weft_allreduce(t->world, &sum, &lo, 1, WEFT_F64, WEFT_MIN);
    if (st == WEFT_OK) {
        st = weft_allreduce(t->world, &sum, &hi, 1, WEFT_F64, WEFT_MAX);
    }
    *equal = st == WEFT_OK && lo == hi;
    return st;
}

/* One training step: local gradient, allreduce, update. */
static weft_status_t train_step(trainer_t *t, int kill_rank, int kill_step)
{
    int rank, size, me;
    weft_group_rank(t->world, &rank);
    weft_group_size(t->world, &size);
    weft_group_member_id(t->world, rank, &me);
    if (me == kill_rank && t->step == kill_step) {
        fflush(NULL);
        raise(SIGKILL);
    }
    step_timer_start(&t->timer);
    local_gradient(t, me);
    weft_status_t st = weft_allreduce(t->world, t->grad, t->grad, DIM, WEFT_F32, WEFT_SUM);
    if (st != WEFT_OK) {
        return st;
    }
    for (int i = 0; i < DIM; i++) {
        t->w[i] -= 0.1f * t->grad[i] / (float)size;
    }
    if (rank == 0 && t->step % 50 == 0) {
        printf("step %d: loss %.6f on %d ranks\n", t->step, loss(t->w), size);
    }
    step_timer_done(&t->timer, size);
    t->step++;
    return WEFT_OK;
}

/* Train up to @p steps, recovering from every loss, then check that all ranks agree. */
static weft_status_t run(trainer_t *t, int steps, int kill_rank, int kill_step, int *equal)
{
    for (;;) {
        weft_status_t st = WEFT_OK;
        if (t->step < steps && t->step % ADMIT_EVERY == 0 && t->step != t->admitted_at) {
            st = admit_joiners(t);
        } else if (t->step < steps) {
            st = train_step(t, kill_rank, kill_step);
        } else {
            st = check_consistent(t, equal);
            if (st == WEFT_OK) {
                return WEFT_OK;
            }
        }
        if (peer_lost(st)) {
            st = recover(t); /* then redo what failed, at the step rank 0 had */
        }
        if (st != WEFT_OK) {
            return st;
        }
    }
}

static void report_rates(trainer_t *t)
{
    step_timer_t *tm = &t->timer;
    double before = step_timer_median(tm->first, tm->n_first);
    double after = step_timer_median(tm->last, tm->n_last);
    if (tm->edits == 0 || before <= 0 || after <= 0) {
        return;
    }
    printf("step time: %.1f us on %d ranks before the first edit, %.1f us on %d ranks after "
           "the last (%d resynchronisations): speed %.2fx\n",
           1e6 * before, tm->size_first, 1e6 * after, tm->size_last, tm->edits, before / after);
}

int main(int argc, char **argv)
{
    static trainer_t t = {.admitted_at = -1};
    int steps = 200, kill_rank = -1, kill_step = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("weft %s\n", weft_version(NULL, NULL, NULL));
            return 0;
        }
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0) {
            steps = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--kill-rank") == 0) {
            kill_rank = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--kill-step") == 0) {
            kill_step = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--wait-replacement") == 0) {
            t.wait_ms = atoi(argv[i + 1]);
        }
    }
    if (!step_timer_init(&t.timer, steps)) {
        fprintf(stderr, "trainer: no memory\n");
        return 1;
    }
    weft_status_t st = weft_init(NULL, &t.ctx);
    if (st != WEFT_OK) {
        fprintf(stderr, "trainer: weft_init: %s\n", weft_status_str(st));
        return 1;
    }
    const float first = loss(t.w); /* of the untrained parameters, on every rank */
    const char *join = getenv("WEFT_JOIN");
    if (join != NULL && strcmp(join, "1") == 0) {
        /* A replacement: wait to be admitted, then receive the state like everyone. */
        st = weft_group_join(t.ctx, "world", 60000, &t.world);
        if (st == WEFT_ERR_REVOKED) {
            printf("trainer: %s\n", weft_last_error(t.ctx)); /* came too late: nothing to do */
            weft_finalize(t.ctx);
            return 0;
        }
        if (st == WEFT_OK) {
            st = sync_state(&t);
            st = peer_lost(st) ? recover(&t) : st;
        }
        if (st != WEFT_OK) {
            return fail(&t, "joining", st);
        }
    } else {
        weft_ctx_world(t.ctx, &t.world);
        weft_group_size(t.world, &t.width);
    }
    int equal = 0;
    st = run(&t, steps, kill_rank, kill_step, &equal);
    if (st != WEFT_OK) {
        return fail(&t, "training", st);
    }
    int rank;
    weft_group_rank(t.world, &rank);
    int ok = equal && loss(t.w) < first * 0.01f;
    if (rank == 0) {
        report_rates(&t);
        printf("done: %d steps, loss %.6f (from %.6f), parameters %s on every rank\n", steps,
               loss(t.w), first, ok ? "equal" : "NOT equal");
    }
    step_timer_free(&t.timer);
    weft_finalize(t.ctx);
    return ok ? 0 : 1;
}
