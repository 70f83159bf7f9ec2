/*
 * A rank as weftrun starts it by default (tests/launcher/CMakeLists.txt): it holds its
 * own member secret and the job's data key, never the job token. It checks that
 *   - nothing of the token is in its environment (WEFT_JOB_TOKEN, WEFT_JOB_TOKEN_FILE),
 *     and the variable naming the pipe weftrun handed is gone once weft_init read it;
 *   - the context holds no token, and the job works (an allreduce checked);
 *   - what it holds speaks for its own id only: the store refuses it as any other member
 *     id (WEFT_ERR_AUTH), and with its own id lets it write its own address key but not
 *     another member's, nor anything under weftrun/ (where the launchers' stop, fence and
 *     node keys live).
 * Prints "SECRET-OK <rank>" and exits 0, or says what failed and exits 1.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/core_impl.h"
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

int main(void)
{
    const char *fd_text = getenv("WEFT_MEMBER_SECRET_FD");
    int fd = fd_text != NULL ? atoi(fd_text) : -1;
    if (fd < 3 || fcntl(fd, F_GETFD) < 0) {
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
    if (ctx->token[0] != '\0' || !ctx->member_only || ctx->cred.id != (uint32_t)me) {
        fail("the context holds a token, or a secret that is not its own");
    }
    int64_t v = me + 1;
    if (weft_allreduce(world, &v, &v, 1, WEFT_I64, WEFT_SUM) != WEFT_OK ||
        v != (int64_t)n * (n + 1) / 2) {
        fail("allreduce");
    }
    /* Its secret under every other id the job has, and a few it does not. */
    weft_store_cred_t other = ctx->cred;
    for (int id = 0; id < n + 3; id++) {
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
    printf("SECRET-OK %d\n", me);
    weft_finalize(ctx);
    return 0;
}
