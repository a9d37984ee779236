/* SPDX-License-Identifier: Apache-2.0 */
/* fqcn.h — fully qualified cell names (doc/protocol/cellnet.md §5).
 *
 * An FQCN is a dot-joined path of parts: "server", "site-1", "site-1.J1",
 * "site-1.J1.client_api_trainer_1".  Each part is non-empty, uses only
 * [A-Za-z0-9_~-], and no part appears twice in one name ("site-1.site-1" is
 * invalid).  Names never carry whitespace here: NVFlare strips it from a HELLO
 * endpoint_name, the relay rejects it instead.
 *
 * All functions take NUL-terminated strings and never allocate.  The
 * predicates (is_ancestor, is_direct_child) compare bytes only; they do not
 * validate their arguments, so validate names where they enter the relay. */
#ifndef CJ_WIRE_FQCN_H
#define CJ_WIRE_FQCN_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

/* Longest FQCN accepted anywhere (bytes, without the NUL).  Header fields that
 * hold an FQCN or a similar short name are bounded by the same value. */
#define CJ_FQCN_MAX 255

#define CJ_FQCN_SERVER "server"

/* 0 when s[0..len) is a valid FQCN, else -CJ_E_INVALID / -CJ_E_LIMIT with err
 * naming the problem and its offset inside the name. */
int cj_fqcn_check(const char *s, size_t len, struct cj_err *err);

/* Shorthand for cj_fqcn_check(s, strlen(s), NULL) == 0 (false for NULL). */
bool cj_fqcn_valid(const char *s);

/* Number of parts ("gen"): server, site-1 = 1; site-1.J1 = 2; 0 for "" or NULL.
 * Counts dots only; call on validated names. */
int cj_fqcn_gen(const char *s);

/* Length of the first part (the root: "server" or a site name). */
size_t cj_fqcn_root_len(const char *s);

/* True when the root part of s is "server". */
bool cj_fqcn_is_server(const char *s);

/* Writes parent(s) ("a.b.c" -> "a.b") into out.  Returns 0, or -1 when s has a
 * single part (no parent) or out (size outsz) is too small. */
int cj_fqcn_parent(const char *s, char *out, size_t outsz);

/* True when a is an ancestor of b: b starts with a + "." (a non-empty). */
bool cj_fqcn_is_ancestor(const char *a, const char *b);

/* True when child == parent + "." + leaf with a non-empty leaf holding no dot;
 * *leaf (if leaf is not NULL) then points at the leaf inside child. */
bool cj_fqcn_is_direct_child(const char *parent, const char *child, const char **leaf);

#endif
