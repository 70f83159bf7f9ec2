/*
 * Fuzz target: the decoder of membership decisions (comm/group/decision.c), which reads
 * values any member (or anyone who can write to the store) may have written. What it
 * accepts must be safe to apply: a known kind, 1 to WEFT_TAG_MAX_MEMBERS members, each a
 * valid member id and none twice; and encoding it again must give back the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/ctx/tag.h"
#include "comm/group/edit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weft_decision_t d;
    if (weft__decision_decode(data, size, &d) != WEFT_OK) {
        return 0;
    }
    if ((d.kind != WEFT_EDIT_REPAIR && d.kind != WEFT_EDIT_GROW) || d.n_members == 0 ||
        d.n_members > WEFT_TAG_MAX_MEMBERS) {
        abort();
    }
    static uint8_t seen[WEFT_TAG_MAX_MEMBERS];
    memset(seen, 0, sizeof(seen));
    for (uint32_t i = 0; i < d.n_members; i++) {
        if (d.members[i] < 0 || (uint32_t)d.members[i] >= WEFT_TAG_MAX_MEMBERS ||
            seen[d.members[i]]++) {
            abort();
        }
    }
    void *buf;
    size_t len;
    if (weft__decision_encode(&d, &buf, &len) != WEFT_OK || len != size ||
        memcmp(buf, data, size) != 0) {
        abort();
    }
    free(buf);
    free(d.members);
    return 0;
}
