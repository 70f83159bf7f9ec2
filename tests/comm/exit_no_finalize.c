/*
 * A rank that returns from main without weft_finalize (an error path, say) must exit
 * cleanly: weft's threads (the heartbeat renews its lease every WEFT_HEARTBEAT_MS) keep
 * running while exit handlers run, and must not find OpenSSL torn down under them. An
 * exit handler registered before weft_init runs after every handler registered during
 * it (they run in reverse order) and waits 600 ms there, so several renewals fall after
 * OpenSSL's own handler would have cleaned it up. Run under weftrun: exit status 0, not
 * a crash.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "weft/weft.h"

static void linger(void)
{
    struct timespec ts = {0, 600 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

int main(void)
{
    atexit(linger);
    weft_ctx_t *ctx;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        fprintf(stderr, "exit_no_finalize: %s\n", weft_last_error(NULL));
        return 2;
    }
    weft_group_t *world;
    weft_ctx_world(ctx, &world);
    if (weft_barrier(world) != WEFT_OK) {
        return 2;
    }
    return 0; /* no weft_finalize */
}
