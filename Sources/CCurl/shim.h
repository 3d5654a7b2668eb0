// libcurl (libcurl4-openssl-dev), linked, with typed wrappers for its variadic entry points:
// Swift cannot call a C variadic function, so each argument type of curl_easy_setopt,
// curl_easy_getinfo and curl_multi_setopt gets a static inline function of its own.
#ifndef SPLITFETCH_CCURL_SHIM_H
#define SPLITFETCH_CCURL_SHIM_H

#include <curl/curl.h>
#include <sys/socket.h>

typedef size_t (*sf_curl_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);

static inline CURLcode sf_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode sf_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode sf_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode sf_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode sf_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode sf_easy_setopt_data_callback(CURL *h, CURLoption o, sf_curl_data_callback v) {
    return curl_easy_setopt(h, o, v);
}

/// libcurl's SSH host key callback (`CURLOPT_SSH_KEYFUNCTION`).
typedef int (*sf_ssh_key_callback)(CURL *easy, const struct curl_khkey *knownkey, const struct curl_khkey *foundkey,
                                   enum curl_khmatch match, void *clientp);
static inline CURLcode sf_easy_setopt_ssh_key_callback(CURL *h, sf_ssh_key_callback v) {
    return curl_easy_setopt(h, CURLOPT_SSH_KEYFUNCTION, v);
}

// A socket option callback: SO_LINGER 0, so that closing the connection resets it and the server
// counts it gone at once, not when its next write fails (a shared per-host cap).
static int sf_sockopt_reset_on_close(void *clientp, curl_socket_t fd, curlsocktype purpose) {
    struct linger l = { 1, 0 };
    (void)clientp;
    (void)purpose;
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    return CURL_SOCKOPT_OK;
}
static inline CURLcode sf_easy_reset_on_close(CURL *h) { return curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, sf_sockopt_reset_on_close); }

static inline CURLcode sf_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode sf_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode sf_easy_getinfo_string(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode sf_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }

/// The running libcurl's version information (`CURLVERSION_NOW` is a macro Swift cannot see).
static inline curl_version_info_data *sf_curl_version_info(void) { return curl_version_info(CURLVERSION_NOW); }

static inline CURLMcode sf_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }

#endif
