// OpenSSL's libcrypto (libssl-dev), linked: the message digests (EVP) that the hasher uses.
// libcurl4-openssl already loads this library, so hashing adds no library to the process.
#ifndef SPLITFETCH_COPENSSLCRYPTO_SHIM_H
#define SPLITFETCH_COPENSSLCRYPTO_SHIM_H

#include <openssl/evp.h>

#endif
