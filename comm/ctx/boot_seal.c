/* Sealed messages between two X25519 keys (comm/ctx/boot_seal.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "comm/ctx/boot_seal.h"

struct weft_seal_key {
    EVP_PKEY *pkey;
};

weft_status_t weft__seal_keygen(weft_seal_key_t **key, uint8_t pub[WEFT__SEAL_PUB])
{
    weft_seal_key_t *k = calloc(1, sizeof(*k));
    size_t len = WEFT__SEAL_PUB;
    if (k == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    k->pkey = EVP_PKEY_Q_keygen(NULL, NULL, "X25519");
    if (k->pkey == NULL || EVP_PKEY_get_raw_public_key(k->pkey, pub, &len) != 1 ||
        len != WEFT__SEAL_PUB) {
        weft__seal_key_free(k);
        return WEFT_ERR_INVALID_ARG;
    }
    *key = k;
    return WEFT_OK;
}

void weft__seal_key_free(weft_seal_key_t *key)
{
    if (key != NULL) {
        EVP_PKEY_free(key->pkey);
        free(key);
    }
}

/* The AES key of (mine, peer, label): HKDF-SHA256 (one block: extract, then expand). */
static bool message_key(const weft_seal_key_t *mine, const uint8_t peer[WEFT__SEAL_PUB],
                        const char *label, uint8_t out[32])
{
    static const char salt[] = "weft-seal-v1";
    uint8_t shared[32], prk[32], info[256];
    size_t slen = sizeof(shared), llen = strlen(label);
    unsigned int n = 0;
    bool ok = false;
    EVP_PKEY *other = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer, WEFT__SEAL_PUB);
    EVP_PKEY_CTX *dc = other != NULL ? EVP_PKEY_CTX_new(mine->pkey, NULL) : NULL;
    if (dc != NULL && llen < sizeof(info) && EVP_PKEY_derive_init(dc) == 1 &&
        EVP_PKEY_derive_set_peer(dc, other) == 1 && EVP_PKEY_derive(dc, shared, &slen) == 1 &&
        slen == sizeof(shared) &&
        HMAC(EVP_sha256(), salt, sizeof(salt) - 1, shared, slen, prk, &n) != NULL && n == 32) {
        memcpy(info, label, llen);
        info[llen] = 1;
        ok = HMAC(EVP_sha256(), prk, sizeof(prk), info, llen + 1, out, &n) != NULL && n == 32;
    }
    EVP_PKEY_CTX_free(dc);
    EVP_PKEY_free(other);
    OPENSSL_cleanse(shared, sizeof(shared));
    OPENSSL_cleanse(prk, sizeof(prk));
    return ok;
}

/* AES-256-GCM with a zero nonce (one message per key), tag after the text. */
static bool gcm(bool seal, const uint8_t key[32], const uint8_t *in, size_t n, uint8_t *out,
                uint8_t tag[WEFT__SEAL_TAG])
{
    static const uint8_t nonce[12];
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int len = 0, fin = 0;
    bool ok = c != NULL && n <= INT32_MAX &&
              EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, key, nonce, seal ? 1 : 0) == 1 &&
              EVP_CipherUpdate(c, out, &len, in, (int)n) == 1 && (size_t)len == n;
    if (ok && !seal) {
        ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, WEFT__SEAL_TAG, tag) == 1;
    }
    ok = ok && EVP_CipherFinal_ex(c, out + len, &fin) == 1 && fin == 0;
    if (ok && seal) {
        ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, WEFT__SEAL_TAG, tag) == 1;
    }
    EVP_CIPHER_CTX_free(c);
    return ok;
}

weft_status_t weft__seal(const weft_seal_key_t *mine, const uint8_t peer[WEFT__SEAL_PUB],
                         const char *label, const uint8_t *msg, size_t n, uint8_t *out)
{
    uint8_t key[32];
    bool ok = message_key(mine, peer, label, key) && gcm(true, key, msg, n, out, out + n);
    OPENSSL_cleanse(key, sizeof(key));
    return ok ? WEFT_OK : WEFT_ERR_INVALID_ARG;
}

bool weft__seal_open(const weft_seal_key_t *mine, const uint8_t peer[WEFT__SEAL_PUB],
                     const char *label, const uint8_t *sealed, size_t n, uint8_t *msg)
{
    uint8_t key[32], tag[WEFT__SEAL_TAG];
    if (n < WEFT__SEAL_TAG) {
        return false;
    }
    size_t len = n - WEFT__SEAL_TAG;
    memcpy(tag, sealed + len, WEFT__SEAL_TAG);
    bool ok = message_key(mine, peer, label, key) && gcm(false, key, sealed, len, msg, tag);
    OPENSSL_cleanse(key, sizeof(key));
    if (!ok) {
        OPENSSL_cleanse(msg, len);
    }
    return ok;
}
