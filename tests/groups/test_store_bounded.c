/*
 * A long elastic job keeps the store bounded: the keys of finished epochs (decisions,
 * split records, revocation notices, admissions and join slots) are deleted, so their
 * number does not grow with the number of edits
 * (docs/decisions/0015-retire-finished-epochs.md).
 *
 * Every cycle the world is split in two (a split record), each half does a reduction,
 * every fourth cycle revokes and repairs its half (a subgroup's decision and revocation
 * notice), and frees it; then the world is revoked and repaired (a decision and a
 * revocation notice per cycle). A few times a process started by rank 0 joins (a join
 * slot, an admission, a decision), is killed, and is repaired away (a decision). Rank 0
 * counts the keys of the job's namespace, as a launcher watching its prefix, after the
 * first cycles and at the end: the agreement keys must stay below a bound that does not
 * depend on the number of cycles. Each process that ever joined leaves the keys a member
 * owns (claim, address, topology, failure notice); those are counted apart.
 *
 * argv[1]: cycles (default 1000), or "late": the last rank is declared failed while it
 * sleeps, the others repair it away and edit on until the decision it would need is
 * deleted; woken, its repair must fail with WEFT_ERR_REVOKED saying that it was declared
 * failed, and must not write that decision again. Or "declared": the last rank is
 * declared failed while it waits in a collective (scenario_declared).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/store/store.h"
#include "fault_common.h"

#define TAG_DONE 11
#define TAG_NEVER 12
#define GROWS 3
/* What stays of the agreement whatever the number of cycles: counters (group and joiner
 * ids, joiner registrations), the world's newest decision and its pointer, and slack
 * for a few keys of edits still in progress elsewhere. */
#define AGREEMENT_BOUND 16
/* How long the count waits for the members' deletes to settle: 50 x 100 ms. */
#define SETTLE_TRIES 50
#define SETTLE_US 100000
/* A member declared failed ends its wait on the others well before WEFT_TIMEOUT_MS. */
#define DECLARED_LIMIT_MS 20000.0

/* The store and token, kept before weft_init takes the token out of the environment. */
static char store_addr[256], job_token[128], ns[64];

typedef struct key_count {
    int agreement; /* everything but what a member owns */
    int owned;     /* claim/<id>, addr/<id>, topo/<id>, failed/<id> */
} key_count_t;

static int owned_key(const char *rest)
{
    static const char *const kinds[] = {"claim/", "addr/", "topo/", "failed/"};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        size_t n = strlen(kinds[i]);
        if (strncmp(rest, kinds[i], n) == 0 && rest[n] >= '0' && rest[n] <= '9') {
            return 1;
        }
    }
    return 0;
}

static weft_store_client_t *launcher_connection(void)
{
    weft_store_client_t *c = NULL;
    return weft__store_connect(store_addr, job_token, 10000, NULL, &c) == WEFT_OK ? c : NULL;
}

/* Count the keys of the namespace: a watch is sent one event per existing key. The
 * others wait in a barrier meanwhile, so nothing is set while the events arrive. The
 * first 40 agreement keys are printed when @p print. */
static int count_keys(key_count_t *kc, int print)
{
    weft_store_client_t *c = launcher_connection();
    char prefix[80];
    snprintf(prefix, sizeof(prefix), "%s/", ns);
    memset(kc, 0, sizeof(*kc));
    if (c == NULL) {
        return -1;
    }
    if (weft__store_watch(c, prefix) != WEFT_OK) {
        weft__store_close(c);
        return -1;
    }
    char *key;
    void *val;
    size_t len;
    while (weft__store_next_event(c, 300, &key, &val, &len) == WEFT_OK) {
        if (owned_key(key + strlen(prefix))) {
            kc->owned++;
        } else {
            kc->agreement++;
            if (print && kc->agreement <= 40) {
                printf("  %s\n", key);
            }
        }
        free(key);
        free(val);
    }
    weft__store_close(c);
    return 0;
}

static int fail(int rank, const char *what, weft_status_t st, weft_ctx_t *ctx)
{
    printf("SURVIVOR-FAIL rank %d: %s: %s %s\n", rank, what, weft_status_str(st),
           weft_last_error(ctx));
    return 1;
}

/*
 * Group rank 0 revokes @p g once every other member has told it that it finished its
 * earlier operations (so that only the wait below is cut short), the others see
 * WEFT_ERR_REVOKED in a receive that is never matched, and every member repairs.
 */
static weft_status_t revoke_and_repair(weft_group_t *g)
{
    int rank, size;
    char byte = 0;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    weft_status_t st = WEFT_OK;
    if (rank == 0) {
        for (int r = 1; r < size && st == WEFT_OK; r++) {
            st = weft_recv(g, &byte, 1, r, TAG_DONE, NULL);
        }
        if (st == WEFT_OK) {
            st = weft_group_revoke(g);
        }
    } else {
        st = weft_send(g, &byte, 1, 0, TAG_DONE);
        if (st == WEFT_OK) {
            st = weft_recv(g, &byte, 1, 0, TAG_NEVER, NULL);
            st = st == WEFT_ERR_REVOKED ? WEFT_OK : (st == WEFT_OK ? WEFT_ERR_MISMATCH : st);
        }
    }
    if (st != WEFT_OK && st != WEFT_ERR_REVOKED) {
        return st;
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    return fault_recover(g, &info);
}

static weft_status_t split_cycle(weft_group_t *w, int cycle)
{
    int rank;
    weft_group_rank(w, &rank);
    weft_group_t *sub;
    weft_status_t st = weft_group_split(w, rank % 2, rank, &sub);
    if (st != WEFT_OK) {
        return st;
    }
    st = fault_checked_allreduce(sub);
    if (st == WEFT_OK && cycle % 4 == 0) {
        st = revoke_and_repair(sub);
    }
    weft_group_free(sub);
    return st;
}

static int joiner_main(void)
{
    weft_ctx_t *ctx;
    weft_group_t *g;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st == WEFT_OK) {
        st = weft_group_join(ctx, "world", 30000, &g);
    }
    if (st == WEFT_OK) {
        st = fault_checked_allreduce(g);
    }
    if (st != WEFT_OK) {
        printf("SURVIVOR-FAIL joiner: %s\n", weft_status_str(st));
        return 1;
    }
    printf("joiner verified; waiting to be killed\n");
    fflush(stdout);
    for (;;) {
        pause();
    }
}

static pid_t spawn_joiner(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("WEFT_JOB_TOKEN", job_token, 1);
        setenv("WEFT_JOIN", "1", 1);
        unsetenv("WEFT_RANK");
        execl("/proc/self/exe", "/proc/self/exe", "joiner", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* A process joins, takes part in a reduction, is killed, and is repaired away. */
static weft_status_t grow_cycle(weft_group_t *w, int size)
{
    int rank, pending = 0;
    weft_group_rank(w, &rank);
    pid_t child = rank == 0 ? spawn_joiner() : -1;
    double until = fault_now_ms() + 30000;
    while (pending < 1 && fault_now_ms() < until) {
        weft_group_pending_joiners(w, &pending);
        usleep(1000);
    }
    weft_edit_info_t info = {.size = sizeof(info)};
    weft_status_t st = weft_group_grow(w, 1, 30000, &info);
    if (st != WEFT_OK || info.n_added != 1) {
        return st != WEFT_OK ? st : WEFT_ERR_MISMATCH;
    }
    st = fault_checked_allreduce(w); /* with the joiner; may see it killed already */
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    if (st != WEFT_OK && st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED) {
        return st;
    }
    int now = 0;
    for (int attempt = 0; attempt < 20 && (st != WEFT_OK || now != size); attempt++) {
        st = fault_recover(w, &info);
        weft_group_size(w, &now);
        if (st == WEFT_OK && now != size) {
            st = fault_checked_allreduce(w); /* fails once the death is known */
        }
    }
    return st == WEFT_OK && now == size ? WEFT_OK : (st != WEFT_OK ? st : WEFT_ERR_MISMATCH);
}

/* Rank 0 counts while the others wait in a barrier; every member learns the counts. */
static weft_status_t checkpoint(weft_group_t *w, int rank, int cycle, key_count_t *kc, int print)
{
    weft_status_t st = weft_barrier(w);
    int64_t v[2] = {0, 0};
    if (st == WEFT_OK && rank == 0) {
        /* The deletes are left to each member's heartbeat thread (a renewal period
         * later): the count is taken once they are done, as it settles. */
        int rc = count_keys(kc, 0);
        for (int i = 0; i < SETTLE_TRIES && rc == 0 && kc->agreement > AGREEMENT_BOUND; i++) {
            usleep(SETTLE_US);
            rc = count_keys(kc, 0);
        }
        if (rc == 0 && print) {
            rc = count_keys(kc, print);
        }
        if (rc != 0) {
            v[0] = -1;
        } else {
            v[0] = kc->agreement;
            v[1] = kc->owned;
            printf("after %d cycles: %d agreement keys, %d keys members own\n", cycle,
                   kc->agreement, kc->owned);
            fflush(stdout);
        }
    }
    if (st == WEFT_OK) {
        st = weft_broadcast(w, v, 2, WEFT_I64, 0);
    }
    kc->agreement = (int)v[0];
    kc->owned = (int)v[1];
    return st == WEFT_OK && v[0] < 0 ? WEFT_ERR_IO : st;
}

/* A store key of the test (not the job's namespace): set by @p c, or waited for. */
#define WAKE_KEY "test_store_bounded/wake"

/* Rank 0 declares the last rank failed (as weftrun would: a notice under failed/, saying
 * @p why); every other member repairs until the group lost it. */
static weft_status_t declare_last_failed(weft_store_client_t *c, weft_group_t *w, int rank,
                                         int size, const char *why)
{
    weft_status_t st = WEFT_OK;
    if (rank == 0) {
        char key[128];
        snprintf(key, sizeof(key), "%s/failed/%d", ns, size - 1);
        st = weft__store_set(c, key, why, strlen(why));
    }
    int now = size;
    for (int i = 0; i < 1000 && st == WEFT_OK && now == size; i++) {
        st = weft_group_repair(w, NULL); /* once this member has read the notice */
        weft_group_size(w, &now);
        usleep(now == size ? 1000 : 0);
    }
    return st;
}

/* The last rank sleeps; the others declare it failed (as weftrun would: a notice under
 * failed/), repair it away and edit on until the decision of epoch 0 is deleted. */
static int scenario_late(weft_ctx_t *ctx, weft_group_t *w, int rank, int size)
{
    weft_store_client_t *c = launcher_connection();
    char key[128];
    void *v;
    size_t len;
    if (c == NULL) {
        return fail(rank, "store", WEFT_ERR_IO, ctx);
    }
    if (rank == size - 1) {
        weft_status_t st = weft__store_get(c, WAKE_KEY, 60000, &v, &len);
        if (st != WEFT_OK) {
            weft__store_close(c);
            return fail(rank, "never woken", st, ctx);
        }
        free(v);
        st = weft_group_repair(w, NULL);
        int said = strstr(weft_last_error(ctx), "declared failed") != NULL;
        printf("late rank %d: repair returned %s: %s\n", rank, weft_status_str(st),
               weft_last_error(ctx));
        snprintf(key, sizeof(key), "%s/g/0/0/next", ns);
        weft_status_t again = weft__store_get(c, key, 0, &v, &len);
        if (again == WEFT_OK) {
            free(v);
        }
        weft__store_close(c);
        if (st != WEFT_ERR_REVOKED || !said) {
            return fail(rank, "the late member's repair", st, ctx);
        }
        if (again != WEFT_ERR_TIMEOUT) {
            return fail(rank, "the late member wrote the deleted decision again", again, ctx);
        }
        return 0;
    }
    weft_status_t st = declare_last_failed(c, w, rank, size, "test: too slow");
    for (int i = 0; i < 3 && st == WEFT_OK; i++) {
        st = revoke_and_repair(w);
    }
    if (st == WEFT_OK) {
        st = weft_barrier(w); /* every finish done */
    }
    if (st == WEFT_OK && rank == 0) {
        /* Epoch 0 is finished: its decision goes with the members' next renewals. */
        snprintf(key, sizeof(key), "%s/g/0/0/next", ns);
        bool gone = false;
        for (int i = 0; i < SETTLE_TRIES && !gone; i++) {
            gone = weft__store_get(c, key, 0, &v, &len) != WEFT_OK;
            if (!gone) {
                free(v);
                usleep(SETTLE_US);
            }
        }
        st = gone ? WEFT_OK : WEFT_ERR_MISMATCH;
    }
    if (rank == 0) {
        (void)weft__store_set(c, WAKE_KEY, "1", 1); /* whatever happened: no wait for nothing */
    }
    weft__store_close(c);
    return st == WEFT_OK ? 0 : fail(rank, "repairing the late member away", st, ctx);
}

/*
 * The last rank waits in an allreduce the others never join; rank 0 declares it failed
 * and the others repair it away. An edit that only removes members publishes no
 * revocation: the member learns it from its own notice, which must end its wait at once
 * (not after WEFT_TIMEOUT_MS), and its repair then says it was declared failed.
 */
static int scenario_declared(weft_ctx_t *ctx, weft_group_t *w, int rank, int size)
{
    if (rank == size - 1) {
        int64_t v = 1;
        double t0 = fault_now_ms();
        weft_status_t st = weft_allreduce(w, &v, &v, 1, WEFT_I64, WEFT_SUM);
        double waited = fault_now_ms() - t0;
        printf("declared rank %d: the allreduce returned %s after %.0f ms\n", rank,
               weft_status_str(st), waited);
        weft_status_t again = weft_group_repair(w, NULL);
        bool said = strstr(weft_last_error(ctx), "declared failed") != NULL;
        weft_store_client_t *c = launcher_connection(); /* the others may leave now */
        if (c != NULL) {
            (void)weft__store_set(c, WAKE_KEY, "1", 1);
            weft__store_close(c);
        }
        if (st != WEFT_ERR_REVOKED || waited > DECLARED_LIMIT_MS) {
            return fail(rank, "the declared member's allreduce", st, ctx);
        }
        if (again != WEFT_ERR_REVOKED || !said) {
            return fail(rank, "the declared member's repair", again, ctx);
        }
        return 0;
    }
    weft_store_client_t *c = launcher_connection();
    if (c == NULL) {
        return fail(rank, "store", WEFT_ERR_IO, ctx);
    }
    weft_status_t st = declare_last_failed(c, w, rank, size, "test: declared");
    if (st == WEFT_OK) {
        st = fault_checked_allreduce(w);
    }
    /* Alive until the declared member is done: leaving would end its wait for it. */
    void *v;
    size_t len;
    if (weft__store_get(c, WAKE_KEY, 60000, &v, &len) == WEFT_OK) {
        free(v);
    }
    weft__store_close(c);
    return st == WEFT_OK ? 0 : fail(rank, "repairing the declared member away", st, ctx);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "joiner") == 0) {
        return joiner_main();
    }
    int late_member = argc > 1 && strcmp(argv[1], "late") == 0;
    int declared = argc > 1 && strcmp(argv[1], "declared") == 0;
    int cycles = argc > 1 && !late_member && !declared ? atoi(argv[1]) : 1000;
    const char *env;
    snprintf(job_token, sizeof(job_token), "%s",
             (env = getenv("WEFT_JOB_TOKEN")) != NULL ? env : "");
    snprintf(store_addr, sizeof(store_addr), "%s", (env = getenv("WEFT_STORE")) != NULL ? env : "");
    snprintf(ns, sizeof(ns), "%s", (env = getenv("WEFT_NAMESPACE")) != NULL ? env : "weft");
    weft_ctx_t *ctx;
    weft_group_t *w;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        printf("SURVIVOR-FAIL init\n");
        return 1;
    }
    weft_ctx_world(ctx, &w);
    int rank, size;
    weft_group_rank(w, &rank);
    weft_group_size(w, &size);
    if (late_member || declared) {
        int rc = late_member ? scenario_late(ctx, w, rank, size)
                             : scenario_declared(ctx, w, rank, size);
        weft_finalize(ctx);
        if (rc == 0) {
            SURVIVOR_OK(rank);
        }
        return rc;
    }
    key_count_t early = {0}, late = {0};
    int warmup = cycles / 4 > 0 ? cycles / 4 : 1, rc = 0;
    double t0 = fault_now_ms();
    weft_status_t st = WEFT_OK;
    for (int i = 0; i < cycles && st == WEFT_OK; i++) {
        st = split_cycle(w, i);
        if (st == WEFT_OK) {
            st = revoke_and_repair(w);
        }
        if (st == WEFT_OK && i % (cycles / GROWS + 1) == cycles / GROWS / 2) {
            st = grow_cycle(w, size);
        }
        if (st == WEFT_OK && i + 1 == warmup) {
            st = checkpoint(w, rank, i + 1, &early, 0);
        }
        if (st != WEFT_OK) {
            rc = fail(rank, "cycle", st, ctx);
            printf("  (in cycle %d)\n", i);
        }
    }
    if (rc == 0) {
        st = checkpoint(w, rank, cycles, &late, 1);
        if (st != WEFT_OK) {
            rc = fail(rank, "count", st, ctx);
        }
    }
    if (rc == 0 && rank == 0) {
        printf("%d cycles in %.1f s; agreement keys %d after %d cycles, %d after %d\n", cycles,
               (fault_now_ms() - t0) / 1e3, early.agreement, warmup, late.agreement, cycles);
    }
    if (rc == 0 && (late.agreement > AGREEMENT_BOUND || late.agreement > early.agreement + 4)) {
        printf("SURVIVOR-FAIL rank %d: the store grew: %d agreement keys after %d cycles, %d "
               "after %d (bound %d)\n",
               rank, early.agreement, warmup, late.agreement, cycles, AGREEMENT_BOUND);
        rc = 1;
    }
    weft_finalize(ctx);
    if (rc == 0) {
        SURVIVOR_OK(rank);
    }
    return rc;
}
