/*
 * The store server's SCANs (proto.h): a read of every key under a prefix, in pages, which
 * may first wait until enough keys are there. weft_init reads every member's address
 * with one (docs/store-protocol.md, "Scans"). Called with the server's mutex held.
 *
 * A SCAN that waits is parked in the group of its prefix, which counts the keys under the
 * prefix as they are created and removed and orders its SCANs by the count they wait for:
 * a key created releases SCANs from the front, so N ranks waiting for N addresses cost a
 * test per key, not N. A SCAN whose count is there is due: its page is built from the
 * server's queue of due SCANs, in turn, while the output queued to all connections is
 * below WEFT__STORE_SCAN_QUEUED, a few megabytes per turn of the loop (server.c), so that
 * thousands of ranks released at once neither queue gigabytes nor hold up the others'
 * requests (lease renewals) behind one long turn. Pages are cut from a sorted view of the
 * keys under the prefix, kept until a key is created or removed: the pages of a start-up
 * share one sort.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/store/server.h"
#include "util/clock.h"

/* What one call of weft__store_srv_scans_serve builds at most (a turn of the loop). */
#define SERVE_BYTES_PER_TURN (8u << 20)
#define SERVE_PAGES_PER_TURN 256

static const char *scan_after(const store_scan_t *q)
{
    return q->text + q->plen + 1;
}

static bool under(const store_entry_t *e, const char *prefix, size_t plen)
{
    return e->klen >= plen && memcmp(e->key, prefix, plen) == 0;
}

/* ---- lists: a group's parked SCANs, the due queue ---- */

static void list_unlink(store_scan_t **head, store_scan_t **tail, store_scan_t *q)
{
    if (q->prev != NULL) {
        q->prev->next = q->next;
    } else {
        *head = q->next;
    }
    if (q->next != NULL) {
        q->next->prev = q->prev;
    } else {
        *tail = q->prev;
    }
    q->prev = q->next = NULL;
}

static void list_append(store_scan_t **head, store_scan_t **tail, store_scan_t *q)
{
    q->next = NULL;
    q->prev = *tail;
    if (*tail != NULL) {
        (*tail)->next = q;
    } else {
        *head = q;
    }
    *tail = q;
}

static store_scan_group_t *group_find(weft_store_server_t *s, const char *prefix, size_t plen)
{
    store_scan_group_t *g = s->scan_groups;
    while (g != NULL && (g->plen != plen || memcmp(g->prefix, prefix, plen) != 0)) {
        g = g->next;
    }
    return g;
}

static void group_free_if_empty(weft_store_server_t *s, store_scan_group_t *g)
{
    if (g->head != NULL) {
        return;
    }
    store_scan_group_t **p = &s->scan_groups;
    while (*p != g) {
        p = &(*p)->next;
    }
    *p = g->next;
    free(g);
}

/* @p q leaves its group for the end of the due queue (the group may be left empty). */
static void make_due(weft_store_server_t *s, store_scan_t *q)
{
    store_scan_group_t *g = q->group;
    if (g != NULL) {
        list_unlink(&g->head, &g->tail, q);
        q->group = NULL;
        if (q->conn->parked == q) {
            q->conn->parked = NULL;
        }
    }
    list_append(&s->due_head, &s->due_tail, q);
    s->scans_more = true; /* a key set at a turn's very end: served at the next, at once */
}

/* Takes @p q out of its group or the due queue and of its connection, and frees it. */
static void scan_free(weft_store_server_t *s, store_scan_t *q)
{
    store_conn_t *c = q->conn;
    store_scan_group_t *g = q->group;
    if (g != NULL) {
        list_unlink(&g->head, &g->tail, q);
        group_free_if_empty(s, g);
    } else {
        list_unlink(&s->due_head, &s->due_tail, q);
    }
    if (c->parked == q) {
        c->parked = NULL;
    }
    store_scan_t **p = &c->scans;
    while (*p != q) {
        p = &(*p)->conn_next;
    }
    *p = q->conn_next;
    c->nwaits--;
    s->data_bytes -= q->plen + q->alen + ENTRY_OVERHEAD;
    free(q);
}

/* ---- counting the keys under a prefix ---- */

static void count_one(weft_store_server_t *s, const store_entry_t *e, void *arg)
{
    (void)s;
    (void)e;
    (*(size_t *)arg)++;
}

static size_t keys_under(weft_store_server_t *s, const char *prefix, size_t plen)
{
    const store_scan_group_t *g = group_find(s, prefix, plen);
    size_t n = 0;
    if (g != NULL) {
        return g->count;
    }
    weft__store_srv_dir_scan(s, prefix, plen, count_one, &n);
    return n;
}

void weft__store_srv_scan_key_added(weft_store_server_t *s, const store_entry_t *e)
{
    s->keys_gen++;
    for (store_scan_group_t *g = s->scan_groups, *next; g != NULL; g = next) {
        next = g->next;
        if (!under(e, g->prefix, g->plen)) {
            continue;
        }
        g->count++;
        while (g->head != NULL && g->head->min_count <= g->count) {
            make_due(s, g->head);
        }
        group_free_if_empty(s, g);
    }
}

void weft__store_srv_scan_key_removed(weft_store_server_t *s, const store_entry_t *e)
{
    s->keys_gen++;
    for (store_scan_group_t *g = s->scan_groups; g != NULL; g = g->next) {
        if (under(e, g->prefix, g->plen)) {
            g->count--;
        }
    }
}

/* ---- the request ---- */

/* The group of @p prefix, created with @p count keys if there is none; NULL: no memory. */
static store_scan_group_t *group_get(weft_store_server_t *s, const char *prefix, size_t plen,
                                     size_t count)
{
    store_scan_group_t *g = group_find(s, prefix, plen);
    if (g == NULL && (g = calloc(1, sizeof(*g) + plen + 1)) != NULL) {
        memcpy(g->prefix, prefix, plen);
        g->plen = plen;
        g->count = count;
        g->next = s->scan_groups;
        s->scan_groups = g;
    }
    return g;
}

/* Parks @p q in @p g after the SCANs that wait for as many keys or fewer. */
static void park(weft_store_server_t *s, store_scan_group_t *g, store_scan_t *q, uint32_t timeout)
{
    store_scan_t *at = g->tail;
    while (at != NULL && at->min_count > q->min_count) {
        at = at->prev;
    }
    q->group = g;
    q->prev = at;
    q->next = at != NULL ? at->next : g->head;
    if (q->next != NULL) {
        q->next->prev = q;
    } else {
        g->tail = q;
    }
    if (at != NULL) {
        at->next = q;
    } else {
        g->head = q;
    }
    q->conn->parked = q;
    q->deadline_ms = weft__now_ms() + timeout;
    if (q->deadline_ms < s->waits_due_ms) {
        s->waits_due_ms = q->deadline_ms;
    }
}

bool weft__store_srv_scan(weft_store_server_t *s, store_conn_t *c, const char *prefix, size_t plen,
                          const uint8_t *rest, size_t rlen)
{
    weft_store_scan_wire_t a;
    if (weft__store_scan_decode(rest, rlen, &a) != WEFT_OK) {
        return false;
    }
    if (c->nwaits >= WEFT__STORE_MAX_WAITS) {
        WEFT_WARN(s->lg, "store: refused a SCAN of %.*s by %s: %d of its requests wait already",
                  (int)plen, prefix, c->peer, WEFT__STORE_MAX_WAITS);
        weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
        return true;
    }
    size_t have = a.min_count > 0 ? keys_under(s, prefix, plen) : 0;
    bool waits = have < a.min_count;
    if (waits && a.timeout_ms == 0) {
        weft__store_srv_resp(s, c, WEFT_ERR_TIMEOUT, NULL, 0);
        return true;
    }
    if (waits && c->parked != NULL) {
        /* One waits per connection: the earlier gives way (its caller gave up on it). */
        weft__store_srv_resp_id(s, c, c->parked->id, WEFT_ERR_TIMEOUT, NULL, 0);
        scan_free(s, c->parked);
    }
    store_scan_group_t *g = waits ? group_get(s, prefix, plen, have) : NULL;
    size_t charge = plen + a.alen + ENTRY_OVERHEAD;
    store_scan_t *q = (!waits || g != NULL) && s->data_bytes + charge <= WEFT__STORE_MAX_DATA
                          ? calloc(1, sizeof(*q) + plen + a.alen + 2)
                          : NULL;
    if (q == NULL) {
        if (g != NULL) {
            group_free_if_empty(s, g);
        }
        weft__store_srv_resp(s, c, WEFT_ERR_NO_MEMORY, NULL, 0);
        return true;
    }
    memcpy(q->text, prefix, plen);
    memcpy(q->text + plen + 1, a.after, a.alen);
    q->plen = plen;
    q->alen = a.alen;
    q->conn = c;
    q->id = c->in_id;
    q->min_count = a.min_count;
    q->max_bytes = a.max_bytes;
    q->conn_next = c->scans;
    c->scans = q;
    c->nwaits++;
    s->data_bytes += charge;
    if (waits) {
        park(s, g, q, a.timeout_ms);
    } else {
        make_due(s, q);
    }
    return true;
}

uint64_t weft__store_srv_scans_expire(weft_store_server_t *s, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    for (store_scan_group_t *g = s->scan_groups, *gn; g != NULL; g = gn) {
        gn = g->next;
        for (store_scan_t *q = g->head, *qn; q != NULL; q = qn) {
            qn = q->next; /* the group goes only with its last SCAN */
            if (now >= q->deadline_ms) {
                weft__store_srv_resp_id(s, q->conn, q->id, WEFT_ERR_TIMEOUT, NULL, 0);
                scan_free(s, q);
            } else if (q->deadline_ms < next) {
                next = q->deadline_ms;
            }
        }
    }
    return next;
}

void weft__store_srv_scans_drop(weft_store_server_t *s, store_conn_t *c)
{
    while (c->scans != NULL) {
        scan_free(s, c->scans);
    }
}

void weft__store_srv_scans_free(weft_store_server_t *s)
{
    free(s->sorted.v);
    s->sorted.v = NULL;
    s->sorted.n = s->sorted.cap = 0;
    s->sorted.valid = false;
    weft__store_buf_free(&s->page);
}

/* ---- pages ---- */

static int entry_cmp(const void *a, const void *b)
{
    const store_entry_t *x = *(const store_entry_t *const *)a;
    const store_entry_t *y = *(const store_entry_t *const *)b;
    return weft__store_key_cmp(x->key, x->klen, y->key, y->klen);
}

static void collect(weft_store_server_t *s, const store_entry_t *e, void *arg)
{
    (void)arg;
    s->sorted.v[s->sorted.n++] = e; /* room made by sorted_view */
}

/* The keys under @p prefix in byte order, in s->sorted; false: no memory. */
static bool sorted_view(weft_store_server_t *s, const char *prefix, size_t plen)
{
    if (s->sorted.valid && s->sorted.gen == s->keys_gen && s->sorted.plen == plen &&
        memcmp(s->sorted.prefix, prefix, plen) == 0) {
        return true;
    }
    s->sorted.valid = false;
    size_t n = 0;
    weft__store_srv_dir_scan(s, prefix, plen, count_one, &n);
    if (n > s->sorted.cap) {
        const store_entry_t **v = realloc(s->sorted.v, n * sizeof(*v));
        if (v == NULL) {
            return false;
        }
        s->sorted.v = v;
        s->sorted.cap = n;
    }
    s->sorted.n = 0;
    weft__store_srv_dir_scan(s, prefix, plen, collect, NULL);
    if (s->sorted.n > 1) {
        qsort(s->sorted.v, s->sorted.n, sizeof(*s->sorted.v), entry_cmp);
    }
    memcpy(s->sorted.prefix, prefix, plen);
    s->sorted.plen = plen;
    s->sorted.gen = s->keys_gen;
    s->sorted.valid = true;
    return true;
}

/* The index of the first key of the sorted view after @p after (0 when it is empty). */
static size_t first_after(const weft_store_server_t *s, const char *after, size_t alen)
{
    size_t lo = 0, hi = alen > 0 ? s->sorted.n : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const store_entry_t *e = s->sorted.v[mid];
        if (weft__store_key_cmp(e->key, e->klen, after, alen) <= 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* Builds @p q's page in s->page; WEFT_ERR_NO_MEMORY when there is no room for it, or its
 * first entry does not fit a page. */
static weft_status_t page_build(weft_store_server_t *s, const store_scan_t *q)
{
    if (!sorted_view(s, q->text, q->plen)) {
        return WEFT_ERR_NO_MEMORY;
    }
    size_t budget = q->max_bytes == 0 || q->max_bytes > WEFT__STORE_MAX_PAGE ? WEFT__STORE_MAX_PAGE
                                                                             : q->max_bytes;
    size_t i = first_after(s, scan_after(q), q->alen), used = 0;
    uint32_t count = 0;
    weft_store_buf_t *b = &s->page;
    uint8_t hdr[WEFT__STORE_PAGE_HDR_LEN] = {0};
    b->len = 0;
    weft_status_t st = weft__store_buf_put(b, hdr, sizeof(hdr));
    for (; i < s->sorted.n && st == WEFT_OK; i++, count++) {
        const store_entry_t *e = s->sorted.v[i];
        size_t size = WEFT__STORE_PAGE_ENTRY_LEN + e->klen + e->vlen;
        if (used + size > budget && (count > 0 || size > WEFT__STORE_MAX_PAGE)) {
            break; /* the first entry goes in a page of its own, whatever the budget */
        }
        used += size;
        st = weft__store_buf_put_u16(b, (uint16_t)e->klen);
        if (st == WEFT_OK) {
            st = weft__store_buf_put(b, e->key, e->klen);
        }
        if (st == WEFT_OK) {
            st = weft__store_buf_put_u32(b, (uint32_t)e->vlen);
        }
        if (st == WEFT_OK) {
            st = weft__store_buf_put(b, e->val, e->vlen);
        }
    }
    if (st == WEFT_OK && count == 0 && i < s->sorted.n) {
        const store_entry_t *e = s->sorted.v[i];
        WEFT_WARN(s->lg,
                  "store: a SCAN of %s by %s cannot list %s: its value (%zu bytes) does not "
                  "fit a page; read it with GET",
                  q->text, q->conn->peer, e->key, e->vlen);
        st = WEFT_ERR_NO_MEMORY;
    }
    if (st == WEFT_OK) {
        b->data[0] = i < s->sorted.n;
        for (int k = 0; k < 4; k++) {
            b->data[1 + k] = (uint8_t)(count >> (24 - 8 * k));
        }
    }
    return st;
}

bool weft__store_srv_scans_serve(weft_store_server_t *s)
{
    size_t bytes = 0;
    int pages = 0;
    for (store_scan_t *q = s->due_head, *next; q != NULL; q = next) {
        next = q->next;
        if (s->queued >= WEFT__STORE_SCAN_QUEUED) {
            return false; /* the flushes that make room bring the loop back */
        }
        if (bytes >= SERVE_BYTES_PER_TURN || pages >= SERVE_PAGES_PER_TURN) {
            return true; /* the next turn goes on at once, after the others' requests */
        }
        store_conn_t *c = q->conn;
        if (c->dead || !weft__store_srv_wants_input(c)) {
            continue; /* freed with it, or served once its output has drained */
        }
        weft_status_t st = page_build(s, q);
        if (st == WEFT_OK) {
            weft__store_srv_resp_id(s, c, q->id, WEFT_OK, s->page.data, s->page.len);
            bytes += s->page.len;
        } else {
            weft__store_srv_resp_id(s, c, q->id, st, NULL, 0);
        }
        pages++;
        scan_free(s, q);
    }
    return false;
}
