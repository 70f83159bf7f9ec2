/*
 * weftrun's command line: the usage text, parsing and checking the options into a
 * weftrun_opts_t.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/tag.h"
#include "launcher/weftrun.h"
#include "util/parse.h"
#include "weft/core.h"
#define WEFTRUN_MAX_RANKS 65536
/* Member ids from here up are handed out by the store to processes that join without a
 * launcher (comm/ctx.c): the ids of replacements must stay below. */
#define WEFTRUN_MAX_MEMBER_IDS ((int)(WEFT_TAG_MAX_MEMBERS / 2))
_Static_assert(WEFT_TAG_MAX_MEMBERS / 2 == 32768, "the --max-restarts messages say 32768");
#define WEFTRUN_MAX_SECONDS 31536000.0 /* a year: longer is surely a typo */

static const char usage_text[] =
    "Usage: weftrun -n N [options] [--] program [args...]\n"
    "       weftrun -n N --elastic [--replace] [--min M] [--max-restarts K] [options]\n"
    "               [--] program [args...]\n"
    "       weftrun --store-only [--bind ADDR] [--port PORT] [--timeout SECONDS]\n"
    "\n"
    "Start N local ranks of a weft job, host the job's rendezvous store and supervise\n"
    "the ranks: when one exits abnormally the others are stopped (or, with --elastic,\n"
    "repair their groups and go on).\n"
    "\n"
    "Options:\n"
    "  -n, --np N          number of ranks to start (required unless --store-only)\n"
    "      --tag-output    prefix every line of each rank's stdout and stderr with\n"
    "                      '[rank N] ' (otherwise the ranks write to weftrun's\n"
    "                      stdout and stderr directly)\n"
    "      --keep-going    when a rank exits abnormally, let the others run on; exit\n"
    "                      with the status of the first failure once all have exited\n"
    "      --elastic       a rank that exits abnormally is a tolerated death: the\n"
    "                      others keep running (they repair their groups in place)\n"
    "                      and it does not fail the job; see 'Elastic mode' below.\n"
    "                      Includes --keep-going\n"
    "      --replace       with --elastic: start a new process for each death, to\n"
    "                      join the job as a new member (WEFT_JOIN=1, a new id)\n"
    "      --min M         with --elastic: stop the job when a death leaves fewer\n"
    "                      than M processes running, replacements included\n"
    "                      (default 1)\n"
    "      --max-restarts K\n"
    "                      with --elastic: start at most K replacements in the whole\n"
    "                      job (default 16); later deaths are not replaced\n"
    "      --grace SECONDS time between SIGTERM and SIGKILL when ranks are stopped\n"
    "                      (default 3; fractions allowed)\n"
    "      --timeout SECONDS\n"
    "                      stop all ranks after this long and exit 124 (default: none)\n"
    "      --bind ADDR     address the store listens on (default 127.0.0.1); use this\n"
    "                      host's address or 0.0.0.0 when ranks on other hosts join\n"
    "      --port PORT     port of the store (default 0: any free port)\n"
    "      --store-only    start no ranks: print WEFT_STORE=host:port and\n"
    "                      WEFT_JOB_TOKEN=token lines (for `export`) and serve the\n"
    "                      store until SIGINT or SIGTERM (or --timeout); for jobs\n"
    "                      started by mpirun or srun. With a wildcard --bind the\n"
    "                      printed host is this host's name\n"
    "  -v, --verbose       say more (repeat for debug output)\n"
    "  -h, --help          print this help and exit\n"
    "  -V, --version       print the version and exit\n"
    "\n"
    "Each rank gets these environment variables:\n"
    "  WEFT_RANK           its rank, 0 .. N-1\n"
    "  WEFT_WORLD_SIZE     N\n"
    "  WEFT_LOCAL_RANK     its rank among the ranks of this host (= WEFT_RANK here)\n"
    "  WEFT_LOCAL_SIZE     ranks on this host (= N here)\n"
    "  WEFT_STORE          host:port of the rendezvous store\n"
    "  WEFT_JOB_TOKEN      the secret the store asks its clients to prove they hold\n"
    "  WEFT_JOIN           1 for a replacement (--elastic --replace), unset otherwise\n"
    "  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE\n"
    "                      the values of WEFT_RANK, WEFT_WORLD_SIZE, WEFT_LOCAL_RANK and\n"
    "                      WEFT_LOCAL_SIZE under torchrun's names (for PyTorch scripts)\n"
    "Rank 0 reads weftrun's stdin when it is not a terminal; the others read /dev/null.\n"
    "Each rank runs in a process group of its own; signals go to the whole group, and\n"
    "when the job is stopped what is left in those groups is killed too. Descriptors\n"
    "other than 0, 1 and 2 are not passed on to the ranks.\n"
    "\n"
    "When a rank exits with a non-zero status or is killed by a signal, weftrun first\n"
    "sets the store key weft/failed/<rank> to \"exit <code>\" or \"signal <number>\"\n"
    "(ranks watch that prefix), then, unless --keep-going, sends SIGTERM to the other\n"
    "ranks, SIGKILL after the grace period, and exits with the rank's exit code, or\n"
    "128 + the signal number.\n"
    "SIGINT, SIGTERM and SIGHUP sent to weftrun are forwarded to the ranks (a second\n"
    "one sends SIGKILL at once); weftrun then exits with 128 + the signal number.\n"
    "\n"
    "Elastic mode (--elastic): a rank's number is its member id, never reused. When\n"
    "a process dies (non-zero exit or signal), weftrun sets weft/failed/<id> as above\n"
    "and lets the others run. With --replace it starts the same command again with\n"
    "WEFT_JOIN=1 and WEFT_RANK set to the next unused id (N, N+1, ... in the order\n"
    "of the replacements), WEFT_WORLD_SIZE still N and the WEFT_LOCAL_RANK of the\n"
    "process it replaces; the program calls weft_group_join(), and the members admit\n"
    "it with weft_group_grow() or weft_group_repair(). A replacement that dies is\n"
    "published under its own id and may be replaced in turn, up to --max-restarts in\n"
    "all. When a death leaves fewer than --min processes running, the job is stopped\n"
    "as above and weftrun exits with that death's status. Once a process has exited\n"
    "0 the job is finishing: a death after that is not replaced and fails the job,\n"
    "unless a member had reported that rank failed (weft/failed/<id>) before.\n"
    "A rank that stops renewing its liveness lease (hung or stopped for longer than\n"
    "WEFT_FAILURE_TIMEOUT_MS) is declared failed by the store, and weftrun kills it:\n"
    "it is no member any more. Its end is then handled as a death, except that it\n"
    "does not fail the job when it was declared failed before the job began to finish.\n"
    "When the program cannot be run at all (exec failed), the job is stopped.\n"
    "--tag-output prefixes are '[rank <id>] ', replacements included.\n"
    "\n"
    "Shared memory: ranks on one host share segments named /dev/shm/weft-<job>-*.\n"
    "When the job ends, however it ends, weftrun removes what is left of its job's; with\n"
    "--store-only only when no process of the job on this host still holds the job's\n"
    "lock (/dev/shm/weft-<job>.lock). At start, weftrun removes what jobs that no\n"
    "longer run on this host left there.\n"
    "\n"
    "Exit status: 0 when every rank exited 0; the failing rank's status; 124 on\n"
    "--timeout; 127 when the program cannot be run; 2 for bad usage; 1 when weftrun\n"
    "itself failed. With --elastic: 0 when every process still a member at the end\n"
    "exited 0 (tolerated deaths do not fail the job); otherwise the first non-zero\n"
    "status among those (a death while finishing), or the status of the death that\n"
    "left fewer than --min running.\n";

enum long_only_opt {
    OPT_TAG_OUTPUT = 256,
    OPT_KEEP_GOING,
    OPT_GRACE,
    OPT_TIMEOUT,
    OPT_BIND,
    OPT_PORT,
    OPT_STORE_ONLY,
    OPT_ELASTIC,
    OPT_REPLACE,
    OPT_MIN,
    OPT_MAX_RESTARTS,
};

static const struct option long_opts[] = {
    {"np", required_argument, NULL, 'n'},
    {"tag-output", no_argument, NULL, OPT_TAG_OUTPUT},
    {"keep-going", no_argument, NULL, OPT_KEEP_GOING},
    {"grace", required_argument, NULL, OPT_GRACE},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"bind", required_argument, NULL, OPT_BIND},
    {"port", required_argument, NULL, OPT_PORT},
    {"store-only", no_argument, NULL, OPT_STORE_ONLY},
    {"elastic", no_argument, NULL, OPT_ELASTIC},
    {"replace", no_argument, NULL, OPT_REPLACE},
    {"min", required_argument, NULL, OPT_MIN},
    {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

static void usage_error(const char *fmt, const char *arg)
{
    fputs("weftrun: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nTry 'weftrun --help' for more information.\n", stderr);
}

/* A whole decimal number in [min, max] (util/parse.h). */
static bool parse_int(const char *s, int min, int max, int *out)
{
    int64_t v;
    if (!weft__parse_i64(s, min, max, &v)) {
        return false;
    }
    *out = (int)v;
    return true;
}

/* Non-negative seconds, fractions allowed, to milliseconds rounded up. */
static bool parse_seconds(const char *s, uint64_t *ms)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0.0 ||
        v > WEFTRUN_MAX_SECONDS) {
        return false;
    }
    *ms = (uint64_t)ceil(v * 1000.0);
    return true;
}

/*
 * The elastic options against the rest; @p min_given / @p restarts_given: whether --min
 * and --max-restarts were on the command line. Returns -1 when fine, else the exit code.
 */
static int check_elastic_opts(const weftrun_opts_t *o, bool min_given, bool restarts_given)
{
    if (!o->elastic) {
        if (o->replace || min_given || restarts_given) {
            usage_error("--replace, --min and --max-restarts need --elastic%s", "");
            return WEFTRUN_EXIT_USAGE;
        }
        return -1;
    }
    if (o->store_only) {
        usage_error("--elastic supervises ranks; --store-only starts none%s", "");
        return WEFTRUN_EXIT_USAGE;
    }
    if (o->nranks > 0 && o->min_alive > o->nranks) {
        usage_error("--min cannot be more than -n: only -n processes run at a time%s", "");
        return WEFTRUN_EXIT_USAGE;
    }
    if (o->replace && o->nranks + o->max_restarts > WEFTRUN_MAX_MEMBER_IDS) {
        char max[16];
        snprintf(max, sizeof(max), "%d", WEFTRUN_MAX_MEMBER_IDS);
        usage_error("-n plus --max-restarts must not exceed %s: replacements take new member "
                    "ids, and ids above that are the library's own",
                    max);
        return WEFTRUN_EXIT_USAGE;
    }
    return -1;
}

int weftrun_parse_args(int argc, char **argv, weftrun_opts_t *o)
{
    *o = (weftrun_opts_t){
        .grace_ms = WEFTRUN_DEFAULT_GRACE_MS,
        .bind_addr = WEFTRUN_DEFAULT_BIND,
        .min_alive = 1,
        .max_restarts = WEFTRUN_DEFAULT_MAX_RESTARTS,
    };
    bool min_given = false, restarts_given = false;
    opterr = 0;
    /* '+': options end at the program's name, so its own options are left alone. */
    int c, rc;
    while ((c = getopt_long(argc, argv, "+:n:vhV", long_opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!parse_int(optarg, 1, WEFTRUN_MAX_RANKS, &o->nranks)) {
                usage_error("-n needs a number of ranks from 1 to 65536, not '%s'", optarg);
                return WEFTRUN_EXIT_USAGE;
            }
            break;
        case OPT_TAG_OUTPUT:
            o->tag_output = true;
            break;
        case OPT_KEEP_GOING:
            o->keep_going = true;
            break;
        case OPT_STORE_ONLY:
            o->store_only = true;
            break;
        case OPT_ELASTIC:
            o->elastic = true;
            break;
        case OPT_REPLACE:
            o->replace = true;
            break;
        case OPT_MIN:
            if (!parse_int(optarg, 1, WEFTRUN_MAX_RANKS, &o->min_alive)) {
                usage_error("--min needs a number of processes from 1 to 65536, not '%s'", optarg);
                return WEFTRUN_EXIT_USAGE;
            }
            min_given = true;
            break;
        case OPT_MAX_RESTARTS:
            if (!parse_int(optarg, 0, WEFTRUN_MAX_MEMBER_IDS, &o->max_restarts)) {
                usage_error("--max-restarts needs a number from 0 to 32768, not '%s'", optarg);
                return WEFTRUN_EXIT_USAGE;
            }
            restarts_given = true;
            break;
        case OPT_GRACE:
            if (!parse_seconds(optarg, &o->grace_ms)) {
                usage_error("--grace needs a number of seconds >= 0, not '%s'", optarg);
                return WEFTRUN_EXIT_USAGE;
            }
            break;
        case OPT_TIMEOUT:
            if (!parse_seconds(optarg, &o->timeout_ms) || o->timeout_ms == 0) {
                usage_error("--timeout needs a number of seconds > 0, not '%s'", optarg);
                return WEFTRUN_EXIT_USAGE;
            }
            break;
        case OPT_BIND:
            if (optarg[0] == '\0') {
                usage_error("--bind needs an address%s", "");
                return WEFTRUN_EXIT_USAGE;
            }
            o->bind_addr = optarg;
            break;
        case OPT_PORT:
            if (!parse_int(optarg, 0, 65535, &o->port)) {
                usage_error("--port needs a port number from 0 to 65535, not '%s'", optarg);
                return WEFTRUN_EXIT_USAGE;
            }
            break;
        case 'v':
            o->verbose++;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case 'V':
            printf("weft %s\n", weft_version(NULL, NULL, NULL));
            return 0;
        case ':':
            if (optopt > 0 && optopt < 256) {
                char opt[3] = {'-', (char)optopt, '\0'};
                usage_error("option '%s' needs a value", opt);
            } else {
                usage_error("option '%s' needs a value", argv[optind - 1]);
            }
            return WEFTRUN_EXIT_USAGE;
        default:
            if (optopt > 0 && optopt < 256) {
                char opt[3] = {'-', (char)optopt, '\0'};
                usage_error("unknown option '%s'", opt);
            } else {
                usage_error("unknown option '%s'", argv[optind - 1]);
            }
            return WEFTRUN_EXIT_USAGE;
        }
    }
    o->argv = argv + optind;
    rc = check_elastic_opts(o, min_given, restarts_given);
    if (rc >= 0) {
        return rc;
    }
    if (o->store_only) {
        if (o->argv[0] != NULL || o->nranks != 0) {
            usage_error("--store-only starts no ranks: give no -n and no program%s", "");
            return WEFTRUN_EXIT_USAGE;
        }
        return -1;
    }
    if (o->nranks == 0) {
        usage_error("-n N is required%s", "");
        return WEFTRUN_EXIT_USAGE;
    }
    if (o->argv[0] == NULL) {
        usage_error("no program to run%s", "");
        return WEFTRUN_EXIT_USAGE;
    }
    return -1;
}
