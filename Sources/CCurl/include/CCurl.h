// libcurl (libcurl4-openssl-dev's headers), loaded at run time rather than linked.
//
// libcurl and the 25 libraries it needs took about 5 ms of a process's start on this machine
// (relocations and constructors), before the first line of Swift; a refresh of a list waits for
// that before its first request. So the executable does not link it: CurlLoader.c opens it with
// dlopen, once, on first use (Splitfetch's `Libcurl.preload` starts that on a thread of its own
// ahead of the first download), and defines each libcurl function Splitfetch calls
// (curl_easy_init, curl_url_set, ...) as a hidden stub that waits for the load and calls through.
// Callers use libcurl's own names and types.
//
// Swift cannot call a C variadic function, so each argument type of curl_easy_setopt,
// curl_easy_getinfo and curl_multi_setopt gets a function of its own here.
#ifndef SPLITFETCH_CCURL_H
#define SPLITFETCH_CCURL_H

#include <curl/curl.h>
#include <sys/socket.h>

/// Loads libcurl and runs curl_global_init if that has not been done (waiting for a load under way
/// on another thread); then NULL, or what failed ("cannot load libcurl.so.4: ...").
const char *sf_curl_failure(void);

typedef size_t (*sf_curl_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);

CURLcode sf_easy_setopt_long(CURL *h, CURLoption o, long v);
CURLcode sf_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v);
CURLcode sf_easy_setopt_string(CURL *h, CURLoption o, const char *v);
CURLcode sf_easy_setopt_pointer(CURL *h, CURLoption o, void *v);
CURLcode sf_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v);
CURLcode sf_easy_setopt_data_callback(CURL *h, CURLoption o, sf_curl_data_callback v);

/// libcurl's SSH host key callback (`CURLOPT_SSH_KEYFUNCTION`).
typedef int (*sf_ssh_key_callback)(CURL *easy, const struct curl_khkey *knownkey, const struct curl_khkey *foundkey,
                                   enum curl_khmatch match, void *clientp);
CURLcode sf_easy_setopt_ssh_key_callback(CURL *h, sf_ssh_key_callback v);

/// A socket option callback: SO_LINGER 0, so that closing the connection resets it and the server
/// counts it gone at once, not when its next write fails (a shared per-host cap).
CURLcode sf_easy_reset_on_close(CURL *h);

CURLcode sf_easy_getinfo_long(CURL *h, CURLINFO i, long *v);
CURLcode sf_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v);
CURLcode sf_easy_getinfo_string(CURL *h, CURLINFO i, char **v);
CURLcode sf_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v);

/// The running libcurl's version information (`CURLVERSION_NOW` is a macro Swift cannot see);
/// NULL when libcurl could not be loaded.
curl_version_info_data *sf_curl_version_info(void);

CURLMcode sf_multi_setopt_long(CURLM *m, CURLMoption o, long v);

#endif
