/* SPDX-License-Identifier: Apache-2.0 */
/* cpmsg.c — the messages between FLARE's client parent and its client jobs:
 * their FOBS payloads (see cpmsg.h; doc/protocol/site.md §3,
 * doc/protocol/payload.md §1-§3). */
#include "fl/cpmsg.h"

#include <stdio.h>
#include <string.h>

#include "payload/fobs.h"
#include "payload/lobs.h"
#include "util/mp.h"
#include "util/uuid.h"

#define ADMIN_TYPE "nvflare.private.admin_defs.Message"
#define DC_TYPE "nvflare.fuel.utils.fobs.decomposer.DataClassDecomposer"

static int str(msgpack_packer *pk, const char *s)
{
    return cj_fobs_write_str(pk, s);
}

int cj_cpmsg_admin_write(msgpack_sbuffer *sb, const char *topic, const char *body, const char *job_id, long job_status,
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

int cj_cpmsg_admin_read(const uint8_t *p, size_t len, char *topic, size_t topicsz, char *job_id, size_t jobsz,
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

int cj_cpmsg_map_write(msgpack_sbuffer *sb, const struct cj_cpmsg_kv *kv, size_t n)
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

int cj_cpmsg_command_write(msgpack_sbuffer *sb, const char *command)
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
