/*
 * weft_kv_* (include/weft/kv.h) under weftrun, whose ranks hold only their own member
 * secret (so the store's member rules apply), every rank:
 *   - sets "rank/<r>" and reads every other rank's, waiting for those not set yet;
 *   - adds its rank + 1 to one counter, reads the sum once all have added;
 *   - writes a key shaped like weft's own keys of another member ("x/addr/<peer>",
 *     "failed/<peer>"): a program's key, which the store takes;
 *   - checks edge cases: an absent key (timeout 0 and a short wait), a value cut to a
 *     small buffer, an empty value, bad keys and values, add on a non-counter, delete.
 * Prints "KV-OK" at the end. Without a launcher (size 1, no store) every call answers
 * WEFT_ERR_UNSUPPORTED ("nostore" mode).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft/weft.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "test_kv rank %d: line %d: ", rank, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " (last error: %s)\n", ctx ? weft_last_error(ctx) : "-");              \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int nostore(void)
{
    int rank = 0;
    weft_ctx_t *ctx = NULL;
    weft_status_t st = weft_init(NULL, &ctx);
    CHECK(st == WEFT_OK, "weft_init: %s", weft_status_str(st));
    char buf[8];
    size_t len;
    int64_t v;
    CHECK(weft_kv_set(ctx, "a", "b", 1) == WEFT_ERR_UNSUPPORTED, "set without a store");
    CHECK(weft_kv_get(ctx, "a", buf, sizeof(buf), &len, 0) == WEFT_ERR_UNSUPPORTED,
          "get without a store");
    CHECK(weft_kv_add(ctx, "a", 1, &v) == WEFT_ERR_UNSUPPORTED, "add without a store");
    CHECK(weft_kv_delete(ctx, "a", NULL) == WEFT_ERR_UNSUPPORTED, "delete without a store");
    CHECK(strstr(weft_last_error(ctx), "no store") != NULL, "the error says why");
    weft_finalize(ctx);
    printf("KV-OK\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "nostore") == 0) {
        return nostore();
    }
    int rank = -1, size = 0;
    weft_ctx_t *ctx = NULL;
    weft_status_t st = weft_init(NULL, &ctx);
    CHECK(st == WEFT_OK, "weft_init: %s", weft_status_str(st));
    weft_group_t *world;
    weft_ctx_world(ctx, &world);
    weft_group_rank(world, &rank);
    weft_group_size(world, &size);
    CHECK(getenv("WEFT_JOB_TOKEN") == NULL, "the rank holds the job token: run it without "
                                            "--share-token so the member rules apply");

    char key[64], val[64], buf[64];
    size_t len;
    /* Every rank's value, read by every rank: those set later are waited for. */
    snprintf(key, sizeof(key), "rank/%d", rank);
    snprintf(val, sizeof(val), "value of rank %d", rank);
    st = weft_kv_set(ctx, key, val, strlen(val));
    CHECK(st == WEFT_OK, "set %s: %s", key, weft_status_str(st));
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof(key), "rank/%d", r);
        snprintf(val, sizeof(val), "value of rank %d", r);
        st = weft_kv_get(ctx, key, buf, sizeof(buf), &len, 30000000000ull);
        CHECK(st == WEFT_OK, "get %s: %s", key, weft_status_str(st));
        CHECK(len == strlen(val) && memcmp(buf, val, len) == 0, "get %s: '%.*s'", key, (int)len,
              buf);
    }

    /* A counter every rank adds to: the sum of 1..size once all added. */
    int64_t mine = 0, total = 0;
    st = weft_kv_add(ctx, "sum", rank + 1, &mine);
    CHECK(st == WEFT_OK && mine >= rank + 1, "add: %s, %lld", weft_status_str(st), (long long)mine);
    st = weft_kv_add(ctx, "added", 1, NULL);
    CHECK(st == WEFT_OK, "add: %s", weft_status_str(st));
    for (int64_t n = 0; n < size;) {
        CHECK(weft_kv_add(ctx, "added", 0, &n) == WEFT_OK, "add 0");
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    CHECK(weft_kv_add(ctx, "sum", 0, &total) == WEFT_OK, "add 0");
    CHECK(total == (int64_t)size * (size + 1) / 2, "sum %lld, not %d", (long long)total,
          size * (size + 1) / 2);

    /* Keys shaped like weft's own keys of another member are the program's. */
    int peer = (rank + 1) % size;
    snprintf(key, sizeof(key), "x/addr/%d", peer);
    CHECK(weft_kv_set(ctx, key, "mine", 4) == WEFT_OK, "set %s", key);
    snprintf(key, sizeof(key), "failed/%d", peer);
    CHECK(weft_kv_set(ctx, key, "not a report", 12) == WEFT_OK, "set %s", key);
    snprintf(key, sizeof(key), "g/0/%d/next", rank);
    CHECK(weft_kv_set(ctx, key, "a", 1) == WEFT_OK && weft_kv_set(ctx, key, "b", 1) == WEFT_OK,
          "set %s twice", key);

    /* Absent keys: at once, or after a short wait. */
    snprintf(key, sizeof(key), "absent/%d", rank);
    CHECK(weft_kv_get(ctx, key, buf, sizeof(buf), &len, 0) == WEFT_ERR_TIMEOUT, "absent, 0");
    CHECK(weft_kv_get(ctx, key, buf, sizeof(buf), &len, 120000000ull) == WEFT_ERR_TIMEOUT,
          "absent, 120 ms");
    /* A value longer than the buffer: cut, with its whole length; a query with cap 0. */
    snprintf(key, sizeof(key), "long/%d", rank);
    CHECK(weft_kv_set(ctx, key, "0123456789", 10) == WEFT_OK, "set long");
    CHECK(weft_kv_get(ctx, key, buf, 4, &len, 0) == WEFT_OK && len == 10 &&
              memcmp(buf, "0123", 4) == 0,
          "cut value: len %zu", len);
    CHECK(weft_kv_get(ctx, key, NULL, 0, &len, 0) == WEFT_OK && len == 10, "cap 0");
    /* An empty value exists. */
    snprintf(key, sizeof(key), "empty/%d", rank);
    CHECK(weft_kv_set(ctx, key, NULL, 0) == WEFT_OK, "set empty");
    CHECK(weft_kv_get(ctx, key, buf, sizeof(buf), &len, 0) == WEFT_OK && len == 0, "get empty");
    /* add on a value that is not a counter. */
    snprintf(key, sizeof(key), "text/%d", rank);
    CHECK(weft_kv_set(ctx, key, "abc", 3) == WEFT_OK, "set text");
    st = weft_kv_add(ctx, key, 1, NULL);
    CHECK(st == WEFT_ERR_INVALID_ARG && strstr(weft_last_error(ctx), "no decimal counter"),
          "add on text: %s", weft_status_str(st));
    /* Delete says whether the key held a value. */
    int existed = -1;
    CHECK(weft_kv_delete(ctx, key, &existed) == WEFT_OK && existed == 1, "delete %s", key);
    CHECK(weft_kv_get(ctx, key, buf, sizeof(buf), &len, 0) == WEFT_ERR_TIMEOUT, "deleted");
    CHECK(weft_kv_delete(ctx, key, &existed) == WEFT_OK && existed == 0, "delete again");
    /* Bad arguments. */
    char big[WEFT_KV_MAX_KEY + 2];
    memset(big, 'k', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    CHECK(weft_kv_set(ctx, big, "v", 1) == WEFT_ERR_INVALID_ARG, "key too long");
    big[WEFT_KV_MAX_KEY] = '\0';
    CHECK(weft_kv_set(ctx, big, "v", 1) == WEFT_OK, "key of the longest length");
    CHECK(weft_kv_set(ctx, "", "v", 1) == WEFT_ERR_INVALID_ARG, "empty key");
    CHECK(weft_kv_set(ctx, NULL, "v", 1) == WEFT_ERR_INVALID_ARG, "NULL key");
    CHECK(weft_kv_set(ctx, "a\nb", "v", 1) == WEFT_ERR_INVALID_ARG, "control byte in key");
    CHECK(weft_kv_set(ctx,
                      "a\x1f"
                      "b",
                      "v", 1) == WEFT_ERR_INVALID_ARG,
          "0x1f in key");
    CHECK(weft_kv_set(ctx, "a", NULL, 1) == WEFT_ERR_INVALID_ARG, "NULL value");
    CHECK(weft_kv_set(ctx, "a", "v", WEFT_KV_MAX_VALUE + 1) == WEFT_ERR_INVALID_ARG,
          "value too long");
    CHECK(weft_kv_get(ctx, "a", NULL, 4, &len, 0) == WEFT_ERR_INVALID_ARG, "NULL buf");
    CHECK(weft_kv_get(ctx, "a", buf, 4, NULL, 0) == WEFT_ERR_INVALID_ARG, "NULL len");
    CHECK(weft_kv_set(NULL, "a", "v", 1) == WEFT_ERR_INVALID_ARG, "NULL context");

    st = weft_barrier(world); /* nobody leaves while another still reads */
    CHECK(st == WEFT_OK, "barrier: %s", weft_status_str(st));
    weft_finalize(ctx);
    printf("KV-OK\n");
    return 0;
}
