/*
 * A small bounded JSON reader for the answers of an etcd cluster (comm/store/etcd_client.c),
 * which are untrusted input: the text is checked whole against the JSON grammar (nesting
 * at most WEFT__JSON_MAX_DEPTH, at most WEFT__JSON_MAX_TOKENS values) before anything is
 * read from it, every lookup is bounds-checked, and a value of the wrong type reads as
 * absent. Tokens point into the caller's text, which must outlive the document.
 */
#ifndef WEFT_STORE_JSON_H
#define WEFT_STORE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

#define WEFT__JSON_MAX_DEPTH 32
#define WEFT__JSON_MAX_TOKENS (1 << 20)

typedef enum {
    WEFT__JSON_OBJECT,
    WEFT__JSON_ARRAY,
    WEFT__JSON_STRING,
    WEFT__JSON_PRIM
} weft_json_type_t;

typedef struct weft_json_tok {
    weft_json_type_t type;
    uint32_t start, end; /* bytes of the text; a string's without its quotes */
    uint32_t next;       /* the token after this one's subtree */
} weft_json_tok_t;

typedef struct weft_json {
    const char *text;
    weft_json_tok_t *tok;
    uint32_t n, cap;
} weft_json_t;

/* Parses @p len bytes of @p text (one value, whitespace around it). WEFT_ERR_PROTOCOL if
 * it is not JSON or passes the limits, WEFT_ERR_NO_MEMORY. Free with weft__json_free. */
weft_status_t weft__json_parse(weft_json_t *j, const char *text, size_t len);
void weft__json_free(weft_json_t *j);
/* The value of member @p name of object @p obj, or -1 (also when @p obj is no object). */
int weft__json_get(const weft_json_t *j, int obj, const char *name);
/* Element @p k of array @p arr, or -1. */
int weft__json_item(const weft_json_t *j, int arr, size_t k);
/* A decimal integer, quoted (int64 in etcd's JSON) or not. False if @p t is none. */
bool weft__json_i64(const weft_json_t *j, int t, int64_t *out);
/* Whether @p t is the literal true (absent, false, anything else: false). */
bool weft__json_true(const weft_json_t *j, int t);
/* Whether string @p t equals @p s (no escapes are decoded: etcd sends none in what we compare). */
bool weft__json_str_is(const weft_json_t *j, int t, const char *s);
/* Decodes string @p t as base64 (strict: canonical length and padding, no escapes) into a
 * malloc'ed buffer, NUL-terminated, of at most @p max bytes. */
weft_status_t weft__json_b64(const weft_json_t *j, int t, size_t max, uint8_t **out, size_t *len);

/* Base64 of @p n bytes into @p out, which holds WEFT__B64_LEN(n) + 1 bytes; NUL-terminated. */
#define WEFT__B64_LEN(n) (((n) + 2) / 3 * 4)
void weft__b64_encode(const void *p, size_t n, char *out);
/* Strict decode of @p n characters into @p out (room for n / 4 * 3 bytes); false if they
 * are not canonical base64: a length not a multiple of 4, padding anywhere but at the
 * end, or bits set in the last character past the last byte ("QR==" for "QQ=="), so
 * that each byte string has one spelling. */
bool weft__b64_decode(const char *s, size_t n, uint8_t *out, size_t *len);

#endif
