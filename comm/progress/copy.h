/*
 * Bulk copies of large collectives (internal).
 */
#ifndef WEFT_COPY_H
#define WEFT_COPY_H

#include <stddef.h>

/*
 * Copy @p n bytes like memcpy, but write @p dst with non-temporal stores where the CPU
 * has them: the destination lines are not read first (no read-for-ownership) and do not
 * evict the working set from the caches. Worth it only for outputs far larger than the
 * caches, which will be read from memory anyway. Call weft__copy_fence() before another
 * thread or process may read what was written.
 */
void weft__copy_stream(void *dst, const void *src, size_t n);
void weft__copy_fence(void);

#endif
