// libcurl, opened with dlopen on first use; see CCurl.h.
//
// Each libcurl function Splitfetch calls is defined here under its own name, hidden (not in the
// executable's dynamic symbol table, so libcurl's calls to its own functions still reach libcurl):
// it waits for the load (pthread_once, an atomic load once done) and calls through the pointer
// dlsym gave. When libcurl cannot be loaded, each returns what libcurl returns for a failed
// set-up (NULL, CURLE_FAILED_INIT, ...), and sf_curl_failure says why.
#define _GNU_SOURCE
#include "CCurl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

// Not in the executable's dynamic symbol table, whatever the link's options.
#define HIDDEN __attribute__((visibility("hidden")))

#define SF_CURL_FUNCTIONS(X) \
    X(curl_global_init) X(curl_version_info) X(curl_free) \
    X(curl_easy_init) X(curl_easy_cleanup) X(curl_easy_reset) X(curl_easy_pause) X(curl_easy_strerror) \
    X(curl_easy_setopt) X(curl_easy_getinfo) \
    X(curl_slist_append) X(curl_slist_free_all) \
    X(curl_multi_init) X(curl_multi_cleanup) X(curl_multi_add_handle) X(curl_multi_remove_handle) \
    X(curl_multi_perform) X(curl_multi_poll) X(curl_multi_wakeup) X(curl_multi_info_read) X(curl_multi_strerror) \
    X(curl_multi_setopt) \
    X(curl_url) X(curl_url_cleanup) X(curl_url_set) X(curl_url_get)

// Written once, inside pthread_once; read only after it (which orders the writes before).
static struct {
#define SF_POINTER(name) __typeof__(name) *name;
    SF_CURL_FUNCTIONS(SF_POINTER)
#undef SF_POINTER
} api;
static int loaded;
static char failure[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    // The SONAME: the library libcurl4-openssl's package installs, as the linker would record it.
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *why = dlerror();
        snprintf(failure, sizeof failure, "cannot load libcurl.so.4: %s", why ? why : "unknown error");
        return;
    }
#define SF_RESOLVE(name)                                                                        \
    if ((api.name = (__typeof__(name) *)dlsym(library, #name)) == NULL) {                        \
        snprintf(failure, sizeof failure, "libcurl.so.4 has no %s: it is older than Splitfetch needs", #name); \
        return;                                                                                 \
    }
    SF_CURL_FUNCTIONS(SF_RESOLVE)
#undef SF_RESOLVE
    CURLcode code = api.curl_global_init(CURL_GLOBAL_DEFAULT);
    if (code != CURLE_OK) {
        snprintf(failure, sizeof failure, "curl_global_init failed: %s", api.curl_easy_strerror(code));
        return;
    }
    loaded = 1;
}

static inline int ready(void) {
    pthread_once(&once, load);
    return loaded;
}

HIDDEN const char *sf_curl_failure(void) {
    return ready() ? NULL : failure;
}

static const char not_loaded[] = "libcurl could not be loaded";

// The stubs, under libcurl's names.
HIDDEN void curl_free(void *p) { if (ready()) api.curl_free(p); }

HIDDEN CURL *curl_easy_init(void) { return ready() ? api.curl_easy_init() : NULL; }
HIDDEN void curl_easy_cleanup(CURL *h) { if (ready()) api.curl_easy_cleanup(h); }
HIDDEN void curl_easy_reset(CURL *h) { if (ready()) api.curl_easy_reset(h); }
HIDDEN CURLcode curl_easy_pause(CURL *h, int bitmask) { return ready() ? api.curl_easy_pause(h, bitmask) : CURLE_FAILED_INIT; }
HIDDEN const char *curl_easy_strerror(CURLcode code) { return ready() ? api.curl_easy_strerror(code) : not_loaded; }

HIDDEN struct curl_slist *curl_slist_append(struct curl_slist *list, const char *data) {
    return ready() ? api.curl_slist_append(list, data) : NULL;
}
HIDDEN void curl_slist_free_all(struct curl_slist *list) { if (ready()) api.curl_slist_free_all(list); }

HIDDEN CURLM *curl_multi_init(void) { return ready() ? api.curl_multi_init() : NULL; }
HIDDEN CURLMcode curl_multi_cleanup(CURLM *m) { return ready() ? api.curl_multi_cleanup(m) : CURLM_BAD_HANDLE; }
HIDDEN CURLMcode curl_multi_add_handle(CURLM *m, CURL *h) { return ready() ? api.curl_multi_add_handle(m, h) : CURLM_BAD_HANDLE; }
HIDDEN CURLMcode curl_multi_remove_handle(CURLM *m, CURL *h) {
    return ready() ? api.curl_multi_remove_handle(m, h) : CURLM_BAD_HANDLE;
}
HIDDEN CURLMcode curl_multi_perform(CURLM *m, int *running) { return ready() ? api.curl_multi_perform(m, running) : CURLM_BAD_HANDLE; }
HIDDEN CURLMcode curl_multi_poll(CURLM *m, struct curl_waitfd extra_fds[], unsigned int extra_nfds, int timeout_ms, int *ret) {
    return ready() ? api.curl_multi_poll(m, extra_fds, extra_nfds, timeout_ms, ret) : CURLM_BAD_HANDLE;
}
HIDDEN CURLMcode curl_multi_wakeup(CURLM *m) { return ready() ? api.curl_multi_wakeup(m) : CURLM_BAD_HANDLE; }
HIDDEN CURLMsg *curl_multi_info_read(CURLM *m, int *queued) { return ready() ? api.curl_multi_info_read(m, queued) : NULL; }
HIDDEN const char *curl_multi_strerror(CURLMcode code) { return ready() ? api.curl_multi_strerror(code) : not_loaded; }

HIDDEN CURLU *curl_url(void) { return ready() ? api.curl_url() : NULL; }
HIDDEN void curl_url_cleanup(CURLU *u) { if (ready()) api.curl_url_cleanup(u); }
HIDDEN CURLUcode curl_url_set(CURLU *u, CURLUPart what, const char *part, unsigned int flags) {
    return ready() ? api.curl_url_set(u, what, part, flags) : CURLUE_BAD_HANDLE;
}
HIDDEN CURLUcode curl_url_get(CURLU *u, CURLUPart what, char **part, unsigned int flags) {
    return ready() ? api.curl_url_get(u, what, part, flags) : CURLUE_BAD_HANDLE;
}

// The typed wrappers of the variadic calls. A handle exists only once libcurl is loaded.
HIDDEN CURLcode sf_easy_setopt_long(CURL *h, CURLoption o, long v) { return ready() ? api.curl_easy_setopt(h, o, v) : CURLE_FAILED_INIT; }
HIDDEN CURLcode sf_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) {
    return ready() ? api.curl_easy_setopt(h, o, v) : CURLE_FAILED_INIT;
}
HIDDEN CURLcode sf_easy_setopt_string(CURL *h, CURLoption o, const char *v) {
    return ready() ? api.curl_easy_setopt(h, o, v) : CURLE_FAILED_INIT;
}
HIDDEN CURLcode sf_easy_setopt_pointer(CURL *h, CURLoption o, void *v) {
    return ready() ? api.curl_easy_setopt(h, o, v) : CURLE_FAILED_INIT;
}
HIDDEN CURLcode sf_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) {
    return ready() ? api.curl_easy_setopt(h, o, v) : CURLE_FAILED_INIT;
}
HIDDEN CURLcode sf_easy_setopt_data_callback(CURL *h, CURLoption o, sf_curl_data_callback v) {
    return ready() ? api.curl_easy_setopt(h, o, v) : CURLE_FAILED_INIT;
}
HIDDEN CURLcode sf_easy_setopt_ssh_key_callback(CURL *h, sf_ssh_key_callback v) {
    return ready() ? api.curl_easy_setopt(h, CURLOPT_SSH_KEYFUNCTION, v) : CURLE_FAILED_INIT;
}

static int reset_on_close(void *clientp, curl_socket_t fd, curlsocktype purpose) {
    struct linger l = { 1, 0 };
    (void)clientp;
    (void)purpose;
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    return CURL_SOCKOPT_OK;
}
HIDDEN CURLcode sf_easy_reset_on_close(CURL *h) {
    return ready() ? api.curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, reset_on_close) : CURLE_FAILED_INIT;
}

HIDDEN CURLcode sf_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return ready() ? api.curl_easy_getinfo(h, i, v) : CURLE_FAILED_INIT; }
HIDDEN CURLcode sf_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) {
    return ready() ? api.curl_easy_getinfo(h, i, v) : CURLE_FAILED_INIT;
}
HIDDEN CURLcode sf_easy_getinfo_string(CURL *h, CURLINFO i, char **v) {
    return ready() ? api.curl_easy_getinfo(h, i, v) : CURLE_FAILED_INIT;
}
HIDDEN CURLcode sf_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) {
    return ready() ? api.curl_easy_getinfo(h, i, v) : CURLE_FAILED_INIT;
}

HIDDEN curl_version_info_data *sf_curl_version_info(void) { return ready() ? api.curl_version_info(CURLVERSION_NOW) : NULL; }

HIDDEN CURLMcode sf_multi_setopt_long(CURLM *m, CURLMoption o, long v) {
    return ready() ? api.curl_multi_setopt(m, o, v) : CURLM_BAD_HANDLE;
}
