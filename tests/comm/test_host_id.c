/*
 * Host identity (util/host_id.h): stable within a process, the same across a UTS
 * namespace (another host name), different in another network namespace or with another
 * /dev/shm, and the shared-memory job names follow it. The namespace cases need root (or
 * a user namespace) and are skipped where unshare() is refused.
 */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/shm/shm_job.h"
#include "util/host_id.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

typedef enum { IN_NET, IN_UTS, IN_SHM } where_t;

/* Enter the namespace of @p w (in a child); 0, or the errno of what was refused. */
static int enter(where_t w)
{
    if (w == IN_NET) {
        return unshare(CLONE_NEWNET) == 0 ? 0 : errno;
    }
    if (w == IN_UTS) {
        if (unshare(CLONE_NEWUTS) != 0) {
            return errno;
        }
        return sethostname("weft-test-other", 15) == 0 ? 0 : errno;
    }
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
        return errno;
    }
    return 0;
}

/*
 * The host id and the shm job id seen in namespace @p w, from a child process, into
 * @p id and @p job; false (and the test skipped) where the namespace cannot be made.
 */
static bool seen_from(where_t w, char id[WEFT__HOST_ID_LEN], char job[WEFT_SHM_ID_HEX + 1])
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char buf[WEFT__HOST_ID_LEN + WEFT_SHM_ID_HEX + 1] = {0};
        int err = enter(w);
        if (err == 0) {
            weft__host_id(buf);
            if (weft__shm_job_id("10.0.0.1:29500", TOKEN, buf + WEFT__HOST_ID_LEN) != WEFT_OK) {
                _exit(3);
            }
        }
        ssize_t n = write(p[1], buf, sizeof(buf));
        _exit(n == (ssize_t)sizeof(buf) ? (err == 0 ? 0 : 2) : 3);
    }
    close(p[1]);
    char buf[WEFT__HOST_ID_LEN + WEFT_SHM_ID_HEX + 1];
    ssize_t n = read(p[0], buf, sizeof(buf));
    close(p[0]);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst));
    if (WEXITSTATUS(wst) == 2) {
        return false;
    }
    assert_int_equal(WEXITSTATUS(wst), 0);
    assert_int_equal(n, (ssize_t)sizeof(buf));
    memcpy(id, buf, WEFT__HOST_ID_LEN);
    memcpy(job, buf + WEFT__HOST_ID_LEN, WEFT_SHM_ID_HEX + 1);
    return true;
}

static void here(char id[WEFT__HOST_ID_LEN], char job[WEFT_SHM_ID_HEX + 1])
{
    weft__host_id(id);
    assert_int_equal(weft__shm_job_id("10.0.0.1:29500", TOKEN, job), WEFT_OK);
}

static void test_stable(void **state)
{
    (void)state;
    char a[WEFT__HOST_ID_LEN], b[WEFT__HOST_ID_LEN];
    weft__host_id(a);
    weft__host_id(b);
    assert_string_equal(a, b);
    assert_int_equal(strlen(a), 16);
    assert_int_equal(strspn(a, "0123456789abcdef"), 16);
}

/* A host of its own: the id and the job's names in /dev/shm differ. */
static void check_other_host(where_t w, const char *what)
{
    char id[WEFT__HOST_ID_LEN], job[WEFT_SHM_ID_HEX + 1];
    char oid[WEFT__HOST_ID_LEN], ojob[WEFT_SHM_ID_HEX + 1];
    here(id, job);
    if (!seen_from(w, oid, ojob)) {
        skip();
    }
    if (strcmp(id, oid) == 0 || strcmp(job, ojob) == 0) {
        fail_msg("%s: host id %s / %s, job %s / %s", what, id, oid, job, ojob);
    }
}

static void test_network_namespace(void **state)
{
    (void)state;
    check_other_host(IN_NET, "another network namespace");
}

static void test_own_dev_shm(void **state)
{
    (void)state;
    check_other_host(IN_SHM, "another /dev/shm");
}

/* Another host name alone is the same host. */
static void test_host_name_alone(void **state)
{
    (void)state;
    char id[WEFT__HOST_ID_LEN], job[WEFT_SHM_ID_HEX + 1];
    char oid[WEFT__HOST_ID_LEN], ojob[WEFT_SHM_ID_HEX + 1];
    here(id, job);
    if (!seen_from(IN_UTS, oid, ojob)) {
        skip();
    }
    assert_string_equal(id, oid);
    assert_string_equal(job, ojob);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stable),
        cmocka_unit_test(test_network_namespace),
        cmocka_unit_test(test_own_dev_shm),
        cmocka_unit_test(test_host_name_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
