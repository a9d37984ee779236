/* SPDX-License-Identifier: Apache-2.0 */
/* out.h — one writer for the status socket's answers, two renderings.
 *
 * A command handler describes its answer once — key/value fields and tables with
 * named columns — and the writer renders it either as text ("key: value" lines,
 * aligned tables) or as one JSON object on one line.  That is how the text and
 * JSON forms stay the same fields (haproxy's stats socket does the same). */
#ifndef CJ_OPS_OUT_H
#define CJ_OPS_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

struct cj_col {
    const char *name;
    int width;          /* text rendering: minimum column width */
};

struct cj_out {
    struct evbuffer *buf;
    bool json;
    bool first;         /* JSON: no comma before the next member */
    bool in_row;
    bool row_first;
    const struct cj_col *cols;
    int ncols, col;
};

void cj_out_begin(struct cj_out *o, struct evbuffer *buf, bool json);
void cj_out_end(struct cj_out *o);     /* closes the answer (the empty line) */

void cj_out_str(struct cj_out *o, const char *key, const char *val);
void cj_out_u64(struct cj_out *o, const char *key, uint64_t val);
void cj_out_i64(struct cj_out *o, const char *key, int64_t val);
void cj_out_dbl(struct cj_out *o, const char *key, double val);
void cj_out_bool(struct cj_out *o, const char *key, bool val);

/* A table: begin with its columns, then rows of cells in column order. */
void cj_out_table_begin(struct cj_out *o, const char *name, const struct cj_col *cols, int ncols);
void cj_out_row_begin(struct cj_out *o);
void cj_out_cell_str(struct cj_out *o, const char *val);
void cj_out_cell_u64(struct cj_out *o, uint64_t val);
void cj_out_cell_dbl(struct cj_out *o, double val);
void cj_out_row_end(struct cj_out *o);
void cj_out_table_end(struct cj_out *o);

/* JSON string escaping into buf (always NUL-terminated, truncates). */
void cj_json_escape(char *dst, size_t dstsz, const char *src);

#endif
