/*
 * main() for a fuzz target built without libFuzzer: feeds it every file named on the
 * command line, and every file of every directory named (its corpus). CTest runs this
 * over tests/fuzz/corpus/<target>, so an input that once crashed it is tried on every
 * run of the suite.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap > 0 ? 2 * cap : 4096;
            uint8_t *p = realloc(buf, cap);
            if (p == NULL) {
                fclose(f);
                free(buf);
                return 1;
            }
            buf = p;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0) {
            break;
        }
        len += n;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len); /* a finding aborts */
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of @p dir, in name order; returns how many failed to open. */
static int run_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        perror(dir);
        return 1;
    }
    char **names = NULL;
    size_t n = 0;
    int bad = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char **p = realloc(names, (n + 1) * sizeof(*names));
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (p == NULL || (p[n] = malloc(len)) == NULL) {
            free(p != NULL ? p : names);
            closedir(d);
            return 1;
        }
        names = p;
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(*names), cmp);
    for (size_t i = 0; i < n; i++) {
        bad += run_file(names[i]);
        (*count)++;
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv)
{
    int bad = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            bad += run_dir(argv[i], &count);
        } else {
            bad += run_file(argv[i]);
            count++;
        }
    }
    printf("%d inputs replayed\n", count);
    return bad > 0 || count == 0;
}
