/*
 * Running the real weftrun binary from a test: start it with arguments, capture its
 * stdout and stderr in files, wait for it with a hard limit (killed past it, so a hang
 * fails the test instead of stalling it), and a scratch folder per test whose path the
 * ranks find in $WT_DIR.
 */
#ifndef WEFT_TESTS_LAUNCHER_HARNESS_H
#define WEFT_TESTS_LAUNCHER_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The limit of one weftrun run inside a test: well below the CTest timeout. */
#define WR_LIMIT_MS 9000

typedef struct wr_result {
    int code;  /* exit code, 128 + signal number, or -1 when it ran past the limit */
    char *out; /* stdout, NUL-terminated */
    char *err; /* stderr, NUL-terminated */
} wr_result_t;

/* Path of the weftrun binary (the test's first argument). */
extern const char *wr_weftrun;
/* The scratch folder of the running test. */
extern char wr_dir[256];

/* cmocka setup/teardown: make and export (WT_DIR) / remove the scratch folder. */
int wr_setup(void **state);
int wr_teardown(void **state);

/* Start weftrun with @p args (NULL-terminated, without argv[0]); stdin from @p stdin_path
 * (NULL: /dev/null). */
pid_t wr_start(const char *const *args, const char *stdin_path);
/* Wait at most @p limit_ms for @p pid, then collect its output into @p r. */
void wr_wait(pid_t pid, int limit_ms, wr_result_t *r);
/* wr_start + wr_wait with WR_LIMIT_MS. */
void wr_run(const char *const *args, wr_result_t *r);
void wr_result_free(wr_result_t *r);

/* Path of @p name inside the scratch folder, in a static buffer: valid until the next
 * call. */
const char *wr_path(const char *name);
/* Wait until the file @p name exists in the scratch folder; false after @p limit_ms. */
bool wr_wait_file(const char *name, int limit_ms);
/* Contents of @p name in the scratch folder (malloc'ed), NULL when it does not exist. */
char *wr_read_file(const char *name);
/* Number of lines of @p text equal to @p line (without its newline). */
size_t wr_count_lines(const char *text, const char *line);

#endif
