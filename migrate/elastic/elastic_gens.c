/* Which generation of snapshots the members restore from (weft_elastic_choose_gen). */
#include <stdlib.h>

#include "comm/core.h"
#include "util/sized.h"
#include "weft/coll.h"
#include "weft/elastic.h"

/* A member's report: (id, committed) for each generation it holds, WEFT_GEN_NONE past
 * the last; a first id of GEN_REFUSED says that member's arguments were refused. */
#define REPORT_INTS (2 * WEFT_ELASTIC_MAX_GENS)
#define GEN_REFUSED (WEFT_GEN_NONE + 1)

static bool gens_valid(const weft_snapshot_gen_t *gens, int n)
{
    if (n < 0 || n > WEFT_ELASTIC_MAX_GENS || (gens == NULL && n > 0)) {
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (gens[i].id < WEFT_GEN_START ||
            (gens[i].snap == NULL) != (gens[i].id == WEFT_GEN_START)) {
            return false;
        }
        for (int j = 0; j < i; j++) {
            if (gens[j].id == gens[i].id) {
                return false;
            }
        }
    }
    return true;
}

static bool gen_committed(const weft_snapshot_gen_t *x)
{
    uint64_t step;
    return x->snap == NULL || weft_snapshot_committed(x->snap, &step) == WEFT_OK;
}

static void make_report(const weft_snapshot_gen_t *gens, int n, bool refused, int32_t *rep)
{
    for (int i = 0; i < WEFT_ELASTIC_MAX_GENS; i++) {
        rep[2 * i] = i < n && !refused ? gens[i].id : WEFT_GEN_NONE;
        rep[2 * i + 1] = i < n && !refused && gen_committed(&gens[i]);
    }
    if (refused) {
        rep[0] = GEN_REFUSED;
    }
}

/* Whether member report @p r holds @p id, and committed (1) or not (0); -1: not held. */
static int holds(const int32_t *r, int32_t id)
{
    for (int i = 0; i < WEFT_ELASTIC_MAX_GENS; i++) {
        if (r[2 * i] == id) {
            return r[2 * i + 1] != 0;
        }
    }
    return -1;
}

/* The newest id that some member holds committed and none uncommitted. */
static int32_t choose(const int32_t *reports, int size)
{
    int32_t best = WEFT_GEN_NONE;
    for (int m = 0; m < size; m++) {
        const int32_t *r = reports + (size_t)m * REPORT_INTS;
        for (int i = 0; i < WEFT_ELASTIC_MAX_GENS; i++) {
            int32_t id = r[2 * i];
            if (id == WEFT_GEN_NONE || !r[2 * i + 1] || id <= best) {
                continue;
            }
            bool uncommitted = false;
            for (int k = 0; k < size && !uncommitted; k++) {
                uncommitted = holds(reports + (size_t)k * REPORT_INTS, id) == 0;
            }
            best = uncommitted ? best : id;
        }
    }
    return best;
}

static weft_gen_choice_t describe(const int32_t *reports, int size, int rank,
                                  const weft_snapshot_gen_t *gens, int n)
{
    weft_gen_choice_t c = {.size = sizeof(c), .id = choose(reports, size), .index = -1, .root = -1};
    if (c.id == WEFT_GEN_NONE) {
        return c;
    }
    for (int m = size - 1; m >= 0; m--) {
        if (holds(reports + (size_t)m * REPORT_INTS, c.id) == 1) {
            c.root = m;
            c.holders++;
        }
    }
    for (int i = 0; i < n; i++) {
        if (gens[i].id == c.id && holds(reports + (size_t)rank * REPORT_INTS, c.id) == 1) {
            c.index = i;
        }
    }
    return c;
}

static int first_refused(const int32_t *reports, int size)
{
    for (int m = 0; m < size; m++) {
        if (reports[(size_t)m * REPORT_INTS] == GEN_REFUSED) {
            return m;
        }
    }
    return -1;
}

weft_status_t weft_elastic_choose_gen(weft_group_t *g, const weft_snapshot_gen_t *gens, int n,
                                      weft_gen_choice_t *choice)
{
    WEFT_API_LOCK(g != NULL ? weft__group_ctx(g) : NULL);
    if (g == NULL) {
        return weft__error_noctx(WEFT_ERR_INVALID_ARG, "weft_elastic_choose_gen: NULL group");
    }
    int size, rank;
    weft_status_t st = weft_group_size(g, &size);
    if (st == WEFT_OK) {
        st = weft_group_rank(g, &rank);
    }
    if (st != WEFT_OK) {
        return st;
    }
    bool refused = choice == NULL || choice->size < WEFT__SIZED_MIN(weft_gen_choice_t, holders) ||
                   !gens_valid(gens, n);
    int32_t mine[REPORT_INTS];
    int32_t *reports = malloc((size_t)size * sizeof(mine));
    if (reports == NULL) {
        return weft__error(weft__group_ctx(g), WEFT_ERR_NO_MEMORY,
                           "weft_elastic_choose_gen: out of memory");
    }
    make_report(gens, n, refused, mine);
    st = weft_allgather(g, mine, reports, REPORT_INTS, WEFT_I32);
    int bad = st == WEFT_OK ? first_refused(reports, size) : -1;
    if (bad >= 0) {
        st = weft__error(weft__group_ctx(g), WEFT_ERR_INVALID_ARG,
                         "weft_elastic_choose_gen: group rank %d passed a bad choice (NULL, or "
                         "size not sizeof(weft_gen_choice_t)) or bad generations (n outside "
                         "0..%d, an id below WEFT_GEN_START or twice, a NULL snapshot for an "
                         "id other than WEFT_GEN_START)",
                         bad, WEFT_ELASTIC_MAX_GENS);
    }
    if (st == WEFT_OK) {
        weft_gen_choice_t c = describe(reports, size, rank, gens, n);
        weft__sized_copy(choice, &c, sizeof(c));
    }
    free(reports);
    return st;
}
