/*
 * Streaming copies. x86-64 always has SSE2 and its non-temporal 16-byte store; other
 * architectures fall back to memcpy.
 */
#include <stdint.h>
#include <string.h>

#include "comm/progress/copy.h"

#if defined(__x86_64__)
#include <emmintrin.h>

void weft__copy_stream(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (n < 256 || head > n) {
        memcpy(d, s, n);
        return;
    }
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    memcpy(d + i, s + i, n - i);
}

void weft__copy_fence(void)
{
    _mm_sfence();
}

#else

void weft__copy_stream(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

void weft__copy_fence(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

#endif
