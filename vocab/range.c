/* Vocabulary sharding: which rows of the vocabulary each rank holds. No communication. */
#include <stdint.h>

#include "vocab/vocab_impl.h"

weft_status_t weft_vocab_shard_range(size_t vocab_size, int nranks, size_t align, int rank,
                                     weft_vocab_range_t *range)
{
    if (vocab_size == 0 || nranks <= 0 || rank < 0 || rank >= nranks || range == NULL) {
        return WEFT_ERR_INVALID_ARG;
    }
    if (align == 0) {
        align = 1;
    }
    size_t p = (size_t)nranks;
    size_t per = vocab_size / p + (vocab_size % p != 0);
    if (per > SIZE_MAX - (align - 1)) {
        return WEFT_ERR_INVALID_ARG;
    }
    per = (per + align - 1) / align * align;
    if (per > SIZE_MAX / p) {
        return WEFT_ERR_INVALID_ARG;
    }
    size_t start = per * (size_t)rank;
    size_t left = start < vocab_size ? vocab_size - start : 0;
    range->start = start;
    range->length = left < per ? left : per;
    range->padded_length = per;
    return WEFT_OK;
}

const char *weft_vocab_algo_name(weft_vocab_algo_t algo)
{
    switch (algo) {
    case WEFT_VOCAB_ALG2:
        return "alg2";
    case WEFT_VOCAB_ALG1:
        return "alg1";
    case WEFT_VOCAB_NAIVE:
        return "naive";
    default:
        return "?";
    }
}
