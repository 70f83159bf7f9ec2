/*
 * A rank for shm_leftovers.sh, which checks what jobs leave in /dev/shm.
 *   shm_hold hold DIR   writes DIR/job (the <job> of its names in /dev/shm) and
 *                       DIR/pid.<rank>; rank 0 starts the world's first allreduce, which
 *                       creates its shared segment, and writes DIR/created once the name
 *                       is in /dev/shm; the others join only once DIR/go exists, so the
 *                       name stays there until then. All check the sum.
 *   shm_hold quick      one allreduce on the world.
 * Exits 0 on success, 1 with a message otherwise.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/shm/shm_job.h"
#include "weft/weft.h"

#define WAIT_S 100

static int rank = -1;
static weft_ctx_t *ctx;

static void die(const char *what, weft_status_t st)
{
    fprintf(stderr, "shm_hold rank %d: %s: %s\n", rank, what, weft_status_str(st));
    exit(1);
}

/* Write @p text to DIR/NAME at once (a reader never sees it half written). */
static void put(const char *dir, const char *name, const char *text)
{
    char tmp[512], path[512];
    snprintf(tmp, sizeof(tmp), "%s/.%s.%ld", dir, name, (long)getpid());
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        exit(1);
    }
}

static bool name_exists(const char *job)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "weft-%s-", job);
    DIR *d = opendir(WEFT_SHM_DIR);
    bool found = false;
    for (struct dirent *e; d != NULL && !found && (e = readdir(d)) != NULL;) {
        found = strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    }
    if (d != NULL) {
        closedir(d);
    }
    return found;
}

static void wait_for(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    for (int i = 0; access(path, F_OK) != 0; i++) {
        if (i > WAIT_S * 100) {
            fprintf(stderr, "shm_hold rank %d: %s never appeared\n", rank, path);
            exit(1);
        }
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
}

static void hold(weft_group_t *world, const char *dir)
{
    char job[WEFT_SHM_ID_HEX + 1], text[64];
    /* The names this rank uses; weftrun derives them on its own to remove what is left. */
    snprintf(job, sizeof(job), "%s", weft__shm_ctx_job(ctx));
    if (job[0] == '\0') {
        die("job id", WEFT_ERR_INVALID_ARG);
    }
    put(dir, "job", job);
    snprintf(text, sizeof(text), "%ld", (long)getpid());
    char name[32];
    snprintf(name, sizeof(name), "pid.%d", rank);
    put(dir, name, text);
    int64_t in = rank + 1, out = 0;
    weft_req_t *req = NULL;
    if (rank != 0) {
        wait_for(dir, "go");
    }
    weft_status_t st = weft_iallreduce(world, &in, &out, 1, WEFT_I64, WEFT_SUM, &req);
    if (st != WEFT_OK && st != WEFT_INPROGRESS) {
        die("iallreduce", st);
    }
    if (rank == 0) {
        if (!name_exists(job)) {
            fprintf(stderr, "shm_hold: no /dev/shm/weft-%s-* while rank 0 waits\n", job);
            exit(1);
        }
        put(dir, "created", job);
    }
    if (req != NULL && (st = weft_wait(req, (uint64_t)WAIT_S * 1000000000)) != WEFT_OK) {
        die("wait", st);
    }
    weft_req_free(req);
    int size;
    weft_group_size(world, &size);
    if (out != (int64_t)size * (size + 1) / 2) {
        fprintf(stderr, "shm_hold rank %d: sum %lld\n", rank, (long long)out);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "hold") == 0 && argc < 3)) {
        fprintf(stderr, "usage: shm_hold hold DIR | quick\n");
        return 1;
    }
    weft_group_t *world;
    weft_status_t st = weft_init(NULL, &ctx);
    if (st != WEFT_OK) {
        die("init", st);
    }
    weft_ctx_world(ctx, &world);
    weft_group_rank(world, &rank);
    if (strcmp(argv[1], "hold") == 0) {
        hold(world, argv[2]);
    } else {
        int64_t in = 1, out = 0;
        if ((st = weft_allreduce(world, &in, &out, 1, WEFT_I64, WEFT_SUM)) != WEFT_OK) {
            die("allreduce", st);
        }
    }
    st = weft_finalize(ctx);
    if (st != WEFT_OK) {
        die("finalize", st);
    }
    return 0;
}
