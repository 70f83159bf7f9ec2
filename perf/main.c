#include <getopt.h>
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
    {"migrate", perf_migrate_main,
     "parameter migration vs allgather-then-slice and save-and-reload (--overlap, --dry-run)"},
    {"snapshot", perf_snapshot_main,
     "in-memory snapshots: training-step overhead, and time to recover vs a file restart"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: weft-perf SUBCOMMAND [options]   (run under weftrun)\n"
                 "       weft-perf --help | --version\n\nsubcommands:\n");
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
        fprintf(out, "  %-16s %s\n", subcommands[i].name, subcommands[i].summary);
    }
    fprintf(out, "\n'weft-perf SUBCOMMAND --help' lists its options.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    perf_keep_token(); /* before any weft_init takes it out of the environment */
    int c;
    opterr = 0;
    /* '+': options end at the subcommand, whose own options are its to parse. */
    while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(stdout);
            return PERF_EXIT_OK;
        case 'V':
            perf_print_version(stdout);
            return PERF_EXIT_OK;
        default:
            perf_opt_error(NULL, c, argc, argv, opts);
            return PERF_EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return PERF_EXIT_USAGE;
    }
    const char *name = argv[optind];
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
        if (strcmp(name, subcommands[i].name) == 0) {
            return subcommands[i].main(argc - optind, argv + optind);
        }
    }
    perf_usage_error(NULL, "unknown subcommand '%s'", name);
    return PERF_EXIT_USAGE;
}
