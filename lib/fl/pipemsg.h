/* SPDX-License-Identifier: Apache-2.0 */
/* pipemsg.h — the cell headers of FLARE's CellPipe messages (releases.md §4.4):
 * cell_pipe.msg_type ("REQ"/"REP"), cell_pipe.msg_id, cell_pipe.req_id (on
 * replies), cell_pipe.start (a float, time.time()) and cell_pipe.hb_seq (an
 * int, on heartbeats), read from a received message's header block and
 * written as raw msgpack values for the stream layer's application headers. */
#ifndef CJ_FL_PIPEMSG_H
#define CJ_FL_PIPEMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "stream/stream.h"
#include "util/err.h"
#include "wire/header.h"

#define CJ_PIPE_CH_PREFIX "cell_pipe."
#define CJ_PIPE_T_HEARTBEAT "_HEARTBEAT_"
#define CJ_PIPE_T_END "_END_"
#define CJ_PIPE_T_ABORT "_ABORT_"
#define CJ_PIPE_ID_MAX 255
#define CJ_PIPE_HDRS 5

struct cj_pipe_hdrs {
    bool rep;                          /* msg_type "REP" (else "REQ") */
    char msg_id[CJ_PIPE_ID_MAX + 1];
    char req_id[CJ_PIPE_ID_MAX + 1];   /* "" when absent */
    double start;                      /* 0 when absent */
    int64_t hb_seq;                    /* 0 when absent */
};

/* Reads the cell_pipe.* headers of h.  msg_type and msg_id are required;
 * msg_type must be REQ or REP, ids strings of at most CJ_PIPE_ID_MAX bytes.
 * 0, or <0 with err naming the header. */
int cj_pipemsg_read(const struct cj_hdr *h, struct cj_pipe_hdrs *out, struct cj_err *err);

/* True when h carries __token__ == token and __token_signature__ == signature
 * (str values; compared without an early exit), as CellPipe's outgoing filter
 * stamps the site's credentials on every request of a release trainer. */
bool cj_pipemsg_creds_ok(const struct cj_hdr *h, const char *token, const char *signature);

/* The headers of a message the relay sends: their raw values packed into vals
 * (cleared first) and hv[0..*n) pointing into it (valid while vals is).
 * req_id NULL or "" and hb_seq 0 leave those out.  0 or -1 (no memory). */
int cj_pipemsg_build(msgpack_sbuffer *vals, struct cj_stream_hv hv[CJ_PIPE_HDRS], size_t *n,
                     const struct cj_pipe_hdrs *in);

/* The key and value of a "metric" message's analytics DXO (flare.log: data
 * {track_key, track_value}): key as written, value as Python prints it (a
 * float, an int, True/False), each cut to its buffer.  A flat walk of the
 * body's msgpack (no recursion, at most 4096 items).  0, or -1 when the body
 * has no such pair. */
int cj_pipemsg_metric(const uint8_t *body, size_t n, char *key, size_t ksz, char *val, size_t vsz);

/* The FOBS body of a heartbeat, "" (LOBS of a msgpack empty string), and of
 * _END_ / _ABORT_ with a string: out += 64 00 <len> <str>.  0 or -1. */
int cj_pipemsg_str_body(msgpack_sbuffer *out, const char *s);

#endif
