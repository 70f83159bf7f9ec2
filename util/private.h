/*
 * Whether what was opened is this user's alone: the one test behind the job token's file
 * (util/secret_file.h), the shared-memory segments (comm/shm/shm_seg.c) and the SSD
 * tier's directories (migrate/ssd/ssd.c). Made on what was opened (fstat), so nothing can
 * be swapped in after. Header-only and dependency-free.
 */
#ifndef WEFT_UTIL_PRIVATE_H
#define WEFT_UTIL_PRIVATE_H

#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

/* @p st is of file type @p type (S_IFREG, S_IFDIR), owned by the effective user, and
 * gives group and others no permission at all. */
static inline bool weft__stat_private(const struct stat *st, mode_t type)
{
    return (st->st_mode & S_IFMT) == type && st->st_uid == geteuid() && (st->st_mode & 077) == 0;
}

#endif
