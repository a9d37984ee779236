/* SPDX-License-Identifier: Apache-2.0 */
/* flclient.c — the requests a site cell sends to server.<job> (see flclient.h). */
#include "fl/flclient.h"

#include <event2/buffer.h>

#include "fl/flmsg.h"

#define TOPIC_HEARTBEAT "__job_heartbeat__"
#define TOPIC_GET_TASK "get_task"
#define TOPIC_SYNC "__sync_runner__"

static const char *aux_send(const struct cj_fl_client *c, const char *topic, const char *server_task_id,
                            bool optional, bool patient, double timeout, cj_stream_reply_fn fn, void *arg,
                            uint64_t *handle)
{
    char why[256];
    struct evbuffer *b = evbuffer_new();
    if (!b || cj_flmsg_aux_request(b, topic, server_task_id, c->site, c->job, why, sizeof why)) {
        if (b) evbuffer_free(b);
        return "cannot build the request";
    }
    struct cj_stream_msg m = {.encoding = "fobs", .optional = optional, .patient = patient};
    if (cj_stream_request(c->ep, c->server, CJ_FL_AUX_CHANNEL, topic, &m, b, timeout, fn, arg, handle, NULL))
        return "request could not be sent";
    return NULL;
}

const char *cj_fl_client_aux(const struct cj_fl_client *c, const char *topic, const char *server_task_id,
                             double timeout, cj_stream_reply_fn fn, void *arg, uint64_t *handle)
{
    return aux_send(c, topic, server_task_id, false, false, timeout, fn, arg, handle);
}

const char *cj_fl_client_sync(const struct cj_fl_client *c, double timeout, cj_stream_reply_fn fn, void *arg,
                              uint64_t *handle)
{
    return aux_send(c, TOPIC_SYNC, NULL, false, true, timeout, fn, arg, handle);
}

const char *cj_fl_client_heartbeat_req(const struct cj_fl_client *c, double timeout, cj_stream_reply_fn fn, void *arg,
                                       uint64_t *handle)
{
    return aux_send(c, TOPIC_HEARTBEAT, NULL, true, false, timeout, fn, arg, handle);
}

const char *cj_fl_client_get_task(const struct cj_fl_client *c, const char *last_task_id,
                                  const struct cj_stream_msg *m, double timeout, cj_stream_reply_fn fn, void *arg,
                                  uint64_t *handle)
{
    static const struct cj_stream_msg plain = {.encoding = "fobs"};
    char why[256];
    struct evbuffer *b = evbuffer_new();
    if (!b || cj_flmsg_get_task_request(b, c->site, c->job, last_task_id, why, sizeof why)) {
        if (b) evbuffer_free(b);
        return "cannot build the request";
    }
    if (cj_stream_request(c->ep, c->server, CJ_FL_SERVER_CHANNEL, TOPIC_GET_TASK, m ? m : &plain, b, timeout, fn,
                          arg, handle, NULL))
        return "request could not be sent";
    return NULL;
}

int cj_fl_client_heartbeat(const struct cj_fl_client *c)
{
    char why[256];
    struct evbuffer *b = evbuffer_new();
    if (!b || cj_flmsg_aux_request(b, TOPIC_HEARTBEAT, NULL, c->site, c->job, why, sizeof why)) {
        if (b) evbuffer_free(b);
        return -1;
    }
    struct cj_stream_msg m = {.encoding = "fobs", .optional = true};
    return cj_stream_send(c->ep, c->server, CJ_FL_AUX_CHANNEL, TOPIC_HEARTBEAT, &m, NULL, b, NULL, NULL, NULL) ? 1 : 0;
}

int cj_fl_client_reply_rc(const struct cj_stream_reply *r, char *rc, size_t rcsz, char *why, size_t whysz)
{
    size_t len = r->data ? evbuffer_get_length(r->data) : 0;
    const uint8_t *p = len ? evbuffer_pullup(r->data, -1) : NULL;
    if (cj_flmsg_read_rc(p, len, rc, rcsz, why, whysz)) {
        if (rcsz) rc[0] = '\0';
        return -1;
    }
    return 0;
}
