/* Loads libcurl with dlopen (etcd_curl.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/store/etcd_curl.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static weft_curl_t curl;
static const weft_curl_t *loaded;
static char why[256];

static void *sym(void *lib, const char *name, bool *ok)
{
    void *p = dlsym(lib, name);
    if (p == NULL && *ok) {
        snprintf(why, sizeof(why), "%s has no %s", "libcurl", name);
        *ok = false;
    }
    return p;
}

static void load(void)
{
    const char *name = getenv("WEFT_CURL_LIBRARY");
    name = name != NULL && name[0] != '\0' ? name : "libcurl.so.4";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(why, sizeof(why), "cannot load %s (WEFT_CURL_LIBRARY): %s", name, dlerror());
        return;
    }
    bool ok = true;
    /* POSIX lets a data pointer from dlsym become a function pointer this way. */
    *(void **)&curl.global_init = sym(lib, "curl_global_init", &ok);
    *(void **)&curl.easy_init = sym(lib, "curl_easy_init", &ok);
    *(void **)&curl.easy_setopt = sym(lib, "curl_easy_setopt", &ok);
    *(void **)&curl.easy_perform = sym(lib, "curl_easy_perform", &ok);
    *(void **)&curl.easy_getinfo = sym(lib, "curl_easy_getinfo", &ok);
    *(void **)&curl.easy_cleanup = sym(lib, "curl_easy_cleanup", &ok);
    *(void **)&curl.easy_strerror = sym(lib, "curl_easy_strerror", &ok);
    *(void **)&curl.slist_append = sym(lib, "curl_slist_append", &ok);
    *(void **)&curl.slist_free_all = sym(lib, "curl_slist_free_all", &ok);
    *(void **)&curl.multi_init = sym(lib, "curl_multi_init", &ok);
    *(void **)&curl.multi_add_handle = sym(lib, "curl_multi_add_handle", &ok);
    *(void **)&curl.multi_remove_handle = sym(lib, "curl_multi_remove_handle", &ok);
    *(void **)&curl.multi_perform = sym(lib, "curl_multi_perform", &ok);
    *(void **)&curl.multi_poll = sym(lib, "curl_multi_poll", &ok);     /* 7.66 */
    *(void **)&curl.multi_wakeup = sym(lib, "curl_multi_wakeup", &ok); /* 7.68 */
    *(void **)&curl.multi_info_read = sym(lib, "curl_multi_info_read", &ok);
    *(void **)&curl.multi_cleanup = sym(lib, "curl_multi_cleanup", &ok);
    if (ok && curl.global_init(WEFT__CURL_GLOBAL_DEFAULT) != WEFT__CURLE_OK) {
        snprintf(why, sizeof(why), "curl_global_init failed");
        ok = false;
    }
    if (ok && (curl.no_expect = curl.slist_append(NULL, "Expect:")) == NULL) {
        snprintf(why, sizeof(why), "no memory");
        ok = false;
    }
    if (!ok) {
        dlclose(lib);
        return;
    }
    loaded = &curl; /* the library stays loaded for the process */
}

const weft_curl_t *weft__curl(const weft_logger_t *lg)
{
    pthread_once(&once, load);
    if (loaded == NULL) {
        WEFT_ERROR(lg, "store: the etcd backend needs libcurl: %s", why);
    }
    return loaded;
}
