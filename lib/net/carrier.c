/* SPDX-License-Identifier: Apache-2.0 */
/* carrier.c — one interface over the WebSocket and gRPC carriers (see carrier.h). */
#include "net/carrier.h"

#include <stdlib.h>

#include "net/grpc.h"
#include "net/ws.h"
#include "wire/frame.h"

struct cj_carrier {
    enum cj_carrier_kind kind;
    bool server;
    struct cj_ws *ws;
    struct cj_grpc *grpc;
};

struct cj_carrier *cj_carrier_new(enum cj_carrier_kind kind, bool server, const char *authority, bool tls)
{
    struct cj_carrier *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->kind = kind;
    k->server = server;
    if (kind == CJ_CARRIER_WS) k->ws = cj_ws_new(server ? CJ_WS_SERVER : CJ_WS_CLIENT, authority, NULL);
    else k->grpc = cj_grpc_new(server ? CJ_GRPC_SERVER : CJ_GRPC_CLIENT, authority, tls);
    if (!k->ws && !k->grpc) {
        free(k);
        return NULL;
    }
    return k;
}

void cj_carrier_free(struct cj_carrier *k)
{
    if (!k) return;
    cj_ws_free(k->ws);
    cj_grpc_free(k->grpc);
    free(k);
}

const char *cj_carrier_name(const struct cj_carrier *k) { return k->ws ? "WebSocket" : "gRPC"; }

int cj_carrier_start(struct cj_carrier *k, struct evbuffer *wire_out)
{
    if (k->grpc) return cj_grpc_start(k->grpc, wire_out);
    if (k->server) return 0; /* a WebSocket server speaks first only in its answer */
    return cj_ws_start(k->ws, wire_out) < 0 ? -1 : 0;
}

int cj_carrier_read(struct cj_carrier *k, struct evbuffer *wire_in, struct evbuffer *sfm, struct evbuffer *wire_out,
                    struct cj_err *err)
{
    int rc = k->ws ? cj_ws_read(k->ws, wire_in, sfm, wire_out, err) : cj_grpc_read(k->grpc, wire_in, sfm, wire_out, err);
    return rc > 0 ? CJ_CARRIER_CLOSED : rc;
}

bool cj_carrier_ready(const struct cj_carrier *k)
{
    return k->ws ? cj_ws_is_open(k->ws) : cj_grpc_is_open(k->grpc);
}

/* The length an SFM frame gives itself: its first 4 bytes, big-endian. */
static size_t sfm_length(struct evbuffer *b)
{
    uint8_t p[4];
    if (evbuffer_copyout(b, p, 4) != 4) return 0;
    return cj_frame_length(p);
}

bool cj_carrier_can_send(const struct cj_carrier *k, struct evbuffer *sfm_out)
{
    size_t have = evbuffer_get_length(sfm_out);
    return cj_carrier_ready(k) && have >= 4 && have >= sfm_length(sfm_out);
}

int cj_carrier_send(struct cj_carrier *k, struct evbuffer *sfm_out, struct evbuffer *wire_out)
{
    while (cj_carrier_ready(k) && evbuffer_get_length(sfm_out) >= 4) {
        size_t len = sfm_length(sfm_out);
        if (len < 4) return -1;
        if (evbuffer_get_length(sfm_out) < len) break;
        int rc = k->ws ? cj_ws_write(k->ws, sfm_out, len, wire_out) : cj_grpc_write(k->grpc, sfm_out, len, wire_out);
        if (rc < 0) return -1;
    }
    return 0;
}

void cj_carrier_taken(struct cj_carrier *k, size_t n, struct evbuffer *wire_out)
{
    if (k->grpc) cj_grpc_consume(k->grpc, n, wire_out);
}

size_t cj_carrier_pending(const struct cj_carrier *k) { return k->grpc ? cj_grpc_pending(k->grpc) : 0; }

bool cj_carrier_window_paced(const struct cj_carrier *k) { return k->grpc != NULL; }

void cj_carrier_close(struct cj_carrier *k, struct evbuffer *wire_out)
{
    if (k->ws) cj_ws_close(k->ws, 1000, wire_out);
    else cj_grpc_close(k->grpc, wire_out);
}
