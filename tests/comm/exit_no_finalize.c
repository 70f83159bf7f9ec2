/*
 * A rank that ends without weft_finalize (an error path, an uncaught exception) must
 * exit cleanly: weft's threads (the heartbeat renews its lease every WEFT_HEARTBEAT_MS;
 * the progress thread reads the store's failure notices) must not find OpenSSL torn down
 * under them. An exit handler registered first runs after every other (they run in
 * reverse order) and waits 600 ms there, so without weft's own exit handler several
 * renewals would fall after OpenSSL's handler cleaned it up. Run under weftrun, which
 * reports a rank killed by a signal.
 *
 *   exit_no_finalize return         returns 0 from main (weft is the first user of
 *                                   OpenSSL, which weft_init then starts without its
 *                                   exit handler)
 *   exit_no_finalize openssl-first  OpenSSL is started (and used) before weft_init, as
 *                                   Python's hashlib or torch do, so its exit handler is
 *                                   armed; exit(1)
 *   exit_no_finalize busy           the same, while a second thread waits in weft_recv
 *                                   (holding the context's lock) for a message that
 *                                   never comes; the last rank _exits 200 ms later, so
 *                                   its failure notices reach that thread from the store
 *                                   during the others' exit handlers
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "weft/weft.h"

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static void linger(void)
{
    nap_ms(600);
}

/* What Python does when it imports hashlib: OpenSSL initialised, with its exit handler. */
static int use_openssl(void)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len;
    if (OPENSSL_init_crypto(0, NULL) != 1 ||
        EVP_Digest("weft", 4, md, &len, EVP_sha256(), NULL) != 1) {
        fprintf(stderr, "exit_no_finalize: OpenSSL does not work\n");
        return -1;
    }
    return 0;
}

static weft_group_t *world;
static int rank, size;

static void *wait_for_nothing(void *arg)
{
    char buf[8];
    (void)weft_recv(world, buf, sizeof(buf), (rank + 1) % size, 7, NULL); /* never sent */
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "return";
    bool busy = strcmp(mode, "busy") == 0;
    if (!busy && strcmp(mode, "openssl-first") != 0 && strcmp(mode, "return") != 0) {
        fprintf(stderr, "usage: exit_no_finalize [return|openssl-first|busy]\n");
        return 2;
    }
    atexit(linger);
    if (strcmp(mode, "return") != 0 && use_openssl() != 0) {
        return 2;
    }
    weft_ctx_t *ctx;
    if (weft_init(NULL, &ctx) != WEFT_OK) {
        fprintf(stderr, "exit_no_finalize: %s\n", weft_last_error(NULL));
        return 2;
    }
    weft_ctx_world(ctx, &world);
    weft_group_rank(world, &rank);
    weft_group_size(world, &size);
    float x = 1.0f;
    if (weft_barrier(world) != WEFT_OK ||
        weft_allreduce(world, &x, &x, 1, WEFT_F32, WEFT_SUM) != WEFT_OK) {
        fprintf(stderr, "exit_no_finalize: %s\n", weft_last_error(ctx));
        return 2;
    }
    if (strcmp(mode, "return") == 0) {
        return 0; /* no weft_finalize */
    }
    if (busy) {
        pthread_t t;
        if (pthread_create(&t, NULL, wait_for_nothing, NULL) != 0) {
            return 2;
        }
        /* It is in weft_recv by then, holding the context's lock: no more calls here. */
        nap_ms(100);
        if (rank == size - 1) {
            nap_ms(200);
            _exit(1); /* a death, seen by the others' threads in their exit handlers */
        }
    }
    exit(1); /* no weft_finalize */
}
