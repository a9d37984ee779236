/* SPDX-License-Identifier: Apache-2.0 */
/* account.c — resolving a worker account and switching to it in a child. */
#include "util/account.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What switching a child to another account takes from a daemon that is not
 * root: the ids (setgroups, setgid, setuid) and giving the worker its socket
 * and bootstrap file (chown). */
#define SWITCH_CAPS ((1ULL << CAP_SETUID) | (1ULL << CAP_SETGID) | (1ULL << CAP_CHOWN))

/* The effective capability set, as one 64-bit mask (0 when it cannot be read). */
static uint64_t effective_caps(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) != 0) return 0;
    return (uint64_t)d[0].effective | (uint64_t)d[1].effective << 32;
}

bool cj_account_can_switch(void)
{
    return geteuid() == 0 || (effective_caps() & SWITCH_CAPS) == SWITCH_CAPS;
}

/* A decimal id that fits uid_t/gid_t (and is not (id_t)-1, which means "unchanged" to the kernel). */
static bool parse_id(const char *s, unsigned long *out)
{
    if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 10) return false;
    unsigned long v = strtoul(s, NULL, 10);
    if (v >= 0xffffffffUL) return false;
    *out = v;
    return true;
}

static int lookup_user(const char *user, struct cj_account *a, char *pwname, size_t pwsz, bool *known, char *why,
                       size_t whysz)
{
    unsigned long id;
    struct passwd pw, *res = NULL;
    char buf[4096];
    bool numeric = parse_id(user, &id);
    int rc = numeric ? getpwuid_r((uid_t)id, &pw, buf, sizeof buf, &res) : getpwnam_r(user, &pw, buf, sizeof buf, &res);
    if (rc != 0) {
        snprintf(why, whysz, "user: cannot look up '%s': %s", user, strerror(rc));
        return -1;
    }
    if (!res && !numeric) {
        snprintf(why, whysz, "user: no user '%s' on this system", user);
        return -1;
    }
    /* A number with no passwd entry is allowed (containers, NSS-less ids): no supplementary groups. */
    *known = res != NULL;
    a->uid = res ? res->pw_uid : (uid_t)id;
    a->gid = res ? res->pw_gid : (gid_t)id;
    snprintf(pwname, pwsz, "%s", res ? res->pw_name : "");
    return 0;
}

static int lookup_group(const char *group, gid_t *gid, char *why, size_t whysz)
{
    unsigned long id;
    if (parse_id(group, &id)) {
        *gid = (gid_t)id;
        return 0;
    }
    struct group gr, *res = NULL;
    char buf[8192];
    int rc = getgrnam_r(group, &gr, buf, sizeof buf, &res);
    if (rc != 0 || !res) {
        snprintf(why, whysz, "group: %s '%s'%s%s", rc ? "cannot look up" : "no group", group, rc ? ": " : " on this system",
                 rc ? strerror(rc) : "");
        return -1;
    }
    *gid = res->gr_gid;
    return 0;
}

int cj_group_resolve(const char *group, gid_t *gid, char *why, size_t whysz)
{
    return lookup_group(group, gid, why, whysz);
}

int cj_account_resolve(const char *user, const char *group, struct cj_account *a, char *why, size_t whysz)
{
    memset(a, 0, sizeof *a);
    a->uid = geteuid();
    a->gid = getegid();
    char pwname[256] = "";
    bool known = false;
    if (user && *user && lookup_user(user, a, pwname, sizeof pwname, &known, why, whysz) != 0) return -1;
    if (group && *group && lookup_group(group, &a->gid, why, whysz) != 0) return -1;
    if (known) {
        int n = CJ_ACCOUNT_GROUPS_MAX;
        if (getgrouplist(pwname, a->gid, a->groups, &n) < 0) {
            snprintf(why, whysz, "user: '%s' is in more than %d groups", pwname, CJ_ACCOUNT_GROUPS_MAX);
            return -1;
        }
        a->ngroups = n;
    } else {
        a->groups[0] = a->gid;
        a->ngroups = 1;
    }
    a->privileged = cj_account_can_switch();
    if (!a->privileged && (a->uid != geteuid() || a->gid != getegid())) {
        snprintf(why, whysz, "%s: the daemon runs as uid %u gid %u and cannot start workers as uid %u gid %u "
                             "(that needs root, or CAP_SETUID, CAP_SETGID and CAP_CHOWN: see "
                             "systemd/worker-accounts.conf.example)",
                 a->uid != geteuid() ? "user" : "group", (unsigned)geteuid(), (unsigned)getegid(), (unsigned)a->uid,
                 (unsigned)a->gid);
        return -1;
    }
    snprintf(a->name, sizeof a->name, "%.30s:%.30s", user && *user ? user : "-", group && *group ? group : "-");
    return 0;
}

int cj_account_enter(const struct cj_account *a)
{
    if (a->privileged && setgroups((size_t)a->ngroups, a->groups) != 0) return -1;
    if (setgid(a->gid) != 0 || setuid(a->uid) != 0) return -1;
    if (cj_account_drop_caps() != 0) return -1;
    /* A uid switch that could be undone would leave the worker root in all but name. */
    if (a->uid != 0 && setuid(0) == 0) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

int cj_account_drop_caps(void)
{
    /* uid 0 keeps what root has: a root daemon's own workers are root by choice. */
    if (geteuid() == 0) return 0;
    /* A daemon given capabilities through systemd's AmbientCapabilities would
     * pass them on across exec: clear the ambient set, then every set. */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return -1;
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    return syscall(SYS_capset, &h, d) == 0 ? 0 : -1;
}
