/*
 * A rank that stays out of weft until the others are done, for tests of "the others do
 * not wait for this rank". Instead of sleeping for a while and asserting that the others
 * finished within less (which depends on the machine's speed), the absent rank waits for
 * a marker file from each other rank: if the others waited for it, no marker comes and
 * away_wait() gives up after its bound, so the test fails however fast the machine is.
 *
 * Markers live in a private directory rank 0 makes and broadcasts (away_init); every rank
 * calls away_done() or away_wait() once per absence, in the same order, so that the
 * rounds line up. Header-only: each test includes it once.
 */
#ifndef WEFT_TESTS_AWAY_H
#define WEFT_TESTS_AWAY_H

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft/weft.h"

typedef struct away {
    char dir[64];
    int round;
} away_t;

/* Collective over @p world: rank 0 makes the directory, everyone learns its name. */
static inline bool away_init(weft_group_t *world, int me, away_t *a)
{
    memset(a, 0, sizeof(*a));
    if (me == 0) {
        snprintf(a->dir, sizeof(a->dir), "/tmp/weft-away-XXXXXX");
        if (mkdtemp(a->dir) == NULL) {
            a->dir[0] = '\0';
        }
    }
    return weft_broadcast(world, a->dir, sizeof(a->dir), WEFT_U8, 0) == WEFT_OK &&
           a->dir[0] != '\0';
}

/* A rank that did not wait: say so for this round. */
static inline void away_done(away_t *a, int me)
{
    char path[96];
    snprintf(path, sizeof(path), "%s/%d.%d", a->dir, a->round++, me);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
        close(fd);
    }
}

/* The absent rank: back once the @p nranks - 1 others are done with this round, or false
 * after @p limit_s seconds without them. */
static inline bool away_wait(away_t *a, int me, int nranks, double limit_s)
{
    int round = a->round++;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int seen = 0;
        for (int r = 0; r < nranks; r++) {
            char path[96];
            snprintf(path, sizeof(path), "%s/%d.%d", a->dir, round, r);
            seen += r != me && access(path, F_OK) == 0;
        }
        if (seen == nranks - 1) {
            return true;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9 >
            limit_s) {
            return false;
        }
        usleep(1000);
    }
}

/* Collective: rank 0 removes the markers and the directory once everyone is past them. */
static inline void away_fini(weft_group_t *world, int me, away_t *a)
{
    if (weft_barrier(world) != WEFT_OK || me != 0 || a->dir[0] == '\0') {
        return;
    }
    DIR *d = opendir(a->dir);
    if (d != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (e->d_name[0] != '.') {
                unlinkat(dirfd(d), e->d_name, 0);
            }
        }
        closedir(d);
    }
    rmdir(a->dir);
}

#endif
