/*
 * Strict parsing of decimal integers from the environment, the command line and store
 * values. Header-only and dependency-free.
 */
#ifndef WEFT_UTIL_PARSE_H
#define WEFT_UTIL_PARSE_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/*
 * A whole decimal number in [@p min, @p max]: an optional '-' and digits, nothing
 * before or after (no blanks, no '+', no suffix). Writes *@p out only when it returns true.
 */
static inline bool weft__parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (s == NULL || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) {
        return false;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
        return false;
    }
    *out = v;
    return true;
}

#endif
