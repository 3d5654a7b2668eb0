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

/// Opens a new regular file without a name in `directory` (Linux O_TMPFILE), read-write,
/// close-on-exec, with `mode` (less the umask). Returns the descriptor, or -1 with errno set:
/// EOPNOTSUPP, EISDIR or EINVAL where the file system or kernel cannot.
int sf_open_unnamed(const char *directory, unsigned int mode);

/// Gives the unnamed file `fd` the name `path` (linkat through /proc/self/fd, which needs no
/// privilege). Fails with EEXIST rather than replacing an existing name. Returns 0, or -1 with
/// errno set.
int sf_name_unnamed(int fd, const char *path);

/// Renames `from` to `to` unless `to` exists (renameat2 with RENAME_NOREPLACE): 0, or -1 with
/// errno set (EEXIST; EINVAL or ENOSYS where unsupported).
int sf_rename_noreplace(const char *from, const char *to);

/// Blocks SIGPIPE for the calling thread only, so that a write to a pipe whose reader has gone
/// fails with EPIPE on that thread instead of ending the process.
void sf_block_sigpipe_on_this_thread(void);

/// Takes a SIGPIPE pending for the calling thread (after an EPIPE while it was blocked), so it
/// is never delivered later.
void sf_discard_pending_sigpipe(void);

/// Reads the extended attribute `name` of the file at `path` (not following a symbolic link)
/// into `value` (`size` bytes at most). Returns its length, or -1 with errno set (ENODATA: none;
/// ENOTSUP: the file system keeps none; ERANGE: longer than `size`).
long sf_get_attribute(const char *path, const char *name, void *value, unsigned long size);

/// Sets the extended attribute `name` of the open file `fd`. Returns 0, or -1 with errno set
/// (ENOTSUP where the file system keeps none).
int sf_set_attribute(int fd, const char *name, const void *value, unsigned long size);

/// Removes the extended attribute `name` of the open file `fd`. Returns 0, or -1 with errno set
/// (ENODATA: it had none).
int sf_remove_attribute(int fd, const char *name);

/// Sets the open file's access and modification times to `seconds` since 1970 (UTC). Returns 0,
/// or -1 with errno set.
int sf_set_file_times(int fd, int64_t seconds);

/// Sets glibc's allocator for a long-running process: at most `arenas` arenas, and a fixed
/// threshold (bytes) from which a block is its own mapping, given back when freed (glibc otherwise
/// raises it as such blocks are freed). `MALLOC_ARENA_MAX` and `MALLOC_MMAP_THRESHOLD_` in the
/// environment win over either. A no-op with another C library.
void sf_tune_allocator(int arenas, int mmap_threshold);

/// Gives the free pages of glibc's heaps back to the system (malloc_trim(0)). A no-op with
/// another C library.
void sf_trim_heap(void);

/// The number of frames on the calling thread's stack (glibc's backtrace), uncapped up to 65,536;
/// 0 where there is no backtrace. For tests that a call does not go deeper over time.
int sf_stack_depth(void);

#endif
