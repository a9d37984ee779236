/* SPDX-License-Identifier: Apache-2.0 */
/* lent.c — items lent to download replies by reference (see lent.h). */
#include "dl/lent.h"

#include <stdlib.h>

struct cj_dl_lent {
    uint8_t *data;
    size_t len;
    unsigned refs;       /* the owner's (until released) + one per reply pointing at data */
};

static void unref(struct cj_dl_lent *it)
{
    if (--it->refs == 0) {
        free(it->data);
        free(it);
    }
}

static void reply_done(const void *data, size_t len, void *arg)
{
    (void)data; (void)len;
    unref(arg);
}

struct cj_dl_lent *cj_dl_lent_new(uint8_t *data, size_t len)
{
    struct cj_dl_lent *it = calloc(1, sizeof *it);
    if (!it) {
        free(data);
        return NULL;
    }
    it->data = data;
    it->len = len;
    it->refs = 1;
    return it;
}

int cj_dl_lent_add(struct cj_dl_lent *it, struct evbuffer *out)
{
    it->refs++;
    if (evbuffer_add_reference(out, it->data, it->len, reply_done, it) == 0) return 0;
    it->refs--;
    return -1;
}

void cj_dl_lent_release(struct cj_dl_lent *it)
{
    if (it) unref(it);
}
