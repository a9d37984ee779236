/* SPDX-License-Identifier: Apache-2.0 */
/* cpmsg.c — client parent <-> client job messages for cjrelay-sim (see
 * cpmsg.h; doc/protocol/site.md §3, doc/protocol/payload.md §1-§3). */
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "cpmsg.h"
#include "payload/fobs.h"
#include "payload/lobs.h"
#include "util/log.h"
#include "util/mp.h"
#include "util/uuid.h"

static void map_keys(struct mp_cur *c, uint32_t n, char *out, size_t outsz)
{
    size_t o = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        struct mp_val k;
        struct mp_cur v;
        char key[64] = "?";
        if (mp_read_entry(c, &k, &v, NULL) < 0) break;
        if (k.kind == MP_STR) snprintf(key, sizeof key, "%.*s", (int)(k.len < 63 ? k.len : 63), (const char *)k.ptr);
        for (char *q = key; *q; q++)
            if ((unsigned char)*q <= ' ' || *q == ',' || *q == 0x7f) *q = '?';
        int w = snprintf(out + o, outsz - o, "%s%s", o ? "," : "", key);
        if (w < 0 || (size_t)w >= outsz - o) break;
        o += (size_t)w;
    }
}

void cpmsg_summary(const uint8_t *p, size_t len, const char *encoding, char *out, size_t outsz)
{
    struct cj_lobs_section m;
    if (!p || !len) {
        snprintf(out, outsz, "empty");
        return;
    }
    if (!strcmp(encoding, "fobs") && cj_lobs_validate(p, len, &m, NULL, 0, NULL, NULL) == 0) {
        struct mp_cur c;
        uint32_t n;
        char body[128];
        mp_cur_init(&c, m.value, m.value_len);
        struct mp_cur s = c;
        if (mp_read_map(&c, &n, NULL) == 0) {
            char keys[512];
            map_keys(&c, n, keys, sizeof keys);
            snprintf(out, outsz, "keys=%s", keys);
            return;
        }
        if (mp_read_cstr(&s, body, sizeof body, true, "reply", "body", NULL) == 0) {
            snprintf(out, outsz, "body=%s", body);
            return;
        }
    }
    snprintf(out, outsz, "bytes=%zu", len);
}

/* Builds m's header (payload: sb's size) and sends it with sb's bytes on l. */
static int send_direct(struct cj_link *l, struct cj_hdr_msg *m, const char *error, msgpack_sbuffer *sb)
{
    struct cj_hb hb;
    struct cj_err err;
    msgpack_sbuffer out;
    struct evbuffer *payload = sb && sb->size ? mp_sbuffer_to_evbuffer(sb) : NULL;
    int rc = -1;
    m->payload_encoding = payload ? "fobs" : "none";
    m->payload_len = payload ? (int64_t)evbuffer_get_length(payload) : 0;
    m->route_time = m->send_time = cj_msg_now();
    cj_hb_init(&hb);
    msgpack_sbuffer_init(&out);
    if (error) cj_hb_str(&hb, "cn__error", error);
    cj_hb_cellnet(&hb, m);
    if (sb && sb->size && !payload) cj_log_error("sim: out of memory sending %s/%s", m->channel, m->topic);
    else if (cj_hb_finish(&hb, &out, &err) < 0)
        cj_log_error("sim: cannot build %s/%s to %s: %s", m->channel, m->topic, m->destination, err.msg);
    else if (cj_link_send(l, (const uint8_t *)out.data, out.size, payload, true) < 0)
        cj_log_warning("sim: cannot send %s/%s to %s: link %s is not up", m->channel, m->topic, m->destination,
                       cj_link_peer(l));
    else rc = 0;
    cj_hb_destroy(&hb);
    msgpack_sbuffer_destroy(&out);
    if (payload) evbuffer_free(payload);
    return rc;
}

int cpmsg_request(struct cj_link *l, const char *me, const char *dest, const char *channel, const char *topic,
                  bool reply_expected, msgpack_sbuffer *sb, char *rid)
{
    if (cj_uuid4_str(rid)) return -1;
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REQ, .me = me, .to = cj_link_peer(l), .destination = dest, .channel = channel, .topic = topic,
        .req_id = rid, .reply_expected = reply_expected, .optional = true,
    };
    return send_direct(l, &m, NULL, sb);
}

int cpmsg_reply(struct cj_link *l, const struct cj_hdr *req, const char *rc, const char *error, msgpack_sbuffer *sb)
{
    struct cj_hdr_msg m = {
        .type = CJ_MSG_REPLY, .me = req->destination, .to = cj_link_peer(l), .destination = req->origin,
        .channel = req->channel, .topic = req->topic, .req_id = req->req_id, .return_code = rc,
        .optional = req->optional, .secure = req->secure,
    };
    return send_direct(l, &m, error, sb);
}

const uint8_t *cpmsg_payload(struct cj_msg *m, size_t *len)
{
    *len = evbuffer_get_length(m->payload);
    if (*len == 0 || *len > CJ_CPMSG_PAYLOAD_MAX) return NULL;
    return evbuffer_pullup(m->payload, -1);
}
