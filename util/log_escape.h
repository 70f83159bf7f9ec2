/*
 * Text from the network or the disk (store keys and values that members write, reasons
 * they give) made safe for a log line: a terminal reading the log must not be driven by
 * escape sequences planted in a key, and one line must stay one line. Header-only and
 * dependency-free.
 */
#ifndef WEFT_UTIL_LOG_ESCAPE_H
#define WEFT_UTIL_LOG_ESCAPE_H

#include <stddef.h>

/*
 * The @p n bytes at @p in as printable ASCII in @p out (@p len bytes, NUL included):
 * bytes from ' ' to '~' as they are but '\', which becomes "\\", and every other byte
 * as "\xNN". What does not fit is cut and marked with "...". Returns @p out.
 */
static inline const char *weft__log_escape(const void *in, size_t n, char *out, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = in;
    size_t o = 0;
    if (len == 0) {
        return out;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        char buf[4];
        size_t k;
        if (c == '\\') {
            buf[0] = buf[1] = '\\';
            k = 2;
        } else if (c >= ' ' && c <= '~') {
            buf[0] = (char)c;
            k = 1;
        } else {
            buf[0] = '\\';
            buf[1] = 'x';
            buf[2] = hex[c >> 4];
            buf[3] = hex[c & 15];
            k = 4;
        }
        /* The last byte needs room for itself and the NUL; any other, for itself and a
         * "..." with its NUL after it, so that a cut can always be marked (by induction
         * o + 4 <= len holds here whenever a byte was written before). */
        size_t need = o + k + (i + 1 == n ? 1 : 4);
        if (need > len) {
            if (o + 4 <= len) {
                out[o++] = '.';
                out[o++] = '.';
                out[o++] = '.';
            }
            out[o] = '\0';
            return out;
        }
        for (size_t j = 0; j < k; j++) {
            out[o++] = buf[j];
        }
    }
    out[o] = '\0';
    return out;
}

#endif
