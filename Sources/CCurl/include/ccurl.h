// libcurl, loaded at run time with dlopen, behind typed wrappers Swift can call.
//
// Why dlopen: linking libcurl makes the dynamic loader load and relocate its ~30 libraries
// (OpenSSL, GnuTLS via librtmp and OpenLDAP, Kerberos, ...) before main runs: 3.5-4.5 ms here, on
// every start of the command. Loaded from a thread (see sf_curl_load), the same work overlaps the
// program's own start-up, and `--help` or a usage error never pays it.
//
// The overlap is partial: while dlopen maps and relocates the libraries, glibc holds the lock
// that pthread_create needs, so a thread the Swift runtime starts meanwhile waits (perf sched: the
// main thread blocked 3.8 ms of a 4.3 ms load, its core idle). Starting the load earlier, from an
// ELF constructor before main, made that wait begin sooner and put the first request later
// (9.1 ms against 7.5 ms after start, 5 runs each), so it starts from main.
//
// Every function below calls libcurl through a pointer filled by sf_curl_load; call
// sf_curl_load (it runs once) before any of them. The variadic entry points get one typed
// wrapper per argument type, because Swift cannot call C variadic functions.
#ifndef SPLITFETCH_CCURL_H
#define SPLITFETCH_CCURL_H

#include <curl/curl.h>

/// Loads libcurl (libcurl.so.4, or the file named by the environment variable
/// SPLITFETCH_LIBCURL) and resolves the functions below, once per process; later and concurrent
/// calls wait for the first and return its result. Returns NULL on success, otherwise a message
/// saying what could not be loaded (the message stays valid).
const char *sf_curl_load(void);

CURLcode sf_curl_global_init(long flags);

CURL *sf_curl_easy_init(void);
void sf_curl_easy_cleanup(CURL *handle);
void sf_curl_easy_reset(CURL *handle);
const char *sf_curl_easy_strerror(CURLcode code);

struct curl_slist *sf_curl_slist_append(struct curl_slist *list, const char *line);
void sf_curl_slist_free_all(struct curl_slist *list);

CURLM *sf_curl_multi_init(void);
CURLMcode sf_curl_multi_cleanup(CURLM *multi);
CURLMcode sf_curl_multi_add_handle(CURLM *multi, CURL *handle);
CURLMcode sf_curl_multi_remove_handle(CURLM *multi, CURL *handle);
CURLMcode sf_curl_multi_perform(CURLM *multi, int *running);
CURLMcode sf_curl_multi_poll(CURLM *multi, struct curl_waitfd extra[], unsigned int count, int timeout_ms, int *ready);
CURLMcode sf_curl_multi_wakeup(CURLM *multi);
CURLMsg *sf_curl_multi_info_read(CURLM *multi, int *left);
const char *sf_curl_multi_strerror(CURLMcode code);

typedef size_t (*sf_curl_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*sf_curl_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                         curl_off_t ultotal, curl_off_t ulnow);

CURLcode sf_easy_setopt_long(CURL *h, CURLoption o, long v);
CURLcode sf_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v);
CURLcode sf_easy_setopt_string(CURL *h, CURLoption o, const char *v);
CURLcode sf_easy_setopt_pointer(CURL *h, CURLoption o, void *v);
CURLcode sf_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v);
CURLcode sf_easy_setopt_data_callback(CURL *h, CURLoption o, sf_curl_data_callback v);
CURLcode sf_easy_setopt_xferinfo(CURL *h, sf_curl_xferinfo_callback v);

CURLcode sf_easy_getinfo_long(CURL *h, CURLINFO i, long *v);
CURLcode sf_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v);
CURLcode sf_easy_getinfo_string(CURL *h, CURLINFO i, char **v);
CURLcode sf_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v);

CURLMcode sf_multi_setopt_long(CURLM *m, CURLMoption o, long v);

#endif
