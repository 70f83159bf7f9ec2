/*
 * weftrun's command line: the usage text, parsing and checking the options into a
 * weftrun_opts_t.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/ctx/tag.h"
#include "launcher/weftrun.h"
#include "util/parse.h"
#include "util/secret_file.h"
#include "weft/core.h"

#define WEFTRUN_MAX_RANKS 65536
#define WEFTRUN_MAX_NODES 4096
_Static_assert(WEFT_TAG_MAX_MEMBERS / 2 == 32768, "the --max-restarts messages say 32768");
_Static_assert(WEFT_EXIT_JOB_FAILED == 86, "the usage text says 86");
#define WEFTRUN_MAX_SECONDS 31536000.0 /* a year: longer is surely a typo */

static const char usage_text[] =
    "Usage: weftrun -n N [options] [--] program [args...]\n"
    "       weftrun -n N --elastic [--replace] [--min M] [--max-restarts K] [options]\n"
    "               [--] program [args...]\n"
    "       weftrun --nnodes N --node-rank R --store HOST:PORT --token-file FILE\n"
    "               -n PER_NODE [options] [--] program [args...]\n"
    "       weftrun --store-only [--bind ADDR] [--port PORT] [--timeout SECONDS]\n"
    "       weftrun --new-token\n"
    "\n"
    "Start N local ranks of a weft job, host the job's rendezvous store and supervise\n"
    "the ranks: when one exits abnormally the others are stopped (or, with --elastic,\n"
    "repair their groups and go on). A job over several nodes runs one weftrun per\n"
    "node; see 'Multi-node jobs' below.\n"
    "\n"
    "Options:\n"
    "  -n, --np N          number of ranks to start on this node (required unless\n"
    "                      --store-only; also -np, --nproc-per-node, --nproc_per_node).\n"
    "                      More than twice the CPUs weftrun may use: a warning\n"
    "      --cpu-bind core|none\n"
    "                      core: pin each rank to one CPU weftrun may use (the\n"
    "                      local rank's), when the node's ranks fit its CPUs; two\n"
    "                      ranks left to the scheduler may share a core for a\n"
    "                      while (default none; weft-perf's collectives pin\n"
    "                      themselves)\n"
    "      --share-token   give each rank the job token (WEFT_JOB_TOKEN), as programs\n"
    "                      that start members themselves or speak to the store as\n"
    "                      other members need; such ranks can act as any member or\n"
    "                      as a launcher. By default each rank, replacements\n"
    "                      included, gets only its own member secret and the job's\n"
    "                      data key through a pipe (WEFT_MEMBER_SECRET_FD)\n"
    "      --member-secrets\n"
    "                      the default; accepted for scripts that name it\n"
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
    "                      WEFT_JOB_TOKEN_FILE=path lines (for `export`; the token is\n"
    "                      in that file, readable by you only: the --token-file, or a\n"
    "                      new one removed when the store stops) and serve the\n"
    "                      store until SIGINT or SIGTERM (or --timeout); for jobs\n"
    "                      started by mpirun or srun. With a wildcard --bind the\n"
    "                      printed host is this host's name\n"
    "      --nnodes N      nodes in the job, each running a weftrun (default 1)\n"
    "      --node-rank R   this node's index, 0 .. N-1 (also --node_rank): its ranks\n"
    "                      are R*PER_NODE .. R*PER_NODE+PER_NODE-1\n"
    "      --store HOST:PORT\n"
    "                      where the job's store is served (also --rdzv-endpoint):\n"
    "                      node 0 serves it there, bound to HOST unless --bind says\n"
    "                      otherwise, and the other nodes connect to it (required\n"
    "                      with --nnodes above 1; the same on every node). With\n"
    "                      --store-only: where to serve it\n"
    "      --token TOKEN   the job token, the same on every node: 32 to 64\n"
    "                      printable characters without spaces (weftrun --new-token\n"
    "                      makes one). Others on the host can read it in ps until\n"
    "                      weftrun hides it: prefer\n"
    "      --token-file FILE\n"
    "                      the job token from the first line of FILE, a file of yours\n"
    "                      that only you can read (mode 0600). Without\n"
    "                      either, WEFT_JOB_TOKEN from the environment when --store is\n"
    "                      given; otherwise weftrun makes one\n"
    "      --external-store\n"
    "                      no node serves the store: it runs apart, under\n"
    "                      weftrun --store-only --store HOST:PORT with the same token,\n"
    "                      or is an etcd cluster: --store etcd://H1:P1,H2:P2,...\n"
    "      --new-token     print a new random token and exit\n"
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
    "  WEFT_MEMBER_SECRET_FD  a pipe with its own member secret and the job's data key\n"
    "  WEFT_JOB_TOKEN      with --share-token only (instead of the pipe): the job's\n"
    "                      secret, with which a rank can act as any member\n"
    "  WEFT_JOIN           1 for a replacement (--elastic --replace), unset otherwise\n"
    "  WEFTRUN_LIBDIR      the lib folder beside weftrun's, where libweft.so is (the\n"
    "                      Python package loads it from there)\n"
    "  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE\n"
    "                      the values of WEFT_RANK, WEFT_WORLD_SIZE, WEFT_LOCAL_RANK and\n"
    "                      WEFT_LOCAL_SIZE under torchrun's names (for PyTorch scripts)\n"
    "Rank 0 reads weftrun's stdin when it is not a terminal; the others read /dev/null.\n"
    "Each rank runs in a process group of its own; signals go to the whole group, and\n"
    "when the job is stopped what is left in those groups is killed too. Descriptors\n"
    "other than 0, 1 and 2 are not passed on to the ranks.\n"
    "\n"
    "When a rank exits with a non-zero status or is killed by a signal, weftrun first\n"
    "sets the store key <ns>/failed/<rank> to \"exit <code>\" or \"signal <number>\"\n"
    "(ns: WEFT_NAMESPACE, default weft; ranks watch that prefix), then, unless --keep-going, sends "
    "SIGTERM to the other\n"
    "ranks, SIGKILL after the grace period, and exits with the rank's exit code, or\n"
    "128 + the signal number.\n"
    "A rank that exits 86 (WEFT_EXIT_JOB_FAILED, weft/core.h; Python: sys.exit(86))\n"
    "says that the job failed, not the rank: its work cannot go on (training state\n"
    "lost, a wrong result). In every mode, --keep-going and --elastic included, weftrun\n"
    "then starts no replacement, stops the job as above (on every node) and exits 86,\n"
    "whatever the other ranks do after (a replacement that finds the job over and\n"
    "exits 0 does not make it a success). Exit with another non-zero status for a\n"
    "failure of the rank alone, which --elastic tolerates and --replace replaces.\n"
    "SIGINT and SIGTERM sent to weftrun are forwarded to the ranks and stop the job (a\n"
    "second one sends SIGKILL at once); weftrun then exits with 128 + the signal\n"
    "number. SIGHUP stops the job alike, but the ranks get SIGTERM (UCX takes SIGHUP\n"
    "as its debug signal). SIGUSR1 and SIGUSR2 (a batch system's warning, e.g. Slurm's\n"
    "--signal before preemption) are forwarded to the running ranks and the job goes\n"
    "on; --store-only ignores them.\n"
    "\n"
    "Elastic mode (--elastic): a rank's number is its member id, never reused. When\n"
    "a process dies (non-zero exit or signal), weftrun sets <ns>/failed/<id> as above\n"
    "and lets the others run. With --replace it starts the same command again with\n"
    "WEFT_JOIN=1 and WEFT_RANK set to the next unused id (N, N+1, ... in the order\n"
    "of the replacements), WEFT_WORLD_SIZE still N and the WEFT_LOCAL_RANK of the\n"
    "process it replaces; the program calls weft_group_join(), and the members admit\n"
    "it with weft_group_grow() or weft_group_repair(). A replacement that dies is\n"
    "published under its own id and may be replaced in turn, up to --max-restarts in\n"
    "all. When a death leaves fewer than --min processes running, the job is stopped\n"
    "as above and weftrun exits with that death's status. Once a process has exited\n"
    "0 the job is finishing: a death after that is not replaced and fails the job,\n"
    "unless a member had reported that rank failed (<ns>/failed/<id>) before.\n"
    "A rank that stops renewing its liveness lease (hung or stopped for longer than\n"
    "WEFT_FAILURE_TIMEOUT_MS) is declared failed by the store, and weftrun kills it:\n"
    "it is no member any more. Its end is then handled as a death, except that it\n"
    "does not fail the job when it was declared failed before the job began to finish.\n"
    "When the program cannot be run at all (exec failed), the job is stopped.\n"
    "--tag-output prefixes are '[rank <id>] ', replacements included.\n"
    "\n"
    "Multi-node jobs: start the same command on every node, with its own --node-rank\n"
    "(by hand, ssh, or a cluster's launcher starting one task per node). Ranks get\n"
    "WEFT_RANK and WEFT_WORLD_SIZE of the whole job (N x PER_NODE), WEFT_LOCAL_RANK\n"
    "and WEFT_LOCAL_SIZE of their node, and WEFT_STORE as given to --store. Every\n"
    "weftrun registers in the store (keys weftrun/...) and holds a lease there: one\n"
    "that dies, or stops answering for WEFT_FAILURE_TIMEOUT_MS, is declared lost; its\n"
    "ranks die with it (or are declared failed by their own leases) and the others\n"
    "learn of each. Nodes other than 0 wait for the store up to\n"
    "WEFT_CONNECT_TIMEOUT_MS, so they may start first. Node 0, once its own ranks have\n"
    "ended, serves the store until every other node's weftrun has ended or is lost.\n"
    "Without --elastic, a rank's failure, a signal, --timeout or a lost node stops\n"
    "the job on every node (exit status as above, the first node's that stopped);\n"
    "with it, a rank's exit 86 does. Node 0, which waits for the others, exits with\n"
    "such a stop's status even when its own ranks had ended 0.\n"
    "With --elastic every node decides for its own ranks: --min, --replace and\n"
    "--max-restarts count this node's processes, a death or a lost node does not\n"
    "stop the other nodes, and replacements take member ids from a counter in the\n"
    "store (N x PER_NODE and up). A node started again with the --node-rank of a lost\n"
    "one (same command, --elastic) starts all its ranks as replacements that join.\n"
    "Hosts: ranks share memory only with ranks of the same host (one kernel, network\n"
    "namespace, PID namespace and /dev/shm); between hosts they use the network.\n"
    "\n"
    "Shared memory: ranks on one host share segments named /dev/shm/weft-<job>-*.\n"
    "When the job ends, however it ends, weftrun removes what is left of its job's; with\n"
    "--store-only only when no process of the job on this host still holds the job's\n"
    "lock (/dev/shm/weft-<job>.lock). At start, weftrun removes what jobs that no\n"
    "longer run on this host left there.\n"
    "\n"
    "Exit status: 0 when every rank exited 0; the failing rank's status; 86 when a\n"
    "rank said the job failed; 124 on --timeout; 127 when the program cannot be run;\n"
    "2 for bad usage, or a WEFT_* setting in the environment that does not parse (the\n"
    "ranks would refuse it: weftrun names it and starts none); 1 when weftrun itself\n"
    "failed. With --elastic: 0 when every process still a member at the end exited 0\n"
    "(tolerated deaths do not fail the job) and none exited 86; otherwise 86, the\n"
    "first non-zero status among those (a death while finishing), or the status of\n"
    "the death that left fewer than --min running.\n";

enum long_only_opt {
    OPT_TAG_OUTPUT = 256,
    OPT_MEMBER_SECRETS,
    OPT_SHARE_TOKEN,
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
    OPT_NNODES,
    OPT_NODE_RANK,
    OPT_STORE,
    OPT_TOKEN,
    OPT_TOKEN_FILE,
    OPT_EXTERNAL_STORE,
    OPT_NEW_TOKEN,
    OPT_CPU_BIND,
};

static const struct option long_opts[] = {
    {"np", required_argument, NULL, 'n'},
    {"nproc-per-node", required_argument, NULL, 'n'},
    {"nproc_per_node", required_argument, NULL, 'n'},
    {"nnodes", required_argument, NULL, OPT_NNODES},
    {"node-rank", required_argument, NULL, OPT_NODE_RANK},
    {"node_rank", required_argument, NULL, OPT_NODE_RANK},
    {"store", required_argument, NULL, OPT_STORE},
    {"rdzv-endpoint", required_argument, NULL, OPT_STORE},
    {"token", required_argument, NULL, OPT_TOKEN},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"external-store", no_argument, NULL, OPT_EXTERNAL_STORE},
    {"new-token", no_argument, NULL, OPT_NEW_TOKEN},
    {"tag-output", no_argument, NULL, OPT_TAG_OUTPUT},
    {"member-secrets", no_argument, NULL, OPT_MEMBER_SECRETS},
    {"share-token", no_argument, NULL, OPT_SHARE_TOKEN},
    {"cpu-bind", required_argument, NULL, OPT_CPU_BIND},
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

__attribute__((format(printf, 1, 2))) static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("weftrun: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\nTry 'weftrun --help' for more information.\n", stderr);
    va_end(ap);
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
    if (o->replace && (int64_t)o->nnodes * (o->nranks + o->max_restarts) > WEFTRUN_MAX_MEMBER_IDS) {
        char max[16];
        snprintf(max, sizeof(max), "%d", WEFTRUN_MAX_MEMBER_IDS);
        usage_error("--nnodes times (-n plus --max-restarts) must not exceed %s: replacements "
                    "take new member ids, and ids above that are the library's own",
                    max);
        return WEFTRUN_EXIT_USAGE;
    }
    return -1;
}

/* A token the user gave: printable, no spaces, long enough to be a secret. */
static bool token_ok(const char *t, const char *from)
{
    size_t n = strlen(t);
    for (size_t i = 0; i < n; i++) {
        if (t[i] <= ' ' || t[i] > '~') {
            usage_error("the token from %s holds a space or an unprintable character", from);
            return false;
        }
    }
    if (n < WEFTRUN_TOKEN_MIN || n > WEFTRUN_TOKEN_MAX) {
        usage_error("the token from %s must have %d to %d characters (weftrun --new-token "
                    "makes one)",
                    from, WEFTRUN_TOKEN_MIN, WEFTRUN_TOKEN_MAX);
        return false;
    }
    return true;
}

/* The first line of @p path into o->token_buf (util/secret_file.h: a file only this user
 * can read). */
static bool read_token_file(const char *path, weftrun_opts_t *o)
{
    char why[512];
    if (!weft__read_secret_file(path, o->token_buf, sizeof(o->token_buf), why, sizeof(why))) {
        usage_error("--token-file: %s", why);
        return false;
    }
    o->token = o->token_buf;
    o->token_file = path;
    return token_ok(o->token, "--token-file");
}

/*
 * --token TOKEN: the command line is readable by every local user (ps, /proc/PID/cmdline).
 * Kept for scripts, but the token is copied and wiped from argv at once, and weftrun says
 * that it was visible until then.
 */
static bool take_token_arg(char *arg, weftrun_opts_t *o)
{
    size_t n = strlen(arg);
    if (n >= sizeof(o->token_buf)) {
        n = sizeof(o->token_buf) - 1;
    }
    memcpy(o->token_buf, arg, n);
    o->token_buf[n] = '\0';
    memset(arg, '*', strlen(arg));
    o->token = o->token_buf;
    fprintf(stderr, "weftrun: warning: --token puts the job token on the command line, where "
                    "every user of this host can read it until weftrun hides it; prefer "
                    "--token-file FILE (mode 0600) or WEFT_JOB_TOKEN\n");
    return token_ok(o->token, "--token");
}

/* The options of multi-node jobs; returns -1 when fine, else the exit code. */
static int parse_node_opt(int c, char *arg, weftrun_opts_t *o)
{
    switch (c) {
    case OPT_NNODES:
        if (!parse_int(arg, 1, WEFTRUN_MAX_NODES, &o->nnodes)) {
            usage_error("--nnodes needs a number of nodes from 1 to 4096, not '%s'", arg);
            return WEFTRUN_EXIT_USAGE;
        }
        return -1;
    case OPT_NODE_RANK:
        if (!parse_int(arg, 0, WEFTRUN_MAX_NODES - 1, &o->node_rank)) {
            usage_error("--node-rank needs a node index from 0 to 4095, not '%s'", arg);
            return WEFTRUN_EXIT_USAGE;
        }
        return -1;
    case OPT_STORE: {
        const char *colon = strrchr(arg, ':');
        int port;
        if (colon == NULL || colon == arg || !parse_int(colon + 1, 1, 65535, &port)) {
            usage_error("--store needs HOST:PORT with a port from 1 to 65535, not '%s'", arg);
            return WEFTRUN_EXIT_USAGE;
        }
        o->store = arg;
        return -1;
    }
    case OPT_TOKEN:
        return take_token_arg(arg, o) ? -1 : WEFTRUN_EXIT_USAGE;
    case OPT_TOKEN_FILE:
        return read_token_file(arg, o) ? -1 : WEFTRUN_EXIT_USAGE;
    case OPT_EXTERNAL_STORE:
        o->external_store = true;
        return -1;
    default: { /* OPT_NEW_TOKEN */
        char token[65];
        if (weft__store_make_token(token) != WEFT_OK) {
            fprintf(stderr, "weftrun: cannot make a token: no entropy source\n");
            return WEFTRUN_EXIT_FAILED;
        }
        printf("%s\n", token);
        return 0;
    }
    }
}

/*
 * The multi-node options against the rest (@p bind_given, @p port_given: --bind and
 * --port were on the command line). Returns -1 when fine, else the exit code.
 */
static int check_node_opts(weftrun_opts_t *o, bool bind_given, bool port_given)
{
    const char *why = NULL;
    bool serves = o->store_only || (o->node_rank == 0 && !o->external_store);
    if (o->node_rank >= o->nnodes) {
        why = "--node-rank must be below --nnodes%s";
    } else if (o->nnodes > 1 && o->store == NULL) {
        why = "a job over several nodes needs --store HOST:PORT, the same on every node%s";
    } else if (o->store_only && (o->nnodes > 1 || o->node_rank > 0 || o->external_store)) {
        why = "--store-only serves the store alone: give it no --nnodes, --node-rank or "
              "--external-store%s";
    } else if (serves && o->store != NULL && strncmp(o->store, "etcd://", 7) == 0) {
        why = "an etcd store is served by etcd, not by weftrun: add --external-store%s";
    } else if (o->external_store && o->store == NULL) {
        why = "--external-store needs --store HOST:PORT%s";
    } else if ((bind_given || port_given) && !serves) {
        why = "--bind and --port are for the weftrun that serves the store%s";
    } else if (port_given && o->store != NULL) {
        why = "--store gives the port already: no --port with it%s";
    }
    if (why != NULL) {
        usage_error(why, "");
        return WEFTRUN_EXIT_USAGE;
    }
    if ((int64_t)o->nnodes * o->nranks > WEFTRUN_MAX_MEMBER_IDS) {
        usage_error("--nnodes times -n must not exceed 32768 ranks%s", "");
        return WEFTRUN_EXIT_USAGE;
    }
    /* The token of ranks on other nodes: one they were given, never a random one. */
    if (o->token == NULL && o->store != NULL) {
        const char *env = getenv("WEFT_JOB_TOKEN");
        if (env != NULL && env[0] != '\0') {
            if (!token_ok(env, "WEFT_JOB_TOKEN")) {
                return WEFTRUN_EXIT_USAGE;
            }
            o->token = env;
        }
    }
    if (o->token == NULL && (o->nnodes > 1 || o->external_store)) {
        usage_error("every node needs the job token: give --token-file FILE, --token TOKEN or "
                    "WEFT_JOB_TOKEN (weftrun --new-token makes one)%s",
                    "");
        return WEFTRUN_EXIT_USAGE;
    }
    if (!bind_given && o->store != NULL && serves) {
        /* Serve where the others are told to connect: HOST of --store, unbracketed. */
        size_t n = (size_t)(strrchr(o->store, ':') - o->store);
        bool br = o->store[0] == '[' && n >= 2 && o->store[n - 1] == ']';
        snprintf(o->bind_buf, sizeof(o->bind_buf), "%.*s", (int)(br ? n - 2 : n),
                 o->store + (br ? 1 : 0));
        o->bind_addr = o->bind_buf;
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
        .nnodes = 1,
        .member_secrets = true,
    };
    bool min_given = false, restarts_given = false, bind_given = false, port_given = false;
    opterr = 0;
    /* '+': options end at the program's name, so its own options are left alone. */
    int c, rc;
    while ((c = getopt_long(argc, argv, "+:n:vhV", long_opts, NULL)) != -1) {
        switch (c) {
        case 'n': {
            const char *val = optarg;
            /* mpirun's "-np N" (or "-npN"): getopt reads "-n" with the value "p". */
            if (val == argv[optind - 1] + 2 && strncmp(argv[optind - 1], "-np", 3) == 0) {
                if (val[1] != '\0') {
                    val++;
                } else if (optind < argc) {
                    val = argv[optind++];
                } else {
                    usage_error("option '%s' needs a value", "-np");
                    return WEFTRUN_EXIT_USAGE;
                }
            }
            if (!parse_int(val, 1, WEFTRUN_MAX_RANKS, &o->nranks)) {
                usage_error("-n needs a number of ranks from 1 to 65536, not '%s'", val);
                return WEFTRUN_EXIT_USAGE;
            }
            break;
        }
        case OPT_TAG_OUTPUT:
            o->tag_output = true;
            break;
        case OPT_MEMBER_SECRETS:
            o->member_secrets = true;
            break;
        case OPT_SHARE_TOKEN:
            o->member_secrets = false;
            break;
        case OPT_CPU_BIND:
            if (strcmp(optarg, "core") != 0 && strcmp(optarg, "none") != 0) {
                usage_error("--cpu-bind takes core or none, not '%s'", optarg);
                return WEFTRUN_EXIT_USAGE;
            }
            o->cpu_bind = strcmp(optarg, "core") == 0;
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
            bind_given = true;
            break;
        case OPT_PORT:
            if (!parse_int(optarg, 0, 65535, &o->port)) {
                usage_error("--port needs a port number from 0 to 65535, not '%s'", optarg);
                return WEFTRUN_EXIT_USAGE;
            }
            port_given = true;
            break;
        case OPT_NNODES:
        case OPT_NODE_RANK:
        case OPT_STORE:
        case OPT_TOKEN:
        case OPT_TOKEN_FILE:
        case OPT_EXTERNAL_STORE:
        case OPT_NEW_TOKEN:
            rc = parse_node_opt(c, optarg, o);
            if (rc >= 0) {
                return rc;
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
    if (rc < 0) {
        rc = check_node_opts(o, bind_given, port_given);
    }
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
