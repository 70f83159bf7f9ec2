/*
 * Large buffers (util/bigmem.h): small sizes come from calloc, large ones are 2 MiB
 * aligned, zeroed and writable to their last byte, and where the kernel gives huge pages
 * to memory that asks for them (transparent_hugepage "always" or "madvise") a large
 * buffer is backed by some, which is what frees a killed rank's memory quickly. The public
 * form, weft_mem_alloc, likewise, and refuses a NULL pointer to fill.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/bigmem.h"
#include "weft/core.h"

static void test_sizes(void **state)
{
    (void)state;
    const size_t sizes[] = {0, 1, 4096, WEFT__BIGMEM_MIN - 1, WEFT__BIGMEM_MIN,
                            WEFT__BIGMEM_MIN + 1, (5u << 20) + 3};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        uint8_t *p = weft__bigmem_alloc(n);
        assert_non_null(p);
        if (n >= WEFT__BIGMEM_MIN) {
            assert_int_equal((uintptr_t)p % WEFT__BIGMEM_PAGE, 0);
        }
        for (size_t k = 0; k < n; k += 4093) {
            assert_int_equal(p[k], 0);
        }
        if (n > 0) {
            assert_int_equal(p[n - 1], 0);
            memset(p, 0xa5, n);
            assert_int_equal(p[n - 1], 0xa5);
        }
        weft__bigmem_free(p, n);
    }
    weft__bigmem_free(NULL, 1u << 30); /* nothing to free */
    assert_null(weft__bigmem_alloc(SIZE_MAX - 100));
}

/* The kernel's THP mode: true when memory that asks (MADV_HUGEPAGE) may get huge pages. */
static int thp_on(void)
{
    char line[256] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == NULL) {
        return 0;
    }
    if (fgets(line, sizeof(line), f) == NULL) {
        line[0] = '\0';
    }
    fclose(f);
    return strstr(line, "[always]") != NULL || strstr(line, "[madvise]") != NULL;
}

/* AnonHugePages (kB) of the mapping that holds @p p, from /proc/self/smaps. */
static long huge_kb_at(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    long kb = -1;
    int in = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) {
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kb;
}

static void test_huge_pages(void **state)
{
    (void)state;
    if (!thp_on()) {
        skip(); /* huge pages off: the buffers are plain pages, still correct */
    }
    size_t n = 16u << 20;
    uint8_t *p = weft__bigmem_alloc(n);
    assert_non_null(p);
    memset(p, 1, n);
    long kb = huge_kb_at(p);
    /* Fragmented memory may deny a few; none at all means the advice was not given. */
    assert_true(kb >= 2048);
    weft__bigmem_free(p, n);
}

static void test_public(void **state)
{
    (void)state;
    void *p = NULL;
    assert_int_equal(weft_mem_alloc(8u << 20, NULL), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "weft_mem_alloc"));
    assert_int_equal(weft_mem_alloc(8u << 20, &p), WEFT_OK);
    assert_int_equal((uintptr_t)p % WEFT__BIGMEM_PAGE, 0);
    memset(p, 7, 8u << 20);
    assert_int_equal(weft_mem_free(p, 8u << 20), WEFT_OK);
    assert_int_equal(weft_mem_alloc(0, &p), WEFT_OK);
    assert_non_null(p);
    assert_int_equal(weft_mem_free(p, 0), WEFT_OK);
    assert_int_equal(weft_mem_alloc(SIZE_MAX, &p), WEFT_ERR_NO_MEMORY);
    assert_null(p);
    assert_int_equal(weft_mem_free(NULL, 123), WEFT_OK);
}

/* weft_mem_free refuses what weft_mem_alloc did not hand out as it says: another size,
 * a pointer freed already, one of malloc, one inside a buffer. The buffer stays usable
 * after a refused free, and is freed by the right call. */
static void test_free_checked(void **state)
{
    (void)state;
    size_t n = 6u << 20;
    uint8_t *p = NULL;
    assert_int_equal(weft_mem_alloc(n, (void **)&p), WEFT_OK);
    assert_int_equal(weft_mem_free(p, n + (2u << 20)), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "allocated with"));
    assert_int_equal(weft_mem_free(p, n / 2), WEFT_ERR_INVALID_ARG);
    assert_int_equal(weft_mem_free(p + 4096, n - 4096), WEFT_ERR_INVALID_ARG);
    void *m = malloc(64);
    assert_int_equal(weft_mem_free(m, 64), WEFT_ERR_INVALID_ARG);
    assert_non_null(strstr(weft_last_error(NULL), "not memory of weft_mem_alloc"));
    free(m);
    memset(p, 1, n); /* still mapped, all of it */
    assert_int_equal(weft_mem_free(p, n), WEFT_OK);
    assert_int_equal(weft_mem_free(p, n), WEFT_ERR_INVALID_ARG); /* twice */
    assert_non_null(strstr(weft_last_error(NULL), "freed already"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_huge_pages),
        cmocka_unit_test(test_public),
        cmocka_unit_test(test_free_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
