/*
 * A job's names in /dev/shm: how they are made, the job lock, and removing what jobs
 * that no longer run left behind (comm/shm/shm_job.h says why it works this way).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/shm/shm_job.h"
#include "comm/store/proto.h"
#include "util/hex.h"
#include "util/host_id.h"

#define NAME_PREFIX "weft-"
#define LOCK_SUFFIX ".lock"
#define LOCK_WAIT_MS 10000 /* for a cleaner holding the lock exclusively: a moment, normally */
#define LOCK_TRIES 100     /* lock files removed under our feet before giving up */

/* 16 hex digits of HMAC-SHA256(key, each of @p parts with its NUL byte). */
static weft_status_t keyed_id(const char *key, const char *const *parts, size_t nparts,
                              char out[WEFT_SHM_ID_HEX + 1])
{
    char msg[1024];
    size_t len = 0;
    for (size_t i = 0; i < nparts; i++) {
        size_t n = strlen(parts[i]) + 1; /* the NUL keeps ("ab", "c") apart from ("a", "bc") */
        if (len + n > sizeof(msg)) {
            return WEFT_ERR_INVALID_ARG;
        }
        memcpy(msg + len, parts[i], n);
        len += n;
    }
    uint8_t mac[WEFT__STORE_PROOF_LEN];
    weft_status_t st = weft__store_hmac_sha256(key, strlen(key), msg, len, mac);
    if (st != WEFT_OK) {
        return st;
    }
    weft__hex_encode(mac, WEFT_SHM_ID_HEX / 2, out);
    return WEFT_OK;
}

weft_status_t weft__shm_job_id(const char *store_addr, const char *key,
                               char job[WEFT_SHM_ID_HEX + 1])
{
    /* The host too: hosts emulated by network namespaces may share one /dev/shm, and a
     * job's names on one of them must not look like the same job's on another, which
     * weftrun there removes when its ranks end (util/host_id.h). */
    char host[WEFT__HOST_ID_LEN];
    weft__host_id(host);
    const char *parts[] = {"weft shm job", store_addr, host};
    return keyed_id(key, parts, 3, job);
}

weft_status_t weft__shm_job_init(weft_shm_job_t *j, const char *store_addr, const char *key,
                                 const char *ns)
{
    const char *parts[] = {"weft shm namespace", store_addr, ns};
    j->lock_fd = -1;
    weft_status_t st = weft__shm_job_id(store_addr, key, j->job);
    return st != WEFT_OK ? st : keyed_id(key, parts, 3, j->ns);
}

void weft__shm_seg_name(const weft_shm_job_t *j, uint32_t gid, uint32_t epoch, const char *kind,
                        char *out, size_t len)
{
    snprintf(out, len, "/" NAME_PREFIX "%s-%s-%u-%u-%s", j->job, j->ns, gid, epoch, kind);
}

static void lock_name(const char *job, char *out, size_t len)
{
    snprintf(out, len, NAME_PREFIX "%s" LOCK_SUFFIX, job);
}

/* A regular file of this user (not a link, not someone else's). */
static bool is_mine(int dfd, const char *name, struct stat *sb)
{
    return fstatat(dfd, name, sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb->st_mode) &&
           sb->st_uid == geteuid();
}

/* The <job> of @p name if it is "weft-<job>-<more>" or "weft-<job>.lock". */
static bool name_job(const char *name, char job[WEFT_SHM_ID_HEX + 1])
{
    const char *p = name + strlen(NAME_PREFIX);
    if (strncmp(name, NAME_PREFIX, strlen(NAME_PREFIX)) != 0) {
        return false;
    }
    for (int i = 0; i < WEFT_SHM_ID_HEX; i++) {
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) {
            return false;
        }
    }
    const char *rest = p + WEFT_SHM_ID_HEX;
    if ((rest[0] != '-' || rest[1] == '\0') && strcmp(rest, LOCK_SUFFIX) != 0) {
        return false;
    }
    memcpy(job, p, WEFT_SHM_ID_HEX);
    job[WEFT_SHM_ID_HEX] = '\0';
    return true;
}

/*
 * Open lock file @p name in @p dfd, creating it if missing (*created says so), and flock
 * it with @p op. The lock must be on the file that is at the path afterwards: a cleaner
 * may have removed it between our open and our flock, and a lock on a removed file
 * protects nothing. Returns the descriptor, or -1 with errno (EWOULDBLOCK: held).
 */
static int lock_file(int dfd, const char *name, int op, bool *created)
{
    for (int tries = 0; tries < LOCK_TRIES; tries++) {
        int fd = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        *created = fd >= 0;
        if (fd < 0 && errno == EEXIST) {
            fd = openat(dfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        }
        if (fd < 0) {
            if (errno == ENOENT) {
                continue; /* removed between the two opens */
            }
            return -1;
        }
        int rc;
        while ((rc = flock(fd, op)) != 0 && errno == EINTR) {
        }
        struct stat mine, now;
        if (rc == 0 && fstat(fd, &mine) == 0 && mine.st_uid != geteuid()) {
            rc = -1;
            errno = EACCES; /* another user's file under our job's name */
        }
        if (rc != 0) {
            int err = errno;
            close(fd);
            errno = err;
            return -1;
        }
        if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == mine.st_ino &&
            now.st_dev == mine.st_dev) {
            return fd;
        }
        close(fd);
    }
    errno = EAGAIN;
    return -1;
}

int weft__shm_job_lock(weft_shm_job_t *j, const char *dir)
{
    if (j->lock_fd >= 0) {
        return 0;
    }
    char name[64];
    lock_name(j->job, name, sizeof(name));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        return errno;
    }
    int fd, err;
    bool created;
    for (int waited_ms = 0;; waited_ms++) {
        fd = lock_file(dfd, name, LOCK_SH | LOCK_NB, &created);
        err = errno;
        if (fd >= 0 || err != EWOULDBLOCK || waited_ms >= LOCK_WAIT_MS) {
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    close(dfd);
    if (fd < 0) {
        return err;
    }
    j->lock_fd = fd;
    return 0;
}

void weft__shm_job_unlock(weft_shm_job_t *j, const char *dir, const weft_logger_t *lg)
{
    if (j->lock_fd < 0) {
        return;
    }
    close(j->lock_fd);
    j->lock_fd = -1;
    weft__shm_clean_job(dir, j->job, false, lg);
}

/*
 * Unlink this user's files in @p d named "weft-<job>-...", with @p cutoff >= 0 only those
 * unchanged since then. Returns how many.
 */
static int remove_names(DIR *d, const char *dir, const char *job, time_t cutoff,
                        const weft_logger_t *lg)
{
    char prefix[32];
    snprintf(prefix, sizeof(prefix), NAME_PREFIX "%s-", job);
    size_t plen = strlen(prefix);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (strncmp(e->d_name, prefix, plen) != 0 || !is_mine(dirfd(d), e->d_name, &sb) ||
            (cutoff >= 0 && sb.st_mtime > cutoff)) {
            continue;
        }
        if (unlinkat(dirfd(d), e->d_name, 0) == 0) {
            n++;
            WEFT_DEBUG(lg, "removed %s/%s", dir, e->d_name);
        } else if (errno != ENOENT) {
            WEFT_DEBUG(lg, "cannot remove %s/%s: %s", dir, e->d_name, strerror(errno));
        }
    }
    return n;
}

int weft__shm_clean_job(const char *dir, const char *job, bool force, const weft_logger_t *lg)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return 0;
    }
    char lock[64];
    lock_name(job, lock, sizeof(lock));
    bool created = false;
    int fd = -1;
    if (!force) {
        fd = lock_file(dirfd(d), lock, LOCK_EX | LOCK_NB, &created);
        if (fd < 0) {
            if (errno != EWOULDBLOCK) {
                WEFT_DEBUG(lg, "%s/%s: %s", dir, lock, strerror(errno));
            }
            closedir(d);
            return 0; /* a process of the job still runs here, or we cannot tell */
        }
    }
    /* No lock file: these names were not made under the lock; only old ones go. */
    time_t cutoff = created ? time(NULL) - WEFT_SHM_ORPHAN_AGE_S : -1;
    int n = remove_names(d, dir, job, cutoff, lg);
    if (unlinkat(dirfd(d), lock, 0) != 0 && errno != ENOENT) {
        WEFT_DEBUG(lg, "cannot remove %s/%s: %s", dir, lock, strerror(errno));
    }
    if (fd >= 0) {
        close(fd); /* only now: the lock file went last, with the lock held */
    }
    closedir(d);
    if (n > 0) {
        WEFT_INFO(lg, "removed %d shared-memory segment%s of job %s from %s", n, n == 1 ? "" : "s",
                  job, dir);
    }
    return n;
}

/* Whether @p job is among the first @p n of @p jobs. */
static bool listed(char (*jobs)[WEFT_SHM_ID_HEX + 1], size_t n, const char *job)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(jobs[i], job) == 0) {
            return true;
        }
    }
    return false;
}

int weft__shm_sweep(const char *dir, const weft_logger_t *lg)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return 0;
    }
    char(*jobs)[WEFT_SHM_ID_HEX + 1] = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char job[WEFT_SHM_ID_HEX + 1];
        struct stat sb;
        if (!name_job(e->d_name, job) || !is_mine(dirfd(d), e->d_name, &sb) ||
            listed(jobs, n, job)) {
            continue;
        }
        if (n == cap) {
            size_t ncap = cap == 0 ? 16 : 2 * cap;
            void *p = realloc(jobs, ncap * sizeof(*jobs));
            if (p == NULL) {
                break; /* clean what is listed; the next job sees the rest */
            }
            jobs = p;
            cap = ncap;
        }
        memcpy(jobs[n++], job, sizeof(job));
    }
    closedir(d);
    int removed = 0;
    for (size_t i = 0; i < n; i++) {
        removed += weft__shm_clean_job(dir, jobs[i], false, lg);
    }
    free(jobs);
    return removed;
}
