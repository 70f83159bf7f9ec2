/* Helpers shared by the weft-perf subcommands: options, sizes, timers, patterns, output. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf.h"

/* ---- names ---- */

static const struct {
    const char *name;
    weft_dtype_t dtype;
    size_t size;
} dtype_names[] = {
    /* The first name of each dtype is the one printed. */
    {"float", WEFT_F32, 4},     {"f32", WEFT_F32, 4},   {"double", WEFT_F64, 8},
    {"f64", WEFT_F64, 8},       {"half", WEFT_F16, 2},  {"f16", WEFT_F16, 2},
    {"bfloat16", WEFT_BF16, 2}, {"bf16", WEFT_BF16, 2}, {"int32", WEFT_I32, 4},
    {"i32", WEFT_I32, 4},       {"int", WEFT_I32, 4},   {"int64", WEFT_I64, 8},
    {"i64", WEFT_I64, 8},       {"uint8", WEFT_U8, 1},  {"u8", WEFT_U8, 1},
    {"char", WEFT_U8, 1},
};

static const struct {
    const char *name;
    weft_op_t op;
} op_names[] = {{"sum", WEFT_SUM}, {"prod", WEFT_PROD}, {"max", WEFT_MAX}, {"min", WEFT_MIN}};

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

int perf_parse_dtype(const char *s, weft_dtype_t *out)
{
    for (size_t i = 0; i < NELEMS(dtype_names); i++) {
        if (strcasecmp(s, dtype_names[i].name) == 0) {
            *out = dtype_names[i].dtype;
            return 0;
        }
    }
    return -1;
}

int perf_parse_op(const char *s, weft_op_t *out)
{
    for (size_t i = 0; i < NELEMS(op_names); i++) {
        if (strcasecmp(s, op_names[i].name) == 0) {
            *out = op_names[i].op;
            return 0;
        }
    }
    return -1;
}

const char *perf_dtype_str(weft_dtype_t dtype)
{
    for (size_t i = 0; i < NELEMS(dtype_names); i++) {
        if (dtype_names[i].dtype == dtype) {
            return dtype_names[i].name;
        }
    }
    return "?";
}

size_t perf_dtype_size(weft_dtype_t dtype)
{
    for (size_t i = 0; i < NELEMS(dtype_names); i++) {
        if (dtype_names[i].dtype == dtype) {
            return dtype_names[i].size;
        }
    }
    return 1;
}

const char *perf_op_str(weft_op_t op)
{
    for (size_t i = 0; i < NELEMS(op_names); i++) {
        if (op_names[i].op == op) {
            return op_names[i].name;
        }
    }
    return op >= WEFT_OP_USER_FIRST ? "user" : "?";
}

/* ---- sizes ---- */

int perf_parse_size(const char *s, size_t *out)
{
    if (s == NULL || !isdigit((unsigned char)s[0])) {
        return -1;
    }
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0) {
        return -1;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        shift = 10;
        end++;
        break;
    case 'M':
        shift = 20;
        end++;
        break;
    case 'G':
        shift = 30;
        end++;
        break;
    case 'T':
        shift = 40;
        end++;
        break;
    default:
        break;
    }
    if (shift != 0 && (*end == 'i' || *end == 'I')) {
        end++;
        if (*end != 'B' && *end != 'b') {
            return -1;
        }
    }
    if (*end == 'B' || *end == 'b') {
        end++;
    }
    if (*end != '\0') {
        return -1;
    }
    if (shift != 0 && v > (SIZE_MAX >> shift)) {
        return -1;
    }
    if (v > SIZE_MAX) {
        return -1;
    }
    *out = (size_t)v << shift;
    return 0;
}

const char *perf_format_size(size_t bytes, char *buf, size_t buflen)
{
    static const char suffix[] = "KMGT";
    int unit = -1;
    size_t v = bytes;
    while (v != 0 && (v & 1023) == 0 && unit < 3) {
        v >>= 10;
        unit++;
    }
    if (unit < 0) {
        snprintf(buf, buflen, "%zu", bytes);
    } else {
        snprintf(buf, buflen, "%zu%c", v, suffix[unit]);
    }
    return buf;
}

bool perf_next_size(const perf_opts_t *o, size_t *size)
{
    size_t cur = *size, next;
    if (o->step_bytes != 0) {
        next = cur + o->step_bytes;
    } else if (cur == 0) {
        next = 1; /* a sweep starting at 0 B goes on with 1 B */
    } else if (o->factor > 1 && cur <= SIZE_MAX / o->factor) {
        next = cur * o->factor;
    } else {
        return false;
    }
    if (next <= cur || next > o->max_bytes) {
        return false;
    }
    *size = next;
    return true;
}

/* ---- options ---- */

void perf_opts_default(perf_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->min_bytes = 8;
    o->max_bytes = 32u << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    o->dtype = WEFT_F32;
    o->op = WEFT_SUM;
    o->root = 0;
    o->window = 64;
    o->uses = PERF_USE_ALL;
}

void perf_print_usage(FILE *out, const char *subcommand, const perf_opts_t *d,
                      const perf_extra_opt_t *extras, size_t n_extras)
{
    unsigned u = d->uses;
    char b[24], e[24], i[24];
    fprintf(out, "usage: weftrun -n N -- weft-perf %s [options]\n\n", subcommand);
    if (u & PERF_USE_SIZES) {
        fprintf(out,
                "  -b, --minbytes SIZE     smallest message (default %s; K/M/G suffixes)\n"
                "  -e, --maxbytes SIZE     largest message (default %s)\n"
                "  -f, --stepfactor F      multiply the size by F between steps (default %llu)\n"
                "  -i, --stepbytes SIZE    add SIZE between steps instead (default %s: use -f)\n",
                perf_format_size(d->min_bytes, b, sizeof(b)),
                perf_format_size(d->max_bytes, e, sizeof(e)), (unsigned long long)d->factor,
                perf_format_size(d->step_bytes, i, sizeof(i)));
    }
    if (u & PERF_USE_ITERS) {
        fprintf(out, "  -n, --iters N           timed iterations (default %d)\n", d->iters);
    }
    if (u & PERF_USE_WARMUP) {
        fprintf(out, "  -w, --warmup_iters N    untimed iterations first (default %d)\n",
                d->warmup);
    }
    if (u & PERF_USE_CHECK) {
        fprintf(out, "  -c, --check [0|1]       verify the data (default %d)\n", d->check);
    }
    if (u & PERF_USE_DTYPE) {
        fprintf(out,
                "  -d, --datatype T        float|double|half|bfloat16|int32|int64|uint8 "
                "(default %s)\n",
                perf_dtype_str(d->dtype));
    }
    if (u & PERF_USE_OP) {
        fprintf(out, "  -o, --op OP             sum|prod|max|min (default %s)\n",
                perf_op_str(d->op));
    }
    if (u & PERF_USE_ROOT) {
        fprintf(out, "  -r, --root R            root rank (default %d)\n", d->root);
    }
    if (u & PERF_USE_WINDOW) {
        fprintf(out, "  -W, --window N          operations in flight (default %d)\n", d->window);
    }
    if (u & PERF_USE_INPLACE) {
        fprintf(out, "      --inplace           use the same buffer for input and output\n");
    }
    if (u & PERF_USE_REUSE) {
        fprintf(out, "      --reuse             one buffer set for every iteration (cache-warm, "
                     "as nccl-tests\n"
                     "                          and OSU); default: rotate sets larger than the "
                     "cache\n");
    }
    if (u & PERF_USE_JSON) {
        fprintf(out, "      --json              print one JSON document instead of the table\n");
    }
    fprintf(out, "  -h, --help              this text\n"
                 "      --version           print weft-perf's version\n");
    for (size_t k = 0; k < n_extras; k++) {
        char left[64];
        snprintf(left, sizeof(left), "%s%s%s", extras[k].name, extras[k].has_arg ? " " : "",
                 extras[k].has_arg && extras[k].metavar ? extras[k].metavar : "");
        fprintf(out, "      %-20s%s\n", left, extras[k].help ? extras[k].help : "");
    }
    fprintf(out, "\nExit status: 0 ok, 1 wrong results, 2 bad options, 3 a weft call failed.\n");
}

/* Long options past the characters: the flags without a short form, then the extras. */
enum { OPT_INPLACE = 256, OPT_JSON, OPT_REUSE, OPT_VERSION, OPT_EXTRA };

/* The common options, each with the PERF_USE_* bit that admits it (0: always). */
static const struct {
    struct option opt;
    unsigned use;
} common_opts[] = {
    {{"minbytes", required_argument, NULL, 'b'}, PERF_USE_SIZES},
    {{"maxbytes", required_argument, NULL, 'e'}, PERF_USE_SIZES},
    {{"stepfactor", required_argument, NULL, 'f'}, PERF_USE_SIZES},
    {{"stepbytes", required_argument, NULL, 'i'}, PERF_USE_SIZES},
    {{"iters", required_argument, NULL, 'n'}, PERF_USE_ITERS},
    {{"warmup_iters", required_argument, NULL, 'w'}, PERF_USE_WARMUP},
    {{"check", optional_argument, NULL, 'c'}, PERF_USE_CHECK},
    {{"datatype", required_argument, NULL, 'd'}, PERF_USE_DTYPE},
    {{"op", required_argument, NULL, 'o'}, PERF_USE_OP},
    {{"root", required_argument, NULL, 'r'}, PERF_USE_ROOT},
    {{"window", required_argument, NULL, 'W'}, PERF_USE_WINDOW},
    {{"inplace", no_argument, NULL, OPT_INPLACE}, PERF_USE_INPLACE},
    {{"reuse", no_argument, NULL, OPT_REUSE}, PERF_USE_REUSE},
    {{"json", no_argument, NULL, OPT_JSON}, PERF_USE_JSON},
    {{"help", no_argument, NULL, 'h'}, 0},
    {{"version", no_argument, NULL, OPT_VERSION}, 0},
};
#define MAX_EXTRAS 8

int perf_parse_int(const char *s, long lo, long hi, long *out)
{
    if (s == NULL) {
        return -1;
    }
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        return -1;
    }
    *out = v;
    return 0;
}

void perf_print_version(FILE *out)
{
    fprintf(out, "weft-perf %s\n", WEFT_PERF_VERSION);
}

void perf_usage_error(const char *subcommand, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "weft-perf%s%s: ", subcommand != NULL ? " " : "",
            subcommand != NULL ? subcommand : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'weft-perf%s%s --help' for more information.\n",
            subcommand != NULL ? " " : "", subcommand != NULL ? subcommand : "");
}

void perf_opt_error(const char *subcommand, int c, int argc, char **argv,
                    const struct option *longopts)
{
    /* getopt_long has passed the element of a long option; a short one may sit inside a
     * cluster ("-xn5"), so the element before is only its own when it names optopt. */
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    int len = (int)strcspn(arg, "=");
    bool is_long = strncmp(arg, "--", 2) == 0 && len > 2;
    const struct option *hit = NULL; /* the long option the element names, if just one */
    int matches = 0;
    for (const struct option *l = longopts; is_long && l->name != NULL; l++) {
        if (strncmp(l->name, arg + 2, (size_t)len - 2) == 0) {
            hit = l;
            if ((int)strlen(l->name) == len - 2) {
                matches = 1; /* an exact name is never ambiguous */
                break;
            }
            matches++;
        }
    }
    if (matches != 1) {
        hit = NULL;
    }
    if (is_long && optopt > 0 && optopt < 256 && (hit == NULL || hit->val != optopt)) {
        is_long = false; /* a short option of the element being scanned */
    }
    if (!is_long) {
        const char *what = c == ':' ? "needs a value" : "is unknown";
        perf_usage_error(subcommand, "option '-%c' %s", optopt, what);
    } else if (c == ':') {
        perf_usage_error(subcommand, "option '%.*s' needs a value", len, arg);
    } else if (optopt != 0) {
        perf_usage_error(subcommand, "option '%.*s' takes no value", len, arg);
    } else if (matches > 1) {
        perf_usage_error(subcommand, "option '%.*s' is ambiguous", len, arg);
    } else {
        perf_usage_error(subcommand, "option '%.*s' is unknown", len, arg);
    }
}

static int apply_common(perf_opts_t *o, int id, const char *val)
{
    long v;
    switch (id) {
    case 'b':
        return perf_parse_size(val, &o->min_bytes);
    case 'e':
        return perf_parse_size(val, &o->max_bytes);
    case 'i':
        return perf_parse_size(val, &o->step_bytes);
    case 'f':
        if (perf_parse_int(val, 1, 1L << 30, &v) != 0) {
            return -1;
        }
        o->factor = (uint64_t)v;
        return 0;
    case 'n':
    case 'w':
    case 'r':
    case 'W':
        if (perf_parse_int(val, id == 'W' ? 1 : 0, 1L << 30, &v) != 0) {
            return -1;
        }
        *(id == 'n'   ? &o->iters
          : id == 'w' ? &o->warmup
          : id == 'r' ? &o->root
                      : &o->window) = (int)v;
        return 0;
    case 'c':
        if (val == NULL) {
            o->check = 1;
            return 0;
        }
        if (perf_parse_int(val, 0, 1, &v) != 0) {
            return -1;
        }
        o->check = (int)v;
        return 0;
    case 'd':
        return perf_parse_dtype(val, &o->dtype);
    case 'o':
        return perf_parse_op(val, &o->op);
    case OPT_INPLACE:
        o->inplace = true;
        return 0;
    case OPT_JSON:
        o->json = true;
        return 0;
    case OPT_REUSE:
        o->reuse = true;
        return 0;
    }
    return -1;
}

/* The long name of option @p id, for messages. */
static const char *common_name(int id)
{
    for (size_t k = 0; k < NELEMS(common_opts); k++) {
        if (common_opts[k].opt.val == id) {
            return common_opts[k].opt.name;
        }
    }
    return "?";
}

/*
 * After getopt_long refused an option ('?'): when it is a common option that this
 * subcommand does not use (left out of its table), say so rather than "unknown".
 */
static bool refuse_unused(const char *subcommand, unsigned uses, int argc, char **argv)
{
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    size_t len = strcspn(arg, "=");
    for (size_t k = 0; k < NELEMS(common_opts); k++) {
        const struct option *l = &common_opts[k].opt;
        if (common_opts[k].use == 0 || (common_opts[k].use & uses) != 0) {
            continue;
        }
        bool is_short = optopt != 0 && optopt == l->val;
        bool is_long = strncmp(arg, "--", 2) == 0 && len - 2 == strlen(l->name) &&
                       strncmp(arg + 2, l->name, len - 2) == 0;
        if (is_short || is_long) {
            if (l->val < 256) {
                perf_usage_error(subcommand, "option '-%c' (--%s) is not used by %s", l->val,
                                 l->name, subcommand);
            } else {
                perf_usage_error(subcommand, "option '--%s' is not used by %s", l->name,
                                 subcommand);
            }
            return true;
        }
    }
    return false;
}

/* Values that parse but make no sense; an error is printed for the first one. */
static bool opts_make_sense(const char *subcommand, const perf_opts_t *o)
{
    unsigned u = o->uses;
    size_t es = perf_dtype_size(o->dtype);
    if ((u & PERF_USE_ITERS) && o->iters < 1) {
        perf_usage_error(subcommand, "-n %d: at least 1 timed iteration is needed", o->iters);
    } else if ((u & PERF_USE_SIZES) && o->min_bytes == 0) {
        perf_usage_error(subcommand, "-b 0: the smallest message must be at least 1 byte");
    } else if ((u & PERF_USE_SIZES) && o->max_bytes == 0) {
        perf_usage_error(subcommand, "-e 0: the largest message must be at least 1 byte");
    } else if ((u & PERF_USE_SIZES) && o->min_bytes > o->max_bytes) {
        perf_usage_error(subcommand, "-b %zu is larger than -e %zu", o->min_bytes, o->max_bytes);
    } else if ((u & PERF_USE_SIZES) && (u & PERF_USE_DTYPE) && o->min_bytes < es) {
        perf_usage_error(subcommand, "-b %zu is smaller than one %s (%zu bytes)", o->min_bytes,
                         perf_dtype_str(o->dtype), es);
    } else if ((u & PERF_USE_SIZES) && o->factor < 2 && o->step_bytes == 0 &&
               o->min_bytes != o->max_bytes) {
        perf_usage_error(subcommand, "-f must be at least 2 (or use -i)");
    } else {
        return true;
    }
    return false;
}

int perf_parse_opts(int argc, char **argv, perf_opts_t *o, const char *subcommand,
                    const perf_extra_opt_t *extras, size_t n_extras, perf_extra_fn handler,
                    void *handler_arg)
{
    struct option longopts[NELEMS(common_opts) + MAX_EXTRAS + 1];
    /* '+': no reordering, so a stray argument is reported rather than skipped;
     * ':': a missing value is told apart from an unknown option. */
    char shorts[3 + 3 * NELEMS(common_opts) + 1] = "+:";
    size_t nlong = 0, nshort = 2;
    if (n_extras > MAX_EXTRAS) {
        fprintf(stderr, "weft-perf %s: more than %d extra options\n", subcommand, MAX_EXTRAS);
        return PERF_BAD;
    }
    for (size_t k = 0; k < NELEMS(common_opts); k++) {
        if (common_opts[k].use != 0 && (common_opts[k].use & o->uses) == 0) {
            continue;
        }
        const struct option *l = &common_opts[k].opt;
        longopts[nlong++] = *l;
        if (l->val < 256) {
            shorts[nshort++] = (char)l->val;
            for (int colons = l->has_arg; colons > 0; colons--) {
                shorts[nshort++] = ':'; /* required_argument 1, optional_argument 2 */
            }
        }
    }
    shorts[nshort] = '\0';
    for (size_t k = 0; k < n_extras; k++) {
        longopts[nlong++] =
            (struct option){extras[k].name + 2, extras[k].has_arg ? required_argument : no_argument,
                            NULL, OPT_EXTRA + (int)k};
    }
    longopts[nlong] = (struct option){NULL, 0, NULL, 0};
    const perf_opts_t defaults = *o;

    bool help = false, version = false;
    int c;
    opterr = 0;
    optind = 0; /* a fresh scan: main() has parsed its own options with getopt_long */
    while ((c = getopt_long(argc, argv, shorts, longopts, NULL)) != -1) {
        const char *val = optarg;
        /* "-n=10" is "-n 10", as "--iters=10" is. */
        if (val != NULL && val[0] == '=' && val == argv[optind - 1] + 2) {
            val++;
        }
        /* "-c 0": the check flag's value may also be the next argument, if it is a digit. */
        if (c == 'c' && val == NULL && optind < argc && isdigit((unsigned char)argv[optind][0])) {
            val = argv[optind++];
        }
        if (c == 'h' || c == OPT_VERSION) {
            help = help || c == 'h';
            version = version || c == OPT_VERSION;
        } else if (c == ':' || c == '?') {
            if (c == ':' || !refuse_unused(subcommand, o->uses, argc, argv)) {
                perf_opt_error(subcommand, c, argc, argv, longopts);
            }
            return PERF_BAD;
        } else if (c >= OPT_EXTRA) {
            const perf_extra_opt_t *x = &extras[c - OPT_EXTRA];
            if (handler == NULL || handler(handler_arg, x->name, x->has_arg ? val : NULL) != 0) {
                perf_usage_error(subcommand, "bad value '%s' for %s", val != NULL ? val : "",
                                 x->name);
                return PERF_BAD;
            }
        } else if (apply_common(o, c, val) != 0) {
            perf_usage_error(subcommand, "bad value '%s' for --%s", val != NULL ? val : "",
                             common_name(c));
            return PERF_BAD;
        }
    }
    if (optind < argc) {
        perf_usage_error(subcommand, "unexpected argument '%s'", argv[optind]);
        return PERF_BAD;
    }
    if (help) {
        perf_print_usage(stdout, subcommand, &defaults, extras, n_extras);
        return PERF_HELP;
    }
    if (version) {
        perf_print_version(stdout);
        return PERF_VERSION;
    }
    return opts_make_sense(subcommand, o) ? PERF_CONTINUE : PERF_BAD;
}

/* ---- timing ---- */

uint64_t perf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double perf_now_us(void)
{
    return (double)perf_now_ns() / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double perf_median(double *v, int n)
{
    if (n <= 0) {
        return 0;
    }
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double perf_quantile(double *v, int n, double q)
{
    if (n <= 0) {
        return 0;
    }
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    int k = (int)(q * (n - 1) + 0.5);
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

double perf_gbs(size_t bytes, double time_us)
{
    return time_us > 0 ? (double)bytes / time_us / 1e3 : 0.0;
}

/* ---- buffers ---- */

void *perf_alloc(size_t bytes)
{
    void *p = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (posix_memalign(&p, page > 0 ? (size_t)page : 4096, bytes ? bytes : 1) != 0) {
        return NULL;
    }
    return p;
}

void perf_free(void *p)
{
    free(p);
}

static char *kept_token;

void perf_keep_token(void)
{
    const char *t = getenv("WEFT_JOB_TOKEN");
    if (t != NULL && kept_token == NULL) {
        kept_token = strdup(t);
    }
}

void perf_pass_token(void)
{
    if (kept_token != NULL) {
        setenv("WEFT_JOB_TOKEN", kept_token, 1);
    }
}

bool perf_need_token(const char *subcommand, const char *what, const char *instead)
{
    if (kept_token != NULL) {
        return true;
    }
    const char *rank = getenv("WEFT_RANK");
    if (rank == NULL || strcmp(rank, "0") == 0) {
        fprintf(stderr,
                "weft-perf %s: %s starts weft processes of this job itself and needs the job "
                "token, which ranks hold only under 'weftrun --share-token'; run it so, or "
                "pass %s\n",
                subcommand, what, instead);
    }
    return false;
}

size_t perf_llc_bytes(void)
{
    long v = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    v = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    if (v > 0) {
        return (size_t)v;
    }
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f != NULL) {
        char buf[32];
        size_t sz;
        if (fgets(buf, sizeof(buf), f) != NULL) {
            buf[strcspn(buf, "\n")] = '\0';
            if (perf_parse_size(buf, &sz) == 0 && sz > 0) {
                fclose(f);
                return sz;
            }
        }
        fclose(f);
    }
    return 32u << 20;
}

size_t perf_rotation_count(size_t bytes, size_t max_total)
{
    if (bytes == 0) {
        return 1;
    }
    size_t want = 2 * perf_llc_bytes() / bytes + 1;
    size_t cap = max_total / bytes;
    size_t n = want < cap ? want : cap;
    return n < 1 ? 1 : n;
}

/* ---- patterns ---- */

static uint64_t mix64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

uint64_t perf_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}

uint64_t perf_pattern_word(uint64_t seed, size_t w)
{
    return mix64(seed ^ ((uint64_t)w * UINT64_C(0xd6e8feb86659fd93)));
}

void perf_fill_pattern(void *buf, size_t bytes, uint64_t seed)
{
    unsigned char *p = buf;
    size_t words = bytes / 8;
    for (size_t w = 0; w < words; w++) {
        uint64_t v = perf_pattern_word(seed, w);
        memcpy(p + 8 * w, &v, 8);
    }
    if (bytes % 8 != 0) {
        uint64_t v = perf_pattern_word(seed, words);
        memcpy(p + 8 * words, &v, bytes % 8);
    }
}

size_t perf_check_pattern(const void *buf, size_t bytes, uint64_t seed)
{
    const unsigned char *p = buf;
    size_t bad = 0, words = bytes / 8;
    for (size_t w = 0; w <= words; w++) {
        size_t n = w < words ? 8 : bytes % 8;
        uint64_t v = perf_pattern_word(seed, w), got = 0;
        if (n == 0) {
            break;
        }
        memcpy(&got, p + 8 * w, n);
        if (n < 8) {
            v &= (UINT64_C(1) << (8 * n)) - 1;
        }
        if (got != v) {
            for (size_t k = 0; k < n; k++) {
                bad += ((got >> (8 * k)) & 0xff) != ((v >> (8 * k)) & 0xff);
            }
        }
    }
    return bad;
}

/* ---- the world ---- */

void perf_report_error(const perf_world_t *w, const char *what, weft_status_t st)
{
    /* Without a context (weft_init failed) the thread's last error says why. */
    const char *detail = weft_last_error(w != NULL ? w->ctx : NULL);
    fprintf(stderr, "weft-perf%s%d: %s: %s%s%s\n", w != NULL ? " rank " : "",
            w != NULL ? w->rank : 0, what, weft_status_str(st), detail[0] ? ": " : "", detail);
}

int perf_world_open(perf_world_t *w)
{
    memset(w, 0, sizeof(*w));
    w->rank = -1;
    weft_status_t st = weft_init(NULL, &w->ctx);
    if (st != WEFT_OK) {
        w->ctx = NULL;
        perf_report_error(w, "weft_init", st);
        return -1;
    }
    if ((st = weft_ctx_world(w->ctx, &w->world)) != WEFT_OK ||
        (st = weft_group_rank(w->world, &w->rank)) != WEFT_OK ||
        (st = weft_group_size(w->world, &w->size)) != WEFT_OK) {
        perf_report_error(w, "world group", st);
        weft_finalize(w->ctx);
        w->ctx = NULL;
        return -1;
    }
    return 0;
}

void perf_world_close(perf_world_t *w)
{
    if (w->ctx != NULL) {
        weft_finalize(w->ctx);
        w->ctx = NULL;
    }
}

/* ---- output ---- */

void perf_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s != NULL && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            fprintf(out, "\\%c", c);
        } else if (c < 0x20) {
            fprintf(out, "\\u%04x", c);
        } else {
            fputc(c, out);
        }
    }
    fputc('"', out);
}

static void json_number(FILE *out, double v)
{
    if (isfinite(v)) {
        fprintf(out, "%.6g", v);
    } else {
        fputs("null", out);
    }
}

void perf_table_begin(perf_table_t *t, const perf_opts_t *o, const char *subcommand, int nranks,
                      const perf_col_t *cols, size_t ncols, bool print)
{
    memset(t, 0, sizeof(*t));
    t->opts = o;
    t->subcommand = subcommand;
    t->nranks = nranks;
    t->ncols = ncols < PERF_MAX_EXTRA_COLS ? ncols : PERF_MAX_EXTRA_COLS;
    memcpy(t->cols, cols, t->ncols * sizeof(*cols));
    t->print = print;
    t->out = stdout;
    if (!print) {
        return;
    }
    if (o->json) {
        fprintf(t->out, "{\"subcommand\": ");
        perf_json_string(t->out, subcommand);
        fprintf(t->out,
                ", \"nranks\": %d, \"version\": \"%s\", \"dtype\": \"%s\", \"op\": \"%s\", "
                "\"inplace\": %s, \"buffers\": \"%s\", \"iters\": %d, \"warmup\": %d, "
                "\"check\": %d, \"results\": [",
                nranks, weft_version(NULL, NULL, NULL), perf_dtype_str(o->dtype),
                perf_op_str(o->op), o->inplace ? "true" : "false", o->reuse ? "reused" : "rotated",
                o->iters, o->warmup, o->check);
        return;
    }
    fprintf(t->out, "# weft-perf %s: %d ranks, %d iters, %d warmup, check %d, %s, %s\n", subcommand,
            nranks, o->iters, o->warmup, o->check, o->inplace ? "in-place" : "out-of-place",
            o->reuse ? "one buffer set reused (cache-warm)" : "buffer sets rotated (cache-cold)");
    fprintf(t->out, "#%12s %13s %9s %7s %10s %8s %8s %7s", "size", "count", "type", "op", "time",
            "algbw", "busbw", "#wrong");
    for (size_t i = 0; i < t->ncols; i++) {
        fprintf(t->out, " %10s", t->cols[i].title);
    }
    fprintf(t->out, "\n#%12s %13s %9s %7s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)",
            "(GB/s)", "(GB/s)", "");
    fflush(t->out);
}

void perf_table_row(perf_table_t *t, const perf_row_t *r)
{
    const perf_opts_t *o = t->opts;
    const char *type = r->type ? r->type : perf_dtype_str(o->dtype);
    const char *op = r->op ? r->op : perf_op_str(o->op);
    if (r->wrong > 0) {
        t->total_wrong += r->wrong;
    }
    t->sum_busbw += r->busbw_gbs;
    t->nrows++;
    if (!t->print) {
        return;
    }
    if (o->json) {
        fprintf(t->out, "%s\n  {\"size\": %zu, \"count\": %zu, \"type\": ", t->nrows > 1 ? "," : "",
                r->bytes, r->count);
        perf_json_string(t->out, type);
        fprintf(t->out, ", \"op\": ");
        perf_json_string(t->out, op);
        if (r->root >= 0) {
            fprintf(t->out, ", \"root\": %d", r->root);
        }
        fprintf(t->out, ", \"time_us\": ");
        json_number(t->out, r->time_us);
        fprintf(t->out, ", \"algbw_gbs\": ");
        json_number(t->out, r->algbw_gbs);
        fprintf(t->out, ", \"busbw_gbs\": ");
        json_number(t->out, r->busbw_gbs);
        if (r->wrong >= 0) {
            fprintf(t->out, ", \"wrong\": %ld", r->wrong);
        } else {
            fprintf(t->out, ", \"wrong\": null");
        }
        for (size_t i = 0; i < t->ncols; i++) {
            fprintf(t->out, ", ");
            perf_json_string(t->out, t->cols[i].json_key);
            fprintf(t->out, ": ");
            json_number(t->out, r->extra[i]);
        }
        fputc('}', t->out);
        return;
    }
    char wrong[24];
    if (r->wrong >= 0) {
        snprintf(wrong, sizeof(wrong), "%ld", r->wrong);
    } else {
        snprintf(wrong, sizeof(wrong), "N/A");
    }
    fprintf(t->out, " %12zu %13zu %9s %7s %10.2f %8.2f %8.2f %7s", r->bytes, r->count, type, op,
            r->time_us, r->algbw_gbs, r->busbw_gbs, wrong);
    for (size_t i = 0; i < t->ncols; i++) {
        fprintf(t->out, " %10.*f", t->cols[i].decimals, r->extra[i]);
    }
    fputc('\n', t->out);
    fflush(t->out);
}

int perf_table_end(perf_table_t *t)
{
    double avg = t->nrows ? t->sum_busbw / (double)t->nrows : 0.0;
    if (t->print) {
        if (t->opts->json) {
            fprintf(t->out, "\n], \"avg_busbw_gbs\": ");
            json_number(t->out, avg);
            fprintf(t->out, ", \"total_wrong\": %ld}\n", t->total_wrong);
        } else {
            fprintf(t->out, "# Out of bounds values : %ld %s\n", t->total_wrong,
                    t->total_wrong ? "FAILED" : "OK");
            fprintf(t->out, "# Avg bus bandwidth    : %g GB/s\n", avg);
        }
        fflush(t->out);
    }
    return t->total_wrong > 0 ? PERF_EXIT_WRONG : PERF_EXIT_OK;
}

double perf_slowest(const perf_world_t *w, double us)
{
    double out = us;
    weft_allreduce(w->world, &us, &out, 1, WEFT_F64, WEFT_MAX);
    return out;
}
