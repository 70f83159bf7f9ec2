/*
 * The close of a migration: every member's worst stream status goes to group rank 0,
 * which sends the minimum back, so every member returns the same result.
 */
#include <stdlib.h>

#include "comm/coll/start.h"
#include "migrate/engine/engine_impl.h"

/*
 * The close: every member's worst stream status goes to group rank 0, which sends the
 * minimum back. Messages, not a collective: the close starts whenever this member's
 * streams end, which is not the same point of the group's collective sequence on every
 * member, while messages are matched by the migration's own tags.
 */
weft_status_t weft__mig_start_close(mig_t *m)
{
    weft_status_t worst = m->local_err ? WEFT_ERR_TRANSPORT : m->before_err;
    for (int i = 0; i < m->nstreams; i++) {
        if (m->streams[i].err != WEFT_OK) {
            worst = m->streams[i].err;
        }
    }
    m->close_in = (int32_t)worst;
    m->close_out = m->close_in;
    m->stage = STAGE_CLOSE;
    int p = weft__group_size(m->g);
    m->close_reqs = calloc((size_t)p, sizeof(*m->close_reqs));
    m->close_vals = calloc((size_t)p, sizeof(*m->close_vals));
    if (m->close_reqs == NULL || m->close_vals == NULL) {
        return weft__error(weft__group_ctx(m->g), WEFT_ERR_NO_MEMORY,
                           "weft_migrate: out of memory");
    }
    uint32_t up = payload(m, 0, true, WEFT_MIG_CLOSE), down = payload(m, 1, true, WEFT_MIG_CLOSE);
    weft_status_t st = WEFT_OK;
    if (weft__group_rank(m->g) == 0) {
        m->close_vals[0] = m->close_in;
        for (int r = 1; r < p && (st == WEFT_OK || st == WEFT_INPROGRESS); r++) {
            st = weft__irecv(m->g, r, &m->close_vals[r], sizeof(int32_t), WEFT_TAG_MIGRATE, up,
                             &m->close_reqs[r]);
        }
    } else {
        st = weft__isend(m->g, 0, &m->close_in, sizeof(int32_t), WEFT_TAG_MIGRATE, up,
                         &m->close_reqs[0]);
        if (st == WEFT_OK || st == WEFT_INPROGRESS) {
            st = weft__irecv(m->g, 0, &m->close_out, sizeof(int32_t), WEFT_TAG_MIGRATE, down,
                             &m->close_reqs[1]);
        }
    }
    return st == WEFT_INPROGRESS ? WEFT_OK : st;
}

/* WEFT_OK once every message of the close is done. */
weft_status_t weft__mig_close_progress(mig_t *m)
{
    int p = weft__group_size(m->g);
    for (int r = 0; r < p; r++) {
        weft_status_t st = weft__coll_child_test(&m->close_reqs[r], NULL);
        if (st != WEFT_OK) {
            return st;
        }
    }
    if (weft__group_rank(m->g) != 0 || m->close_bcast) {
        return WEFT_OK;
    }
    for (int r = 1; r < p; r++) {
        if (m->close_vals[r] < m->close_out) {
            m->close_out = m->close_vals[r];
        }
    }
    m->close_bcast = true;
    uint32_t down = payload(m, 1, true, WEFT_MIG_CLOSE);
    for (int r = 1; r < p; r++) {
        weft_status_t st = weft__isend(m->g, r, &m->close_out, sizeof(int32_t), WEFT_TAG_MIGRATE,
                                       down, &m->close_reqs[r]);
        if (st != WEFT_OK && st != WEFT_INPROGRESS) {
            return st;
        }
    }
    return weft__mig_close_progress(m);
}
