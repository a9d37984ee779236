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

#define ADMIN_TYPE "nvflare.private.admin_defs.Message"
#define DC_TYPE "nvflare.fuel.utils.fobs.decomposer.DataClassDecomposer"

static int str(msgpack_packer *pk, const char *s)
{
    return cj_fobs_write_str(pk, s);
}

int cpmsg_admin_write(msgpack_sbuffer *sb, const char *topic, const char *body, const char *job_id, long job_status,
                      const char *rtn)
{
    struct cj_err e;
    msgpack_packer pk;
    size_t hoff;
    char id[CJ_UUID_STR_LEN + 1];
    uint32_t nh = (job_id != NULL) + (job_status >= 0) + (rtn != NULL);
    if (cj_uuid4_str(id) || cj_lobs_begin_main(sb, &hoff, &e)) return -1;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    /* {__fobs_type__, __fobs_data__: {data: vars(Message)}, __fobs_dc__} */
    if (msgpack_pack_map(&pk, 3) || str(&pk, "__fobs_type__") || str(&pk, ADMIN_TYPE) || str(&pk, "__fobs_data__") ||
        msgpack_pack_map(&pk, 1) || str(&pk, "data") || msgpack_pack_map(&pk, 4) || str(&pk, "id") || str(&pk, id) ||
        str(&pk, "topic") || str(&pk, topic) || str(&pk, "body") || str(&pk, body) || str(&pk, "headers") ||
        msgpack_pack_map(&pk, nh))
        return -1;
    if (job_id && (str(&pk, "job_id") || str(&pk, job_id))) return -1;
    if (job_status >= 0 && (str(&pk, "job_status") || msgpack_pack_long(&pk, job_status))) return -1;
    if (rtn && (str(&pk, "_rtnCode") || str(&pk, rtn))) return -1;
    if (str(&pk, "__fobs_dc__") || str(&pk, DC_TYPE)) return -1;
    cj_lobs_end_main(sb, hoff);
    return 0;
}

/* Enters map key of the map at c: c becomes a cursor over its value. */
static int enter(struct mp_cur *c, const char *key, char *why, size_t whysz)
{
    uint32_t n;
    struct mp_cur v;
    if (mp_read_map(c, &n, NULL) < 0 || mp_map_find(c, n, key, &v, NULL) != 1)
        return snprintf(why, whysz, "no map entry '%s' in the admin message", key), -1;
    *c = v;
    return 0;
}

int cpmsg_admin_read(const uint8_t *p, size_t len, char *topic, size_t topicsz, char *job_id, size_t jobsz,
                     long *status, char *why, size_t whysz)
{
    struct cj_lobs_section m;
    struct cj_err e = {0};
    struct mp_cur c, t, v;
    uint32_t n;
    char type[64];
    *status = -1;
    topic[0] = job_id[0] = '\0';
    if (cj_lobs_validate(p, len, &m, NULL, 0, NULL, &e))
        return snprintf(why, whysz, "not a LOBS payload: %s", e.msg), -1;
    mp_cur_init(&c, m.value, m.value_len);
    t = c;
    if (mp_read_map(&t, &n, NULL) < 0 || mp_map_find_str(&t, n, "__fobs_type__", type, sizeof type, NULL) != 1 ||
        strcmp(type, ADMIN_TYPE))
        return snprintf(why, whysz, "__fobs_type__ is not %s", ADMIN_TYPE), -1;
    if (enter(&c, "__fobs_data__", why, whysz) || enter(&c, "data", why, whysz)) return -1;
    t = c;
    if (mp_read_map(&t, &n, NULL) < 0 || mp_map_find_str(&t, n, "topic", topic, topicsz, NULL) != 1)
        return snprintf(why, whysz, "the admin message's topic is not a str"), -1;
    if (enter(&c, "headers", why, whysz) || mp_read_map(&c, &n, NULL) < 0)
        return snprintf(why, whysz, "the admin message's headers are not a map"), -1;
    t = c;
    if (mp_map_find_str(&t, n, "job_id", job_id, jobsz, NULL) < 0)
        return snprintf(why, whysz, "header job_id is not a str"), -1;
    int64_t st;
    int found = mp_map_find(&c, n, "job_status", &v, NULL);
    if (found < 0 || (found == 1 && (mp_read_int(&v, &st, NULL) < 0 || st < 0 || st > 1000)))
        return snprintf(why, whysz, "header job_status is not a small int"), -1;
    if (found == 1) *status = (long)st;
    return 0;
}

int cpmsg_map_write(msgpack_sbuffer *sb, const struct cpmsg_kv *kv, size_t n)
{
    struct cj_err e;
    msgpack_packer pk;
    size_t hoff;
    if (cj_lobs_begin_main(sb, &hoff, &e)) return -1;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, (uint32_t)n)) return -1;
    for (size_t i = 0; i < n; i++) {
        if (str(&pk, kv[i].key)) return -1;
        if (kv[i].s ? str(&pk, kv[i].s) : msgpack_pack_int64(&pk, kv[i].i)) return -1;
    }
    cj_lobs_end_main(sb, hoff);
    return 0;
}

int cpmsg_command_write(msgpack_sbuffer *sb, const char *command)
{
    struct cj_err e;
    msgpack_packer pk;
    size_t hoff;
    if (cj_lobs_begin_main(sb, &hoff, &e)) return -1;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, 2) || str(&pk, "command") || str(&pk, command) || str(&pk, "data") ||
        msgpack_pack_map(&pk, 0))
        return -1;
    cj_lobs_end_main(sb, hoff);
    return 0;
}

/* Keys of the map at c, "k1,k2" (non-str keys as "?"). */
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
    if (*len == 0 || *len > CPMSG_PAYLOAD_MAX) return NULL;
    return evbuffer_pullup(m->payload, -1);
}
