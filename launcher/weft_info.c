/*
 * weft-info: what this weft was built with, what it can use here, its settings, and
 * the topology it sees with the transport it would choose for each kind of peer and
 * buffer, and why. The report is weft_info_print() (include/weft/info.h); this file
 * reads the options.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft/weft.h"

static void usage(FILE *f)
{
    fprintf(f, "Usage: weft-info [OPTION]...\n"
               "Show how weft was built and what it can use on this machine.\n"
               "\n"
               "  (no option)       version, transports built and usable, CUDA, cuBLAS and NCCL\n"
               "      --config      every WEFT_* setting: value in effect, default, meaning\n"
               "      --topology    GPUs, NICs, NUMA nodes and links of this host, and the\n"
               "                    transport chosen for each kind of peer and buffer, and why\n"
               "      --xml FILE    with --topology: read this hwloc XML file instead of the\n"
               "                    host (default: the WEFT_TOPO_XML setting)\n"
               "      --peer-xml FILE  with --topology: the other host is this XML file\n"
               "                    (default: a host like this one)\n"
               "      --gpu N       with --topology: this process drives GPU N of the list\n"
               "      --algorithms  the collectives' rule table: the algorithm each takes by\n"
               "                    size and by how the group lies on its hosts\n"
               "      --version     the version only\n"
               "  -h, --help        this text\n");
}

/* Fill @p o from the command line. Returns -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, weft_info_params_t *o)
{
    enum { OPT_VERSION = 256, OPT_CONFIG, OPT_TOPOLOGY, OPT_XML, OPT_PEER_XML, OPT_GPU, OPT_ALGOS };
    static const struct option longopts[] = {
        {"version", no_argument, NULL, OPT_VERSION},
        {"config", no_argument, NULL, OPT_CONFIG},
        {"topology", no_argument, NULL, OPT_TOPOLOGY},
        {"algorithms", no_argument, NULL, OPT_ALGOS},
        {"xml", required_argument, NULL, OPT_XML},
        {"peer-xml", required_argument, NULL, OPT_PEER_XML},
        {"gpu", required_argument, NULL, OPT_GPU},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_VERSION:
            printf("weft %s\n", weft_version(NULL, NULL, NULL));
            return 0;
        case OPT_CONFIG:
            o->flags |= WEFT_INFO_CONFIG;
            break;
        case OPT_TOPOLOGY:
            o->flags |= WEFT_INFO_TOPOLOGY;
            break;
        case OPT_ALGOS:
            o->flags |= WEFT_INFO_ALGORITHMS;
            break;
        case OPT_XML:
            o->topo_xml = optarg;
            break;
        case OPT_PEER_XML:
            o->peer_xml = optarg;
            break;
        case OPT_GPU:
            o->gpu = (int)strtol(optarg, &end, 10);
            o->flags |= WEFT_INFO_TOPOLOGY_GPU;
            if (*optarg == '\0' || *end != '\0' || o->gpu < 0) {
                fprintf(stderr, "weft-info: --gpu needs a GPU index, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-info: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if ((o->topo_xml != NULL || o->peer_xml != NULL || (o->flags & WEFT_INFO_TOPOLOGY_GPU)) &&
        !(o->flags & WEFT_INFO_TOPOLOGY)) {
        fprintf(stderr, "weft-info: --xml, --peer-xml and --gpu go with --topology\n");
        return 2;
    }
    return -1;
}

int main(int argc, char **argv)
{
    /* No option: the summary. --config and --topology print those sections alone. */
    weft_info_params_t o = {.size = sizeof(o)};
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0) {
        return rc;
    }
    weft_status_t status = weft_info_print(stdout, &o);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-info: %s\n", weft_status_str(status));
        return 1;
    }
    return 0;
}
