/*
 * What fuzz_ssd.c and the writer of its seeds (ssd_seeds.c) share: the key the fuzzer's
 * files are sealed with, and the first byte of an input, which says what the rest is.
 */
#ifndef WEFT_TESTS_FUZZ_SSD_H
#define WEFT_TESTS_FUZZ_SSD_H

#include <stdint.h>

#include "migrate/ssd/ssd_format.h"

static const uint8_t fuzz_ssd_key[WEFT__SSD_KEY_BYTES] = "weft fuzz_ssd key, not a secret";

enum fuzz_ssd_mode {
    FUZZ_SSD_HEADER = 0,        /* a chunk header as read (zero-padded to 4 KiB) */
    FUZZ_SSD_HEADER_FIXED = 1,  /* the same, its checksum made right: the fields are read */
    FUZZ_SSD_CHUNK = 2,         /* a chunk file: header, then payload; its MAC checked */
    FUZZ_SSD_MANIFEST = 3,      /* a manifest file as read */
    FUZZ_SSD_MANIFEST_BODY = 4, /* a manifest without checksum and MAC, which are added */
    FUZZ_SSD_NAME = 5,          /* a file name of the directory */
    FUZZ_SSD_MODES = 6,
};

#endif
