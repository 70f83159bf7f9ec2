/* weft_mem_alloc / weft_mem_free: large host buffers on huge pages (util/bigmem.h). */
#include "comm/core_impl.h"
#include "util/bigmem.h"

weft_status_t weft_mem_alloc(size_t bytes, void **ptr)
{
    if (ptr == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_mem_alloc: ptr is NULL");
    }
    *ptr = weft__bigmem_alloc(bytes);
    if (*ptr == NULL) {
        return weft__error_noctx(WEFT_ERR_NO_MEMORY, "weft_mem_alloc: %zu bytes: out of memory",
                                 bytes);
    }
    return WEFT_OK;
}

weft_status_t weft_mem_free(void *ptr, size_t bytes)
{
    weft__bigmem_free(ptr, bytes);
    return WEFT_OK;
}
