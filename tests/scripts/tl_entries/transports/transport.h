/* Fixture of check_tl_entries.py: the message table, one entry of it planted unused. */
#ifndef FIXTURE_TRANSPORT_H
#define FIXTURE_TRANSPORT_H

#include <stddef.h>

/* Not a capability table: its function pointers are not checked. */
typedef struct weft_tl_params {
    size_t size;
    void (*log)(void *arg, int level, const char *fmt);
} weft_tl_params_t;

typedef struct weft_tl_msg_ops {
    size_t size;
    unsigned flags;
    int (*init)(const weft_tl_params_t *p, void **tl);
    int (*isend)(void *tl, const void *buf, size_t len,
                 unsigned long tag); /* called through a table in a struct */
    /* Planted: filled by a designated initializer, named in a comment and a string, called
     * by a test and by the launcher, never by the library. */
    void (*flush)(void *tl);
    int
        (
            *progress
        )
        (void *tl); /* called with spaces before the parenthesis */
} weft_tl_msg_ops_t;

#endif
