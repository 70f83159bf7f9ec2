#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "fault_common.h"
#include "util/hash.h"

static char death_path[128];
static volatile sig_atomic_t stop_instead;

double fault_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void path_for(char *buf, size_t len, int id)
{
    snprintf(buf, len, "/tmp/weft-fault.%ld.%d", (long)getppid(), id);
}

/* Runs in a signal handler: only async-signal-safe calls. */
static void on_alarm(int sig)
{
    (void)sig;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long us = (unsigned long long)ts.tv_sec * 1000000ull +
                            (unsigned long long)ts.tv_nsec / 1000ull;
    char digits[32], text[32];
    int n = 0;
    do {
        digits[n++] = (char)('0' + us % 10);
        us /= 10;
    } while (us > 0);
    for (int i = 0; i < n; i++) {
        text[i] = digits[n - 1 - i];
    }
    text[n++] = '\n';
    int fd = open(death_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        ssize_t w = write(fd, text, (size_t)n);
        (void)w;
        close(fd);
    }
    raise(stop_instead ? SIGSTOP : SIGKILL);
}

static void arm_timer(int member_id, unsigned seed, long min_us, long max_us);

void fault_arm_death(int member_id, unsigned seed, long min_us, long max_us)
{
    stop_instead = 0;
    arm_timer(member_id, seed, min_us, max_us);
}

void fault_arm_stop(int member_id, unsigned seed, long min_us, long max_us)
{
    char path[160];
    path_for(path, sizeof(path) - 8, member_id);
    strcat(path, ".pid");
    FILE *f = fopen(path, "w");
    if (f != NULL) {
        fprintf(f, "%ld\n", (long)getpid());
        fclose(f);
    }
    stop_instead = 1;
    arm_timer(member_id, seed, min_us, max_us);
}

int fault_stopped_gone(int member_id, int timeout_ms)
{
    char path[160];
    long pid = -1;
    path_for(path, sizeof(path) - 8, member_id);
    strcat(path, ".pid");
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    int ok = fscanf(f, "%ld", &pid) == 1;
    fclose(f);
    unlink(path);
    if (!ok || pid <= 0) {
        return -1;
    }
    double until = fault_now_ms() + timeout_ms;
    while (fault_now_ms() < until) {
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            return 0;
        }
        usleep(1000);
    }
    kill((pid_t)pid, SIGKILL);
    return -1;
}

static void arm_timer(int member_id, unsigned seed, long min_us, long max_us)
{
    path_for(death_path, sizeof(death_path), member_id);
    srand(seed * 2654435761u + (unsigned)member_id);
    long us = min_us + (max_us > min_us ? rand() % (max_us - min_us) : 0);
    signal(SIGALRM, on_alarm);
    struct itimerval it = {{0, 0}, {us / 1000000, us % 1000000}};
    if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0) {
        it.it_value.tv_usec = 1;
    }
    setitimer(ITIMER_REAL, &it, NULL);
}

double fault_death_time_ms(int member_id)
{
    char path[128];
    unsigned long long us;
    path_for(path, sizeof(path), member_id);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    int ok = fscanf(f, "%llu", &us) == 1;
    fclose(f);
    return ok ? (double)us / 1e3 : -1;
}

weft_status_t fault_checked_allreduce(weft_group_t *g)
{
    int rank, size;
    weft_group_rank(g, &rank);
    weft_group_size(g, &size);
    int64_t v = rank + 1;
    weft_status_t st = weft_allreduce(g, &v, &v, 1, WEFT_I64, WEFT_SUM);
    if (st == WEFT_OK && v != (int64_t)size * (size + 1) / 2) {
        fprintf(stderr, "rank %d: allreduce gave %lld, expected %lld\n", rank, (long long)v,
                (long long)size * (size + 1) / 2);
        return WEFT_ERR_MISMATCH;
    }
    return st;
}

weft_status_t fault_recover(weft_group_t *g, weft_edit_info_t *info)
{
    weft_status_t st = WEFT_ERR_PEER_FAILED;
    for (int attempt = 0; attempt < 10; attempt++) {
        st = weft_group_repair(g, info);
        if (st != WEFT_OK) {
            return st;
        }
        st = fault_checked_allreduce(g);
        if (st == WEFT_OK || (st != WEFT_ERR_PEER_FAILED && st != WEFT_ERR_REVOKED)) {
            return st;
        }
    }
    return st;
}

int fault_has_member(weft_group_t *g, int id)
{
    int r;
    return weft_group_rank_of(g, id, &r) == WEFT_OK;
}

weft_status_t fault_membership_agrees(weft_group_t *g)
{
    int size;
    uint32_t epoch;
    weft_group_size(g, &size);
    weft_group_epoch(g, &epoch);
    uint64_t h = WEFT__FNV1A_SEED;
    for (int r = 0; r < size; r++) {
        int id = -1;
        weft_group_member_id(g, r, &id);
        h = weft__fnv1a(h, &id, sizeof(id));
    }
    int64_t v[3] = {(int64_t)(h >> 1), (int64_t)epoch, size}, lo[3], hi[3];
    weft_status_t st = weft_allreduce(g, v, lo, 3, WEFT_I64, WEFT_MIN);
    if (st == WEFT_OK) {
        st = weft_allreduce(g, v, hi, 3, WEFT_I64, WEFT_MAX);
    }
    if (st == WEFT_OK && memcmp(lo, hi, sizeof(lo)) != 0) {
        st = WEFT_ERR_MISMATCH;
    }
    return st;
}

int fault_uses_shm(weft_group_t *g)
{
    uint32_t epoch;
    weft_group_epoch(g, &epoch);
    char want[48], line[512];
    snprintf(want, sizeof(want), "-0-%u-ctl", epoch);
    FILE *f = fopen("/proc/self/maps", "r");
    int found = 0;
    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
        found = strstr(line, "/weft-") != NULL && strstr(line, want) != NULL;
    }
    if (f != NULL) {
        fclose(f);
    }
    return found;
}
