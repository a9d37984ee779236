/* SPDX-License-Identifier: Apache-2.0 */
/* msg.c — the cellnet message object (see msg.h). */
#include "wire/msg.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double cj_msg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct cj_msg *cj_msg_from_block(uint8_t *blk, size_t len, struct cj_err *err)
{
    struct cj_msg *m = calloc(1, sizeof *m);
    if (!m || !(m->payload = evbuffer_new())) {
        free(m);
        free(blk);
        cj_fail(err, CJ_E_NOMEM, 0, "out of memory for a message");
        return NULL;
    }
    m->hblk = blk;
    m->hlen = len;
    if (cj_hdr_decode(&m->hdr, blk, len, err) < 0) {
        cj_msg_free(m);
        return NULL;
    }
    return m;
}

struct cj_msg *cj_msg_from_copy(const uint8_t *blk, size_t len, struct cj_err *err)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) {
        cj_fail(err, CJ_E_NOMEM, 0, "out of memory for a header block");
        return NULL;
    }
    if (len) memcpy(copy, blk, len);
    return cj_msg_from_block(copy, len, err);
}

struct cj_msg *cj_msg_build(struct cj_hb *hb, const struct cj_hdr_msg *m, struct evbuffer *payload,
                            struct cj_err *err)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    cj_hb_cellnet(hb, m);
    if (cj_hb_finish(hb, &sb, err) < 0) {
        msgpack_sbuffer_destroy(&sb);
        return NULL;
    }
    size_t len = sb.size;
    uint8_t *blk = (uint8_t *)msgpack_sbuffer_release(&sb);   /* take the bytes, no copy */
    struct cj_msg *msg = cj_msg_from_block(blk, len, err);
    if (!msg) return NULL;
    if (payload && evbuffer_add_buffer(msg->payload, payload) < 0) {
        cj_fail(err, CJ_E_NOMEM, 0, "cannot move the payload");
        cj_msg_free(msg);
        return NULL;
    }
    return msg;
}

size_t cj_msg_payload_len(const struct cj_msg *m) { return evbuffer_get_length(m->payload); }

void cj_msg_free(struct cj_msg *m)
{
    if (!m) return;
    if (m->payload) evbuffer_free(m->payload);
    free(m->hblk);
    free(m);
}
