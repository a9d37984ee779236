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
};

/* Resolves user (a name or a number; NULL or "": the daemon's own) and group
 * (likewise; NULL or "": the user's primary group).  A name is looked up
 * through the system's user database (NSS), once, here.  Refuses an account
 * this process cannot switch to: another uid or gid needs root (CAP_SETUID and
 * CAP_SETGID).  0, or -1 with why naming "user" or "group". */
int cj_account_resolve(const char *user, const char *group, struct cj_account *a, char *why, size_t whysz);

/* A group's id from its name or number (a name looked up through NSS).
 * 0, or -1 with why naming "group". */
int cj_group_resolve(const char *group, gid_t *gid, char *why, size_t whysz);

/* In a forked child before exec (async-signal-safe calls only): the
 * supplementary groups, the gid, then the uid.  0, or -1 with errno. */
int cj_account_enter(const struct cj_account *a);

#endif
