/*
 * A tiny elastic data-parallel trainer: the loop a real trainer has around weft.
 *
 * Every rank holds the same parameters w (a vector) and fits them to a target by
 * gradient descent; each step every rank computes the gradient of its own slice of the
 * data, the gradients are averaged with an allreduce, and every rank applies the same
 * update. When a rank dies the allreduce fails on the survivors; they repair the world
 * group in place, admit any process waiting to join (weftrun --elastic --replace starts
 * one), hand it the parameters and the step with a broadcast, and redo the step.
 *
 *   weftrun -n 4 --elastic --replace -- weft-example-trainer [--steps N]
 *           [--kill-rank R --kill-step S]
 *
 * --kill-rank/--kill-step make member R kill itself (SIGKILL) at step S, to watch it
 * happen. --wait-replacement MS makes the survivors wait up to MS for replacements after a
 * loss, so that the job keeps its width (and global batch size). At the end rank 0 prints the loss and every rank checks that all hold the same
 * parameters; the exit status is 0 when they do and the loss went down.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

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

/* After an edit: give newcomers the parameters and the step from rank 0. Every member,
 * old and new, takes part (a newcomer calls it right after joining). */
static weft_status_t sync_state(trainer_t *t)
{
    weft_status_t st = weft_broadcast(t->world, &t->step, 1, WEFT_I32, 0);
    if (st == WEFT_OK) {
        st = weft_broadcast(t->world, t->w, DIM, WEFT_F32, 0);
    }
    /* Members old and new now agree that admissions for this step are done. */
    t->admitted_at = t->step;
    return st;
}

/* After a loss: rank 0 waits (bounded) for replacements to register, and the members
 * admit together as many as it saw. */
static weft_status_t wait_for_width(trainer_t *t)
{
    int rank, size, pending = 0;
    weft_group_rank(t->world, &rank);
    weft_group_size(t->world, &size);
    if (t->wait_ms <= 0 || size >= t->width) {
        return WEFT_OK;
    }
    for (int waited = 0; rank == 0 && waited < t->wait_ms; waited++) {
        weft_group_pending_joiners(t->world, &pending);
        if (size + pending >= t->width) {
            break;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    int32_t n = pending;
    weft_status_t st = weft_broadcast(t->world, &n, 1, WEFT_I32, 0);
    if (st != WEFT_OK || n == 0) {
        return st;
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    st = weft_group_grow(t->world, n, 30000, &info);
    if (st == WEFT_OK && rank == 0) {
        printf("step %d: admitted %d replacement(s), %d ranks\n", t->step, info.n_added,
               info.new_size);
    }
    return st;
}

/* The recovery path: repair (which also admits processes already waiting to join),
 * then resynchronise; replacements that arrive later are admitted by admit_joiners(). */
static weft_status_t recover(trainer_t *t)
{
    for (int attempt = 0; attempt < 10; attempt++) {
        weft_edit_info_t info = {.size = sizeof(info)};
        weft_status_t st = weft_group_repair(t->world, &info);
        if (st != WEFT_OK) {
            return st;
        }
        int rank;
        weft_group_rank(t->world, &rank);
        if (rank == 0 && info.n_removed > 0) {
            printf("step %d: lost %d member(s), %d -> %d ranks, epoch %u\n", t->step,
                   info.n_removed, info.old_size, info.new_size, info.new_epoch);
        }
        if (st == WEFT_OK) {
            st = wait_for_width(t);
        }
        if (st == WEFT_OK) {
            st = sync_state(t);
        }
        if (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
            return st;
        }
    }
    return WEFT_ERR_PEER_FAILED;
}

/* Every ADMIT_EVERY steps the members decide together whether to admit waiting
 * processes: rank 0 counts them and broadcasts the count, so all call grow, or none. */
static weft_status_t admit_joiners(trainer_t *t)
{
    int rank, pending = 0;
    weft_group_rank(t->world, &rank);
    if (rank == 0) {
        weft_group_pending_joiners(t->world, &pending);
    }
    int32_t n = pending;
    weft_status_t st = weft_broadcast(t->world, &n, 1, WEFT_I32, 0);
    if (st != WEFT_OK) {
        return st;
    }
    t->admitted_at = t->step;
    if (n == 0) {
        return WEFT_OK;
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    st = weft_group_grow(t->world, n, 30000, &info);
    if (st == WEFT_OK && rank == 0) {
        printf("step %d: admitted %d member(s), %d ranks\n", t->step, info.n_added,
               info.new_size);
    }
    return st == WEFT_OK ? sync_state(t) : st;
}

/* Are all parameters equal on every rank? (max - min of a checksum over the group) */
static int consistent(trainer_t *t)
{
    double sum = 0;
    for (int i = 0; i < DIM; i++) {
        sum += t->w[i] * (double)(i + 1);
    }
    double lo = sum, hi = sum;
    if (weft_allreduce(t->world, &sum, &lo, 1, WEFT_F64, WEFT_MIN) != WEFT_OK ||
        weft_allreduce(t->world, &sum, &hi, 1, WEFT_F64, WEFT_MAX) != WEFT_OK) {
        return 0;
    }
    return lo == hi;
}

int main(int argc, char **argv)
{
    static trainer_t t = {.admitted_at = -1};
    int steps = 200, kill_rank = -1, kill_step = -1;
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
    weft_status_t st = weft_init(NULL, &t.ctx);
    if (st != WEFT_OK) {
        fprintf(stderr, "trainer: weft_init: %s\n", weft_status_str(st));
        return 1;
    }
    const float first = loss(t.w); /* of the untrained parameters, on every rank */
    const char *join = getenv("WEFT_JOIN");
    if (join != NULL && strcmp(join, "1") == 0) {
        /* A replacement: wait to be admitted, then receive the state. */
        st = weft_group_join(t.ctx, "world", 60000, &t.world);
        if (st == WEFT_OK) {
            st = sync_state(&t);
        }
        if (st != WEFT_OK) {
            return fail(&t, "joining", st);
        }
    } else {
        weft_ctx_world(t.ctx, &t.world);
    }
    weft_group_size(t.world, &t.width);
    while (t.step < steps) {
        int rank, size, me;
        if (t.step % ADMIT_EVERY == 0 && t.step != t.admitted_at) {
            st = admit_joiners(&t);
            if (st == WEFT_ERR_PEER_FAILED || st == WEFT_ERR_REVOKED) {
                st = recover(&t);
            }
            if (st != WEFT_OK) {
                return fail(&t, "admitting joiners", st);
            }
        }
        weft_group_rank(t.world, &rank);
        weft_group_size(t.world, &size);
        weft_group_member_id(t.world, rank, &me);
        if (me == kill_rank && t.step == kill_step) {
            fflush(NULL);
            raise(SIGKILL);
        }
        local_gradient(&t, me);
        st = weft_allreduce(t.world, t.grad, t.grad, DIM, WEFT_F32, WEFT_SUM);
        if (st == WEFT_ERR_PEER_FAILED || st == WEFT_ERR_REVOKED) {
            st = recover(&t);
            if (st != WEFT_OK) {
                return fail(&t, "recovering", st);
            }
            continue; /* redo this step with the new membership */
        }
        if (st != WEFT_OK) {
            return fail(&t, "allreduce", st);
        }
        for (int i = 0; i < DIM; i++) {
            t.w[i] -= 0.1f * t.grad[i] / (float)size;
        }
        if (rank == 0 && t.step % 50 == 0) {
            printf("step %d: loss %.6f on %d ranks\n", t.step, loss(t.w), size);
        }
        t.step++;
    }
    int rank;
    weft_group_rank(t.world, &rank);
    int ok = consistent(&t) && loss(t.w) < first * 0.01f;
    if (rank == 0) {
        printf("done: %d steps, loss %.6f (from %.6f), parameters %s on every rank\n", steps,
               loss(t.w), first, ok ? "equal" : "NOT equal");
    }
    weft_finalize(t.ctx);
    return ok ? 0 : 1;
}
