#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "ccurl.h"

#if defined(__APPLE__)
#define SF_LIBCURL "libcurl.4.dylib"
#else
#define SF_LIBCURL "libcurl.so.4"
#endif

// The libcurl functions used, in one table. Written once by load_once (under pthread_once),
// read-only afterwards; pthread_once makes the writes visible to every thread that calls
// sf_curl_load.
static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    void (*easy_reset)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_perform)(CURLM *, int *);
    CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd[], unsigned int, int, int *);
    CURLMcode (*multi_wakeup)(CURLM *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    const char *(*multi_strerror)(CURLMcode);
} api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *load_error;
static char load_error_text[512];

static void load_once(void) {
    // RTLD_LAZY: functions are bound on their first call, as for a library linked at build
    // time; RTLD_NOW, binding every call site of 30 libraries up front, delayed the first
    // request by a millisecond here. RTLD_LOCAL: libcurl's symbols stay out of the global
    // namespace.
    const char *name = getenv("SPLITFETCH_LIBCURL");
    if (!name || !*name) name = SF_LIBCURL;
    void *lib = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error_text, sizeof load_error_text, "cannot load libcurl (%s): %s", name, dlerror());
        load_error = load_error_text;
        return;
    }
#define SF_RESOLVE(field, symbol)                                                                  \
    do {                                                                                           \
        *(void **)&api.field = dlsym(lib, symbol);                                                 \
        if (!api.field) {                                                                          \
            snprintf(load_error_text, sizeof load_error_text, "%s has no %s", name, symbol);       \
            load_error = load_error_text;                                                          \
            return;                                                                                \
        }                                                                                          \
    } while (0)
    SF_RESOLVE(global_init, "curl_global_init");
    SF_RESOLVE(easy_init, "curl_easy_init");
    SF_RESOLVE(easy_cleanup, "curl_easy_cleanup");
    SF_RESOLVE(easy_reset, "curl_easy_reset");
    SF_RESOLVE(easy_strerror, "curl_easy_strerror");
    SF_RESOLVE(easy_setopt, "curl_easy_setopt");
    SF_RESOLVE(easy_getinfo, "curl_easy_getinfo");
    SF_RESOLVE(slist_append, "curl_slist_append");
    SF_RESOLVE(slist_free_all, "curl_slist_free_all");
    SF_RESOLVE(multi_init, "curl_multi_init");
    SF_RESOLVE(multi_cleanup, "curl_multi_cleanup");
    SF_RESOLVE(multi_add_handle, "curl_multi_add_handle");
    SF_RESOLVE(multi_remove_handle, "curl_multi_remove_handle");
    SF_RESOLVE(multi_perform, "curl_multi_perform");
    SF_RESOLVE(multi_poll, "curl_multi_poll");
    SF_RESOLVE(multi_wakeup, "curl_multi_wakeup");
    SF_RESOLVE(multi_info_read, "curl_multi_info_read");
    SF_RESOLVE(multi_setopt, "curl_multi_setopt");
    SF_RESOLVE(multi_strerror, "curl_multi_strerror");
#undef SF_RESOLVE
}

const char *sf_curl_load(void) {
    pthread_once(&once, load_once);
    return load_error;
}

CURLcode sf_curl_global_init(long flags) { return api.global_init(flags); }

CURL *sf_curl_easy_init(void) { return api.easy_init(); }
void sf_curl_easy_cleanup(CURL *handle) { api.easy_cleanup(handle); }
void sf_curl_easy_reset(CURL *handle) { api.easy_reset(handle); }
const char *sf_curl_easy_strerror(CURLcode code) { return api.easy_strerror(code); }

struct curl_slist *sf_curl_slist_append(struct curl_slist *list, const char *line) { return api.slist_append(list, line); }
void sf_curl_slist_free_all(struct curl_slist *list) { api.slist_free_all(list); }

CURLM *sf_curl_multi_init(void) { return api.multi_init(); }
CURLMcode sf_curl_multi_cleanup(CURLM *multi) { return api.multi_cleanup(multi); }
CURLMcode sf_curl_multi_add_handle(CURLM *multi, CURL *handle) { return api.multi_add_handle(multi, handle); }
CURLMcode sf_curl_multi_remove_handle(CURLM *multi, CURL *handle) { return api.multi_remove_handle(multi, handle); }
CURLMcode sf_curl_multi_perform(CURLM *multi, int *running) { return api.multi_perform(multi, running); }
CURLMcode sf_curl_multi_poll(CURLM *multi, struct curl_waitfd extra[], unsigned int count, int timeout_ms, int *ready) {
    return api.multi_poll(multi, extra, count, timeout_ms, ready);
}
CURLMcode sf_curl_multi_wakeup(CURLM *multi) { return api.multi_wakeup(multi); }
CURLMsg *sf_curl_multi_info_read(CURLM *multi, int *left) { return api.multi_info_read(multi, left); }
const char *sf_curl_multi_strerror(CURLMcode code) { return api.multi_strerror(code); }

CURLcode sf_easy_setopt_long(CURL *h, CURLoption o, long v) { return api.easy_setopt(h, o, v); }
CURLcode sf_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return api.easy_setopt(h, o, v); }
CURLcode sf_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return api.easy_setopt(h, o, v); }
CURLcode sf_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return api.easy_setopt(h, o, v); }
CURLcode sf_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return api.easy_setopt(h, o, v); }
CURLcode sf_easy_setopt_data_callback(CURL *h, CURLoption o, sf_curl_data_callback v) { return api.easy_setopt(h, o, v); }
CURLcode sf_easy_setopt_xferinfo(CURL *h, sf_curl_xferinfo_callback v) { return api.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, v); }

CURLcode sf_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return api.easy_getinfo(h, i, v); }
CURLcode sf_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return api.easy_getinfo(h, i, v); }
CURLcode sf_easy_getinfo_string(CURL *h, CURLINFO i, char **v) { return api.easy_getinfo(h, i, v); }
CURLcode sf_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return api.easy_getinfo(h, i, v); }

CURLMcode sf_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return api.multi_setopt(m, o, v); }
