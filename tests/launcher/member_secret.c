/*
 * A rank as weftrun starts it by default (tests/launcher/CMakeLists.txt): it holds its
 * own member secret and the job's data key, never the job token. It checks that
 *   - nothing of the token is in its environment (WEFT_JOB_TOKEN, WEFT_JOB_TOKEN_FILE),
 *     and the variable naming the pipe weftrun handed is gone once weft_init read it;
 *   - the context holds no token, and the job works (an allreduce checked);
 *   - what it holds speaks for its own id only: the store refuses it as any other member
 *     id (WEFT_ERR_AUTH), and with its own id lets it write its own address key but not
 *     another member's, nor anything under weftrun/ (where the launchers' stop, fence and
 *     node keys live);
 *   - its word evicts nobody the store sees alive: member 1's signed report of member 2
 *     is refused while 2 renews its lease, and a decision member 1 writes that leaves 2
 *     out is applied by no member (each one's repair fails with WEFT_ERR_PROTOCOL): the
 *     world keeps its 3 members, and works;
 *   - an honest member that lost contact with a peer the store sees alive (member 1 told
 *     member 2 failed, in a subgroup of all three, as its transport would) removes it on
 *     no edit: its repair fails with WEFT_ERR_TIMEOUT after WEFT_FAILURE_TIMEOUT_MS, and
 *     writes no decision.
 * Prints "SECRET-OK <rank>" and exits 0, or says what failed and exits 1.
 *
 * Under a PMIx launcher (mpirun; tests/launcher/pmix_launch.sh) the same holds for every
 * rank but 0, which serves the job's store and holds its token: the others get their
 * member secret sealed to a key of their own through PMIx (comm/ctx/boot_pmix.c).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/core_impl.h"
#include "comm/group/edit.h"
#include "comm/store/store.h"
#include "weft/weft.h"

static int me = -1;

static void fail(const char *what)
{
    fprintf(stderr, "member_secret rank %d: %s\n", me, what);
    exit(1);
}

/* Whether /proc/self/environ has a variable named @p name. */
static int environ_has(const char *name)
{
    char buf[1 << 16];
    int fd = open("/proc/self/environ", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0) {
        close(fd);
    }
    if (n < 0) {
        fail("cannot read /proc/self/environ");
    }
    size_t len = strlen(name);
    for (ssize_t i = 0; i < n; i += (ssize_t)strnlen(buf + i, (size_t)(n - i)) + 1) {
        if (strncmp(buf + i, name, len) == 0 && buf[i + (ssize_t)len] == '=') {
            return 1;
        }
    }
    return 0;
}

/* Member 1 tries to evict member 2 (see the top); every member checks the outcome. */
static void try_to_evict(weft_ctx_t *ctx, weft_group_t *world, int n)
{
    if (n < 3) {
        fail("needs 3 ranks");
    }
    if (me == 1) {
        weft_store_client_t *c = NULL;
        if (weft__store_connect_cred(ctx->store_addr, &ctx->cred, 5000, &ctx->logger, &c) !=
            WEFT_OK) {
            fail("its own secret was refused");
        }
        static const char report[] = "reported by member 1: forged";
        if (weft__store_set(c, "weft/failed/2", report, sizeof(report) - 1) != WEFT_ERR_AUTH) {
            fail("the store took a report about a member it sees alive");
        }
        int32_t members[] = {0, 1};
        weft_decision_t d = {
            .kind = WEFT_EDIT_REPAIR, .new_epoch = 1, .n_members = 2, .members = members};
        void *buf, *won;
        size_t len, wlen;
        int created = 0;
        if (weft__decision_encode(&d, &buf, &len) != WEFT_OK ||
            weft__store_set_nx(c, "weft/g/0/0/next", buf, len, &won, &wlen, &created) != WEFT_OK ||
            !created) {
            fail("could not write the forged decision");
        }
        free(buf);
        free(won);
        weft__store_close(c);
    }
    if (weft_barrier(world) != WEFT_OK) { /* the decision is there before anyone looks */
        fail("barrier after the forgery");
    }
    weft_status_t st = weft_group_repair(world, NULL);
    int size = 0, rank = -1;
    uint32_t epoch = 99;
    weft_group_size(world, &size);
    weft_group_rank(world, &rank);
    weft_group_epoch(world, &epoch);
    if (st != WEFT_ERR_PROTOCOL || strstr(weft_last_error(ctx), "removes member 2") == NULL) {
        fprintf(stderr, "member_secret rank %d: repair: %s: %s\n", me, weft_status_str(st),
                weft_last_error(ctx));
        fail("a member applied a decision that evicts a live member");
    }
    if (size != n || rank != me || epoch != 0) {
        fail("the forged decision changed the world");
    }
    int64_t v = me + 1;
    if (weft_allreduce(world, &v, &v, 1, WEFT_I64, WEFT_SUM) != WEFT_OK ||
        v != (int64_t)n * (n + 1) / 2) {
        fail("allreduce after the forgery");
    }
}

/* Member 1 loses contact with member 2 (see the top). */
static void lost_contact(weft_ctx_t *ctx, weft_group_t *world)
{
    weft_group_t *sub = NULL;
    if (weft_group_split(world, 0, me, &sub) != WEFT_OK) {
        fail("split");
    }
    if (me == 1) {
        weft__report_failure(ctx, 2, "test: lost contact");
        weft_status_t st = weft_group_repair(sub, NULL);
        if (st != WEFT_ERR_TIMEOUT ||
            strstr(weft_last_error(ctx), "lost contact with member 2") == NULL) {
            fprintf(stderr, "member_secret rank 1: repair: %s: %s\n", weft_status_str(st),
                    weft_last_error(ctx));
            fail("a member's repair removed a member the store sees alive");
        }
        char key[96];
        void *v;
        size_t len;
        weft__decision_key(ctx, key, sizeof(key), sub->id, 0);
        if (weft__store_get(ctx->store, key, 0, &v, &len) != WEFT_ERR_TIMEOUT) {
            fail("a decision was written");
        }
        if (weft__store_set(ctx->store, "weft/test/lost-contact", "1", 1) != WEFT_OK) {
            fail("cannot say it is done");
        }
    } else {
        void *v;
        size_t len;
        if (weft__store_get(ctx->store, "weft/test/lost-contact", 60000, &v, &len) != WEFT_OK) {
            fail("member 1 never said it was done");
        }
        free(v);
        if (weft_group_free(sub) != WEFT_OK) {
            fail("freeing the subgroup");
        }
    }
}

int main(void)
{
    const char *fd_text = getenv("WEFT_MEMBER_SECRET_FD");
    int fd = fd_text != NULL ? atoi(fd_text) : -1;
    bool pmix = getenv("PMIX_RANK") != NULL && fd_text == NULL;
    if (!pmix && (fd < 3 || fcntl(fd, F_GETFD) < 0)) {
        fail("weftrun handed no secret pipe (WEFT_MEMBER_SECRET_FD)");
    }
    if (getenv("WEFT_JOB_TOKEN") != NULL || getenv("WEFT_JOB_TOKEN_FILE") != NULL ||
        environ_has("WEFT_JOB_TOKEN") || environ_has("WEFT_JOB_TOKEN_FILE")) {
        fail("the job token reached the rank");
    }
    weft_ctx_t *ctx;
    weft_group_t *world;
    int n;
    if (weft_init(NULL, &ctx) != WEFT_OK || weft_ctx_world(ctx, &world) != WEFT_OK ||
        weft_group_rank(world, &me) != WEFT_OK || weft_group_size(world, &n) != WEFT_OK) {
        fail("weft_init");
    }
    /* (The descriptor's number may be reused by then: only the variable is checked.) */
    if (getenv("WEFT_MEMBER_SECRET_FD") != NULL) {
        fail("the secret pipe's variable outlived weft_init");
    }
    if (pmix && me == 0) {
        if (ctx->token[0] == '\0' || ctx->member_only) {
            fail("rank 0 of a PMIx job serves the store without its token");
        }
    } else if (ctx->token[0] != '\0' || !ctx->member_only || ctx->cred.id != (uint32_t)me) {
        fail("the context holds a token, or a secret that is not its own");
    }
    int64_t v = me + 1;
    if (weft_allreduce(world, &v, &v, 1, WEFT_I64, WEFT_SUM) != WEFT_OK ||
        v != (int64_t)n * (n + 1) / 2) {
        fail("allreduce");
    }
    /* Its secret under every other id the job has, and a few it does not. */
    weft_store_cred_t other = ctx->cred;
    for (int id = 0; id < n + 3 && ctx->member_only; id++) {
        weft_store_client_t *c = NULL;
        other.id = (uint32_t)id;
        weft_status_t st =
            weft__store_connect_cred(ctx->store_addr, &other, 5000, &ctx->logger, &c);
        if (id == me) {
            if (st != WEFT_OK) {
                fail("its own secret was refused");
            }
            char key[64];
            snprintf(key, sizeof(key), "weft/addr/%d", (me + 1) % n);
            if (weft__store_set(c, key, "x", 1) != WEFT_ERR_AUTH ||
                weft__store_set(c, "weftrun/stop", "0 0 forged", 10) != WEFT_ERR_AUTH) {
                fail("it wrote another member's address or a launcher's key");
            }
            weft__store_close(c);
        } else if (st != WEFT_ERR_AUTH) {
            weft__store_close(c);
            fprintf(stderr, "member_secret rank %d: as member %d: %s\n", me, id,
                    weft_status_str(st));
            fail("the store took its secret for another member");
        }
    }
    if (weft_barrier(world) != WEFT_OK) {
        fail("barrier");
    }
    try_to_evict(ctx, world, n);
    lost_contact(ctx, world);
    printf("SECRET-OK %d\n", me);
    weft_finalize(ctx);
    return 0;
}
