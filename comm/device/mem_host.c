/* weft_mem_alloc / weft_mem_free: large host buffers on huge pages (util/bigmem.h). Every
 * buffer handed out is recorded, so that weft_mem_free refuses a pointer it did not hand
 * out, one freed already, or a size other than the allocation's, instead of unmapping
 * whatever lies there. */
#include <pthread.h>

#include "comm/core_impl.h"
#include "util/array.h"
#include "util/bigmem.h"

typedef struct live_buf {
    void *ptr;
    size_t bytes;
} live_buf_t;

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static live_buf_t *live;
static size_t nlive, cap_live;

/* Record @p ptr of @p bytes; false when the table cannot grow. */
static bool live_add(void *ptr, size_t bytes)
{
    pthread_mutex_lock(&live_lock);
    bool ok = weft__array_reserve((void **)&live, &cap_live, nlive + 1, sizeof(*live));
    if (ok) {
        live[nlive++] = (live_buf_t){ptr, bytes};
    }
    pthread_mutex_unlock(&live_lock);
    return ok;
}

/* Take @p ptr out of the table: WEFT_OK, or WEFT_ERR_INVALID_ARG (left in it) when it is
 * not there or was allocated with another size, *@p had then saying which. */
static weft_status_t live_take(void *ptr, size_t bytes, size_t *had)
{
    weft_status_t st = WEFT_ERR_INVALID_ARG;
    *had = 0;
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < nlive; i++) {
        if (live[i].ptr != ptr) {
            continue;
        }
        *had = live[i].bytes;
        if (live[i].bytes == bytes) {
            live[i] = live[--nlive];
            st = WEFT_OK;
        }
        break;
    }
    pthread_mutex_unlock(&live_lock);
    return st;
}

weft_status_t weft_mem_alloc(size_t bytes, void **ptr)
{
    if (ptr == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_mem_alloc: ptr is NULL");
    }
    void *p = weft__bigmem_alloc(bytes);
    if (p != NULL && !live_add(p, bytes)) {
        weft__bigmem_free(p, bytes);
        p = NULL;
    }
    *ptr = p;
    if (p == NULL) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "weft_mem_alloc: %zu bytes: out of memory",
                                 bytes);
    }
    return WEFT_OK;
}

weft_status_t weft_mem_free(void *ptr, size_t bytes)
{
    if (ptr == NULL) {
        return WEFT_OK;
    }
    size_t had;
    if (live_take(ptr, bytes, &had) != WEFT_OK) {
        if (had == 0) {
            return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                     "weft_mem_free: %p is not memory of weft_mem_alloc, or was "
                                     "freed already",
                                     ptr);
        }
        return weft__error_noctx(WEFT_ERR_INVALID_ARG,
                                 "weft_mem_free: %p was allocated with %zu bytes, not %zu", ptr,
                                 had, bytes);
    }
    weft__bigmem_free(ptr, bytes);
    return WEFT_OK;
}
