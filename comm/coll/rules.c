/*
 * The rule table of the collectives over messages: which algorithm each takes, by size
 * and by how the group lies on its hosts, with the settings' values in effect. The
 * setups of allreduce.c, allgather.c, bcast.c, alltoall.c, hier.c and hier_sliced.c
 * decide; this prints what they decide, computing the latency limits with the same
 * function (weft__coll_small_limit). docs/perf.md has the sweeps behind the defaults.
 */
#include <stdio.h>

#include "comm/coll/coll.h"

/* @p bytes in K or M when exact, for the table. */
static const char *human(size_t bytes, char *buf, size_t len)
{
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) {
        snprintf(buf, len, "%zuM", bytes >> 20);
    } else if (bytes >= 1024 && bytes % 1024 == 0) {
        snprintf(buf, len, "%zuK", bytes >> 10);
    } else {
        snprintf(buf, len, "%zu", bytes);
    }
    return buf;
}

/* The latency limit from @p base for a few group sizes. */
static void limits(FILE *out, const char *what, const char *name, size_t base)
{
    static const int sizes[] = {2, 4, 8, 16, 64};
    char b[32];
    fprintf(out, "      %s (%s=%s): P=", what, name, human(base, b, sizeof(b)));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t limit = weft__coll_small_limit(base, sizes[i]);
        fprintf(out, "%s%d: %s", i > 0 ? ", " : "", sizes[i],
                limit > WEFT_COLL_HDR_SIZE ? human(limit - WEFT_COLL_HDR_SIZE, b, sizeof(b)) : "0");
    }
    fputc('\n', out);
}

void weft__coll_rules_print(FILE *out, const weft_config_t *cfg)
{
    char b1[32], b2[32], b3[32], b4[32];
    fprintf(out, "Collective algorithms (the settings in effect; every rank of a group decides "
                 "alike)\n\n");
    fprintf(out, "Groups whose ranks share one host, WEFT_COLL_SHM=%s: %s\n\n",
            cfg->coll_shm ? "on" : "off",
            cfg->coll_shm ? "every collective through the group's shared-memory segment"
                          : "over messages, as below");
    fprintf(out, "Over messages (groups over several hosts, or on one host without the "
                 "segment;\nP ranks, L = log2 of the largest power of two <= P):\n");
    fprintf(out, "  latency path, every collective but alltoall, while the message (allreduce, "
                 "reduce:\n  the vector; reduce_scatter, allgather: every rank's blocks; "
                 "broadcast: the buffer)\n  fits the limit, base x (2(P-1) - L) / L minus "
                 "its header:\n");
    limits(out, "one host ", "WEFT_COLL_SMALL_MAX", cfg->coll_small_max);
    limits(out, "hosts    ", "WEFT_COLL_NET_SMALL_MAX", cfg->coll_net_small_max);
    fprintf(out, "      recursive doubling with the data in the messages: log2(P) steps "
                 "(+2 when P is no power of two)\n");
    fprintf(out, "  allreduce over several hosts, past the latency path:\n");
    fprintf(out,
            "    up to WEFT_COLL_HIER_MAX=%s, some host with >= 2 ranks: each host's ranks "
            "send to its\n      leader, ring among the leaders, result sent back "
            "(decision 0026)\n",
            human(cfg->coll_hier_max, b1, sizeof(b1)));
    if (cfg->coll_hier_segment > 0) {
        fprintf(out,
                "    larger, every host with the same L >= 2 ranks: sliced (decision 0029): "
                "reduce-scatter\n      within the host, L rings across hosts at once (L "
                "connections per host pair),\n      allgather within the host; segments of "
                "WEFT_COLL_HIER_SEGMENT=%s, %d in flight\n",
                human(cfg->coll_hier_segment, b2, sizeof(b2)), WEFT_SLICED_DEPTH);
    } else {
        fprintf(out, "    larger: the ring (WEFT_COLL_HIER_SEGMENT=0 turns slicing off)\n");
    }
    fprintf(out,
            "  otherwise allreduce, reduce, reduce_scatter, allgather: a pipelined ring, "
            "2(P-1) steps\n    (P-1 for one of reduce-scatter and allgather); broadcast: a "
            "pipelined chain,\n    over several hosts one that crosses each host boundary "
            "once, and up to\n    WEFT_COLL_HIER_MAX a tree: host entries linked across "
            "hosts, each host's ranks\n    behind its entry\n    chunks: over several hosts "
            "WEFT_COLL_NET_CHUNK=%s; on one "
            "host WEFT_COLL_CHUNK=%s,\n    or %s (eager copies) while a block is at most 32 "
            "of them per message of a chunk\n",
            human(cfg->coll_net_chunk, b3, sizeof(b3)), human(cfg->coll_chunk, b4, sizeof(b4)),
            human(WEFT_RING_EAGER_CHUNK, b1, sizeof(b1)));
    fprintf(out, "  allgather over several hosts with the same L >= 2 ranks each, past the "
                 "latency path:\n    each rank's block to its local index on every other "
                 "host, then each rank\n    forwards those blocks within its host\n");
    fprintf(out, "  alltoall, alltoallv: every pair exchanges its blocks directly, in the order "
                 "r+1, r+2, ...\n");
}
