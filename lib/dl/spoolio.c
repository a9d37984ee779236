/* SPDX-License-Identifier: Apache-2.0 */
/* spoolio.c — the spool's disk I/O thread (see spoolio.h).
 *
 * Three lists under one mutex: todo (queued by the loop, taken by the thread
 * in order), the job in progress, and done (finished by the thread, taken by
 * the loop in order).  The thread writes one byte to a non-blocking pipe when
 * done goes from empty to non-empty; the pipe's read end is a persistent read
 * event on the loop, whose callback runs the completions.
 *
 * Ownership across the threads: a job belongs to whichever list holds it; the
 * thread touches a job only while it is "running".  A write job's evbuffer is
 * only read by the thread (evbuffer_peek, never drained) and freed on the loop,
 * so cleanup callbacks of reference chains run on the loop.  A read job's
 * evbuffer is created by the thread and handed to the loop with the job.
 *
 * cj_sio_forget marks the jobs of ctx (waiting, running, done) "orphan": they
 * still run, their callbacks are not called, an fd they open is closed (by the
 * thread when it sees the mark, else through a close job queued by the loop)
 * and a buffer they read is freed.  Later jobs of the same ctx are not marked,
 * so a ctx address reused by a new owner is served normally. */
#include "dl/spoolio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util/log.h"

#define TMPFS_MAGIC_ 0x01021994u
#define RAMFS_MAGIC_ 0x858458f6u

#define DRAIN_BATCH 256             /* completions per loop wake-up before yielding */
#define RM_DEPTH_MAX 32             /* rmtree: deeper than this is refused (ELOOP) */
#define READ_MAX (256u << 20)       /* one read job: at most this many bytes (EINVAL) */
#define IOV_BATCH 64

enum op { OP_MKDIRS, OP_CREATE, OP_OPEN, OP_WRITE, OP_READ, OP_FINISH, OP_CLOSE, OP_UNLINK, OP_RMTREE };

static const char *const op_names[] = {"mkdirs", "create", "open", "write", "read",
                                       "finish", "close", "unlink", "rmtree"};

struct job {
    struct job *next;
    enum op op;
    bool orphan;                    /* forgotten, or nobody to call: clean up results */
    bool sync;
    void *ctx;
    union {
        cj_sio_done_fn done;
        cj_sio_fd_fn fd;
        cj_sio_read_fn rd;
    } cb;
    int fd;                         /* in: write, read, finish, close */
    int rfd;                        /* out: create, open */
    int err;
    unsigned mode;
    uint64_t off;
    size_t len;                     /* read: wanted; write: bytes queued */
    size_t moved;                   /* bytes written or read */
    struct evbuffer *buf;           /* write: the data; read: the result */
    const char *path, *path2;       /* point into names */
    char names[];
};

struct jlist {
    struct job *head, *tail;
};

struct cj_sio {
    struct event_base *base;
    struct event *ev;
    int wake[2];                    /* [0] read by the loop, [1] written by the thread */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct jlist todo, done;        /* under mu */
    struct job *running;            /* under mu */
    bool stop;                      /* under mu */
    struct cj_sio_stats st;         /* under mu */
    bool draining, free_pending, freeing;   /* loop thread only */
};

/* ---- lists -------------------------------------------------------------------------------- */

static void jl_push(struct jlist *l, struct job *j)
{
    j->next = NULL;
    if (l->tail) l->tail->next = j;
    else l->head = j;
    l->tail = j;
}

static struct job *jl_pop(struct jlist *l)
{
    struct job *j = l->head;
    if (!j) return NULL;
    l->head = j->next;
    if (!l->head) l->tail = NULL;
    j->next = NULL;
    return j;
}

static void job_free(struct job *j)
{
    if (j->buf) evbuffer_free(j->buf);
    free(j);
}

/* ---- the work (I/O thread) ------------------------------------------------------------------ */

static int do_mkdirs(const char *path, unsigned mode)
{
    size_t n = strlen(path);
    if (!n) return ENOENT;
    char *p = malloc(n + 1);
    if (!p) return ENOMEM;
    memcpy(p, path, n + 1);
    int err = 0;
    for (char *s = p + 1; *s && !err; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, mode) < 0 && errno != EEXIST) err = errno;
        *s = '/';
    }
    if (!err && mkdir(p, mode) < 0) {
        err = errno;
        struct stat st;
        if (err == EEXIST) err = stat(p, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    }
    free(p);
    return err;
}

/* All of buf at fd's offset: writev over the chains, short writes and EINTR
 * resumed.  *moved: bytes written, also on error. */
static int do_write(int fd, struct evbuffer *buf, size_t *moved)
{
    size_t total = evbuffer_get_length(buf), done = 0;
    struct evbuffer_ptr pos;
    struct evbuffer_iovec vec[IOV_BATCH];
    struct iovec iov[IOV_BATCH];
    if (evbuffer_ptr_set(buf, &pos, 0, EVBUFFER_PTR_SET) < 0) return EIO;
    while (done < total) {
        int n = evbuffer_peek(buf, -1, &pos, vec, IOV_BATCH);
        if (n <= 0) return EIO;
        if (n > IOV_BATCH) n = IOV_BATCH;
        for (int i = 0; i < n; i++) iov[i] = (struct iovec){vec[i].iov_base, vec[i].iov_len};
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return EIO;
        done += (size_t)w;
        *moved = done;
        if (done < total && evbuffer_ptr_set(buf, &pos, (size_t)w, EVBUFFER_PTR_ADD) < 0) return EIO;
    }
    return 0;
}

/* Exactly len bytes at off into a new evbuffer (one chain, filled by pread
 * directly: one copy, from the kernel). */
static int do_read(int fd, uint64_t off, size_t len, struct evbuffer **out, size_t *moved)
{
    if (len > READ_MAX || off > (uint64_t)INT64_MAX - len) return EINVAL;
    struct evbuffer *b = evbuffer_new();
    if (!b) return ENOMEM;
    struct evbuffer_iovec v = {0};
    if (len && evbuffer_reserve_space(b, (ev_ssize_t)len, &v, 1) != 1) {
        evbuffer_free(b);
        return ENOMEM;
    }
    size_t got = 0;
    int err = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)v.iov_base + got, len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { err = errno; break; }
        if (r == 0) { err = EIO; break; }   /* the file is shorter than asked */
        got += (size_t)r;
    }
    if (!err && len) {
        v.iov_len = len;
        if (evbuffer_commit_space(b, &v, 1) < 0) err = EIO;
    }
    if (err) {
        evbuffer_free(b);
        return err;
    }
    *moved = got;
    *out = b;
    return 0;
}

/* fsync of the directory holding path, so a rename is durable too. */
static int sync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return ENAMETOOLONG;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    int err = fsync(fd) < 0 ? errno : 0;
    close(fd);
    return err == EINVAL ? 0 : err;         /* some filesystems cannot fsync a directory */
}

static int do_finish(int fd, bool sync, const char *tmp, const char *final)
{
    int err = 0;
    if (sync && fsync(fd) < 0) err = errno;
    /* close is not retried on EINTR: on Linux the fd is gone either way. */
    if (close(fd) < 0 && !err && errno != EINTR) err = errno;
    if (err || !tmp || !final) return err;
    if (rename(tmp, final) < 0) return errno;
    return sync ? sync_parent(final) : 0;
}

/* ---- rmtree: an openat/fstatat/unlinkat walk that never follows a symlink -------------------- */

struct rmw {
    dev_t dev;                      /* the filesystem of the top */
    int err;                        /* the first error */
    size_t plen;
    char path[PATH_MAX];            /* the entry being looked at (for messages) */
    char errpath[PATH_MAX];         /* where the first error happened */
};

static void rm_note(struct rmw *w, int err)
{
    if (w->err) return;
    w->err = err;
    snprintf(w->errpath, sizeof w->errpath, "%s", w->path);
}

static void rm_entry(struct rmw *w, int dirfd, const char *name, int depth);

/* Removes what directory fd holds (fd is consumed). */
static void rm_children(struct rmw *w, int fd, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        rm_note(w, errno);
        close(fd);
        return;
    }
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno) rm_note(w, errno);
            break;
        }
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        rm_entry(w, dirfd(d), e->d_name, depth + 1);
    }
    closedir(d);
}

static void rm_entry(struct rmw *w, int dirfd, const char *name, int depth)
{
    size_t save = w->plen;
    if (depth > 0) {
        int n = snprintf(w->path + w->plen, sizeof w->path - w->plen, "/%s", name);
        w->plen = n < 0 || (size_t)n >= sizeof w->path - w->plen ? sizeof w->path - 1 : w->plen + (size_t)n;
    }
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno != ENOENT) rm_note(w, errno);
    } else if (!S_ISDIR(st.st_mode)) {
        /* files, symlinks (the link itself), sockets, fifos */
        if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT) rm_note(w, errno);
    } else if (depth > 0 && st.st_dev != w->dev) {
        rm_note(w, EXDEV);                  /* a mount point: never cross */
    } else if (depth >= RM_DEPTH_MAX) {
        rm_note(w, ELOOP);
    } else {
        if (depth == 0) w->dev = st.st_dev;
        int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st2;
        if (fd < 0) {
            if (errno != ENOENT) rm_note(w, errno);
        } else if (fstat(fd, &st2) < 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino) {
            close(fd);                      /* swapped under us since fstatat */
            rm_note(w, EBUSY);
        } else {
            rm_children(w, fd, depth);
            /* After a child failed this is ENOTEMPTY: rm_note keeps the first error. */
            if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT) rm_note(w, errno);
        }
    }
    w->path[save] = '\0';
    w->plen = save;
}

/* 0, or the first errno with w->errpath naming where. */
static int rmtree_walk(struct rmw *w, const char *path)
{
    w->err = 0;
    w->errpath[0] = '\0';
    int n = snprintf(w->path, sizeof w->path, "%s", path);
    if (n < 0 || (size_t)n >= sizeof w->path) {
        snprintf(w->errpath, sizeof w->errpath, "%.200s...", path);
        return w->err = ENAMETOOLONG;
    }
    w->plen = (size_t)n;
    rm_entry(w, AT_FDCWD, path, 0);
    return w->err;
}

static int do_rmtree(const char *path)
{
    struct rmw *w = malloc(sizeof *w);
    if (!w) return ENOMEM;
    int err = rmtree_walk(w, path);
    if (err) cj_log_warning("spool: cannot remove %s (removing %s): %s", w->errpath, path, strerror(err));
    free(w);
    return err;
}

/* Reserves size bytes for a new file, so that a spool too small fails at the
 * item's start rather than after most of it was written.  A filesystem
 * without fallocate is not an error (the writes find out).  On failure the
 * file is closed and removed. */
static int reserve(int fd, const char *path, size_t size, int *rfd)
{
    int rc;
    do rc = fallocate(fd, 0, 0, (off_t)size);
    while (rc < 0 && errno == EINTR);
    if (rc == 0 || errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL) return 0;
    int err = errno;
    close(fd);
    unlink(path);
    *rfd = -1;
    return err;
}

static void run_job(struct job *j)
{
    switch (j->op) {
    case OP_MKDIRS: j->err = do_mkdirs(j->path, j->mode); break;
    case OP_CREATE:
    case OP_OPEN: {
        int flags = j->op == OP_CREATE ? O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW
                                       : O_RDONLY | O_CLOEXEC | O_NOFOLLOW;
        do j->rfd = open(j->path, flags, 0600);
        while (j->rfd < 0 && errno == EINTR);
        if (j->rfd < 0) j->err = errno;
        else if (j->op == OP_CREATE && j->len) j->err = reserve(j->rfd, j->path, j->len, &j->rfd);
        break;
    }
    case OP_WRITE: j->err = do_write(j->fd, j->buf, &j->moved); break;
    case OP_READ: j->err = do_read(j->fd, j->off, j->len, &j->buf, &j->moved); break;
    case OP_FINISH: j->err = do_finish(j->fd, j->sync, j->path, j->path2); break;
    case OP_CLOSE: j->err = close(j->fd) < 0 && errno != EINTR ? errno : 0; break;
    case OP_UNLINK: j->err = unlink(j->path) < 0 && errno != ENOENT ? errno : 0; break;
    case OP_RMTREE: j->err = do_rmtree(j->path); break;
    }
    if (j->err && j->path) cj_log_debug("spool io: %s %s: %s", op_names[j->op], j->path, strerror(j->err));
    else if (j->err) cj_log_debug("spool io: %s fd %d: %s", op_names[j->op], j->fd, strerror(j->err));
}

static void wake_loop(struct cj_sio *s)
{
    char c = 1;
    /* EAGAIN: the pipe is full, so the loop is woken anyway. */
    while (write(s->wake[1], &c, 1) < 0 && errno == EINTR) {}
}

static void *io_thread(void *arg)
{
    struct cj_sio *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->todo.head) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop) break;
        struct job *j = jl_pop(&s->todo);
        s->running = j;
        pthread_mutex_unlock(&s->mu);

        run_job(j);

        pthread_mutex_lock(&s->mu);
        s->running = NULL;
        s->st.jobs_queued--;
        if (j->op == OP_WRITE) s->st.bytes_queued -= j->len, s->st.bytes_written += j->moved;
        if (j->op == OP_READ) s->st.bytes_read += j->moved;
        if (j->err) s->st.errors++;
        int orphan_fd = -1;
        if (j->orphan && j->rfd >= 0) orphan_fd = j->rfd, j->rfd = -1;
        bool wake = !s->done.head;
        jl_push(&s->done, j);
        if (orphan_fd >= 0 || wake) {
            pthread_mutex_unlock(&s->mu);
            if (orphan_fd >= 0) close(orphan_fd);
            if (wake) wake_loop(s);
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the loop side ---------------------------------------------------------------------------- */

static void deliver(struct cj_sio *s, struct job *j)
{
    if (j->orphan) {
        if (j->rfd >= 0 && cj_sio_close(s, j->rfd, NULL, NULL) < 0) close(j->rfd);
        job_free(j);
        return;
    }
    switch (j->op) {
    case OP_CREATE:
    case OP_OPEN: j->cb.fd(j->ctx, j->err, j->rfd); break;
    case OP_READ: {
        struct evbuffer *b = j->buf;
        j->buf = NULL;
        j->cb.rd(j->ctx, j->err, b);
        break;
    }
    default:
        if (j->cb.done) j->cb.done(j->ctx, j->err);
        break;
    }
    job_free(j);
}

static void release(struct cj_sio *s)
{
    if (s->ev) event_free(s->ev);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct cj_sio *s = arg;
    char tmp[64];
    while (read(fd, tmp, sizeof tmp) > 0) {}
    s->draining = true;
    for (int n = 0; n < DRAIN_BATCH && !s->free_pending; n++) {
        pthread_mutex_lock(&s->mu);
        struct job *j = jl_pop(&s->done);
        pthread_mutex_unlock(&s->mu);
        if (!j) break;
        deliver(s, j);
    }
    s->draining = false;
    if (s->free_pending) {
        release(s);                     /* cj_sio_free was called from a callback */
        return;
    }
    pthread_mutex_lock(&s->mu);
    bool more = s->done.head != NULL;
    pthread_mutex_unlock(&s->mu);
    if (more) event_active(s->ev, EV_READ, 0);  /* let other events run in between */
}

struct cj_sio *cj_sio_new(struct event_base *base)
{
    if (!base) return NULL;
    struct cj_sio *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->base = base;
    if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->ev = event_new(base, s->wake[0], EV_READ | EV_PERSIST, on_wake, s);
    if (!s->ev || event_add(s->ev, NULL) < 0) {
        release(s);
        return NULL;
    }
    /* A write past RLIMIT_FSIZE raises SIGXFSZ, whose default action kills the
     * whole relay; ignored, the write fails with EFBIG instead, which the
     * spool reports like a full disk. */
    struct sigaction sa = {.sa_handler = SIG_IGN};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGXFSZ, &sa, NULL);
    /* The thread takes no signals: they stay with the loop's thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->th, NULL, io_thread, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        cj_log_error("spool io: cannot start the I/O thread: %s", strerror(rc));
        release(s);
        return NULL;
    }
    return s;
}

/* Results of jobs nobody will hear about: an fd opened for the owner is
 * closed (the owner never saw it); an fd handed to a close or finish job is
 * closed (the owner gave it away); the fds of write and read jobs are the
 * owner's and stay open. */
static void drop_job(struct job *j)
{
    if (j->rfd >= 0) close(j->rfd);
    if (j->op == OP_CLOSE || j->op == OP_FINISH) close(j->fd);
    job_free(j);
}

void cj_sio_free(struct cj_sio *s)
{
    if (!s || s->freeing) return;
    s->freeing = true;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);          /* after the job in progress */
    struct job *j;
    while ((j = jl_pop(&s->todo))) drop_job(j);
    while ((j = jl_pop(&s->done))) {       /* ran: a close or finish already closed its fd */
        if (j->rfd >= 0) close(j->rfd);
        job_free(j);
    }
    if (s->draining) s->free_pending = true;   /* on_wake releases s when the callback returns */
    else release(s);
}

/* ---- queuing ---------------------------------------------------------------------------------- */

static struct job *job_new(enum op op, const char *path, const char *path2, void *ctx)
{
    size_t n1 = path ? strlen(path) + 1 : 0, n2 = path2 ? strlen(path2) + 1 : 0;
    struct job *j = calloc(1, sizeof *j + n1 + n2);
    if (!j) return NULL;
    j->op = op;
    j->ctx = ctx;
    j->fd = -1;
    j->rfd = -1;
    if (path) j->path = memcpy(j->names, path, n1);
    if (path2) j->path2 = memcpy(j->names + n1, path2, n2);
    return j;
}

static int enqueue(struct cj_sio *s, struct job *j)
{
    pthread_mutex_lock(&s->mu);
    jl_push(&s->todo, j);
    s->st.jobs_queued++;
    if (j->op == OP_WRITE) s->st.bytes_queued += j->len;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int queue_done(struct cj_sio *s, enum op op, const char *path, const char *path2, int fd,
                      cj_sio_done_fn done, void *ctx)
{
    if (!s || ((op == OP_MKDIRS || op == OP_UNLINK || op == OP_RMTREE) && !path)) return -1;
    struct job *j = job_new(op, path, path2, ctx);
    if (!j) return -1;
    j->fd = fd;
    j->cb.done = done;
    j->orphan = !done;
    return enqueue(s, j);
}

int cj_sio_mkdirs(struct cj_sio *s, const char *path, unsigned mode, cj_sio_done_fn done, void *ctx)
{
    if (!s || !path) return -1;
    struct job *j = job_new(OP_MKDIRS, path, NULL, ctx);
    if (!j) return -1;
    j->mode = mode;
    j->cb.done = done;
    j->orphan = !done;
    return enqueue(s, j);
}

static int queue_open(struct cj_sio *s, enum op op, const char *path, cj_sio_fd_fn fn, void *ctx)
{
    if (!s || !path) return -1;
    struct job *j = job_new(op, path, NULL, ctx);
    if (!j) return -1;
    j->cb.fd = fn;
    j->orphan = !fn;
    return enqueue(s, j);
}

int cj_sio_create(struct cj_sio *s, const char *path, cj_sio_fd_fn fn, void *ctx)
{
    return cj_sio_create_sized(s, path, 0, fn, ctx);
}

int cj_sio_create_sized(struct cj_sio *s, const char *path, uint64_t size, cj_sio_fd_fn fn, void *ctx)
{
    if (!s || !path || size > (uint64_t)SIZE_MAX) return -1;
    struct job *j = job_new(OP_CREATE, path, NULL, ctx);
    if (!j) return -1;
    j->cb.fd = fn;
    j->orphan = !fn;
    j->len = (size_t)size;
    return enqueue(s, j);
}

int cj_sio_open_read(struct cj_sio *s, const char *path, cj_sio_fd_fn fn, void *ctx)
{
    return queue_open(s, OP_OPEN, path, fn, ctx);
}

int cj_sio_write(struct cj_sio *s, int fd, struct evbuffer *data, cj_sio_done_fn done, void *ctx)
{
    if (!s || !data) return -1;
    struct job *j = job_new(OP_WRITE, NULL, NULL, ctx);
    if (!j) return -1;
    j->buf = evbuffer_new();
    /* Moves the chains (no copy); on failure data is left as it was. */
    if (!j->buf || evbuffer_add_buffer(j->buf, data) < 0) {
        job_free(j);
        return -1;
    }
    j->fd = fd;
    j->len = evbuffer_get_length(j->buf);
    j->cb.done = done;
    j->orphan = !done;
    return enqueue(s, j);
}

int cj_sio_read(struct cj_sio *s, int fd, uint64_t off, size_t len, cj_sio_read_fn fn, void *ctx)
{
    if (!s) return -1;
    struct job *j = job_new(OP_READ, NULL, NULL, ctx);
    if (!j) return -1;
    j->fd = fd;
    j->off = off;
    j->len = len;
    j->cb.rd = fn;
    j->orphan = !fn;
    return enqueue(s, j);
}

int cj_sio_finish(struct cj_sio *s, int fd, bool sync, const char *tmp, const char *final, cj_sio_done_fn done,
                  void *ctx)
{
    bool both = tmp && final;
    if (!s) return -1;
    struct job *j = job_new(OP_FINISH, both ? tmp : NULL, both ? final : NULL, ctx);
    if (!j) return -1;
    j->fd = fd;
    j->sync = sync;
    j->cb.done = done;
    j->orphan = !done;
    return enqueue(s, j);
}

int cj_sio_close(struct cj_sio *s, int fd, cj_sio_done_fn done, void *ctx)
{
    return queue_done(s, OP_CLOSE, NULL, NULL, fd, done, ctx);
}

int cj_sio_unlink(struct cj_sio *s, const char *path, cj_sio_done_fn done, void *ctx)
{
    return queue_done(s, OP_UNLINK, path, NULL, -1, done, ctx);
}

int cj_sio_rmtree(struct cj_sio *s, const char *path, cj_sio_done_fn done, void *ctx)
{
    return queue_done(s, OP_RMTREE, path, NULL, -1, done, ctx);
}

static void mark_orphans(struct job *j, void *ctx)
{
    for (; j; j = j->next)
        if (j->ctx == ctx) j->orphan = true;
}

void cj_sio_forget(struct cj_sio *s, void *ctx)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    mark_orphans(s->todo.head, ctx);
    if (s->running && s->running->ctx == ctx) s->running->orphan = true;
    mark_orphans(s->done.head, ctx);
    pthread_mutex_unlock(&s->mu);
}

void cj_sio_get_stats(const struct cj_sio *s, struct cj_sio_stats *st)
{
    struct cj_sio *m = (struct cj_sio *)s;      /* the mutex is not part of the value */
    pthread_mutex_lock(&m->mu);
    *st = s->st;
    pthread_mutex_unlock(&m->mu);
}

/* ---- synchronous helpers ---------------------------------------------------------------------- */

/* p becomes its parent directory; false when it has none. */
static bool to_parent(char *p)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
    char *slash = strrchr(p, '/');
    if (!slash) {
        if (!strcmp(p, ".")) return false;
        strcpy(p, ".");
    } else if (slash == p) {
        if (!p[1]) return false;
        p[1] = '\0';
    } else {
        *slash = '\0';
    }
    return true;
}

int cj_spool_fs_check(const char *dir, bool allow_tmpfs, char *why, size_t whysz)
{
    char p[PATH_MAX];
    struct statfs sf;
    if (!dir || !dir[0]) {
        snprintf(why, whysz, "spool_dir is empty");
        return -1;
    }
    if (strlen(dir) >= sizeof p) {
        snprintf(why, whysz, "spool_dir %.100s...: %s", dir, strerror(ENAMETOOLONG));
        return -1;
    }
    strcpy(p, dir);
    while (statfs(p, &sf) < 0) {
        int e = errno;
        if (e != ENOENT || !to_parent(p)) {
            snprintf(why, whysz, "spool_dir %s: statfs %s: %s", dir, p, strerror(e));
            return -1;
        }
    }
    uint32_t type = (uint32_t)sf.f_type;
    const char *fs = type == TMPFS_MAGIC_ ? "tmpfs" : type == RAMFS_MAGIC_ ? "ramfs" : NULL;
    if (!fs || allow_tmpfs) return 0;
    if (!strcmp(p, dir))
        snprintf(why, whysz, "spool_dir %s is on %s: memory, not disk; set spool_allow_tmpfs = true to use it anyway",
                 dir, fs);
    else
        snprintf(why, whysz, "spool_dir %s would be on %s (%s is): memory, not disk; "
                 "set spool_allow_tmpfs = true to use it anyway", dir, fs, p);
    return 1;
}

int cj_spool_rmtree_now(const char *path, char *why, size_t whysz)
{
    if (!path || !path[0]) {
        snprintf(why, whysz, "rmtree: empty path");
        return -1;
    }
    struct rmw *w = malloc(sizeof *w);
    if (!w) {
        snprintf(why, whysz, "rmtree %s: out of memory", path);
        return -1;
    }
    int err = rmtree_walk(w, path);
    if (err) snprintf(why, whysz, "cannot remove %s (removing %s): %s", w->errpath, path, strerror(err));
    free(w);
    return err ? -1 : 0;
}

int64_t cj_spool_free_bytes(const char *path)
{
    struct statvfs sv;
    if (!path || statvfs(path, &sv) < 0) return -1;
    uint64_t n = (uint64_t)sv.f_bavail * sv.f_frsize;
    return n > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n;
}
