/* SPDX-License-Identifier: Apache-2.0 */
/* jobfds.c — a job start's TLS files read from the descriptors passed with
 * its line (see jobfds.h). */
#include "ops/jobfds.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    return S_ISSOCK(m) ? "a socket" : S_ISFIFO(m) ? "a pipe" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISDIR(m) ? "a directory" : "not a regular file";
}

/* "fd:" and the path the kernel gives for fd, or "fd:<index>". */
static void label(int fd, int index, char *buf, size_t size)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = size > 4 ? readlink(link, buf + 3, size - 4) : -1;   /* cut short when longer */
    if (n > 0) {
        memcpy(buf, "fd:", 3);
        buf[3 + n] = '\0';
    } else {
        snprintf(buf, size, "fd:%d", index);
    }
}

/* The whole file behind fd into *text: 0, or -1 with why. */
static int read_all(int fd, const char *name, char **text, size_t *len, char *why, size_t whysz)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return snprintf(why, whysz, "cannot stat %s: %s", name, strerror(errno)), -1;
    if (!S_ISREG(st.st_mode)) return snprintf(why, whysz, "%s is %s, not a regular file", name, kind_of(st.st_mode)), -1;
    if (st.st_size > CJ_JOBFDS_FILE_MAX)
        return snprintf(why, whysz, "%s is over %d bytes", name, CJ_JOBFDS_FILE_MAX), -1;
    char *buf = malloc(CJ_JOBFDS_FILE_MAX + 1);
    if (!buf) return snprintf(why, whysz, "out of memory"), -1;
    size_t got = 0;
    ssize_t r = 1;
    while (got <= CJ_JOBFDS_FILE_MAX && r != 0) {   /* it may have grown since fstat: to its end, or the bound */
        r = pread(fd, buf + got, CJ_JOBFDS_FILE_MAX + 1 - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        got += (size_t)r;
    }
    if (r < 0 || got > CJ_JOBFDS_FILE_MAX) {
        if (r < 0) snprintf(why, whysz, "cannot read %s: %s", name, strerror(errno));
        else snprintf(why, whysz, "%s is over %d bytes", name, CJ_JOBFDS_FILE_MAX);
        explicit_bzero(buf, got);
        free(buf);
        return -1;
    }
    buf[got] = '\0';
    *text = buf;
    *len = got;
    return 0;
}

int cj_jobfds_read(struct cj_job_desc *d, const int *fds, int nfds, struct cj_jobfds *out, char *msg, size_t msgsz)
{
    memset(out, 0, sizeof *out);
    unsigned named = 0;
    for (int i = 0; i < CJ_JOBDESC_TLS_FDS; i++)
        if (d->tls_fdmask & (1u << i)) named |= 1u << d->tls_fd[i];
    for (int k = 0; k < nfds; k++)
        if (!(named & (1u << k))) {
            snprintf(msg, msgsz, "tls_fds: open file %d came with the line and the description does not name it", k);
            return 400;
        }
    for (int i = 0; i < CJ_JOBDESC_TLS_FDS; i++) {
        if (!(d->tls_fdmask & (1u << i))) continue;
        int k = d->tls_fd[i];
        if (k >= nfds) {
            snprintf(msg, msgsz, "tls_fds.%s: open file %d was not passed (the line brought %d)", cj_jobdesc_tls_keys[i],
                     k, nfds);
            cj_jobfds_free(out);
            return 400;
        }
        label(fds[k], k, d->tls_label[i], sizeof d->tls_label[i]);
        struct cj_tls_pem *p = &out->pem[i];
        char why[CJ_CFG_PATH_MAX + 80];
        char *text;
        if (read_all(fds[k], d->tls_label[i], &text, &p->len, why, sizeof why) != 0) {
            snprintf(msg, msgsz, "tls_fds.%s: %s", cj_jobdesc_tls_keys[i], why);
            cj_jobfds_free(out);
            return 400;
        }
        p->text = text;
        p->name = d->tls_label[i];
        out->given[i] = p;
    }
    return 0;
}

void cj_jobfds_free(struct cj_jobfds *f)
{
    for (int i = 0; i < CJ_JOBDESC_TLS_FDS; i++) {
        char *text = (char *)f->pem[i].text;
        if (text) explicit_bzero(text, f->pem[i].len);
        free(text);
    }
    memset(f, 0, sizeof *f);
}
