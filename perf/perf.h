/* weft-perf: subcommands share option parsing, timing and nccl-tests-style output. */
#ifndef WEFT_PERF_H
#define WEFT_PERF_H

typedef int (*perf_main_fn)(int argc, char **argv);

typedef struct perf_subcommand {
    const char *name;
    perf_main_fn main;
    const char *summary;
} perf_subcommand_t;

int perf_sendrecv_main(int argc, char **argv);

#endif
