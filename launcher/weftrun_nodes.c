/*
 * Multi-node jobs: one weftrun per node, all meeting in the job's store. The keys of
 * this protocol live under "weftrun/", apart from the ranks' own:
 *
 *   weftrun/node/<R>/starts  a counter: the how-manieth start of node R this is (its
 *                            incarnation, k); k > 1 is a node started again after it
 *                            was lost, whose ranks then join as replacements
 *   weftrun/up/<R>.<k>       set when incarnation k of node R registers
 *   weftrun/end/<R>.<k>      "exit <code>" when it ends; "lost" from its lease when its
 *                            weftrun dies (the connection closes) or stops renewing it
 *                            for WEFT_FAILURE_TIMEOUT_MS
 *   weftrun/stop             "<code> <node> <why>": without --elastic, the first node
 *                            that stops its ranks stops every node's; with it, the
 *                            first whose rank exited WEFT_EXIT_JOB_FAILED does. The
 *                            serving node, once its own ranks have ended, takes a stop
 *                            it sees while it waits for the others as its exit status
 *   weftrun/fence/<id>       member id declared failed by its lapsed lease on the node
 *                            that serves the store, to be killed by the node running it
 *   weftrun/finishing        "<node>": a rank exited 0 (--elastic), the job is ending
 *   weftrun/next_id          a counter: member ids of replacements, from N x PER_NODE
 *   weftrun/ranks/<R>.<k>/<id>
 *                            on etcd only: member <id> runs under incarnation k of node
 *                            R, whose lease covers it (the rank holds none of its own;
 *                            WEFT_NODE_LEASE="<ns>/failed/<id> <this key>").
 *                            Set before the rank starts; deleted by the rank when it
 *                            leaves with the others (its lease disarmed), else by its
 *                            weftrun when it reaps it, which then publishes
 *                            <ns>/failed/<id> if the rank had not taken it away. When
 *                            the node's lease lapses, the weftruns that see the lapse
 *                            publish <ns>/failed/<id> for every id left under it
 *
 * Every weftrun watches the prefix on a connection of its own (its descriptor is in the
 * supervisor's poll set) and talks to the store on another, which also holds the lease;
 * both share one store health, so a lost store is reported once. On etcd, whose leases
 * lapse in seconds and cost a keepalive each, a node's lease stands for its ranks too
 * (weftrun/ranks/ above): one lease per node rather than one per rank. The weftrun serving
 * the store registers nothing (its death is the store's) and, when its ranks have
 * ended, waits for every registered incarnation to end before closing the store.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/weftrun.h"
#include "launcher/weftrun_stopmsg.h"
#include "util/array.h"
#include "util/log_escape.h"
#include "util/parse.h"

#define KEY_PREFIX "weftrun/"

typedef struct node_inc {
    int node, start;
    bool ended;
} node_inc_t;

struct weftrun_nodes {
    weft_store_client_t *ctl;   /* requests and this node's lease */
    weft_store_client_t *watch; /* events under weftrun/ */
    weft_store_health_t health; /* shared by both */
    int start;                  /* this node's incarnation; 0 on the serving node */
    char end_key[64];
    uint32_t ttl_ms;
    uint64_t period_ms, renew_at_ms;
    uint64_t arrive_by_ms; /* the serving node waits this long for nodes never seen */
    int late_stop_code;    /* of a stop seen after this node's ranks ended; 0: none */
    node_inc_t *incs;      /* incarnations of other nodes seen up or ended */
    size_t ninc, cap;
};

static weft_status_t store_gone(weftrun_job_t *job, weft_status_t st, const char *what)
{
    weftrun_nodes_t *n = job->nodes;
    if (weft__store_lost_ns(&n->health) != 0) {
        /* Without --elastic the job cannot go on without the node that served it. */
        bool stop =
            !job->opts->elastic && !job->opts->keep_going && job->stop_reason == WEFTRUN_STOP_NONE;
        if (weft__store_claim_report(&n->health)) {
            WEFT_ERROR(job->lg,
                       "lost the store at %s (%s): the node serving it is gone or out of "
                       "reach; %s",
                       job->store_addr, weft__store_lost_cause(&n->health),
                       stop ? "stopping this node's ranks"
                            : "this node's ranks will fail on their own");
        }
        if (stop) {
            weftrun_begin_stop(job, WEFTRUN_STOP_REMOTE, WEFTRUN_EXIT_FAILED, SIGTERM);
        }
    } else {
        WEFT_ERROR(job->lg, "store: %s: %s", what, weft_status_str(st));
    }
    return st;
}

weft_status_t weftrun_store_set(weftrun_job_t *job, const char *key, const char *val)
{
    if (job->server != NULL) {
        return weft__store_server_set(job->server, key, val, strlen(val));
    }
    if (job->nodes == NULL || job->nodes->ctl == NULL) {
        return WEFT_ERR_IO;
    }
    weft_status_t st = weft__store_set(job->nodes->ctl, key, val, strlen(val));
    return st == WEFT_OK ? st : store_gone(job, st, key);
}

bool weftrun_store_has(weftrun_job_t *job, const char *key)
{
    if (job->server != NULL) {
        return weft__store_server_has(job->server, key);
    }
    void *val;
    size_t len;
    if (job->nodes == NULL || job->nodes->ctl == NULL) {
        return false;
    }
    if (weft__store_get(job->nodes->ctl, key, 0, &val, &len) != WEFT_OK) {
        return false;
    }
    free(val);
    return true;
}

weft_status_t weftrun_nodes_new_id(weftrun_job_t *job, int *id)
{
    int64_t n;
    if (job->nodes->ctl == NULL) {
        return WEFT_ERR_IO;
    }
    weft_status_t st = weft__store_add(job->nodes->ctl, KEY_PREFIX "next_id", 1, &n);
    if (st != WEFT_OK) {
        return store_gone(job, st, "cannot take a member id for a replacement");
    }
    if (n < 1 || job->world_size + n - 1 >= WEFTRUN_MAX_MEMBER_IDS) {
        WEFT_ERROR(job->lg, "member ids for replacements are exhausted");
        return WEFT_ERR_NO_MEMORY;
    }
    *id = job->world_size + (int)n - 1;
    return WEFT_OK;
}

static node_inc_t *inc_of(weftrun_nodes_t *n, int node, int start)
{
    for (size_t i = 0; i < n->ninc; i++) {
        if (n->incs[i].node == node && n->incs[i].start == start) {
            return &n->incs[i];
        }
    }
    if (!weft__array_reserve((void **)&n->incs, &n->cap, n->ninc + 1, sizeof(*n->incs))) {
        return NULL;
    }
    n->incs[n->ninc] = (node_inc_t){.node = node, .start = start};
    return &n->incs[n->ninc++];
}

/* "weftrun/<what>/<node>.<start>" */
static bool parse_inc(const char *rest, int *node, int *start)
{
    char num[16];
    const char *dot = strchr(rest, '.');
    int64_t a, b;
    if (dot == NULL || dot - rest >= (ptrdiff_t)sizeof(num)) {
        return false;
    }
    memcpy(num, rest, (size_t)(dot - rest));
    num[dot - rest] = '\0';
    if (!weft__parse_i64(num, 0, INT32_MAX, &a) || !weft__parse_i64(dot + 1, 1, INT32_MAX, &b)) {
        return false;
    }
    *node = (int)a;
    *start = (int)b;
    return true;
}

/* Whether this node's lease covers its ranks (on etcd, once registered). */
static bool node_lease_covers(const weftrun_job_t *job)
{
    const weftrun_nodes_t *n = job->nodes;
    return n != NULL && n->start > 0 && n->ctl != NULL && weft__store_addr_is_etcd(job->store_addr);
}

bool weftrun_nodes_rank_started(weftrun_job_t *job, int id, char *var, size_t len)
{
    char entry[64], val[16];
    if (!node_lease_covers(job)) {
        return false;
    }
    snprintf(entry, sizeof(entry), KEY_PREFIX "ranks/%d.%d/%d", job->opts->node_rank,
             job->nodes->start, id);
    snprintf(val, sizeof(val), "%d", id);
    /* The notice the entry stands for, then the entry: a context that would publish
     * another notice (another namespace or member id) holds a lease of its own. */
    int n = snprintf(var, len, "%s%d %s", job->failed_prefix, id, entry);
    /* Not set: the rank takes a lease of its own, as on weft's store. */
    return n > 0 && (size_t)n < len && weftrun_store_set(job, entry, val) == WEFT_OK;
}

void weftrun_nodes_rank_ended(weftrun_job_t *job, int id, bool clean)
{
    char key[64], fkey[64];
    if (!node_lease_covers(job)) {
        return;
    }
    snprintf(key, sizeof(key), KEY_PREFIX "ranks/%d.%d/%d", job->opts->node_rank, job->nodes->start,
             id);
    if (!weftrun_store_has(job, key)) {
        return; /* it left with the others: its lease was disarmed */
    }
    if (clean) {
        /* What its own lease would have said: it ended while the others went on. */
        snprintf(fkey, sizeof(fkey), "%s%d", job->failed_prefix, id);
        weftrun_store_set(job, fkey, "exit 0 (without leaving with the others)");
    }
    if (job->nodes->ctl != NULL) {
        (void)weft__store_delete(job->nodes->ctl, key);
    }
}

/* Marks failed each rank of @p start of @p node left under weftrun/ranks/: that node's
 * lease lapsed. Every weftrun that sees it does so; set_nx keeps the first notice, and
 * the count returned is of the notices this one wrote. */
static int fail_ranks_of(weftrun_job_t *job, int node, int start)
{
    weftrun_nodes_t *n = job->nodes;
    char prefix[64], after[WEFT_STORE_MAX_KEY + 1] = "";
    int marked = 0;
    bool more = true;
    if (!weft__store_addr_is_etcd(job->store_addr)) {
        return 0;
    }
    snprintf(prefix, sizeof(prefix), KEY_PREFIX "ranks/%d.%d/", node, start);
    while (more && n->ctl != NULL) {
        weft_store_scan_args_t args = {.prefix = prefix, .after = after};
        weft_store_page_t page;
        weft_status_t st = weft__store_scan(n->ctl, &args, &page);
        if (st != WEFT_OK) {
            store_gone(job, st, "cannot list the ranks of a lost node");
            return marked;
        }
        for (size_t i = 0; i < page.n; i++) {
            int64_t id;
            if (!weft__parse_i64(page.kv[i].key + strlen(prefix), 0, INT32_MAX, &id)) {
                continue;
            }
            char fkey[64], val[96], *won;
            size_t wlen;
            int created = 0;
            snprintf(fkey, sizeof(fkey), "%s%d", job->failed_prefix, (int)id);
            snprintf(val, sizeof(val), "member %d: lost with node %d (its weftrun's lease lapsed)",
                     (int)id, node);
            if (weft__store_set_nx(n->ctl, fkey, val, strlen(val), (void **)&won, &wlen,
                                   &created) == WEFT_OK) {
                free(won);
                marked += created != 0;
            }
            (void)weft__store_delete(n->ctl, page.kv[i].key);
        }
        more = page.more && page.n > 0;
        if (more) {
            snprintf(after, sizeof(after), "%s", page.kv[page.n - 1].key);
        }
        weft__store_page_free(&page);
    }
    return marked;
}

static void on_end(weftrun_job_t *job, const char *rest, const char *val, bool live)
{
    int node, start;
    if (!parse_inc(rest, &node, &start)) {
        return;
    }
    node_inc_t *inc = inc_of(job->nodes, node, start);
    if (inc == NULL || inc->ended || (node == job->opts->node_rank && start == job->nodes->start)) {
        return;
    }
    inc->ended = true;
    if (node == job->opts->node_rank) {
        return; /* an earlier start of this node: said at start ("lost before") */
    }
    if (strcmp(val, "lost") != 0) {
        char text[96]; /* any token holder may write it */
        WEFT_INFO(job->lg, "node %d ended (%s)", node,
                  weft__log_escape(val, strlen(val), text, sizeof(text)));
        return;
    }
    int marked = fail_ranks_of(job, node, start);
    bool stop = live && !job->opts->elastic && !job->opts->keep_going &&
                job->stop_reason == WEFTRUN_STOP_NONE;
    WEFT_WARN(job->lg,
              "node %d was lost: its weftrun died or stopped answering, and its ranks "
              "with it%s%s",
              node, marked > 0 ? " (declared failed here: its lease covered them)" : "",
              stop ? "; stopping this node's ranks" : "");
    if (stop) {
        weftrun_begin_stop(job, WEFTRUN_STOP_REMOTE, WEFTRUN_EXIT_FAILED, SIGTERM);
    }
}

/* @p live: this node's ranks still run (else it is the serving node's final wait). */
static void on_stop(weftrun_job_t *job, const char *val, bool live)
{
    int code, node;
    char why[256];
    if (!weftrun_stop_parse(val, &code, &node, why, sizeof(why)) ||
        node == job->opts->node_rank || job->stop_reason != WEFTRUN_STOP_NONE ||
        job->nodes->late_stop_code != 0) {
        return;
    }
    if (!live) {
        /* This node's ranks are done, but the job they belonged to failed. */
        WEFT_ERROR(job->lg, "node %d stopped the job (%s) after this node's ranks ended", node,
                   why);
        job->nodes->late_stop_code = code != 0 ? code : WEFTRUN_EXIT_FAILED;
        return;
    }
    WEFT_ERROR(job->lg, "node %d stopped the job (%s); stopping this node's ranks", node, why);
    weftrun_begin_stop(job, WEFTRUN_STOP_REMOTE, code, SIGTERM);
}

/* One event; @p live: the ranks are still supervised (not in the final wait). */
static void on_event(weftrun_job_t *job, const char *key, const char *val, bool live)
{
    const char *k = key + strlen(KEY_PREFIX);
    int64_t v;
    if (strncmp(k, "end/", 4) == 0) {
        on_end(job, k + 4, val, live);
    } else if (strncmp(k, "up/", 3) == 0) {
        int node, start;
        if (parse_inc(k + 3, &node, &start) && node != job->opts->node_rank &&
            inc_of(job->nodes, node, start) != NULL) {
            char text[96];
            WEFT_INFO(job->lg, "node %d is up (%s)", node,
                      weft__log_escape(val, strlen(val), text, sizeof(text)));
        }
    } else if (strcmp(k, "stop") == 0) {
        on_stop(job, val, live);
    } else if (!live) {
        return;
    } else if (strncmp(k, "fence/", 6) == 0 && weft__parse_i64(k + 6, 0, INT32_MAX, &v)) {
        weftrun_fence_id(job, (int)v,
                         "stopped renewing its liveness lease and was declared "
                         "failed");
    } else if (strcmp(k, "finishing") == 0 && job->opts->elastic &&
               weft__parse_i64(val, 0, INT32_MAX, &v) && v != job->opts->node_rank) {
        weftrun_elastic_finishing(job, "a rank of another node exited 0");
    }
}

static void read_events(weftrun_job_t *job, bool live)
{
    weftrun_nodes_t *n = job->nodes;
    for (;;) {
        char *key;
        void *val;
        size_t len;
        weft_status_t st = weft__store_next_event(n->watch, 0, &key, &val, &len);
        if (st == WEFT_INPROGRESS) {
            return;
        }
        if (st != WEFT_OK) {
            store_gone(job, st, "reading the other nodes' news failed");
            weft__store_close(n->watch);
            n->watch = NULL;
            return;
        }
        on_event(job, key, val, live);
        free(key);
        free(val);
    }
}

void weftrun_nodes_read(weftrun_job_t *job)
{
    if (job->nodes != NULL && job->nodes->watch != NULL) {
        read_events(job, job->slots != NULL);
    }
}

int weftrun_nodes_fd(const weftrun_job_t *job)
{
    return job->nodes != NULL && job->nodes->watch != NULL ? weft__store_fd(job->nodes->watch) : -1;
}

uint64_t weftrun_nodes_tick(weftrun_job_t *job, uint64_t now)
{
    weftrun_nodes_t *n = job->nodes;
    if (n == NULL || n->start == 0 || n->ctl == NULL) {
        return 0;
    }
    if (now >= n->renew_at_ms) {
        weft_status_t st = weft__store_lease(n->ctl, n->end_key, "lost", 4, n->ttl_ms);
        if (st != WEFT_OK) {
            store_gone(job, st, "cannot renew this node's lease");
            weft__store_close(n->ctl);
            n->ctl = NULL;
            return 0;
        }
        n->renew_at_ms = now + n->period_ms;
    }
    return n->renew_at_ms;
}

void weftrun_nodes_publish(weftrun_job_t *job, const char *key, int code, const char *why)
{
    char val[256];
    if (code >= 0) {
        snprintf(val, sizeof(val), "%d %d %s", code, job->opts->node_rank, why);
    } else {
        snprintf(val, sizeof(val), "%d", job->opts->node_rank);
    }
    weftrun_store_set(job, key, val);
}

/*
 * On etcd a lost weftrun's lease lapses only at its TTL (seconds), so the same command
 * started again at once finds its earlier start still registered: wait for @p end_key
 * (the earlier start's end) that long before taking it for a node running twice. weft's
 * own store ends the lease when the connection closes: nothing to wait for there.
 */
static bool earlier_start_lapses(weftrun_job_t *job, const char *end_key)
{
    weftrun_nodes_t *n = job->nodes;
    if (!weft__store_addr_is_etcd(job->store_addr)) {
        return false;
    }
    /* etcd's TTL is the timeout in whole seconds, 2 s at the least; then its sweep. */
    uint64_t wait_ms = 2 * (n->ttl_ms < 2000 ? 2000 : (uint64_t)n->ttl_ms) + 5000;
    WEFT_INFO(job->lg,
              "node %d's earlier start is still registered: waiting up to %llu ms "
              "for its lease to lapse",
              job->opts->node_rank, (unsigned long long)wait_ms);
    void *val;
    size_t len;
    int ms = wait_ms > INT32_MAX ? INT32_MAX : (int)wait_ms;
    if (weft__store_get(n->ctl, end_key, ms, &val, &len) != WEFT_OK) {
        return false;
    }
    free(val);
    return true;
}

/* Register this node (not the serving one); sets job->replacement_node. */
static weft_status_t register_node(weftrun_job_t *job)
{
    weftrun_nodes_t *n = job->nodes;
    int R = job->opts->node_rank;
    char key[64], val[320], host[256] = "";
    int64_t k;
    snprintf(key, sizeof(key), KEY_PREFIX "node/%d/starts", R);
    weft_status_t st = weft__store_add(n->ctl, key, 1, &k);
    if (st != WEFT_OK) {
        return store_gone(job, st, "cannot register this node");
    }
    n->start = (int)k;
    snprintf(n->end_key, sizeof(n->end_key), KEY_PREFIX "end/%d.%d", R, n->start);
    /* Before this start's lease is armed: nothing renews it while this waits. */
    bool earlier_ended = true;
    if (n->start > 1) {
        snprintf(key, sizeof(key), KEY_PREFIX "end/%d.%d", R, n->start - 1);
        earlier_ended = weftrun_store_has(job, key) || earlier_start_lapses(job, key);
    }
    n->renew_at_ms = 0;
    if (weftrun_nodes_tick(job, weft__now_ms()) == 0) {
        return WEFT_ERR_IO;
    }
    gethostname(host, sizeof(host) - 1);
    snprintf(key, sizeof(key), KEY_PREFIX "up/%d.%d", R, n->start);
    snprintf(val, sizeof(val), "host %s, pid %d", host, (int)getpid());
    if ((st = weftrun_store_set(job, key, val)) != WEFT_OK) {
        return st;
    }
    if (n->start == 1) {
        return WEFT_OK;
    }
    if (!earlier_ended) {
        WEFT_ERROR(job->lg,
                   "node %d is running already: start a node again only once it is "
                   "lost (or check --node-rank)",
                   R);
        return WEFT_ERR_INVALID_ARG;
    }
    if (!job->opts->elastic) {
        WEFT_ERROR(job->lg,
                   "node %d ran before in this job: only an --elastic job takes a node "
                   "started again, whose ranks join as replacements",
                   R);
        return WEFT_ERR_INVALID_ARG;
    }
    WEFT_WARN(job->lg, "node %d was lost before: its %d rank(s) join the job as replacements", R,
              job->opts->nranks);
    job->replacement_node = true;
    return WEFT_OK;
}

weft_status_t weftrun_nodes_start(weftrun_job_t *job)
{
    weftrun_nodes_t *n = calloc(1, sizeof(*n));
    if (n == NULL) {
        WEFT_ERROR(job->lg, "out of memory");
        return WEFT_ERR_NO_MEMORY;
    }
    job->nodes = n;
    const weft_config_t *cfg = &job->cfg; /* read by main() */
    n->ttl_ms = cfg->failure_timeout_ms == 0           ? 1
                : cfg->failure_timeout_ms > UINT32_MAX ? UINT32_MAX
                                                       : (uint32_t)cfg->failure_timeout_ms;
    n->period_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : 100;
    int wait_ms = cfg->connect_timeout_ms > INT32_MAX ? INT32_MAX : (int)cfg->connect_timeout_ms;
    n->arrive_by_ms = weft__now_ms() + (uint64_t)wait_ms;
    weft_status_t st = weft__store_connect(job->store_addr, job->token, wait_ms, job->lg, &n->ctl);
    if (st == WEFT_OK) {
        weft__store_share_health(n->ctl, &n->health);
        st = weft__store_connect(job->store_addr, job->token, wait_ms, job->lg, &n->watch);
    }
    if (st == WEFT_OK) {
        weft__store_share_health(n->watch, &n->health);
        st = weft__store_watch(n->watch, KEY_PREFIX);
    }
    if (st != WEFT_OK) {
        WEFT_ERROR(job->lg, "cannot reach the job's store at %s: %s%s", job->store_addr,
                   weft_status_str(st),
                   st == WEFT_ERR_AUTH ? " (is the token the same on every node?)" : "");
        return st;
    }
    if (job->server == NULL) {
        st = register_node(job);
    }
    /* What happened before this node came (a stop, lost nodes) counts already. */
    if (st == WEFT_OK) {
        read_events(job, true);
    }
    return st;
}

/*
 * The serving node: the nodes it waits for, listed in @p list: incarnations still
 * running, and nodes never seen while they may still come (their ranks wait as long for
 * each other). A node ended or lost is not waited for again unless it comes back.
 */
static int nodes_to_wait_for(const weftrun_job_t *job, char *list, size_t len)
{
    const weftrun_nodes_t *n = job->nodes;
    bool may_come = weft__now_ms() < n->arrive_by_ms;
    int count = 0;
    size_t off = 0;
    list[0] = '\0';
    for (int node = 1; node < job->opts->nnodes; node++) {
        bool seen = false, running = false;
        for (size_t i = 0; i < n->ninc; i++) {
            if (n->incs[i].node == node) {
                seen = true;
                running |= !n->incs[i].ended;
            }
        }
        if (running || (!seen && may_come)) {
            count++;
            if (off < len) {
                off += (size_t)snprintf(list + off, len - off, "%s%d%s", count > 1 ? ", " : "",
                                        node, seen ? "" : " (not up yet)");
            }
        }
    }
    return count;
}

/* The serving node keeps the store until every other node's weftrun has ended. */
static void wait_for_nodes(weftrun_job_t *job)
{
    weftrun_nodes_t *n = job->nodes;
    char list[256];
    bool said = false;
    while (n->watch != NULL && nodes_to_wait_for(job, list, sizeof(list)) > 0) {
        if (!said) {
            WEFT_INFO(job->lg, "waiting for node(s) %s to end before closing the store", list);
            said = true;
        }
        struct pollfd p[2] = {{.fd = weft__store_fd(n->watch), .events = POLLIN},
                              {.fd = job->sigfd, .events = POLLIN}};
        uint64_t now = weft__now_ms();
        int ms = now < n->arrive_by_ms ? (int)(n->arrive_by_ms - now) : -1;
        if (poll(p, 2, ms) < 0 && errno != EINTR) {
            return;
        }
        if (p[1].revents != 0) {
            int sig;
            while ((sig = weftrun_next_signal(job->sigfd)) != 0) {
                if (sig != SIGCHLD) {
                    WEFT_WARN(job->lg, "%s: closing the store under node(s) %s", strsignal(sig),
                              list);
                    return;
                }
            }
        }
        read_events(job, false);
    }
}

int weftrun_nodes_finish(weftrun_job_t *job, int code)
{
    weftrun_nodes_t *n = job->nodes;
    if (n == NULL) {
        return code;
    }
    if (job->server != NULL) {
        wait_for_nodes(job);
        code = code == 0 ? n->late_stop_code : code;
    } else if (n->ctl != NULL && n->start > 0) {
        char val[32];
        snprintf(val, sizeof(val), "exit %d", code);
        /* Set before the lease is disarmed: a death in between still ends this node. */
        if (weftrun_store_set(job, n->end_key, val) == WEFT_OK) {
            weft__store_lease(n->ctl, n->end_key, "lost", 4, 0);
        }
    }
    weft__store_close(n->ctl);
    weft__store_close(n->watch);
    free(n->incs);
    free(n);
    job->nodes = NULL;
    return code;
}
