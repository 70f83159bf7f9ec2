/*
 * Reading a secret (the job token) from a file: weftrun's --token-file and the ranks'
 * WEFT_JOB_TOKEN_FILE. The file must be a regular file of the effective user that
 * nobody else can read or write, checked on the file opened (no window between the
 * check and the read). Header-only and dependency-free.
 */
#ifndef WEFT_UTIL_SECRET_FILE_H
#define WEFT_UTIL_SECRET_FILE_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/private.h"

/*
 * The first line of @p path, without its line end, into @p out (@p len bytes, NUL
 * included; a longer line fails). On failure @p why (may be NULL) says what is wrong and
 * how to fix it; @p out is then cleared.
 */
static inline bool weft__read_secret_file(const char *path, char *out, size_t len, char *why,
                                          size_t why_len)
{
    char dummy[600]; /* the reason, when the caller does not want it */
    if (why == NULL) {
        why = dummy;
        why_len = sizeof(dummy);
    }
    memset(out, 0, len);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return false;
    }
    if (!weft__stat_private(&st, S_IFREG)) {
        snprintf(why, why_len,
                 "%s must be a regular file of yours that only you can read (it is %s, owned "
                 "by uid %u, mode %04o): chmod 600 it, or make one with (umask 077 && weftrun "
                 "--new-token >FILE)",
                 path, S_ISREG(st.st_mode) ? "a file" : "not a regular file",
                 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        close(fd);
        return false;
    }
    char buf[512];
    ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n < 0) {
        snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    size_t got = (size_t)n, line = 0; /* buf is not NUL-terminated */
    while (line < got && buf[line] != '\n' && buf[line] != '\r' && buf[line] != '\0') {
        line++;
    }
    bool ok = line > 0 && line < len;
    if (ok) {
        memcpy(out, buf, line);
        out[line] = '\0';
    } else {
        snprintf(why, why_len, "%s %s", path,
                 line == 0 ? "holds no token on its first line" : "holds a first line too long");
    }
    explicit_bzero(buf, sizeof(buf));
    return ok;
}

#endif
