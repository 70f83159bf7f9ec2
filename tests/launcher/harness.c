#include "launcher/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"

const char *wr_weftrun;
char wr_dir[256];

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int wr_setup(void **state)
{
    (void)state;
    snprintf(wr_dir, sizeof(wr_dir), "/tmp/weftrun-test-XXXXXX");
    if (mkdtemp(wr_dir) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    setenv("WT_DIR", wr_dir, 1);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int wr_teardown(void **state)
{
    (void)state;
    nftw(wr_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

const char *wr_path(const char *name)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", wr_dir, name);
    return path;
}

pid_t wr_start(const char *const *args, const char *stdin_path)
{
    size_t n = 0;
    while (args[n] != NULL) {
        n++;
    }
    const char **argv = calloc(n + 2, sizeof(*argv));
    if (argv == NULL) {
        return -1;
    }
    argv[0] = wr_weftrun;
    memcpy(argv + 1, args, n * sizeof(*argv));
    char out_path[512], err_path[512];
    snprintf(out_path, sizeof(out_path), "%s/_stdout", wr_dir);
    snprintf(err_path, sizeof(err_path), "%s/_stderr", wr_dir);
    pid_t pid = fork();
    if (pid == 0) {
        int in = open(stdin_path != NULL ? stdin_path : "/dev/null", O_RDONLY);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
            dup2(err, 2) < 0) {
            _exit(250);
        }
        execv(wr_weftrun, (char *const *)argv);
        _exit(251);
    }
    free(argv);
    return pid;
}

static char *read_path(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf != NULL && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf != NULL) {
        buf[len] = '\0';
    }
    return buf;
}

void wr_wait(pid_t pid, int limit_ms, wr_result_t *r)
{
    uint64_t end = weft__now_ms() + (uint64_t)limit_ms;
    int st = 0;
    r->code = -1;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            r->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        if (w < 0 && errno != EINTR) {
            break;
        }
        if (weft__now_ms() > end) {
            fprintf(stderr, "weftrun ran past %d ms: killed\n", limit_ms);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        sleep_ms(5);
    }
    r->out = wr_read_file("_stdout");
    r->err = wr_read_file("_stderr");
    if (r->out == NULL) {
        r->out = strdup("");
    }
    if (r->err == NULL) {
        r->err = strdup("");
    }
}

void wr_run(const char *const *args, wr_result_t *r)
{
    wr_wait(wr_start(args, NULL), WR_LIMIT_MS, r);
}

void wr_result_free(wr_result_t *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

bool wr_wait_file(const char *name, int limit_ms)
{
    uint64_t end = weft__now_ms() + (uint64_t)limit_ms;
    while (access(wr_path(name), F_OK) != 0) {
        if (weft__now_ms() > end) {
            return false;
        }
        sleep_ms(5);
    }
    return true;
}

char *wr_read_file(const char *name)
{
    return read_path(wr_path(name));
}

size_t wr_count_lines(const char *text, const char *line)
{
    size_t count = 0, n = strlen(line);
    for (const char *p = text; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        if (len == n && memcmp(p, line, n) == 0) {
            count++;
        }
        if (nl == NULL) {
            break;
        }
        p = nl + 1;
    }
    return count;
}
