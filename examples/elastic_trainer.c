/*
 * A small elastic data-parallel trainer with ZeRO-1 state kept in in-memory snapshots:
 * the loop a real trainer has around weft.
 *
 * The model is a vector w, fitted by momentum SGD on a global batch of BATCH samples per
 * step (toy_problem.h). w and its momentum m are cut into flat partitions over the
 * members (sharded_state.h); a member updates its partition of both, and an allgather
 * gives every member the whole w. After every committed step each member starts a
 * snapshot of its shard (its partitions of w and m) and of a blob with the step counter,
 * on itself and --redundancy buddies (snapshot_gens.h); it runs in the background during
 * the next step, which waits for it before starting the next one.
 *
 * A step: the global batch is cut into BLOCKS blocks whatever the width, spread over the
 * members with weft_batch_share (whole blocks, contiguous in rank order); each member
 * computes the gradient sum of its blocks, an alltoall gives each member its partition
 * of every block's sum, and it adds them in block order. The arithmetic is then the same
 * at every width, bit for bit, and so is every state a run goes through.
 *
 * When a member dies the next operation fails on the survivors. Each makes the others
 * leave what they are blocked in (revoking the world group and the snapshots'
 * subgroups), repairs the world group in place (which also admits processes waiting to
 * join: weftrun --elastic --replace starts them), may wait for replacements, and
 * resynchronises: the members agree on a generation of snapshots
 * (weft_elastic_choose_gen), its members restore the state of its newest committed step
 * over the survivors (weft_elastic_restore_gen), a migration gives newcomers their share, a new generation is made over the new
 * membership, and training goes back to the restored step and computes the steps after
 * it again. When a shard and all its copies died together, the restore reports the
 * missing bytes: the trainer says what was lost and every member stops with
 * WEFT_EXIT_JOB_FAILED, so that weftrun replaces none of them and the job fails.
 *
 *   weftrun -n 4 --elastic --replace -- weft-example-trainer [--steps N]
 *           [--redundancy R] [--wait-replacement MS] [kill options: kill_plan.h]
 *   weft-example-trainer --version
 *
 * --wait-replacement MS makes the survivors wait up to MS for replacements after a
 * loss, so that the job keeps its width. At the end rank 0 recomputes the run in one
 * process without failures (toy_reference), and every member compares its w and its
 * shard with it, bit for bit. Rank 0 prints the median step time before the first edit
 * and after the last, and the loss; the exit status is 0 when every member's state
 * equals the reference and the loss went down.
 *
 * Exit status: WEFT_EXIT_JOB_FAILED (86) where every member stops together because the
 * job cannot succeed (training state lost, a restore failed, too many ranks, a result
 * that differs from the reference; a joiner whose every member died), which weftrun
 * takes for the job's failure; 1 where this process alone failed (a weft call's error),
 * which weftrun --elastic takes for a death and --replace replaces.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "kill_plan.h"
#include "sharded_state.h"
#include "snapshot_gens.h"
#include "step_timer.h"
#include "toy_problem.h"

#define ADMIT_EVERY 10

/* How a restore went, as its members tell the others. */
enum { RESTORED = 0, RESTORE_LOST = 1, RESTORE_FAILED = 2 };

/* Why every member stops together. */
enum { GOING_ON = 0, STATE_LOST, NOT_RESTORED, TOO_WIDE, NO_MEMBERS };

typedef struct trainer {
    weft_ctx_t *ctx;
    weft_group_t *world;
    state_t cur;        /* the state at the start of the next step */
    gens_t gens;        /* snapshots */
    retired_t retired;  /* buffers a failed operation may still read */
    float *sums;        /* this member's block sums */
    float *sendbuf;     /* the partitions of them that go to each member */
    float *recvbuf;     /* every member's block sums of this member's partition */
    float grad[DIM];    /* the gradient of this member's partition */
    float ref[2 * DIM]; /* the reference w and m, once rank 0 computed them */
    int have_ref;
    int32_t admitted_at; /* step of the last membership sync: no second admission then */
    int width;           /* ranks the job is meant to have */
    int wait_ms;         /* --wait-replacement */
    int stop_together;   /* why every member stops (GOING_ON: they don't) */
    int started;         /* the first resynchronisation is done */
    kill_plan_t kill;
    step_timer_t timer;
} trainer_t;

static int me_id(const trainer_t *t)
{
    int rank, me;
    weft_group_rank(t->world, &rank);
    weft_group_member_id(t->world, rank, &me);
    return me;
}

static int peer_lost(weft_status_t st)
{
    return st == WEFT_ERR_PEER_FAILED || st == WEFT_ERR_REVOKED;
}

static int fail(trainer_t *t, const char *what, weft_status_t st)
{
    static const char *why[] = {
        [STATE_LOST] = "training state lost: every copy of a part of it died (see above)",
        [NOT_RESTORED] = "the restore failed (see above)",
        [TOO_WIDE] = "more ranks than this trainer takes",
        [NO_MEMBERS] = "training state lost: every member died before admitting this process",
    };
    if (t->stop_together != GOING_ON) {
        fprintf(stderr, "trainer: %s: %s\n", what, why[t->stop_together]);
        /* Every member stops here together: leaving together tells the processes still
         * waiting to join that there is nothing to join. */
        gens_free(&t->gens, &t->cur, &t->retired);
        weft_finalize(t->ctx);
        /* The job failed, not this process: a replacement would find nothing to do. */
        return WEFT_EXIT_JOB_FAILED;
    }
    fprintf(stderr, "trainer: %s: %s: %s\n", what, weft_status_str(st), weft_last_error(t->ctx));
    return 1;
}

/*
 * Restore from generation @p x (its members) and move the state to the members now
 * (everyone): the first member holding it says how the restore went, over which
 * members the restored layout lies, and its step; a migration gives everyone its share.
 */
static weft_status_t restore_and_move(trainer_t *t, const weft_gen_choice_t *x, state_t *next)
{
    int rank;
    weft_group_rank(t->world, &rank);
    int32_t head[3 + MAX_MEMBERS] = {RESTORED};
    restored_t got = {0};
    weft_status_t st = WEFT_OK;
    if (x->index >= 0) {
        st = gens_restore(&t->gens, x->id, t->world, &got);
        if (peer_lost(st)) {
            return st; /* the others learn it from the revocations */
        }
        if (st != WEFT_OK) {
            fprintf(stderr, "trainer: member %d: restore: %s: %s\n", me_id(t), weft_status_str(st),
                    weft_last_error(t->ctx));
        }
        head[0] = st != WEFT_OK ? RESTORE_FAILED : got.missing > 0 ? RESTORE_LOST : RESTORED;
        head[1] = got.step;
        head[2] = got.n_src;
        memcpy(head + 3, got.src, (size_t)got.n_src * sizeof(int));
        if (rank == x->root && head[0] == RESTORED) {
            printf("step %d: restored step %d from the snapshots of generation %d: %zu bytes "
                   "moved, %zu copied locally\n",
                   t->cur.step, got.step, x->id, got.moved, got.local);
        }
    }
    st = weft_broadcast(t->world, head, 3 + MAX_MEMBERS, WEFT_I32, x->root);
    if (st == WEFT_OK && head[0] != RESTORED) {
        t->stop_together = head[0] == RESTORE_LOST ? STATE_LOST : NOT_RESTORED;
        st = head[0] == RESTORE_LOST ? WEFT_ERR_UNSUPPORTED : WEFT_ERR_PROTOCOL;
    }
    for (int i = 0; st == WEFT_OK && i < head[2]; i++) {
        int r;
        if (weft_group_rank_of(t->world, head[3 + i], &r) != WEFT_OK) {
            st = WEFT_ERR_PEER_FAILED; /* it died since: restore again */
        }
    }
    if (st == WEFT_OK) {
        st = state_move(t->world, head + 3, head[2], got.buf, head[1], next, &t->retired);
    }
    if (st == WEFT_OK) {
        weft_mem_free(got.buf, got.bytes);
    } else {
        retire_mem(&t->retired, got.buf, got.bytes); /* a failed migration may still read it */
    }
    return st;
}

/*
 * After every membership edit, and only then: the first operations of every epoch.
 * weft_elastic_choose_gen() chooses, on every member alike, the generation of snapshots
 * to restore from (weft/elastic.h); the members restore from it and move the state to
 * the members now, then make a new generation over them. Survivors whose live state is
 * ahead take the restored one.
 */
static weft_status_t resynchronise(trainer_t *t)
{
    gens_cancel(&t->gens, &t->cur, &t->retired);
    int ids[MAX_MEMBERS], rank;
    int size = group_members(t->world, ids);
    weft_group_rank(t->world, &rank);
    if (size > MAX_MEMBERS) {
        t->stop_together = TOO_WIDE; /* every member sees the same size */
        return WEFT_ERR_UNSUPPORTED;
    }
    weft_gen_choice_t x = {.size = sizeof(x)};
    weft_status_t st = gens_choose(&t->gens, t->world, &x);
    if (st != WEFT_OK) {
        return st;
    }
    if (x.id == WEFT_GEN_NONE) {
        t->stop_together = STATE_LOST; /* only joiners are left */
        if (rank == 0) {
            fprintf(stderr, "trainer: no member holds the training state\n");
        }
        return WEFT_ERR_UNSUPPORTED;
    }
    gens_drop_older(&t->gens, x.id);
    state_t next;
    if (x.id == WEFT_GEN_START) {
        st = state_alloc(&next, ids, size, ids[rank], 0); /* w = m = 0 */
    } else {
        st = restore_and_move(t, &x, &next);
    }
    if (st == WEFT_OK && (st = gens_make(&t->gens, t->world, &next, &t->retired)) != WEFT_OK) {
        state_free(&next);
    }
    if (st == WEFT_OK) {
        state_free(&t->cur);
        t->cur = next;
        t->admitted_at = t->cur.step; /* no second admission at this step */
        if (t->started) {
            step_timer_edit(&t->timer);
        }
        t->started = 1;
    }
    return st;
}

/* When this member leaves what it was doing on a failure: the others may be blocked in
 * an operation that waits for it, on the world group or on a snapshot's subgroup. */
static void leave_operations(trainer_t *t)
{
    gens_cancel(&t->gens, &t->cur, &t->retired);
    (void)weft_group_revoke(t->world); /* first: the restore checks the world */
    gens_revoke(&t->gens);
}

/*
 * The recovery loop, as it must be written: make the others leave too, repair (survivors
 * agree on who is gone, and processes already waiting to join are admitted), optionally
 * wait for replacements (an admission every member may call: the first decides for
 * all), then resynchronise. Any of these fails with WEFT_ERR_PEER_FAILED/WEFT_ERR_REVOKED
 * if another member fails or decides an edit meanwhile; the loop then starts over, and
 * repair applies what the others decided.
 */
static weft_status_t recover(trainer_t *t)
{
    for (int round = 0; round < 256; round++) {
        kill_plan_check(&t->kill, me_id(t), t->cur.step);
        leave_operations(t);
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

/*
 * The gradient of this member's partition, the same bits at any width. The member
 * computes the sums of its blocks (weft_batch_share of BLOCKS blocks over the members:
 * whole blocks, contiguous in rank order), an alltoall gives each member its partition
 * of every block's sum (a reduce-scatter whose sum is left to the receiver, so that it
 * adds in block order), and the member adds them.
 */
static weft_status_t batch_gradient(trainer_t *t, int rank, int size)
{
    weft_batch_share_t share = {.size = sizeof(share)};
    weft_status_t st = weft_batch_share(BLOCKS, size, rank, 0, &share);
    if (st != WEFT_OK) {
        return st;
    }
    /* Each member sends every other as many block slots as the most any member has, of
     * partitions of ceil(DIM / size) elements (weft_layout_flat's rule). */
    size_t per_b = (BLOCKS + (size_t)size - 1) / (size_t)size;
    size_t per_w = (DIM + (size_t)size - 1) / (size_t)size;
    for (uint64_t k = 0; k < share.samples; k++) {
        toy_block_sum(t->cur.w, t->cur.step, (int)(share.first + k), t->sums + k * DIM);
        for (size_t q = 0; q < (size_t)size && q * per_w < DIM; q++) {
            size_t n = DIM - q * per_w < per_w ? DIM - q * per_w : per_w;
            memcpy(t->sendbuf + (q * per_b + k) * per_w, t->sums + k * DIM + q * per_w,
                   n * sizeof(float));
        }
    }
    st = weft_alltoall(t->world, t->sendbuf, t->recvbuf, per_b * per_w, WEFT_F32);
    if (st != WEFT_OK) {
        return st;
    }
    const float *blocks[BLOCKS];
    for (int r = 0; r < size; r++) {
        weft_batch_share(BLOCKS, size, r, 0, &share);
        for (uint64_t k = 0; k < share.samples; k++) {
            blocks[share.first + k] = t->recvbuf + ((size_t)r * per_b + k) * per_w;
        }
    }
    toy_gradient(blocks, t->cur.len, t->grad);
    return WEFT_OK;
}

/* One training step: the gradient, the update of this member's partition, the allgather
 * of w, the wait for the previous snapshot. The new state is committed only when all of
 * that succeeded, and its snapshot starts. */
static weft_status_t train_step(trainer_t *t)
{
    int rank, size;
    weft_group_rank(t->world, &rank);
    weft_group_size(t->world, &size);
    step_timer_start(&t->timer);
    weft_status_t st = batch_gradient(t, rank, size);
    state_t next;
    if (st != WEFT_OK || (st = state_step(&t->cur, t->grad, &next)) != WEFT_OK) {
        return st;
    }
    if ((st = state_gather_w(t->world, &next)) == WEFT_OK) {
        st = gens_wait(&t->gens, &t->cur, &t->retired);
    }
    if (st != WEFT_OK) {
        state_free(&next);
        return st;
    }
    state_free(&t->cur);
    t->cur = next;
    /* Every member ran this step, so every member had committed this generation. */
    gens_step_committed(&t->gens);
    if ((st = gens_take(&t->gens, &t->cur)) != WEFT_OK) {
        return st;
    }
    if (rank == 0 && t->cur.step % 50 == 0) {
        printf("step %d: loss %.6f on %d ranks\n", t->cur.step, toy_loss(t->cur.w), size);
    }
    step_timer_done(&t->timer, size);
    return WEFT_OK;
}

/* At the end: does every member hold the same w (max - min of a checksum over the group),
 * and are its w and its shard bitwise those of the reference, which rank 0 computes? */
static weft_status_t final_check(trainer_t *t, int steps, int *equal, int *match)
{
    int rank;
    weft_group_rank(t->world, &rank);
    if (rank == 0 && !t->have_ref) {
        toy_reference(steps, t->ref, t->ref + DIM);
        t->have_ref = 1;
    }
    weft_status_t st = weft_broadcast(t->world, t->ref, 2 * DIM, WEFT_F32, 0);
    if (st != WEFT_OK) {
        return st;
    }
    const state_t *s = &t->cur;
    size_t part = s->len * sizeof(float);
    int32_t differ = memcmp(s->w, t->ref, DIM * sizeof(float)) != 0 ||
                     memcmp(s->shard, t->ref + s->lo, part) != 0 ||
                     memcmp(s->shard + s->len, t->ref + DIM + s->lo, part) != 0;
    double sum = 0;
    for (int i = 0; i < DIM; i++) {
        sum += s->w[i] * (double)(i + 1);
    }
    double lo = sum, hi = sum;
    st = weft_allreduce(t->world, &sum, &lo, 1, WEFT_F64, WEFT_MIN);
    if (st == WEFT_OK) {
        st = weft_allreduce(t->world, &sum, &hi, 1, WEFT_F64, WEFT_MAX);
    }
    if (st == WEFT_OK) {
        st = weft_allreduce(t->world, &differ, &differ, 1, WEFT_I32, WEFT_SUM);
    }
    *equal = st == WEFT_OK && lo == hi;
    *match = st == WEFT_OK && differ == 0;
    return st;
}

/* Train up to @p steps, recovering from every loss, then check the result. */
static weft_status_t run(trainer_t *t, int steps, int *equal, int *match)
{
    for (;;) {
        weft_status_t st = WEFT_OK;
        int32_t step = t->cur.step;
        kill_plan_check(&t->kill, me_id(t), step);
        if (step < steps && step % ADMIT_EVERY == 0 && step != t->admitted_at) {
            st = admit_joiners(t);
        } else if (step < steps) {
            st = train_step(t);
        } else {
            st = final_check(t, steps, equal, match);
            if (st == WEFT_OK) {
                return WEFT_OK;
            }
        }
        if (peer_lost(st)) {
            st = recover(t); /* then go on from the restored state */
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

/* The options; returns the number of steps. */
static int parse_options(trainer_t *t, int argc, char **argv, int *redundancy)
{
    int steps = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *opt = argv[i], *val = argv[i + 1];
        int v = atoi(val);
        if (strcmp(opt, "--steps") == 0) {
            steps = v;
        } else if (strcmp(opt, "--redundancy") == 0) {
            *redundancy = v;
        } else if (strcmp(opt, "--kill-rank") == 0 || strcmp(opt, "--kill-rank2") == 0) {
            t->kill.rank[opt[11] == '2'] = v;
        } else if (strcmp(opt, "--kill-step") == 0 || strcmp(opt, "--kill-step2") == 0) {
            t->kill.text[opt[11] == '2'] = val;
        } else if (strcmp(opt, "--kill-gap-ms2") == 0) {
            t->kill.gap_ms = v;
        } else if (strcmp(opt, "--wait-replacement") == 0) {
            t->wait_ms = v;
        }
    }
    kill_plan_resolve(&t->kill, steps);
    return steps;
}

/* A process started after the job: wait to be admitted, then resynchronise like
 * everyone. Returns 1 when the job is over already (nothing to do); when every member
 * died first, *st says so and the job has failed (NO_MEMBERS). */
static int join_job(trainer_t *t, weft_status_t *st)
{
    *st = weft_group_join(t->ctx, "world", 60000, &t->world);
    if (*st == WEFT_ERR_REVOKED) {
        printf("trainer: %s\n", weft_last_error(t->ctx)); /* came too late: nothing to do */
        return 1;
    }
    if (*st == WEFT_ERR_PEER_FAILED) {
        t->stop_together = NO_MEMBERS; /* nobody holds the state it would join for */
        return 0;
    }
    if (*st == WEFT_OK) {
        *st = resynchronise(t);
        *st = peer_lost(*st) ? recover(t) : *st;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static trainer_t t = {.admitted_at = -1, .kill = {.rank = {-1, -1}, .step = {-1, -1}}};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("weft %s\n", weft_version(NULL, NULL, NULL));
            return 0;
        }
    }
    int redundancy = 1;
    int steps = parse_options(&t, argc, argv, &redundancy);
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines reach a log file as they happen */
    toy_init();
    t.sums = calloc((size_t)BLOCKS * DIM, sizeof(float));
    t.sendbuf = calloc((size_t)2 * BLOCKS * DIM, sizeof(float));
    t.recvbuf = calloc((size_t)2 * BLOCKS * DIM, sizeof(float));
    if (!step_timer_init(&t.timer, steps) || !t.sums || !t.sendbuf || !t.recvbuf) {
        fprintf(stderr, "trainer: no memory\n");
        return 1;
    }
    weft_status_t st = weft_init(NULL, &t.ctx);
    if (st != WEFT_OK) {
        fprintf(stderr, "trainer: weft_init: %s\n", weft_status_str(st));
        return 1;
    }
    const char *join = getenv("WEFT_JOIN");
    int joiner = join != NULL && strcmp(join, "1") == 0;
    gens_init(&t.gens, redundancy, !joiner);
    if (joiner) {
        if (join_job(&t, &st)) {
            weft_finalize(t.ctx);
            return 0;
        }
    } else {
        weft_ctx_world(t.ctx, &t.world);
        weft_group_size(t.world, &t.width);
        if (me_id(&t) == 0) {
            kill_plan_print(&t.kill);
        }
        st = resynchronise(&t); /* the state at step 0, and its first snapshot */
        st = peer_lost(st) ? recover(&t) : st;
    }
    if (st != WEFT_OK) {
        return fail(&t, joiner ? "joining" : "starting", st);
    }
    static const float untrained[DIM];
    const float first = toy_loss(untrained);
    int equal = 0, match = 0;
    st = run(&t, steps, &equal, &match);
    if (st != WEFT_OK) {
        return fail(&t, "training", st);
    }
    int rank, size;
    weft_group_rank(t.world, &rank);
    weft_group_size(t.world, &size);
    int ok = equal && match && toy_loss(t.cur.w) < first * 0.01f;
    if (rank == 0) {
        report_rates(&t);
        printf("reference: w and momentum %s a run without failures\n",
               match ? "bitwise equal to" : "DIFFER from");
        printf("done: %d steps on %d ranks, loss %.6f (from %.6f), parameters %s on every "
               "rank\n",
               steps, size, toy_loss(t.cur.w), first, equal ? "equal" : "NOT equal");
    }
    gens_free(&t.gens, &t.cur, &t.retired);
    step_timer_free(&t.timer);
    weft_finalize(t.ctx);
    retired_free(&t.retired);
    state_free(&t.cur);
    free(t.sums);
    free(t.sendbuf);
    free(t.recvbuf);
    /* Every member decides alike (equal and match are agreed): a wrong result is the
     * job's failure, which no replacement would mend. */
    return ok ? 0 : WEFT_EXIT_JOB_FAILED;
}
