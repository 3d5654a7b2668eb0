// Small Linux-specific system calls Swift's Glibc module does not expose.
#ifndef SPLITFETCH_CSHIMS_H
#define SPLITFETCH_CSHIMS_H

#include <stdint.h>

/// Starts writeback of the file's dirty pages in [offset, offset + length) without waiting for it
/// (Linux sync_file_range with SYNC_FILE_RANGE_WRITE; length 0 means to the end of the file).
/// Returns 0, or -1 with errno set; a no-op returning 0 where unsupported.
int sf_start_writeback(int fd, int64_t offset, int64_t length);

/// Names the calling thread (at most 15 bytes are kept), for debuggers and `top -H`.
void sf_set_thread_name(const char *name);

#endif
