/* Fixture of check_tl_entries.py: a table another change adds, in a header of its own. */
#ifndef FIXTURE_BULK_H
#define FIXTURE_BULK_H

#include <stddef.h>

typedef struct weft_tl_bulk_ops {
    size_t size;
    int (*copy)(void *dst, const void *src, size_t len); /* called from migrate/ */
    int (*wait)(void *req);                               /* planted: never called */
} weft_tl_bulk_ops_t;

#endif
