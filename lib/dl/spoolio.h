/* SPDX-License-Identifier: Apache-2.0 */
/* spoolio.h — the spool's disk I/O, off the event loop.
 *
 * One I/O thread per relay runs every file operation of the spool (mkdir,
 * create, write, read, fsync, rename, unlink, remove a tree) in the order they
 * were queued, with plain blocking syscalls; the event loop only queues jobs
 * and gets each job's completion callback back on its own thread (a pipe wakes
 * the loop).  Why a thread and not non-blocking file I/O: regular files are
 * always "ready" for epoll, O_NONBLOCK does nothing for them, and io_uring /
 * POSIX AIO are either not in bookworm's libevent or run a thread pool
 * themselves.  One thread keeps the order of the writes of a file without
 * locks per file, and a spool is written sequentially anyway.
 *
 * Memory: a write job holds its evbuffer until written; the owner bounds what
 * it queues (cj_sio_queued_bytes) — the download client holds back its ACKs
 * until bytes are written, so the sender's window bounds it.
 *
 * Errors are errno values (ENOSPC, EDQUOT, EFBIG for RLIMIT_FSIZE — SIGXFSZ is
 * ignored by cj_sio_new so the write fails instead of killing the process —,
 * EIO, ...).  A short read is EIO.
 *
 * Callbacks run on the loop thread, never from inside the queuing call.
 * cj_sio_forget(ctx) stops every later callback to ctx (its jobs still run; a
 * file descriptor opened for a forgotten ctx is closed by the thread, a buffer
 * read for it is freed).  Jobs queued after the forget, even with the same ctx
 * pointer, are called normally.  A NULL callback is allowed for every job: its
 * results are cleaned up as for a forgotten ctx. */
#ifndef CJ_DL_SPOOLIO_H
#define CJ_DL_SPOOLIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>

struct cj_sio;

typedef void (*cj_sio_done_fn)(void *ctx, int err);
typedef void (*cj_sio_fd_fn)(void *ctx, int err, int fd);                 /* fd -1 on error */
/* data: the bytes read, owned by the callback (it frees or moves them); NULL on error. */
typedef void (*cj_sio_read_fn)(void *ctx, int err, struct evbuffer *data);

struct cj_sio_stats {
    uint64_t jobs_queued;       /* waiting or running now */
    uint64_t bytes_queued;      /* write bytes waiting */
    uint64_t bytes_written, bytes_read;
    uint64_t errors;            /* jobs that failed */
};

/* NULL on no memory or when the thread cannot start. */
struct cj_sio *cj_sio_new(struct event_base *base);

/* Waits for the job in progress, drops the rest (their callbacks are not
 * called; write buffers freed; no fd is closed that the owner holds: the fds
 * of dropped writes and reads stay open, while an fd handed to a dropped close
 * or finish job, or opened by a create/open whose callback did not run yet, is
 * closed), joins the thread.  May be called from one of s's callbacks (s is
 * released when that callback returns). */
void cj_sio_free(struct cj_sio *s);

/* Every job returns 0 when queued, -1 on no memory (callback never called). */

/* mkdir -p path (each missing level with mode). */
int cj_sio_mkdirs(struct cj_sio *s, const char *path, unsigned mode, cj_sio_done_fn done, void *ctx);

/* open(path, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC|O_NOFOLLOW, 0600). */
int cj_sio_create(struct cj_sio *s, const char *path, cj_sio_fd_fn fn, void *ctx);
/* ... and reserves size bytes for it (fallocate, where the filesystem has it):
 * no room -> ENOSPC (or EDQUOT, EFBIG) at once, the file removed. */
int cj_sio_create_sized(struct cj_sio *s, const char *path, uint64_t size, cj_sio_fd_fn fn, void *ctx);

/* open(path, O_RDONLY|O_CLOEXEC|O_NOFOLLOW). */
int cj_sio_open_read(struct cj_sio *s, const char *path, cj_sio_fd_fn fn, void *ctx);

/* Writes all of data (its contents are taken now) at fd's current offset. */
int cj_sio_write(struct cj_sio *s, int fd, struct evbuffer *data, cj_sio_done_fn done, void *ctx);

/* Reads exactly len bytes at off (pread) into a new evbuffer of one chain;
 * len above 256 MiB is EINVAL. */
int cj_sio_read(struct cj_sio *s, int fd, uint64_t off, size_t len, cj_sio_read_fn fn, void *ctx);

/* fsync (when sync), close fd, then rename tmp to final (when both are given). */
int cj_sio_finish(struct cj_sio *s, int fd, bool sync, const char *tmp, const char *final, cj_sio_done_fn done,
                  void *ctx);

/* close(fd); done may be NULL. */
int cj_sio_close(struct cj_sio *s, int fd, cj_sio_done_fn done, void *ctx);

/* unlink(path); ENOENT is not an error. */
int cj_sio_unlink(struct cj_sio *s, const char *path, cj_sio_done_fn done, void *ctx);

/* rm -r path: never follows a symlink, never crosses into another filesystem;
 * a missing path is not an error. */
int cj_sio_rmtree(struct cj_sio *s, const char *path, cj_sio_done_fn done, void *ctx);

/* Stops later callbacks to ctx (see the top of this file). */
void cj_sio_forget(struct cj_sio *s, void *ctx);

void cj_sio_get_stats(const struct cj_sio *s, struct cj_sio_stats *st);

/* ---- synchronous helpers: start-up and --check-config only, never on a running loop ---- */

/* statfs of dir, or of its nearest existing ancestor when dir does not exist
 * yet.  Returns 0 when fine; 1 when it is tmpfs (0x01021994) or ramfs
 * (0x858458f6) and allow_tmpfs is false (why says which filesystem and the key
 * to set); -1 when statfs fails (why names the path and errno). */
int cj_spool_fs_check(const char *dir, bool allow_tmpfs, char *why, size_t whysz);

/* rm -r path with the rules of cj_sio_rmtree.  0, or -1 with why filled. */
int cj_spool_rmtree_now(const char *path, char *why, size_t whysz);

/* Free bytes for an unprivileged writer on the filesystem holding path (statvfs
 * f_bavail * f_frsize); -1 on error. */
int64_t cj_spool_free_bytes(const char *path);

#endif
