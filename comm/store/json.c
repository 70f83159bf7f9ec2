/*
 * The bounded JSON reader of json.h: a recursive-descent check of the whole text that
 * records one token per value, with its depth and token count capped; lookups walk the
 * tokens by their `next` links, so none reads past the text or the token array.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/store/json.h"

typedef struct parser {
    weft_json_t *j;
    const char *s;
    size_t pos, len;
} parser_t;

static void skip_ws(parser_t *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r')) {
        p->pos++;
    }
}

/* A new token; -1 when the cap is reached or memory is short. */
static int new_tok(parser_t *p, weft_json_type_t type)
{
    weft_json_t *j = p->j;
    if (j->n == j->cap) {
        if (j->cap >= WEFT__JSON_MAX_TOKENS) {
            return -1;
        }
        uint32_t cap = j->cap == 0 ? 64 : j->cap * 2;
        weft_json_tok_t *t = realloc(j->tok, cap * sizeof(*t));
        if (t == NULL) {
            return -1;
        }
        j->tok = t;
        j->cap = cap;
    }
    j->tok[j->n] = (weft_json_tok_t){.type = type, .start = (uint32_t)p->pos};
    return (int)j->n++;
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool parse_string(parser_t *p)
{
    p->pos++; /* the opening quote */
    int t = new_tok(p, WEFT__JSON_STRING);
    if (t < 0) {
        return false;
    }
    while (p->pos < p->len) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->j->tok[t].end = (uint32_t)p->pos++;
            p->j->tok[t].next = p->j->n;
            return true;
        }
        if (c < 0x20) {
            return false;
        }
        if (c == '\\') {
            if (p->pos + 1 >= p->len) {
                return false;
            }
            char e = p->s[++p->pos];
            if (e == 'u') {
                if (p->pos + 4 >= p->len) {
                    return false;
                }
                for (int i = 1; i <= 4; i++) {
                    if (!is_hex(p->s[p->pos + (size_t)i])) {
                        return false;
                    }
                }
                p->pos += 4;
            } else if (strchr("\"\\/bfnrt", e) == NULL || e == '\0') {
                return false;
            }
        }
        p->pos++;
    }
    return false;
}

/* true, false, null or a number: checked loosely (its characters), read by the getters. */
static bool parse_prim(parser_t *p)
{
    int t = new_tok(p, WEFT__JSON_PRIM);
    if (t < 0) {
        return false;
    }
    size_t begin = p->pos;
    while (p->pos < p->len && strchr("0123456789+-.eEtrufalsn", p->s[p->pos]) != NULL &&
           p->s[p->pos] != '\0') {
        p->pos++;
    }
    p->j->tok[t].end = (uint32_t)p->pos;
    p->j->tok[t].next = p->j->n;
    return p->pos > begin;
}

static bool parse_value(parser_t *p, int depth);

/* An object or an array, its opening character at pos. */
static bool parse_container(parser_t *p, int depth, bool object)
{
    int t = new_tok(p, object ? WEFT__JSON_OBJECT : WEFT__JSON_ARRAY);
    if (t < 0 || depth >= WEFT__JSON_MAX_DEPTH) {
        return false;
    }
    char close = object ? '}' : ']';
    p->pos++;
    skip_ws(p);
    bool first = true;
    for (;;) {
        if (p->pos >= p->len) {
            return false;
        }
        if (p->s[p->pos] == close) {
            p->pos++;
            break;
        }
        if (!first) {
            if (p->s[p->pos] != ',') {
                return false;
            }
            p->pos++;
            skip_ws(p);
        }
        first = false;
        if (object) {
            if (p->pos >= p->len || p->s[p->pos] != '"' || !parse_string(p)) {
                return false;
            }
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                return false;
            }
            p->pos++;
        }
        if (!parse_value(p, depth + 1)) {
            return false;
        }
        skip_ws(p);
    }
    p->j->tok[t].end = (uint32_t)p->pos;
    p->j->tok[t].next = p->j->n;
    return true;
}

static bool parse_value(parser_t *p, int depth)
{
    skip_ws(p);
    if (p->pos >= p->len) {
        return false;
    }
    char c = p->s[p->pos];
    if (c == '{' || c == '[') {
        return parse_container(p, depth, c == '{');
    }
    return c == '"' ? parse_string(p) : parse_prim(p);
}

weft_status_t weft__json_parse(weft_json_t *j, const char *text, size_t len)
{
    *j = (weft_json_t){.text = text};
    if (len >= UINT32_MAX) {
        return WEFT_ERR_PROTOCOL;
    }
    parser_t p = {.j = j, .s = text, .len = len};
    bool ok = parse_value(&p, 0);
    skip_ws(&p);
    if (ok && p.pos == len) {
        return WEFT_OK;
    }
    weft__json_free(j); /* what passes the caps reads as malformed too */
    return WEFT_ERR_PROTOCOL;
}

void weft__json_free(weft_json_t *j)
{
    free(j->tok);
    j->tok = NULL;
    j->n = j->cap = 0;
}

static bool valid(const weft_json_t *j, int t)
{
    return t >= 0 && (uint32_t)t < j->n;
}

int weft__json_get(const weft_json_t *j, int obj, const char *name)
{
    if (!valid(j, obj) || j->tok[obj].type != WEFT__JSON_OBJECT) {
        return -1;
    }
    uint32_t end = j->tok[obj].next;
    for (uint32_t k = (uint32_t)obj + 1; k < end && k + 1 < end; k = j->tok[k + 1].next) {
        if (weft__json_str_is(j, (int)k, name)) {
            return (int)k + 1;
        }
    }
    return -1;
}

int weft__json_item(const weft_json_t *j, int arr, size_t k)
{
    if (!valid(j, arr) || j->tok[arr].type != WEFT__JSON_ARRAY) {
        return -1;
    }
    uint32_t end = j->tok[arr].next;
    for (uint32_t i = (uint32_t)arr + 1; i < end; i = j->tok[i].next) {
        if (k-- == 0) {
            return (int)i;
        }
    }
    return -1;
}

bool weft__json_i64(const weft_json_t *j, int t, int64_t *out)
{
    if (!valid(j, t) ||
        (j->tok[t].type != WEFT__JSON_STRING && j->tok[t].type != WEFT__JSON_PRIM)) {
        return false;
    }
    const char *s = j->text + j->tok[t].start;
    size_t n = j->tok[t].end - j->tok[t].start, i = 0;
    bool neg = n > 0 && s[0] == '-';
    i = neg ? 1 : 0;
    if (i == n || n - i > 19) {
        return false;
    }
    uint64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return false;
        }
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) {
        return false;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

bool weft__json_true(const weft_json_t *j, int t)
{
    return valid(j, t) && j->tok[t].type == WEFT__JSON_PRIM &&
           j->tok[t].end - j->tok[t].start == 4 &&
           memcmp(j->text + j->tok[t].start, "true", 4) == 0;
}

bool weft__json_str_is(const weft_json_t *j, int t, const char *s)
{
    if (!valid(j, t) || j->tok[t].type != WEFT__JSON_STRING) {
        return false;
    }
    size_t n = j->tok[t].end - j->tok[t].start;
    return strlen(s) == n && memcmp(j->text + j->tok[t].start, s, n) == 0;
}

weft_status_t weft__json_b64(const weft_json_t *j, int t, size_t max, uint8_t **out, size_t *len)
{
    if (!valid(j, t) || j->tok[t].type != WEFT__JSON_STRING) {
        return WEFT_ERR_PROTOCOL;
    }
    size_t n = j->tok[t].end - j->tok[t].start;
    if (n / 4 * 3 > max + 2) {
        return WEFT_ERR_PROTOCOL;
    }
    uint8_t *b = malloc(n / 4 * 3 + 1);
    if (b == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    size_t got;
    if (!weft__b64_decode(j->text + j->tok[t].start, n, b, &got) || got > max) {
        free(b);
        return WEFT_ERR_PROTOCOL;
    }
    b[got] = '\0';
    *out = b;
    *len = got;
    return WEFT_OK;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void weft__b64_encode(const void *p, size_t n, char *out)
{
    const uint8_t *s = p;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = i + 1 < n ? B64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? B64[v & 63] : '=';
    }
    out[o] = '\0';
}

static int b64_value(char c)
{
    const char *q = c != '\0' ? strchr(B64, c) : NULL;
    return q != NULL ? (int)(q - B64) : -1;
}

bool weft__b64_decode(const char *s, size_t n, uint8_t *out, size_t *len)
{
    if (n % 4 != 0) {
        return false;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int pad = s[i + 3] == '=' ? (s[i + 2] == '=' ? 2 : 1) : 0;
        if (pad > 0 && i + 4 != n) {
            return false; /* padding only at the end */
        }
        int v[4];
        for (int k = 0; k < 4 - pad; k++) {
            if ((v[k] = b64_value(s[i + (size_t)k])) < 0) {
                return false;
            }
        }
        if ((pad == 2 && (v[1] & 0xf) != 0) || (pad == 1 && (v[2] & 0x3) != 0)) {
            return false; /* bits past the last byte: another spelling of the same bytes */
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
                     (pad < 2 ? (uint32_t)v[2] << 6 : 0) | (pad < 1 ? (uint32_t)v[3] : 0);
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) {
            out[o++] = (uint8_t)(w >> 8);
        }
        if (pad < 1) {
            out[o++] = (uint8_t)w;
        }
    }
    *len = o;
    return true;
}
