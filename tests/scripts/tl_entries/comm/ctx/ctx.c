/* The library's calls: through a pointer, through a struct, with spaces. Comments and
 * strings that name an entry do not call it: ops->flush(tl), ->wait(req). */
#include <stdio.h>

#include "transports/transport.h"

typedef struct inst {
    const weft_tl_msg_ops_t *ops;
    void *tl;
} inst_t;

int start(const weft_tl_msg_ops_t *ops, inst_t *t, const weft_tl_params_t *p)
{
    puts("ops->flush(t->tl) is not a call, nor is tbl.wait(req)");
    // t->ops->flush(t->tl);
    if (ops->init(p, &t->tl) != 0) {
        return -1;
    }
    t->ops = ops;
    return t->ops->isend(t->tl, "x", 1, 7ul) + t->ops -> progress (t->tl);
}
