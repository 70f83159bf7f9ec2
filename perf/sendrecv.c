#include <stdio.h>

#include "perf.h"

int perf_sendrecv_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "weft-perf sendrecv: not implemented yet\n");
    return 2;
}
