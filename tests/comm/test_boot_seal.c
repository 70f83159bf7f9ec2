/*
 * Sealed messages (comm/ctx/boot_seal.h), as the PMIx bootstrap hands each rank its member
 * secret: what one key seals to another opens with the recipient's key only, from that
 * sender only, under that label only, and not once a byte of it changed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "comm/ctx/boot_seal.h"

typedef struct party {
    weft_seal_key_t *key;
    uint8_t pub[WEFT__SEAL_PUB];
} party_t;

static void make(party_t *p)
{
    assert_int_equal(weft__seal_keygen(&p->key, p->pub), WEFT_OK);
}

static void test_round_trip(void **state)
{
    (void)state;
    party_t a, b;
    make(&a);
    make(&b);
    assert_memory_not_equal(a.pub, b.pub, WEFT__SEAL_PUB);
    static const char msg[] = "weft-member-v1 3 0123456789abcdef";
    size_t n = sizeof(msg) - 1;
    uint8_t sealed[sizeof(msg) - 1 + WEFT__SEAL_TAG], back[sizeof(msg)] = {0};
    assert_int_equal(weft__seal(a.key, b.pub, "weft.0.seal.3", (const uint8_t *)msg, n, sealed),
                     WEFT_OK);
    /* The text does not show through. */
    assert_null(memmem(sealed, sizeof(sealed), "weft-member", 11));
    assert_true(weft__seal_open(b.key, a.pub, "weft.0.seal.3", sealed, sizeof(sealed), back));
    assert_memory_equal(back, msg, n);
    weft__seal_key_free(a.key);
    weft__seal_key_free(b.key);
}

static void test_refused(void **state)
{
    (void)state;
    party_t a, b, c;
    make(&a);
    make(&b);
    make(&c);
    static const uint8_t msg[40] = {1, 2, 3, 4, 5};
    uint8_t sealed[sizeof(msg) + WEFT__SEAL_TAG], back[sizeof(msg)];
    assert_int_equal(weft__seal(a.key, b.pub, "label 1", msg, sizeof(msg), sealed), WEFT_OK);
    /* Another recipient, another sender, another label. */
    assert_false(weft__seal_open(c.key, a.pub, "label 1", sealed, sizeof(sealed), back));
    assert_false(weft__seal_open(b.key, c.pub, "label 1", sealed, sizeof(sealed), back));
    assert_false(weft__seal_open(b.key, a.pub, "label 2", sealed, sizeof(sealed), back));
    /* Every byte altered in turn, the tag's included; cut short. */
    for (size_t i = 0; i < sizeof(sealed); i++) {
        sealed[i] ^= 0x40;
        memset(back, 0x55, sizeof(back));
        assert_false(weft__seal_open(b.key, a.pub, "label 1", sealed, sizeof(sealed), back));
        for (size_t j = 0; j < sizeof(back); j++) {
            assert_int_equal(back[j], 0); /* cleared, nothing half-opened left */
        }
        sealed[i] ^= 0x40;
    }
    assert_false(weft__seal_open(b.key, a.pub, "label 1", sealed, sizeof(sealed) - 1, back));
    assert_false(weft__seal_open(b.key, a.pub, "label 1", sealed, WEFT__SEAL_TAG - 1, back));
    assert_true(weft__seal_open(b.key, a.pub, "label 1", sealed, sizeof(sealed), back));
    assert_memory_equal(back, msg, sizeof(msg));
    weft__seal_key_free(a.key);
    weft__seal_key_free(b.key);
    weft__seal_key_free(c.key);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
