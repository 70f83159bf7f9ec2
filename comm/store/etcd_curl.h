/*
 * The part of libcurl the etcd backend uses, opened with dlopen at the first etcd
 * connection (WEFT_CURL_LIBRARY, default libcurl.so.4), so that libweft loads and runs
 * with its own store where libcurl is absent and the build needs no curl headers. The
 * declarations below are libcurl's stable ABI (its option numbers, the CURLMsg and
 * curl_waitfd layouts of its headers), declared here rather than included.
 */
#ifndef WEFT_STORE_ETCD_CURL_H
#define WEFT_STORE_ETCD_CURL_H

#include <stddef.h>

#include "comm/ctx/log.h"
#include "weft/status.h"

typedef void CURL;
typedef void CURLM;
typedef int CURLcode;

struct curl_slist;

#define WEFT__CURLE_OK 0
#define WEFT__CURLE_COULDNT_CONNECT 7
#define WEFT__CURLE_WRITE_ERROR 23
#define WEFT__CURLE_OPERATION_TIMEDOUT 28

#define WEFT__CURLOPT_WRITEDATA 10001
#define WEFT__CURLOPT_URL 10002
#define WEFT__CURLOPT_PROXY 10004
#define WEFT__CURLOPT_WRITEFUNCTION 20011
#define WEFT__CURLOPT_POSTFIELDS 10015
#define WEFT__CURLOPT_HTTPHEADER 10023
#define WEFT__CURLOPT_POST 47
#define WEFT__CURLOPT_POSTFIELDSIZE 60
#define WEFT__CURLOPT_NOSIGNAL 99
#define WEFT__CURLOPT_TCP_NODELAY 121
#define WEFT__CURLOPT_TIMEOUT_MS 155
#define WEFT__CURLOPT_CONNECTTIMEOUT_MS 156
#define WEFT__CURLOPT_PROTOCOLS 181
#define WEFT__CURLPROTO_HTTP 1L
#define WEFT__CURLINFO_RESPONSE_CODE (0x200000 + 2)
#define WEFT__CURL_GLOBAL_DEFAULT 3L
#define WEFT__CURLMSG_DONE 1

typedef struct weft_curl_msg { /* CURLMsg */
    int msg;
    CURL *easy_handle;
    union {
        void *whatever;
        CURLcode result;
    } data;
} weft_curl_msg_t;

typedef struct weft_curl_waitfd { /* struct curl_waitfd */
    int fd;
    short events;
    short revents;
} weft_curl_waitfd_t;

typedef struct weft_curl {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *h, int option, ...);
    CURLcode (*easy_perform)(CURL *h);
    CURLcode (*easy_getinfo)(CURL *h, int info, ...);
    void (*easy_cleanup)(CURL *h);
    const char *(*easy_strerror)(CURLcode code);
    struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
    void (*slist_free_all)(struct curl_slist *l);
    CURLM *(*multi_init)(void);
    int (*multi_add_handle)(CURLM *m, CURL *h);
    int (*multi_remove_handle)(CURLM *m, CURL *h);
    int (*multi_perform)(CURLM *m, int *running);
    int (*multi_poll)(CURLM *m, weft_curl_waitfd_t *extra, unsigned n, int timeout_ms, int *ret);
    int (*multi_wakeup)(CURLM *m);
    weft_curl_msg_t *(*multi_info_read)(CURLM *m, int *left);
    int (*multi_cleanup)(CURLM *m);
    struct curl_slist *no_expect; /* "Expect:": no 100-continue round trip on big bodies */
} weft_curl_t;

/* libcurl, loaded once per process; NULL (logged once) when it cannot be. Thread-safe. */
const weft_curl_t *weft__curl(const weft_logger_t *lg);

#endif
