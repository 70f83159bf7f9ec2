#include <stdio.h>
#include <string.h>

#include "perf.h"

static const perf_subcommand_t subcommands[] = {
    {"sendrecv", perf_sendrecv_main, "point-to-point latency and bandwidth between ranks 0 and 1"},
    {"group", perf_group_main,
     "cost of losing a rank (detect, repair vs full rebuild) and of admitting one (grow)"},
    {"vocab", perf_vocab_main, "vocabulary-parallel output layer: naive vs Alg.1 vs Alg.2"},
    {"allreduce", perf_allreduce_main, "allreduce bandwidth and latency (nccl-tests style)"},
    {"reduce_scatter", perf_reduce_scatter_main, "reduce-scatter bandwidth and latency"},
    {"allgather", perf_allgather_main, "allgather bandwidth and latency"},
    {"broadcast", perf_broadcast_main, "broadcast bandwidth and latency (-r root)"},
    {"alltoall", perf_alltoall_main, "alltoall bandwidth and latency"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: weft-perf SUBCOMMAND [options]   (run under weftrun)\n\nsubcommands:\n");
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
        fprintf(out, "  %-16s %s\n", subcommands[i].name, subcommands[i].summary);
    }
    fprintf(out, "\n'weft-perf SUBCOMMAND --help' lists its options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
        if (strcmp(argv[1], subcommands[i].name) == 0) {
            return subcommands[i].main(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "weft-perf: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
