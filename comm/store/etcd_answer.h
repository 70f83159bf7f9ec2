/*
 * The decoders of etcd's answers for the etcd backend (etcd_client.c): everything that
 * turns what an endpoint sent (a range, a transaction's result, a lease grant or
 * keepalive, a count, the messages of a streamed watch) into weft's keys, values and
 * revisions. Answers are untrusted network input: these functions read only the parsed
 * document (json.h), bound every size they take from it, make no request and log
 * nothing (a WEFT_ERR_PROTOCOL is the caller's to report, with its context), so the fuzz
 * target tests/fuzz/fuzz_etcd_json.c runs exactly this code on arbitrary bytes.
 *
 * @p root is the job's root of etcd keys, "weft/<16 hex>/" (WEFT__ETCD_ROOT_LEN bytes).
 * Outputs are set only on WEFT_OK (true); what they hold is malloc'ed, NUL-terminated.
 */
#ifndef WEFT_STORE_ETCD_ANSWER_H
#define WEFT_STORE_ETCD_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/store/json.h"
#include "comm/store/store.h"
#include "weft/status.h"

#define WEFT__ETCD_ROOT_LEN 22           /* "weft/" 16 hex "/" */
#define WEFT__ETCD_MAX_ANSWER (8u << 20) /* bytes of one answer (or one watch message) */

/* ---- the bytes of an answer ---- */

/* An answer's text as it arrives, NUL-terminated, at most WEFT__ETCD_MAX_ANSWER bytes. */
typedef struct weft_etcd_answer {
    char *p;
    size_t len, cap;
    bool too_big; /* it passed the bound: the transfer was aborted */
} weft_etcd_answer_t;

/* libcurl's write callback (@p arg a weft_etcd_answer_t): appends; 0 aborts the transfer
 * (past the bound, or no memory). */
size_t weft__etcd_on_data(char *p, size_t size, size_t n, void *arg);

/* A streamed watch: newline-separated JSON messages, each parsed and handed to @p fn,
 * whose false ends the stream (stopped). A message past the bound or not JSON ends it
 * too (malformed). */
typedef struct weft_etcd_stream {
    weft_etcd_answer_t buf;
    bool (*fn)(void *arg, const weft_json_t *doc);
    void *arg;
    bool stopped, malformed;
} weft_etcd_stream_t;

/* libcurl's write callback of a stream (@p arg a weft_etcd_stream_t). */
size_t weft__etcd_on_stream(char *p, size_t size, size_t n, void *arg);

/* ---- pieces of an answer ---- */

/* The revision in the "header" of answer object @p r. */
bool weft__etcd_header_rev(const weft_json_t *doc, int r, int64_t *rev);
/* The value of kv object @p kv (an empty value is left out by etcd: ""): base64 of at
 * most WEFT__STORE_MAX_VALUE bytes. False: malformed, or no memory. */
bool weft__etcd_kv_value(const weft_json_t *doc, int kv, uint8_t **val, size_t *len);
/* The user key of etcd key @p t (base64) under @p dir ("k/", "n/") of @p root, or NULL
 * (not base64, not under it, empty, or holding a NUL). */
char *weft__etcd_user_key(const char *root, const weft_json_t *doc, int t, const char *dir);
/* A kv of a listing under @p dir: its user key and value. False: malformed or no memory. */
bool weft__etcd_kv_entry(const char *root, const weft_json_t *doc, int kv, const char *dir,
                         char **key, uint8_t **val, size_t *len);

/* ---- answers ---- */

/* The first kv of range answer @p r (an object with "kvs"): WEFT_OK with its value (and
 * its mod_revision if @p mod_rev), WEFT_INPROGRESS when there is none, WEFT_ERR_PROTOCOL,
 * WEFT_ERR_NO_MEMORY. */
weft_status_t weft__etcd_first_kv(const weft_json_t *doc, int r, uint8_t **val, size_t *len,
                                  int64_t *mod_rev);
/* The answer of a range of one key: WEFT_OK and its value, or WEFT_INPROGRESS and the
 * header's revision (to watch from), WEFT_ERR_PROTOCOL, WEFT_ERR_NO_MEMORY. */
weft_status_t weft__etcd_range_one(const weft_json_t *doc, uint8_t **val, size_t *len,
                                   int64_t *rev);

/* What a compare-and-swap transaction answered (etcd_client.c, txn): it won, or else the
 * key's value and revision (cur NULL: absent) and whether the client's marker holds the
 * call's sequence number (@p seq: an earlier try was applied). */
typedef struct weft_etcd_txn_out {
    bool won, ours;
    uint8_t *cur;
    size_t cur_len;
    int64_t cur_rev;
} weft_etcd_txn_out_t;
weft_status_t weft__etcd_txn(const weft_json_t *doc, const char *seq, weft_etcd_txn_out_t *out);

/* A lease grant's id and TTL (both > 0), else WEFT_ERR_PROTOCOL. */
weft_status_t weft__etcd_grant(const weft_json_t *doc, int64_t *id, int64_t *ttl_s);
/* Whether a keepalive's answer says the lease lives (a TTL > 0; a lapsed lease's is left
 * out). */
bool weft__etcd_keepalive_alive(const weft_json_t *doc);
/* A count_only range's count (left out when 0), else WEFT_ERR_PROTOCOL. */
weft_status_t weft__etcd_count(const weft_json_t *doc, int64_t *count);

/* ---- watch messages ---- */

/* The "result" of a watch message, or -1; *canceled when the server ended the watch. */
int weft__etcd_watch_result(const weft_json_t *doc, bool *canceled);
/* A get's wait: the first PUT among the message's events. WEFT_OK and its value,
 * WEFT_INPROGRESS when there is none, WEFT_ERR_PROTOCOL (no result, canceled, a bad
 * value), WEFT_ERR_NO_MEMORY. */
weft_status_t weft__etcd_get_event(const weft_json_t *doc, uint8_t **val, size_t *len);

typedef enum {
    WEFT__ETCD_EV_IGNORE, /* a user key deleted; a notice armed, renewed or disarmed */
    WEFT__ETCD_EV_PUT,    /* a user key set: key, val, version */
    WEFT__ETCD_EV_LAPSE   /* a notice deleted with its lease: key, its val */
} weft_etcd_ev_kind_t;

typedef struct weft_etcd_event {
    weft_etcd_ev_kind_t kind;
    int64_t rev;     /* the event's mod_revision */
    int64_t version; /* a PUT's (1: the key's first) */
    char *key;
    uint8_t *val;
    size_t len;
} weft_etcd_event_t;

/* Event @p ev of a prefix's watch (of user keys under k/ and notices under n/, the
 * notices' with prev_kv). False: malformed (or no memory); the watch ends. */
bool weft__etcd_watch_event(const char *root, const weft_json_t *doc, int ev,
                            weft_etcd_event_t *out);

/* ---- scan pages ---- */

/* The entries of a page being read, and their bytes as store.h counts them. */
typedef struct weft_etcd_page_acc {
    char **keys;
    uint8_t **vals;
    size_t *lens;
    size_t n, cap;
    size_t used;
} weft_etcd_page_acc_t;

void weft__etcd_acc_free(weft_etcd_page_acc_t *acc);

/*
 * Adds the kvs of range answer @p doc to @p acc: keys under @p root "k/" @p prefix, in
 * ascending order after @p after ("" or the resume key) and the last entry, until the
 * page's @p budget bytes are spent (*full: more keys are left). *got: the kvs read.
 * *more: etcd said it holds more past the answer's limit. WEFT_ERR_PROTOCOL (a key out of
 * place, a bad value), WEFT_ERR_NO_MEMORY (also an entry larger than any page).
 */
weft_status_t weft__etcd_page_add(const char *root, const weft_json_t *doc, const char *prefix,
                                  const char *after, size_t budget, weft_etcd_page_acc_t *acc,
                                  size_t *got, bool *full, bool *more);
/* The page in @p acc as store.h hands it out: the keys and values in one block. */
weft_status_t weft__etcd_acc_page(const weft_etcd_page_acc_t *acc, bool more,
                                  weft_store_page_t *page);

#endif
