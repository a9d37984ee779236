/* SPDX-License-Identifier: Apache-2.0 */
/* tlscheck.h — what a TLS start would refuse, found before the start: the
 * files of a client's TLS settings opened and checked one by one, each
 * problem named by the setting it is about, all of them in one pass
 * (cjrelayd --check-config, and a job description's TLS files at job start). */
#ifndef CJ_NET_TLSCHECK_H
#define CJ_NET_TLSCHECK_H

#include <stdbool.h>

struct cj_tls_pem;

struct cj_tls_files {
    const char *ca_file;      /* required */
    const char *cert_file;    /* required when mutual */
    const char *key_file;     /* required when mutual */
    bool mutual;
    /* Only what makes a start fail for certain (a file missing, unreadable or
     * not what it should be, a key that does not match): not the checks whose
     * answer the server or the clock decides (the chain to the CA, the dates)
     * nor the key file's mode. */
    bool certain_only;
    /* Each, when set, is the text checked in place of the file of that role
     * (net/tls.h: a file handed over as a descriptor; messages name it by the
     * PEM's name, and the key's mode is not checked: its sender opened it). */
    const struct cj_tls_pem *ca_pem, *cert_pem, *key_pem;
};

/* which: "ca_file", "cert_file" or "key_file"; msg: the problem, naming the file. */
typedef void (*cj_tlscheck_report_fn)(void *arg, const char *which, const char *msg);

/* Checks that each file exists and is readable, holds what it should (a PEM
 * CA certificate, a PEM certificate, a PEM private key), that the key is not
 * readable by group or others, that it matches the certificate, that the
 * certificate chains to the CA and that both are valid now.  Returns how many
 * problems it reported. */
int cj_tls_check_files(const struct cj_tls_files *f, cj_tlscheck_report_fn report, void *arg);

#endif
