/*
 * Deaths on purpose, to watch the example trainer recover: member R kills itself
 * (SIGKILL) once its state reaches step S. Steps may be drawn at random from the job (its
 * store and token, kill_draw), so that every rank of a job draws the same ones (a second
 * victim can die at the first one's step, a few milliseconds later) and each job draws
 * others.
 *
 *   --kill-rank R  --kill-step S|random
 *   --kill-rank2 R --kill-step2 S|random|same  [--kill-gap-ms2 G: 0-G ms after its step]
 */
#ifndef WEFT_EXAMPLE_KILL_PLAN_H
#define WEFT_EXAMPLE_KILL_PLAN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct kill_plan {
    int rank[2];         /* member ids, -1: nobody */
    int step[2];         /* -1: never */
    const char *text[2]; /* as given: a number, "random" or "same" */
    int gap_ms;          /* the second waits up to this long before dying */
    int gap_us;          /* what it drew */
} kill_plan_t;

/*
 * A number drawn from the job (the same on every rank of one job), mixed with @p salt. The
 * job is named by its store's address (weftrun's own store listens on a port of its
 * choosing), and by its token where the ranks hold one (weftrun --share-token); with
 * neither, the clock.
 */
static uint64_t kill_draw(uint64_t salt)
{
    const char *names[] = {getenv("WEFT_STORE"), getenv("WEFT_JOB_TOKEN")};
    uint64_t h = 1469598103934665603ull ^ salt;
    bool any = false;
    for (int i = 0; i < 2; i++) {
        for (const char *c = names[i] != NULL ? names[i] : ""; *c != '\0'; c++) {
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
            any = true;
        }
        h = (h ^ 0xff) * 1099511628211ull;
    }
    if (!any) {
        h ^= (uint64_t)time(NULL);
    }
    h ^= h >> 29;
    return h * 0xbf58476d1ce4e5b9ull;
}

/* Resolve "random" and "same" for a run of @p steps steps. */
static void kill_plan_resolve(kill_plan_t *k, int steps)
{
    for (int i = 0; i < 2; i++) {
        const char *s = k->text[i];
        if (s == NULL) {
            continue;
        }
        if (strcmp(s, "random") == 0) {
            k->step[i] = steps > 2 ? 1 + (int)(kill_draw((uint64_t)i) % (uint64_t)(steps - 2)) : 0;
        } else if (strcmp(s, "same") == 0) {
            k->step[i] = k->step[0];
        } else {
            k->step[i] = atoi(s);
        }
    }
    k->gap_us = k->gap_ms > 0 ? (int)(kill_draw(7) % (uint64_t)(1000 * k->gap_ms + 1)) : 0;
}

static void kill_plan_print(const kill_plan_t *k)
{
    for (int i = 0; i < 2; i++) {
        if (k->rank[i] >= 0 && k->step[i] >= 0) {
            printf("kill plan: member %d dies at step %d", k->rank[i], k->step[i]);
            if (i == 1 && k->gap_us > 0) {
                printf(", %d us after it gets there", k->gap_us);
            }
            printf("\n");
        }
    }
}

/* Die if the plan says that member @p me dies at @p step or before. */
static void kill_plan_check(const kill_plan_t *k, int me, int step)
{
    for (int i = 0; i < 2; i++) {
        if (me == k->rank[i] && k->step[i] >= 0 && step >= k->step[i]) {
            if (i == 1 && k->gap_us > 0) {
                struct timespec ts = {k->gap_us / 1000000, (long)(k->gap_us % 1000000) * 1000};
                nanosleep(&ts, NULL);
            }
            fflush(NULL);
            raise(SIGKILL);
        }
    }
}

#endif
