/* SPDX-License-Identifier: Apache-2.0 */
/* account.h — the account launched workers run as: a user and group given
 * by name or number, resolved once (when the job starts) into the ids and
 * supplementary groups the launcher's child switches to before exec. */
#ifndef CJ_UTIL_ACCOUNT_H
#define CJ_UTIL_ACCOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define CJ_ACCOUNT_GROUPS_MAX 64

struct cj_account {
    uid_t uid;
    gid_t gid;
    int ngroups;                              /* supplementary groups, the user's as the system lists them */
    gid_t groups[CJ_ACCOUNT_GROUPS_MAX];
    char name[64];                            /* "user:group" as given, for the log */
    bool privileged;                          /* the daemon may switch ids (root, or the capabilities) */
};

/* Resolves user (a name or a number; NULL or "": the daemon's own) and group
 * (likewise; NULL or "": the user's primary group).  A name is looked up
 * through the system's user database (NSS), once, here.  Refuses an account
 * this process cannot switch to: another uid or gid needs root, or the
 * capabilities CAP_SETUID, CAP_SETGID and CAP_CHOWN (the worker's socket and
 * bootstrap file are given to it).  0, or -1 with why naming "user" or "group". */
int cj_account_resolve(const char *user, const char *group, struct cj_account *a, char *why, size_t whysz);

/* A group's id from its name or number (a name looked up through NSS).
 * 0, or -1 with why naming "group". */
int cj_group_resolve(const char *group, gid_t *gid, char *why, size_t whysz);

/* True when this process may start workers under another account: it is
 * root, or holds CAP_SETUID, CAP_SETGID and CAP_CHOWN in its effective set. */
bool cj_account_can_switch(void);

/* In a forked child before exec (async-signal-safe calls only): the
 * supplementary groups, the gid, then the uid, then no capability left
 * (cj_account_drop_caps).  0, or -1 with errno. */
int cj_account_enter(const struct cj_account *a);

/* In a forked child before exec, not root: clears the ambient, effective,
 * permitted and inheritable capability sets, so a worker never holds what
 * the daemon was given to switch accounts.  Root keeps its own.  0 or -1. */
int cj_account_drop_caps(void);

#endif
