/*
 * weft-perf: subcommands share option parsing, timing and nccl-tests-style output.
 *
 * A subcommand's main() typically does:
 *
 *     perf_opts_t o;
 *     perf_opts_default(&o);
 *     o.uses = PERF_USE_SIZES | PERF_USE_ITERS | ...;  // the common options it reads
 *     int rc = perf_parse_opts(argc, argv, &o, "sendrecv", extras, n_extras, handler, arg);
 *     if (rc != PERF_CONTINUE) return rc == PERF_BAD ? PERF_EXIT_USAGE : PERF_EXIT_OK;
 *     perf_world_t w;  perf_world_open(&w)  ...  perf_world_close(&w);
 *     perf_table_t t;  perf_table_begin(&t, &o, "sendrecv", w.size, cols, ncols, w.rank == 0);
 *     size_t size = o.min_bytes;
 *     do { ...; perf_table_row(&t, &r); } while (perf_next_size(&o, &size));
 *     return perf_table_end(&t);  // PERF_EXIT_WRONG if any row had #wrong > 0
 *
 * Only the public API (weft/weft.h) is used here.
 */
#ifndef WEFT_PERF_H
#define WEFT_PERF_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft/weft.h"

typedef int (*perf_main_fn)(int argc, char **argv);

typedef struct perf_subcommand {
    const char *name;
    perf_main_fn main;
    const char *summary;
} perf_subcommand_t;

int perf_sendrecv_main(int argc, char **argv);
int perf_group_main(int argc, char **argv);
int perf_vocab_main(int argc, char **argv);
int perf_allreduce_main(int argc, char **argv);
int perf_reduce_scatter_main(int argc, char **argv);
int perf_allgather_main(int argc, char **argv);
int perf_broadcast_main(int argc, char **argv);
int perf_alltoall_main(int argc, char **argv);
int perf_migrate_main(int argc, char **argv);
int perf_snapshot_main(int argc, char **argv);

/* ---- exit codes of every subcommand ---- */
#define PERF_EXIT_OK 0
#define PERF_EXIT_WRONG 1 /* a result was wrong (#wrong > 0) */
#define PERF_EXIT_USAGE 2 /* bad options */
#define PERF_EXIT_ERROR 3 /* a weft call failed */

/* ---- options ---- */

/* The nccl-tests flags every subcommand understands. */
typedef struct perf_opts {
    size_t min_bytes;   /* -b, --minbytes (default 8) */
    size_t max_bytes;   /* -e, --maxbytes (default 32M) */
    uint64_t factor;    /* -f, --stepfactor: multiply size by this (default 2) */
    size_t step_bytes;  /* -i, --stepbytes: add this instead when nonzero (default 0) */
    int iters;          /* -n, --iters (default 20) */
    int warmup;         /* -w, --warmup_iters (default 5) */
    int check;          /* -c, --check: verify results (default 1) */
    weft_dtype_t dtype; /* -d, --datatype (default f32) */
    weft_op_t op;       /* -o, --op (default sum) */
    int root;           /* -r, --root (default 0) */
    bool inplace;       /* --inplace */
    bool json;          /* --json: one JSON document on stdout instead of the table */
    int window;         /* -W, --window: outstanding operations where a test uses a window
                           (default 64) */
    bool reuse;         /* --reuse: one buffer (set) for every iteration, cache-warm, as
                           nccl-tests and OSU measure; default: rotate cold buffers */
    unsigned uses;      /* PERF_USE_* of the options the subcommand reads (set before
                           perf_parse_opts; perf_opts_default sets PERF_USE_ALL) */
} perf_opts_t;

/* The common options a subcommand uses: only these are listed by its --help and accepted
 * (--help and --version always are). */
#define PERF_USE_SIZES (1u << 0)   /* -b, -e, -f, -i */
#define PERF_USE_ITERS (1u << 1)   /* -n */
#define PERF_USE_WARMUP (1u << 2)  /* -w */
#define PERF_USE_CHECK (1u << 3)   /* -c */
#define PERF_USE_DTYPE (1u << 4)   /* -d */
#define PERF_USE_OP (1u << 5)      /* -o */
#define PERF_USE_ROOT (1u << 6)    /* -r */
#define PERF_USE_WINDOW (1u << 7)  /* -W */
#define PERF_USE_INPLACE (1u << 8) /* --inplace */
#define PERF_USE_REUSE (1u << 9)   /* --reuse */
#define PERF_USE_JSON (1u << 10)   /* --json */
#define PERF_USE_ALL ((1u << 11) - 1)

/* A subcommand-specific option, e.g. {"--algo", 1, "ALG", "ring|tree"}. */
typedef struct perf_extra_opt {
    const char *name; /* "--long" or "-x" */
    bool has_arg;
    const char *metavar; /* for the help text, e.g. "N"; NULL without argument */
    const char *help;
} perf_extra_opt_t;

/* Called for each extra option given; @p val is NULL when it has no argument.
 * Return 0 to accept, nonzero to reject (perf_parse_opts then fails). */
typedef int (*perf_extra_fn)(void *arg, const char *name, const char *val);

#define PERF_CONTINUE 0 /* options parsed: run */
#define PERF_HELP 1     /* --help was printed: exit 0 */
#define PERF_VERSION 2  /* --version was printed: exit 0 */
#define PERF_BAD (-1)   /* an error was printed to stderr: exit PERF_EXIT_USAGE */

void perf_opts_default(perf_opts_t *o);

/*
 * Parse argv[1..argc-1] (argv[0] is the subcommand name) with getopt_long, as weftrun
 * does. Options take their value as the next argument or after '=' (--iters=10, -n=10;
 * -n10 is also accepted); -c/--check takes an optional 0 or 1, also as the next
 * argument. Only the common options in o->uses are accepted. Extra options (may be
 * NULL / 0; at most 8, each a "--long" name) come after the common ones. Unknown options,
 * options the subcommand does not use, missing or bad values, values that make no sense
 * (-n 0, -b 0, -e 0, -b below one element of -d) and stray arguments print an error to
 * stderr. Returns PERF_CONTINUE, PERF_HELP, PERF_VERSION or PERF_BAD.
 */
int perf_parse_opts(int argc, char **argv, perf_opts_t *o, const char *subcommand,
                    const perf_extra_opt_t *extras, size_t n_extras, perf_extra_fn handler,
                    void *handler_arg);

/* The job token (WEFT_JOB_TOKEN), kept before weft_init takes it out of the environment;
 * perf_pass_token() puts it back, in a child about to exec a weft process of the same
 * job (a replacement, a fresh job on the same store). A rank holds a token only under
 * weftrun --share-token (by default it holds its member secret alone): without one,
 * perf_need_token() says so, once per job (on rank 0), naming @p what needs it and
 * @p instead, and returns false. */
void perf_keep_token(void);
void perf_pass_token(void);
bool perf_need_token(const char *subcommand, const char *what, const char *instead);

/* "weft-perf <version>" (the project version weft-perf was built from). */
void perf_print_version(FILE *out);
/* "weft-perf [SUBCOMMAND]: <message>" and where to find help, to stderr; @p subcommand
 * may be NULL. */
void perf_usage_error(const char *subcommand, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* After getopt_long returned @p c ('?' or ':', with opterr = 0): say which option of
 * @p longopts it refused and why (unknown, ambiguous, needs a value, takes none). */
void perf_opt_error(const char *subcommand, int c, int argc, char **argv,
                    const struct option *longopts);
/* A whole decimal number in [lo, hi]: 0, or -1 when NULL, malformed or out of range. */
int perf_parse_int(const char *s, long lo, long hi, long *out);

/* Print the help text of the common options that @p defaults->uses names, with the
 * defaults of @p defaults, and of the extras, to @p out. */
void perf_print_usage(FILE *out, const char *subcommand, const perf_opts_t *defaults,
                      const perf_extra_opt_t *extras, size_t n_extras);

/*
 * Parse a byte count: decimal integer with an optional suffix K, M, G, T (powers of
 * 1024, case-insensitive, optionally followed by "B" or "iB"): "64M", "1g", "4096",
 * "16MiB". Returns 0 and sets *out, or -1 for a malformed or overflowing value.
 */
int perf_parse_size(const char *s, size_t *out);
/* Format @p bytes compactly ("64M", "4093", "1G") into @p buf. Returns buf. */
const char *perf_format_size(size_t bytes, char *buf, size_t buflen);

/* dtype names accepted by -d: f32/float, f64/double, f16/half, bf16/bfloat16,
 * i32/int32/int, i64/int64, u8/uint8/char. Returns 0 or -1. */
int perf_parse_dtype(const char *s, weft_dtype_t *out);
/* op names accepted by -o: sum, prod, max, min. Returns 0 or -1. */
int perf_parse_op(const char *s, weft_op_t *out);
/* Short names as printed in the table ("float", "sum"); never NULL. */
const char *perf_dtype_str(weft_dtype_t dtype);
const char *perf_op_str(weft_op_t op);
/* Element size; 1 for anything unknown so counts stay defined. */
size_t perf_dtype_size(weft_dtype_t dtype);

/* Advance *size to the next message size of the sweep; false (and *size unchanged) when
 * the sweep is over (past max_bytes, or the step would not grow the size). A sweep that
 * starts at 0 B continues with 1 B. */
bool perf_next_size(const perf_opts_t *o, size_t *size);

/* ---- timing ---- */
/* Monotonic clock. */
uint64_t perf_now_ns(void);
double perf_now_us(void);
/* Sort @p v (@p n values) and return the median: the mean of the two middle values when n
 * is even, 0 when it is 0. */
double perf_median(double *v, int n);
/* Sort @p v and return the value at quantile @p q in [0, 1] (nearest rank); 0 when n is 0. */
double perf_quantile(double *v, int n, double q);

/* ---- buffers ---- */
/* Page-aligned allocation (at least one byte), freed with perf_free(). NULL on failure. */
void *perf_alloc(size_t bytes);
void perf_free(void *p);
/* Size of the last-level cache in bytes (a guess of 32 MiB when unknown). */
size_t perf_llc_bytes(void);
/* How many distinct buffers of @p bytes to rotate through so that together they exceed
 * twice the last-level cache, bounded by @p max_total bytes; at least 1. */
size_t perf_rotation_count(size_t bytes, size_t max_total);

/*
 * Deterministic byte patterns for data checks: byte i of the buffer identified by
 * @p seed. Different seeds (e.g. mixing source, destination, size, iteration) give
 * different contents, so a misrouted or stale message is caught.
 */
uint64_t perf_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d);
void perf_fill_pattern(void *buf, size_t bytes, uint64_t seed);
/* Number of bytes of @p buf that differ from the pattern of @p seed. */
size_t perf_check_pattern(const void *buf, size_t bytes, uint64_t seed);
/* Word @p w of the pattern of @p seed: byte i of a filled buffer is byte i%8 of word i/8
 * (for contents defined by a global offset, e.g. a flat partition cut several ways). */
uint64_t perf_pattern_word(uint64_t seed, size_t w);

/* ---- the world ---- */
typedef struct perf_world {
    weft_ctx_t *ctx;
    weft_group_t *world;
    int rank, size;
} perf_world_t;

/* The largest of @p us over the ranks of @p w (the slowest rank's time). */
double perf_slowest(const perf_world_t *w, double us);

/* weft_init + world group + rank/size; prints the error and returns nonzero on failure. */
int perf_world_open(perf_world_t *w);
void perf_world_close(perf_world_t *w);
/* Print "weft-perf: <what>: <status>: <last error>" to stderr. */
void perf_report_error(const perf_world_t *w, const char *what, weft_status_t st);

/* ---- output: nccl-tests-style table or JSON ---- */
#define PERF_MAX_EXTRA_COLS 4

/* A subcommand-specific column after #wrong, e.g. {"lat(us)", "lat_us", 2}. */
typedef struct perf_col {
    const char *title;    /* table header */
    const char *json_key; /* key in the JSON row */
    int decimals;         /* digits after the point */
} perf_col_t;

typedef struct perf_row {
    size_t bytes;
    size_t count;
    const char *type; /* NULL: the dtype of the options */
    const char *op;   /* NULL: the op of the options; use "none" where there is none */
    int root;         /* -1: no root */
    double time_us;
    double algbw_gbs; /* GB/s (1e9 bytes per second), like nccl-tests */
    double busbw_gbs;
    long wrong; /* -1: not checked ("N/A") */
    double extra[PERF_MAX_EXTRA_COLS];
} perf_row_t;

typedef struct perf_table {
    const perf_opts_t *opts;
    const char *subcommand;
    int nranks;
    perf_col_t cols[PERF_MAX_EXTRA_COLS];
    size_t ncols;
    bool print; /* false on ranks other than the reporting one */
    FILE *out;
    size_t nrows;
    long total_wrong;
    double sum_busbw;
} perf_table_t;

/*
 * Start the output: the header (table) or the opening of the JSON document. Only the
 * rank with @p print set writes anything; the others still count wrong results.
 */
void perf_table_begin(perf_table_t *t, const perf_opts_t *o, const char *subcommand, int nranks,
                      const perf_col_t *cols, size_t ncols, bool print);
void perf_table_row(perf_table_t *t, const perf_row_t *r);
/* Finish the output (average bus bandwidth, totals) and return PERF_EXIT_OK or
 * PERF_EXIT_WRONG. */
int perf_table_end(perf_table_t *t);

/* Bandwidth in GB/s of @p bytes moved in @p time_us. */
double perf_gbs(size_t bytes, double time_us);
/* Write @p s as a JSON string literal (with quotes). */
void perf_json_string(FILE *out, const char *s);

#endif
