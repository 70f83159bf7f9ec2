/*
 * The WEFT_DEBUG_FAULTS syntax (comm/fault.h): NAME or NAME=VALUE, comma-separated.
 */
#include <string.h>

#include "comm/fault.h"

/* One switch of the table: its name, its largest value and what a bare name means. */
typedef struct fault_switch {
    const char *name;
    int max, bare;
    size_t offset;
    bool is_int; /* an int field; else a bool */
} fault_switch_t;

static const fault_switch_t fault_switches[] = {
    {"cma_refuse", 1, 1, offsetof(weft__faults_t, cma_refuse), false},
    {"ring_refuse", 2, 1, offsetof(weft__faults_t, ring_refuse), true},
    {"snap_share_fail", 1, 1, offsetof(weft__faults_t, snap_share_fail), false},
};
#define NSWITCHES (sizeof(fault_switches) / sizeof(fault_switches[0]))

/* Parse one NAME[=DIGIT] of @p len bytes at @p item into @p f; false if it is not one. */
static bool parse_item(const char *item, size_t len, weft__faults_t *f)
{
    const char *eq = memchr(item, '=', len);
    size_t nlen = eq != NULL ? (size_t)(eq - item) : len;
    for (size_t i = 0; i < NSWITCHES; i++) {
        const fault_switch_t *s = &fault_switches[i];
        if (strlen(s->name) != nlen || strncmp(s->name, item, nlen) != 0) {
            continue;
        }
        int v = s->bare;
        if (eq != NULL) {
            /* One digit, 0 to max. */
            if (len - nlen != 2 || eq[1] < '0' || eq[1] - '0' > s->max) {
                return false;
            }
            v = eq[1] - '0';
        }
        char *field = (char *)f + s->offset;
        if (s->is_int) {
            *(int *)field = v;
        } else {
            *(bool *)field = v != 0;
        }
        return true;
    }
    return false;
}

weft_status_t weft__faults_parse(const char *text, weft__faults_t *f)
{
    weft__faults_t tmp = {
        .cma_refuse = f->cma_refuse,
        .ring_refuse = f->ring_refuse,
        .snap_share_fail = f->snap_share_fail,
    };
    for (const char *p = text; *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (!parse_item(p, len, &tmp)) {
            return WEFT_ERR_INVALID_ARG;
        }
        if (comma == NULL) {
            break;
        }
        p = comma + 1;
        if (*p == '\0') {
            return WEFT_ERR_INVALID_ARG; /* a trailing comma */
        }
    }
    f->cma_refuse = tmp.cma_refuse;
    f->ring_refuse = tmp.ring_refuse;
    f->snap_share_fail = tmp.snap_share_fail;
    return WEFT_OK;
}
