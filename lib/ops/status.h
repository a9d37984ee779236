/* SPDX-License-Identifier: Apache-2.0 */
/* status.h — the status socket: a line protocol on a Unix socket.
 *
 * One command per line; every answer ends with an empty line; errors are one line
 * "ERR <code> <text>".  The socket only reads state through the callbacks below
 * and never touches the data path.  Bounded per client: a line over
 * CJ_STATUS_MAX_LINE is refused, output over CJ_STATUS_MAX_OUTPUT pauses reading
 * until the client drains it, and an idle or never-reading client is closed after
 * a timeout.  Access levels: the kernel checks the socket mode; of those who get
 * in, root, the daemon's own uid and the members of an admin group
 * ([status] admin_group) may change things (pause, resume, reload, shutdown,
 * job start), everyone else may only read (show, help).
 *
 * Open files (SCM_RIGHTS) may come with a command line's bytes, sent with
 * them in one sendmsg: they belong to the line holding the last byte of the
 * read that brought them (a read never goes past bytes that carried
 * descriptors).  A command whose table entry takes them (max_fds: job start)
 * gets them through its call; every one is closed once its command has run,
 * used or refused, and a line with too many, a command that takes none, a
 * line refused before its command, or a client gone closes them too.
 * Received with MSG_CMSG_CLOEXEC. */
#ifndef CJ_OPS_STATUS_H
#define CJ_OPS_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "ops/commands.h"
#include "ops/out.h"
#include "util/err.h"

/* A line carries at most one job description (64 KiB of JSON, ops/jobdesc.h). */
#define CJ_STATUS_MAX_LINE    (65 * 1024)
#define CJ_STATUS_MAX_OUTPUT  (256 * 1024)
#define CJ_STATUS_MAX_CLIENTS 64
#define CJ_STATUS_IDLE_SECS   60
/* Open files a client may pass (SCM_RIGHTS) with one command line, and have
 * waiting unclaimed at once: a job start's TLS files (ca, cert, key). */
#define CJ_STATUS_MAX_FDS     3

struct event_base;
struct evbuffer;
struct cj_status;
/* The client a command came from, as the command handler sees it. */
struct cj_status_call;
/* An answer given later (job wait): until it is, the client's next commands wait. */
struct cj_status_wait;

/* A command handler's return value when it deferred its answer. */
#define CJ_STATUS_DEFERRED 1

struct cj_status_ops {
    void *ctx;
    /* Renders "show <what> [job ID]" (job NULL when not named): 0, or an ERR
     * code with its text in msg (the rendering is then dropped). */
    int (*show)(void *ctx, enum cj_show what, const char *job, struct cj_out *o, char *msg, size_t msgsz);
    /* Runs a command other than help and show, for a client its access level
     * admits, with as many arguments as its table entry allows (args[0..nargs),
     * the last one the rest of the line for a `rest` command).  0 = OK (msg, if
     * set, follows "OK "), else an ERR code with its text in msg, or
     * CJ_STATUS_DEFERRED after cj_status_defer(call). */
    int (*command)(void *ctx, enum cj_cmd cmd, char **args, int nargs, struct cj_status_call *call, char *msg,
                   size_t msgsz);
    /* A deferred answer's client went away: forget w (it is freed after this). */
    void (*cancel)(void *ctx, struct cj_status_wait *w);
};

/* From inside a command handler: the open files that came with the command's
 * line (*fds, count returned; 0 when none or call is NULL).  Borrowed: the
 * socket closes them when the handler returns. */
int cj_status_call_fds(const struct cj_status_call *call, const int **fds);

/* From inside a command handler: the answer comes later, through
 * cj_status_answer.  NULL when the call cannot wait (no client: a test, the
 * fuzzer); the handler then answers at once. */
struct cj_status_wait *cj_status_defer(struct cj_status_call *call);
/* The deferred answer: code 0 and body (lines of "key: value", each ending
 * with a newline) or an ERR code and its one-line text.  Frees w; the client's
 * waiting commands run next. */
void cj_status_answer(struct cj_status_wait *w, int code, const char *text);

/* Creates the socket at path with mode (replacing a stale file, refusing a live one). */
struct cj_status *cj_status_new(struct event_base *base, const char *path, mode_t mode,
                                const struct cj_status_ops *ops, struct cj_err *err);
void cj_status_free(struct cj_status *st);       /* closes clients, unlinks the socket */
/* Members of gid (the peer's group, or one of its supplementary groups,
 * SO_PEERGROUPS) are admin too, from the next connection on. */
void cj_status_set_admin_group(struct cj_status *st, gid_t gid);
int cj_status_clients(const struct cj_status *st);

/* The line protocol without the socket (the server uses these; so does the fuzzer). */
#define CJ_STATUS_MAX_WORDS 8
/* Splits line in place into words separated by blanks (space, tab, CR): fills
 * argv[0..max) and returns the word count, or -1 when there are more than max. */
int cj_status_parse(char *line, char **argv, int max);
/* Runs one command line of len bytes (no newline; modified in place) from a
 * client and appends the whole answer, ending with the empty line, to out
 * (nothing when the handler deferred it).  admin: the client may change
 * things; call: the client, NULL where nothing can wait.  A line holding a
 * NUL or another control character (other than tab and CR) is refused with
 * ERR 400. */
void cj_status_dispatch(const struct cj_status_ops *ops, bool admin, struct cj_status_call *call, char *line,
                        size_t len, struct evbuffer *out);

/* Shared with the worker listener: bind a Unix stream socket at path with mode,
 * replacing a stale socket file but never one a live process still answers on. */
int cj_unix_listen(const char *path, mode_t mode, struct cj_err *err);

#endif
