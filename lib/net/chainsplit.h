/* SPDX-License-Identifier: Apache-2.0 */
/* chainsplit.h — the first n bytes of an evbuffer moved to another without a
 * copy, also when n ends inside a chain.
 *
 * libevent moves whole chains between buffers, but evbuffer_remove_buffer
 * copies the part of a chain it has to cut, and even when the cut falls between
 * chains it ends with an empty evbuffer_add that, after a reference chain,
 * allocates a fresh chain as large as that one (512 KiB after a 400 KB read),
 * which the next small add then fills.  Here src's chains go whole into a
 * holder, and the bytes come back as reference chains on it: the first n to
 * dst, the rest to src.  The holder, with the chains and blocks it keeps, is
 * freed when the last reference is, on whichever thread frees it.  A rest
 * shorter than `small` is copied into a chain of its own instead, so a few
 * bytes left behind pin nothing large. */
#ifndef CJ_NET_CHAINSPLIT_H
#define CJ_NET_CHAINSPLIT_H

#include <stddef.h>

#include <event2/buffer.h>

/* Moves the first n bytes of src (0 < n < its length) to the end of dst.
 * 0, or -1 out of memory (then what moved is undefined: the caller gives up
 * the stream). */
int cj_chain_split(struct evbuffer *src, size_t n, struct evbuffer *dst, size_t small);

#endif
