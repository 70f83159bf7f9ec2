/*
 * Sealing a message to one process over a channel every process of the job can read
 * (PMIx's key-value space): the recipient publishes an X25519 public key, the sender
 * derives a key from its own X25519 key and the recipient's (HKDF-SHA256, bound to a
 * label naming the exchange and the recipient) and encrypts with AES-256-GCM. Only the
 * holder of the recipient's private key opens it, and a message altered, or meant for
 * another label, does not open. Each exchange uses fresh keys: one message per key, so
 * a fixed nonce is safe. OpenSSL's libcrypto does the work (comm/ctx/boot_pmix.c uses it).
 */
#ifndef WEFT_BOOT_SEAL_H
#define WEFT_BOOT_SEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

#define WEFT__SEAL_PUB 32 /* bytes of a public key */
#define WEFT__SEAL_TAG 16 /* bytes a sealed message adds */

typedef struct weft_seal_key weft_seal_key_t;

/* A fresh key pair; @p pub receives its public half. */
weft_status_t weft__seal_keygen(weft_seal_key_t **key, uint8_t pub[WEFT__SEAL_PUB]);
void weft__seal_key_free(weft_seal_key_t *key);
/* @p n bytes of @p msg sealed from @p mine to the holder of @p peer under @p label, into
 * @p out (n + WEFT__SEAL_TAG bytes). */
weft_status_t weft__seal(const weft_seal_key_t *mine, const uint8_t peer[WEFT__SEAL_PUB],
                         const char *label, const uint8_t *msg, size_t n, uint8_t *out);
/* The other way: @p n bytes of @p sealed (at least WEFT__SEAL_TAG) from the holder of @p
 * peer, opened with @p mine into @p msg (n - WEFT__SEAL_TAG bytes). False (msg cleared)
 * unless it was sealed to this key, by that peer, under this label, and is unaltered. */
bool weft__seal_open(const weft_seal_key_t *mine, const uint8_t peer[WEFT__SEAL_PUB],
                     const char *label, const uint8_t *sealed, size_t n, uint8_t *msg);

#endif
