/*
 * A small elastic data-parallel trainer with ZeRO-1 optimizer state: the loop a real
 * trainer has around weft.
 *
 * The model is a vector w, fitted by momentum SGD on a global batch of BATCH samples per
 * step (toy_problem.h). Every member holds all of w. The momentum m is sharded ZeRO-1
 * style: a weft layout cuts it into equal flat partitions over the members in group rank
 * order, and member i also keeps a copy of partition i+1, its ring neighbour's, so that
 * no single death loses optimizer state (momentum_state.c: the layout and its migration).
 *
 * A step: each member computes the gradient of its share of the batch (weft_batch_share:
 * the same samples, and the same 1/BATCH scale, at every width); an allreduce sums the
 * gradients; each member updates m on both partitions it holds (the copy stays equal to
 * the original without a message) and w on its own partition only, since it has no other
 * part of m; an allgather of the w partitions gives every member the whole new w.
 *
 * When a member dies the next collective fails on the survivors. They repair the world
 * group in place (which also admits processes waiting to join: weftrun --elastic --replace
 * starts them), may wait for replacements, and resynchronise: agree on the state, take w
 * and the previous membership from rank 0, and migrate m from the layout over the
 * previous members to the layout over the new ones. The old layout is a function of the
 * previous membership, so every member, joiners included, builds the same plan locally;
 * a joiner holds nothing of the old layout. When two ring neighbours die before a
 * migration has re-replicated their partitions, one partition is lost: the plan lists it
 * as missing, and the trainer says which and stops (restoring it needs a snapshot).
 *
 *   weftrun -n 4 --elastic --replace -- weft-example-trainer [--steps N]
 *           [--kill-rank R --kill-step S] [--kill-rank2 R --kill-step2 S]
 *           [--wait-replacement MS]
 *   weft-example-trainer --version
 *
 * --kill-rank/--kill-step make member R kill itself (SIGKILL) at step S (and
 * --kill-rank2/--kill-step2 a second one), to watch it happen. --wait-replacement MS makes
 * the survivors wait up to MS for replacements after a loss, so that the job keeps its
 * width. Rank 0 prints a line for each migration (bytes received, and the least any plan
 * must move). At the end rank 0 recomputes the run in one process without failures
 * (toy_reference, in double) and every member compares its w and both momentum partitions
 * with it: every element within TOLERANCE of the reference, relative to max(|ref|, 1)
 * (float sums in another order differ in their last bits; runs here stay near 1e-6).
 * Rank 0 prints the median step time before the first edit and after the last, and the
 * loss; the exit status is 0 when all members hold equal w, everything matches the
 * reference and the loss went down.
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "momentum_state.h"
#include "step_timer.h"
#include "toy_problem.h"

#define ADMIT_EVERY 10
#define TOLERANCE 1e-5

typedef struct trainer {
    weft_ctx_t *ctx;
    weft_group_t *world;
    /* The state now, and the one it replaced (to go back to when the others did not make
     * the commit that made the current one; see resynchronise). */
    state_t cur, prev;
    float grad[DIM];
    double ref[2 * DIM]; /* the reference w and m, once rank 0 computed them */
    int have_ref;
    int32_t admitted_at; /* step of the last membership sync: no second admission then */
    int width;           /* ranks the job is meant to have */
    int wait_ms;         /* --wait-replacement: how long to wait for a lost rank's successor */
    int kill_rank[2], kill_step[2];
    int state_lost; /* a momentum partition had no live holder */
    step_timer_t timer;
} trainer_t;

static int fail(trainer_t *t, const char *what, weft_status_t st)
{
    fprintf(stderr, "trainer: %s: %s: %s\n", what,
            t->state_lost ? "optimizer state lost (restoring it needs a snapshot)"
                          : weft_status_str(st),
            t->state_lost ? "see above" : weft_last_error(t->ctx));
    if (t->state_lost) {
        /* Every member stops here together: leaving together tells the processes still
         * waiting to join that there is nothing to join. */
        weft_finalize(t->ctx);
    }
    return 1;
}

static int peer_lost(weft_status_t st)
{
    return st == WEFT_ERR_PEER_FAILED || st == WEFT_ERR_REVOKED;
}

/* Keep @p next as the current state, and the current one as the one before it. */
static void commit(trainer_t *t, state_t *next)
{
    state_free(&t->prev);
    t->prev = t->cur;
    t->cur = *next;
    t->cur.version++;
}

/*
 * After every membership edit, and only then: the first operations of every epoch.
 *
 * 1. Agree on the state. Every commit (a step, a migration) ends with an operation that
 *    can complete on some members and fail on others, so a member may be one commit
 *    ahead: it goes back to the state it kept (a joiner that has none holds nothing).
 * 2. Take the width, the membership the momentum is laid out over, and w from rank 0
 *    (joiners have none of them). Rank 0 holds the agreed state if anyone does: joiners
 *    come after the members they join.
 * 3. Migrate the momentum to the new membership.
 */
static weft_status_t resynchronise(trainer_t *t)
{
    int32_t version = t->cur.version; /* INT32_MAX for a joiner that never took part */
    weft_status_t st = weft_allreduce(t->world, &version, &version, 1, WEFT_I32, WEFT_MIN);
    if (st != WEFT_OK) {
        return st;
    }
    if (t->cur.nmembers > 0 && t->cur.version > version) {
        int rank, me;
        weft_group_rank(t->world, &rank);
        weft_group_member_id(t->world, rank, &me);
        printf("step %d: member %d goes back one commit, which the others did not make\n",
               t->cur.step, me);
        state_free(&t->cur);
        t->cur = t->prev; /* the one before, or nothing */
        memset(&t->prev, 0, sizeof(t->prev));
    }
    int32_t head[3 + MAX_MEMBERS] = {t->width, t->cur.step, t->cur.nmembers};
    for (int i = 0; i < t->cur.nmembers; i++) {
        head[3 + i] = t->cur.members[i];
    }
    st = weft_broadcast(t->world, head, 3 + MAX_MEMBERS, WEFT_I32, 0);
    if (st == WEFT_OK && head[2] == 0) {
        t->state_lost = 1; /* only joiners are left */
        fprintf(stderr, "trainer: no member holds the training state\n");
        return WEFT_ERR_UNSUPPORTED;
    }
    if (st == WEFT_OK && t->cur.w == NULL) {
        t->cur.w = calloc(DIM + MAX_MEMBERS, sizeof(float)); /* a joiner's */
        st = t->cur.w != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
    }
    if (st == WEFT_OK) {
        st = weft_broadcast(t->world, t->cur.w, DIM, WEFT_F32, 0);
    }
    state_t next;
    if (st == WEFT_OK) {
        t->width = head[0];
        t->cur.step = head[1];
        t->cur.version = version;
        st = state_migrate(t->world, &t->cur, head + 3, head[2], &next, &t->state_lost);
    }
    if (st == WEFT_OK) {
        commit(t, &next);
        t->admitted_at = t->cur.step; /* no second admission at this step */
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
            printf("step %d: lost %d member(s), %d -> %d ranks, epoch %u\n", t->cur.step,
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
                printf("step %d: lost %d, admitted %d member(s), %d ranks, epoch %u\n", t->cur.step,
                       grown.n_removed, grown.n_added, grown.new_size, grown.new_epoch);
            }
        }
        if (st == WEFT_OK) {
            st = resynchronise(t);
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
    t->admitted_at = t->cur.step;
    weft_group_epoch(t->world, &after);
    if (st != WEFT_OK || after == before) {
        return st;
    }
    int rank;
    weft_group_rank(t->world, &rank);
    if (rank == 0) {
        printf("step %d: lost %d, admitted %d member(s), %d ranks, epoch %u\n", t->cur.step,
               info.n_removed, info.n_added, info.new_size, info.new_epoch);
    }
    return resynchronise(t);
}

/* One training step: gradient of this member's share of the batch, allreduce, update of
 * the momentum it holds and of its partition of w, allgather of w. The new state is
 * committed only when all of that succeeded. */
static weft_status_t train_step(trainer_t *t)
{
    int rank, size, me;
    weft_group_rank(t->world, &rank);
    weft_group_size(t->world, &size);
    weft_group_member_id(t->world, rank, &me);
    for (int k = 0; k < 2; k++) {
        if (me == t->kill_rank[k] && t->cur.step == t->kill_step[k]) {
            fflush(NULL);
            raise(SIGKILL);
        }
    }
    step_timer_start(&t->timer);
    weft_batch_share_t share;
    weft_status_t st = weft_batch_share(BATCH, size, rank, 0, &share);
    if (st != WEFT_OK) {
        return st;
    }
    toy_gradient(t->cur.w, t->cur.step, share.first, share.samples, (float)share.grad_scale,
                 t->grad);
    st = weft_allreduce(t->world, t->grad, t->grad, DIM, WEFT_F32, WEFT_SUM);
    if (st != WEFT_OK) {
        return st;
    }
    state_t next;
    if ((st = state_update(&t->cur, t->grad, &next)) != WEFT_OK) {
        return st;
    }
    /* Partition r starts at r * per (weft_layout_flat); the last ones may be shorter, and
     * the allgather sends their padding too. */
    size_t per = (DIM + (size_t)size - 1) / (size_t)size;
    st = weft_allgather(t->world, next.w + (size_t)rank * per, next.w, per, WEFT_F32);
    if (st != WEFT_OK) {
        state_free(&next);
        return st;
    }
    next.step++;
    commit(t, &next);
    if (rank == 0 && t->cur.step % 50 == 0) {
        printf("step %d: loss %.6f on %d ranks\n", t->cur.step, toy_loss(t->cur.w), size);
    }
    step_timer_done(&t->timer, size);
    return WEFT_OK;
}

/* Elementwise |x - ref| / max(|ref|, 1), the worst over @p n. */
static double worst_error(const float *x, const double *ref, uint64_t n)
{
    double worst = 0;
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs(x[i] - ref[i]) / fmax(fabs(ref[i]), 1.0);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* At the end: does every member hold the same w (max - min of a checksum over the group),
 * and do its w and its momentum partitions match the reference, which rank 0 computes? */
static weft_status_t final_check(trainer_t *t, int steps, int *equal, double *error)
{
    int rank;
    weft_group_rank(t->world, &rank);
    if (rank == 0 && !t->have_ref) {
        toy_reference(steps, t->ref, t->ref + DIM);
        t->have_ref = 1;
    }
    weft_status_t st = weft_broadcast(t->world, t->ref, 2 * DIM, WEFT_F64, 0);
    if (st != WEFT_OK) {
        return st;
    }
    double e[2] = {worst_error(t->cur.w, t->ref, DIM), 0}; /* w, and m */
    const float *m = t->cur.m;
    for (int k = 0; k < t->cur.nparts; k++) {
        double ek = worst_error(m, t->ref + DIM + t->cur.lo[k], t->cur.len[k]);
        e[1] = ek > e[1] ? ek : e[1];
        m += t->cur.len[k];
    }
    double sum = 0;
    for (int i = 0; i < DIM; i++) {
        sum += t->cur.w[i] * (double)(i + 1);
    }
    double lo = sum, hi = sum;
    st = weft_allreduce(t->world, &sum, &lo, 1, WEFT_F64, WEFT_MIN);
    if (st == WEFT_OK) {
        st = weft_allreduce(t->world, &sum, &hi, 1, WEFT_F64, WEFT_MAX);
    }
    if (st == WEFT_OK) {
        st = weft_allreduce(t->world, e, error, 2, WEFT_F64, WEFT_MAX);
    }
    *equal = st == WEFT_OK && lo == hi;
    return st;
}

/* Train up to @p steps, recovering from every loss, then check the result. */
static weft_status_t run(trainer_t *t, int steps, int *equal, double *error)
{
    for (;;) {
        weft_status_t st = WEFT_OK;
        int32_t step = t->cur.step;
        if (step < steps && step % ADMIT_EVERY == 0 && step != t->admitted_at) {
            st = admit_joiners(t);
        } else if (step < steps) {
            st = train_step(t);
        } else {
            st = final_check(t, steps, equal, error);
            if (st == WEFT_OK) {
                return WEFT_OK;
            }
        }
        if (peer_lost(st)) {
            st = recover(t); /* then redo what failed, from the agreed state */
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
    static trainer_t t = {.admitted_at = -1, .kill_rank = {-1, -1}, .kill_step = {-1, -1}};
    int steps = 200;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("weft %s\n", weft_version(NULL, NULL, NULL));
            return 0;
        }
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *opt = argv[i];
        int v = atoi(argv[i + 1]);
        if (strcmp(opt, "--steps") == 0) {
            steps = v;
        } else if (strcmp(opt, "--kill-rank") == 0 || strcmp(opt, "--kill-rank2") == 0) {
            t.kill_rank[opt[11] == '2'] = v;
        } else if (strcmp(opt, "--kill-step") == 0 || strcmp(opt, "--kill-step2") == 0) {
            t.kill_step[opt[11] == '2'] = v;
        } else if (strcmp(opt, "--wait-replacement") == 0) {
            t.wait_ms = v;
        }
    }
    toy_init();
    if (!step_timer_init(&t.timer, steps)) {
        fprintf(stderr, "trainer: no memory\n");
        return 1;
    }
    weft_status_t st = weft_init(NULL, &t.ctx);
    if (st != WEFT_OK) {
        fprintf(stderr, "trainer: weft_init: %s\n", weft_status_str(st));
        return 1;
    }
    const char *join = getenv("WEFT_JOIN");
    if (join != NULL && strcmp(join, "1") == 0) {
        /* A replacement: wait to be admitted, then receive the state like everyone. */
        t.cur.version = INT32_MAX; /* holds nothing, and was never told a version */
        st = weft_group_join(t.ctx, "world", 60000, &t.world);
        if (st == WEFT_ERR_REVOKED) {
            printf("trainer: %s\n", weft_last_error(t.ctx)); /* came too late: nothing to do */
            weft_finalize(t.ctx);
            return 0;
        }
        if (st == WEFT_OK) {
            st = resynchronise(&t);
            st = peer_lost(st) ? recover(&t) : st;
        }
        if (st != WEFT_OK) {
            return fail(&t, "joining", st);
        }
    } else {
        weft_ctx_world(t.ctx, &t.world);
        weft_group_size(t.world, &t.width);
        if ((st = state_start(t.world, &t.cur)) != WEFT_OK) {
            return fail(&t, "starting", st);
        }
    }
    static const float untrained[DIM];
    const float first = toy_loss(untrained);
    int equal = 0;
    double error[2] = {0, 0};
    st = run(&t, steps, &equal, error);
    if (st != WEFT_OK) {
        return fail(&t, "training", st);
    }
    int rank, size;
    weft_group_rank(t.world, &rank);
    weft_group_size(t.world, &size);
    int matches = error[0] <= TOLERANCE && error[1] <= TOLERANCE;
    int ok = equal && matches && toy_loss(t.cur.w) < first * 0.01f;
    if (rank == 0) {
        report_rates(&t);
        printf("reference: w within %.1e and momentum within %.1e of a run without failures "
               "(tolerance %.0e): %s\n",
               error[0], error[1], TOLERANCE, matches ? "match" : "NO MATCH");
        printf("done: %d steps on %d ranks, loss %.6f (from %.6f), parameters %s on every "
               "rank\n",
               steps, size, toy_loss(t.cur.w), first, equal ? "equal" : "NOT equal");
    }
    step_timer_free(&t.timer);
    weft_finalize(t.ctx);
    return ok ? 0 : 1;
}
