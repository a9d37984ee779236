/* SPDX-License-Identifier: Apache-2.0 */
/* out.c — text and JSON rendering of status answers (see out.h). */
#include "ops/out.h"

#include <event2/buffer.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cj_json_escape(char *dst, size_t dstsz, const char *src)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && o + 7 < dstsz; p++) {
        if (*p == '"' || *p == '\\') { dst[o++] = '\\'; dst[o++] = (char)*p; }
        else if (*p == '\n') { dst[o++] = '\\'; dst[o++] = 'n'; }
        else if (*p == '\t') { dst[o++] = '\\'; dst[o++] = 't'; }
        else if (*p < 0x20) o += (size_t)snprintf(dst + o, dstsz - o, "\\u%04x", *p);
        else dst[o++] = (char)*p;
    }
    dst[o] = '\0';
}

static void json_sep(struct cj_out *o)
{
    if (!o->first) evbuffer_add(o->buf, ",", 1);
    o->first = false;
}

static void json_key(struct cj_out *o, const char *key)
{
    char k[256];
    json_sep(o);
    cj_json_escape(k, sizeof k, key);
    evbuffer_add_printf(o->buf, "\"%s\":", k);
}

/* A value is never cut: a long one (a worker command of kilobytes) is escaped into the heap. */
static void json_str(struct cj_out *o, const char *val)
{
    char small[1024];
    if (!val) val = "";
    size_t cap = strlen(val) * 6 + 1;   /* \u00XX at worst */
    char *v = cap <= sizeof small ? small : malloc(cap);
    if (!v) { v = small; cap = sizeof small; }
    cj_json_escape(v, cap, val);
    evbuffer_add_printf(o->buf, "\"%s\"", v);
    if (v != small) free(v);
}

static void fmt_dbl(char *buf, size_t n, double v)
{
    if (!isfinite(v)) snprintf(buf, n, "0");
    else snprintf(buf, n, "%.3f", v);
}

void cj_out_begin(struct cj_out *o, struct evbuffer *buf, bool json)
{
    memset(o, 0, sizeof *o);
    o->buf = buf;
    o->json = json;
    o->first = true;
    if (json) evbuffer_add(buf, "{", 1);
}

void cj_out_end(struct cj_out *o)
{
    evbuffer_add(o->buf, o->json ? "}\n\n" : "\n", o->json ? 3 : 1);
}

void cj_out_str(struct cj_out *o, const char *key, const char *val)
{
    if (o->json) { json_key(o, key); json_str(o, val); }
    else evbuffer_add_printf(o->buf, "%s: %s\n", key, val ? val : "");
}

void cj_out_u64(struct cj_out *o, const char *key, uint64_t val)
{
    if (o->json) { json_key(o, key); evbuffer_add_printf(o->buf, "%" PRIu64, val); }
    else evbuffer_add_printf(o->buf, "%s: %" PRIu64 "\n", key, val);
}

void cj_out_i64(struct cj_out *o, const char *key, int64_t val)
{
    if (o->json) { json_key(o, key); evbuffer_add_printf(o->buf, "%" PRId64, val); }
    else evbuffer_add_printf(o->buf, "%s: %" PRId64 "\n", key, val);
}

void cj_out_dbl(struct cj_out *o, const char *key, double val)
{
    char b[64];
    fmt_dbl(b, sizeof b, val);
    if (o->json) { json_key(o, key); evbuffer_add_printf(o->buf, "%s", b); }
    else evbuffer_add_printf(o->buf, "%s: %s\n", key, b);
}

void cj_out_bool(struct cj_out *o, const char *key, bool val)
{
    if (o->json) { json_key(o, key); evbuffer_add_printf(o->buf, "%s", val ? "true" : "false"); }
    else evbuffer_add_printf(o->buf, "%s: %s\n", key, val ? "true" : "false");
}

void cj_out_table_begin(struct cj_out *o, const char *name, const struct cj_col *cols, int ncols)
{
    o->cols = cols;
    o->ncols = ncols;
    if (o->json) {
        json_key(o, name);
        evbuffer_add(o->buf, "[", 1);
        o->row_first = true;
        return;
    }
    for (int i = 0; i < ncols; i++) {
        if (i + 1 < ncols) evbuffer_add_printf(o->buf, "%-*s ", cols[i].width, cols[i].name);
        else evbuffer_add_printf(o->buf, "%s", cols[i].name);
    }
    evbuffer_add(o->buf, "\n", 1);
}

void cj_out_row_begin(struct cj_out *o)
{
    o->col = 0;
    o->in_row = true;
    if (o->json) {
        if (!o->row_first) evbuffer_add(o->buf, ",", 1);
        o->row_first = false;
        evbuffer_add(o->buf, "{", 1);
    }
}

static void cell(struct cj_out *o, const char *text, bool quote)
{
    if (o->col >= o->ncols) return;
    const struct cj_col *c = &o->cols[o->col];
    if (o->json) {
        if (o->col) evbuffer_add(o->buf, ",", 1);
        char k[128];
        cj_json_escape(k, sizeof k, c->name);
        evbuffer_add_printf(o->buf, "\"%s\":", k);
        if (quote) json_str(o, text);
        else evbuffer_add_printf(o->buf, "%s", text);
    } else {
        const char *t = *text ? text : "-";
        if (o->col + 1 == o->ncols) evbuffer_add_printf(o->buf, "%s", t);
        else evbuffer_add_printf(o->buf, "%-*s ", c->width, t);
    }
    o->col++;
}

void cj_out_cell_str(struct cj_out *o, const char *val) { cell(o, val ? val : "", true); }

void cj_out_cell_u64(struct cj_out *o, uint64_t val)
{
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, val);
    cell(o, b, false);
}

void cj_out_cell_dbl(struct cj_out *o, double val)
{
    char b[64];
    fmt_dbl(b, sizeof b, val);
    cell(o, b, false);
}

void cj_out_row_end(struct cj_out *o)
{
    while (o->col < o->ncols) cell(o, "", true);
    evbuffer_add(o->buf, o->json ? "}" : "\n", 1);
    o->in_row = false;
}

void cj_out_table_end(struct cj_out *o)
{
    if (o->json) evbuffer_add(o->buf, "]", 1);
}
