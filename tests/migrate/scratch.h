/*
 * What the SSD tier's and the spill space's unit tests share: removing a scratch
 * directory tree, and checking a call's status and the words of its error text.
 * Include after <cmocka.h> (and its prerequisites).
 */
#ifndef WEFT_TESTS_MIGRATE_SCRATCH_H
#define WEFT_TESTS_MIGRATE_SCRATCH_H

#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "weft/core.h"

static inline int scratch_remove_entry(const char *path, const struct stat *st, int flag,
                                       struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Remove @p root and everything under it (symbolic links themselves, not their targets). */
static inline int scratch_remove(const char *root)
{
    return nftw(root, scratch_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* @p got is @p want, and weft_last_error(@p ctx) contains @p word (unless NULL). */
static inline void expect_error_in(const weft_ctx_t *ctx, weft_status_t got, weft_status_t want,
                                   const char *word)
{
    assert_int_equal(got, want);
    if (word != NULL && strstr(weft_last_error(ctx), word) == NULL) {
        fail_msg("error \"%s\" does not say \"%s\"", weft_last_error(ctx), word);
    }
}

/* The same for calls without a context (their text in weft_last_error(NULL)). */
static inline void expect_error(weft_status_t got, weft_status_t want, const char *word)
{
    expect_error_in(NULL, got, want, word);
}

#endif
