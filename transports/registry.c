#include <string.h>

#include "transports/transport.h"

const weft_transport_t *const weft__transports[] = {
    &weft__tl_self,
    &weft__tl_ucx,
#ifdef WEFT_HAVE_NCCL
    &weft__tl_nccl,
#endif
    NULL,
};

const weft_transport_t *weft__transport_find(const char *name)
{
    for (size_t i = 0; weft__transports[i] != NULL; i++) {
        if (strcmp(weft__transports[i]->name, name) == 0) {
            return weft__transports[i];
        }
    }
    return NULL;
}
