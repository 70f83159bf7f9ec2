/* Parsing weftrun/stop (weftrun_stopmsg.h). */
#include "launcher/weftrun_stopmsg.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/parse.h"

bool weftrun_stop_parse(const char *val, int *code, int *node, char *why, size_t len)
{
    char num[2][16];
    int end = 0;
    int64_t c, n;
    if (val == NULL || why == NULL || len == 0 ||
        sscanf(val, "%15s %15s%n", num[0], num[1], &end) != 2 ||
        !weft__parse_i64(num[0], 0, 255, &c) || !weft__parse_i64(num[1], 0, INT32_MAX, &n)) {
        return false;
    }
    const char *r = val + end;
    while (*r == ' ' || *r == '\t' || *r == '\n' || *r == '\r' || *r == '\v' || *r == '\f') {
        r++;
    }
    if (*r == '\0') {
        r = "no reason given";
    }
    size_t k = 0;
    for (; r[k] != '\0' && k + 1 < len; k++) {
        unsigned char b = (unsigned char)r[k];
        why[k] = b >= 0x20 && b < 0x7f ? (char)b : '?';
    }
    why[k] = '\0';
    *code = (int)c;
    *node = (int)n;
    return true;
}
