/* SPDX-License-Identifier: Apache-2.0 */
/* jobfds.h — a job start's TLS files handed over as open files: the
 * descriptors that came with the `job start` line (ops/status.h), named by
 * the description's tls_fds (ops/jobdesc.h), read at once into memory.
 *
 * Each must be a regular file (a socket, pipe or device is refused: reading it
 * could block the loop) of at most CJ_JOBFDS_FILE_MAX bytes; it is read from
 * offset 0 whatever the sender's position, so one descriptor may serve two
 * files.  Every descriptor that came must be named: one left over is a
 * mistake of the sender, refused.  The descriptors stay the status socket's
 * (it closes them); the texts are wiped when freed, for one is a private key. */
#ifndef CJ_OPS_JOBFDS_H
#define CJ_OPS_JOBFDS_H

#include <stddef.h>

#include "net/tls.h"
#include "ops/jobdesc.h"

#define CJ_JOBFDS_FILE_MAX (64 * 1024)

struct cj_jobfds {
    struct cj_tls_pem pem[CJ_JOBDESC_TLS_FDS];        /* in cj_jobdesc_tls_keys order */
    const struct cj_tls_pem *given[CJ_JOBDESC_TLS_FDS]; /* &pem[i], or NULL when not passed */
};

/* Reads the files d->tls_fds names from fds[0..nfds) and sets d->tls_label[i]
 * to "fd:<the file's path as the kernel names it>" (each pem's name).  0, or
 * 400 with msg "tls_fds.key_file: open file 2 is not a regular file (a pipe)"
 * and nothing kept. */
int cj_jobfds_read(struct cj_job_desc *d, const int *fds, int nfds, struct cj_jobfds *out, char *msg, size_t msgsz);

/* Wipes and frees the texts. */
void cj_jobfds_free(struct cj_jobfds *f);

#endif
