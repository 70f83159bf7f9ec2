/*
 * XXH3 as weft takes it (migrate/engine/xxh.h: libxxhash's runtime dispatch where the build found
 * it) gives the values of the library's plain XXH3-64 and XXH3-128, whatever the length
 * and alignment: members built against other libxxhash builds, or running on CPUs with
 * other vector units, agree on chunk checksums and SSD content addresses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#define XXH_DISPATCH_DISABLE_REPLACE /* both forms by name */
#include <xxhash.h>
#ifdef WEFT_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif

static void test_same_values(void **state)
{
    (void)state;
#ifndef WEFT_HAVE_XXH_DISPATCH
    skip(); /* the plain library is what weft calls */
#else
    size_t most = (256 << 10) + 64;
    unsigned char *buf = malloc(most);
    assert_non_null(buf);
    for (size_t i = 0; i < most; i++) {
        buf[i] = (unsigned char)(i * 131 + (i >> 9));
    }
    const size_t lens[] = {0, 1, 3, 16, 17, 128, 129, 240, 241, 1024, 4099, 65536, 256 << 10};
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        for (size_t off = 0; off < 8; off += 3) {
            assert_int_equal(XXH3_64bits_dispatch(buf + off, lens[k]),
                             XXH3_64bits(buf + off, lens[k]));
            XXH128_hash_t a = XXH3_128bits_dispatch(buf + off, lens[k]),
                          b = XXH3_128bits(buf + off, lens[k]);
            assert_true(XXH128_isEqual(a, b));
        }
    }
    free(buf);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_same_values)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
