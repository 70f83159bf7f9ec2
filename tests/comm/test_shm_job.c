/*
 * A job's names in /dev/shm (comm/shm/shm_job.c), in a scratch folder standing for /dev/shm:
 * how names are made, and which the cleaners remove. A name goes when its job's lock
 * file is free; a held lock keeps it; without a lock file only an old name goes; names
 * that are not weft's stay whatever happens.
 */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/shm/shm.h"
#include "comm/shm/shm_job.h"

#define TOKEN "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_shm_job.XXXXXX");
    return mkdtemp(dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    DIR *d = opendir(dir);
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        unlinkat(dirfd(d), e->d_name, 0);
    }
    if (d != NULL) {
        closedir(d);
    }
    return rmdir(dir);
}

static void make(const char *name, int age_s)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    assert_int_equal(futimens(fd, t), 0);
    close(fd);
}

static bool exists(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* The name of segment @p kind of group 1 at epoch 0 of @p j, without the leading '/'. */
static const char *seg(const weft_shm_job_t *j, const char *kind)
{
    static char name[96];
    weft__shm_seg_name(j, 1, 0, kind, name, sizeof(name));
    return name + 1;
}

static const char *lock_of(const weft_shm_job_t *j)
{
    static char name[64];
    snprintf(name, sizeof(name), "weft-%s.lock", j->job);
    return name;
}

static void job(weft_shm_job_t *j, const char *store)
{
    assert_int_equal(weft__shm_job_init(j, store, TOKEN, "weft"), WEFT_OK);
}

static void test_names(void **state)
{
    (void)state;
    weft_shm_job_t a, b, c, d;
    char id[WEFT_SHM_ID_HEX + 1];
    job(&a, "127.0.0.1:5000");
    job(&b, "127.0.0.1:5001");
    assert_int_equal(weft__shm_job_init(&c, "127.0.0.1:5000", TOKEN, "other"), WEFT_OK);
    assert_int_equal(weft__shm_job_init(&d, "127.0.0.1:5000", "x" TOKEN, "weft"), WEFT_OK);
    assert_int_equal(weft__shm_job_id("127.0.0.1:5000", TOKEN, id), WEFT_OK);
    assert_string_equal(id, a.job); /* <job> alone comes out the same */
    assert_int_equal(strlen(a.job), WEFT_SHM_ID_HEX);
    assert_int_equal(strspn(a.job, "0123456789abcdef"), WEFT_SHM_ID_HEX);
    assert_int_equal(a.lock_fd, -1);
    assert_string_not_equal(a.job, b.job); /* another store */
    assert_string_not_equal(a.job, d.job); /* another token */
    assert_string_equal(a.job, c.job);     /* the namespace is not part of <job> ... */
    assert_string_not_equal(a.ns, c.ns);   /* ... but of <ns> */
    assert_int_equal(weft__shm_job_init(&d, "", "", "weft"), WEFT_OK); /* no token: fine */
    char want[96];
    snprintf(want, sizeof(want), "/weft-%s-%s-7-3-data", a.job, a.ns);
    char name[96];
    weft__shm_seg_name(&a, 7, 3, "data", name, sizeof(name));
    assert_string_equal(name, want);
    assert_null(strstr(name, "0123456789abcdef0123")); /* nothing of the token shows */
}

/* Free lock file: every name of the job goes, the lock file too; other names stay. */
static void test_dead_job(void **state)
{
    (void)state;
    weft_shm_job_t a, other;
    job(&a, "dead:1");
    job(&other, "dead:2");
    make(seg(&a, "ctl"), 0);
    make(seg(&a, "data"), 0);
    make(lock_of(&a), 0);
    static const char *const keep[] = {
        "ucx_shm_posix_1",
        "weft-xyz",
        "weftx",
        "weft-0123456789abcdef",
        "weft-0123456789ABCDEF-1",
        "weft-0123456789abcdef-",
    };
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        make(keep[i], 3600);
    }
    char other_seg[96];
    snprintf(other_seg, sizeof(other_seg), "%s", seg(&other, "ctl"));
    make(other_seg, 0); /* no lock file, new: stays */
    assert_int_equal(weft__shm_sweep(dir, NULL), 2);
    assert_false(exists(seg(&a, "ctl")));
    assert_false(exists(seg(&a, "data")));
    assert_false(exists(lock_of(&a)));
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        assert_true(exists(keep[i]));
    }
    assert_true(exists(other_seg));
    assert_false(exists(lock_of(&other))); /* the cleaner's own lock file is gone again */
}

/* A held lock keeps the names from the sweep and from a cleaning that is not forced; the
 * last holder's release removes them. */
static void test_live_job(void **state)
{
    (void)state;
    weft_shm_job_t a, a2;
    job(&a, "live:1");
    job(&a2, "live:1");
    assert_int_equal(weft__shm_job_lock(&a, dir), 0);
    assert_int_equal(weft__shm_job_lock(&a2, dir), 0); /* shared: another process's */
    assert_true(exists(lock_of(&a)));
    make(seg(&a, "ctl"), 3600); /* old, but locked */
    assert_int_equal(weft__shm_sweep(dir, NULL), 0);
    assert_int_equal(weft__shm_clean_job(dir, a.job, false, NULL), 0);
    assert_true(exists(seg(&a, "ctl")));
    weft__shm_job_unlock(&a, dir, NULL);
    assert_int_equal(a.lock_fd, -1);
    assert_true(exists(seg(&a, "ctl"))); /* a2 still holds it */
    weft__shm_job_unlock(&a2, dir, NULL);
    assert_false(exists(seg(&a, "ctl")));
    assert_false(exists(lock_of(&a)));
}

/* No lock file: an hour-old name goes, a new one stays. */
static void test_no_lock_file(void **state)
{
    (void)state;
    weft_shm_job_t a;
    job(&a, "old:1");
    make(seg(&a, "ctl"), WEFT_SHM_ORPHAN_AGE_S + 60);
    make(seg(&a, "data"), 5);
    assert_int_equal(weft__shm_sweep(dir, NULL), 1);
    assert_false(exists(seg(&a, "ctl")));
    assert_true(exists(seg(&a, "data")));
    assert_false(exists(lock_of(&a)));
}

/* Forced (weftrun at the end of its job): everything goes, held lock or not. */
static void test_forced(void **state)
{
    (void)state;
    weft_shm_job_t a;
    job(&a, "forced:1");
    assert_int_equal(weft__shm_job_lock(&a, dir), 0);
    make(seg(&a, "ctl"), 0);
    assert_int_equal(weft__shm_clean_job(dir, a.job, true, NULL), 1);
    assert_false(exists(seg(&a, "ctl")));
    assert_false(exists(lock_of(&a)));
    weft__shm_job_unlock(&a, dir, NULL);
}

/* A lock file removed by a cleaner while held is made again by the next process. */
static void test_lock_file_again(void **state)
{
    (void)state;
    weft_shm_job_t a, a2;
    job(&a, "again:1");
    job(&a2, "again:1");
    assert_int_equal(weft__shm_job_lock(&a, dir), 0);
    assert_int_equal(weft__shm_clean_job(dir, a.job, true, NULL), 0);
    assert_false(exists(lock_of(&a)));
    assert_int_equal(weft__shm_job_lock(&a2, dir), 0);
    assert_true(exists(lock_of(&a)));
    make(seg(&a, "ctl"), 3600);
    assert_int_equal(weft__shm_sweep(dir, NULL), 0);
    assert_true(exists(seg(&a, "ctl")));
    weft__shm_job_unlock(&a, dir, NULL);
    weft__shm_job_unlock(&a2, dir, NULL);
    assert_false(exists(seg(&a, "ctl")));
}

/* A segment another user made first, or one others may read, is not attached to. */
static void test_segment_owner(void **state)
{
    (void)state;
    char name[64], why[200] = "";
    snprintf(name, sizeof(name), "/weft-test-owner-%d", (int)getpid());
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    assert_true(fd >= 0);
    assert_true(weft__shm_fd_private(fd, why, sizeof(why)));
    assert_int_equal(fchmod(fd, 0666), 0); /* anyone may read and write it */
    assert_false(weft__shm_fd_private(fd, why, sizeof(why)));
    assert_non_null(strstr(why, "mode 0666"));
    assert_int_equal(fchmod(fd, 0600), 0);
    if (geteuid() == 0) { /* root can make it another user's, as that user would have */
        assert_int_equal(fchown(fd, 65534, 65534), 0);
        assert_false(weft__shm_fd_private(fd, why, sizeof(why)));
        assert_non_null(strstr(why, "uid 65534"));
    }
    close(fd);
    shm_unlink(name);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_segment_owner),
        cmocka_unit_test_setup_teardown(test_dead_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_live_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_lock_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_file_again, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
