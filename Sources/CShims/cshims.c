#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <execinfo.h>
#include <malloc.h>
#endif
#include <sys/stat.h>
#if defined(__linux__)
#include <sys/xattr.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#endif
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

int sf_open_unnamed(const char *directory, unsigned int mode) {
#if defined(__linux__) && defined(O_TMPFILE)
    return open(directory, O_TMPFILE | O_RDWR | O_CLOEXEC, (mode_t)mode);
#else
    (void)directory; (void)mode;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

int sf_name_unnamed(int fd, const char *path) {
#if defined(__linux__)
    char source[64];
    snprintf(source, sizeof source, "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, source, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
#else
    (void)fd; (void)path;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

int sf_rename_noreplace(const char *from, const char *to) {
#if defined(__linux__) && defined(SYS_renameat2)
    return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 1 /* RENAME_NOREPLACE */);
#else
    (void)from; (void)to;
    errno = ENOSYS;
    return -1;
#endif
}

void sf_block_sigpipe_on_this_thread(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

void sf_discard_pending_sigpipe(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    const struct timespec none = {0, 0};
    while (sigtimedwait(&set, NULL, &none) == SIGPIPE) {
    }
}

long sf_get_attribute(const char *path, const char *name, void *value, unsigned long size) {
#if defined(__linux__)
    return (long)lgetxattr(path, name, value, (size_t)size);
#else
    (void)path; (void)name; (void)value; (void)size;
    errno = ENOTSUP;
    return -1;
#endif
}

int sf_set_attribute(int fd, const char *name, const void *value, unsigned long size) {
#if defined(__linux__)
    return fsetxattr(fd, name, value, (size_t)size, 0);
#else
    (void)fd; (void)name; (void)value; (void)size;
    errno = ENOTSUP;
    return -1;
#endif
}

int sf_remove_attribute(int fd, const char *name) {
#if defined(__linux__)
    return fremovexattr(fd, name);
#else
    (void)fd; (void)name;
    errno = ENOTSUP;
    return -1;
#endif
}

int sf_set_file_times(int fd, int64_t seconds) {
    struct timespec times[2];
    times[0].tv_sec = (time_t)seconds;
    times[0].tv_nsec = 0;
    times[1] = times[0];
    return futimens(fd, times);
}

void sf_tune_allocator(int arenas, int mmap_threshold) {
#if defined(__GLIBC__)
    // glibc's own environment variables, when set, win.
    if (getenv("MALLOC_ARENA_MAX") == NULL) mallopt(M_ARENA_MAX, arenas);
    if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL) mallopt(M_MMAP_THRESHOLD, mmap_threshold);
#else
    (void)arenas; (void)mmap_threshold;
#endif
}

void sf_trim_heap(void) {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

int sf_stack_depth(void) {
#if defined(__GLIBC__)
    for (int size = 256; size <= 65536; size *= 4) {
        void **frames = malloc(sizeof(void *) * (size_t)size);
        if (frames == NULL) return 0;
        int depth = backtrace(frames, size);
        free(frames);
        if (depth < size) return depth;
    }
    return 65536;
#else
    return 0;
#endif
}
