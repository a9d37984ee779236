/* SPDX-License-Identifier: Apache-2.0 */
/* itemcheck.h — the spool's check of a tensor item's header (doc/protocol/download.md §4).
 *
 * The spool writes the items of a ref to disk as they stream in and serves
 * them to workers later, so it checks each item's header before its bytes go
 * to disk: a safetensors item (DOT 6) has a length-prefixed JSON object as its
 * header; an npz item (DOT 3) is a stored ZIP whose member is T<index>.npy
 * (numpy < 2's allow_pickle.npy may come first).  Only the first
 * CJ_ITEM_HDR_MAX bytes of an item are ever looked at.  The tensors themselves
 * are not decoded here (lib/payload/items.c does that for the worker and the
 * simulator). */
#ifndef CJ_DL_ITEMCHECK_H
#define CJ_DL_ITEMCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CJ_ITEM_HDR_MAX 65536u   /* bytes of an item the check may need */

/* Checks the header of item T<index> (size bytes in all) from its first `have`
 * bytes h; final: no more bytes will come.  dot 6 is safetensors, anything
 * else npz.  1: the header is good; 0: more bytes are needed (never when final
 * or when have reaches size or CJ_ITEM_HDR_MAX); -1: bad, why says what. */
int cj_item_check_header(int dot, const uint8_t *h, size_t have, uint64_t size, uint32_t index, bool final, char *why,
                         size_t whysz);

#endif
