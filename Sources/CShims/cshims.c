#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include "cshims.h"

int sf_start_writeback(int fd, int64_t offset, int64_t length) {
#if defined(__linux__)
    return sync_file_range(fd, (off64_t)offset, (off64_t)length, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd; (void)offset; (void)length;
    return 0;
#endif
}

void sf_set_thread_name(const char *name) {
#if defined(__linux__)
    char short_name[16];
    strncpy(short_name, name, sizeof short_name - 1);
    short_name[sizeof short_name - 1] = 0;
    pthread_setname_np(pthread_self(), short_name);
#else
    (void)name;
#endif
}
