/* SPDX-License-Identifier: Apache-2.0 */
/* model.h — the simulator's model: deterministic float32 tensors and the
 * download items that carry them (doc/design.md "Conventions").
 *
 *   value of element j of tensor t in the task of round r (1-based):
 *       (float)(r * 1000 + t) + (float)(j % 1000) * 0.001f      (float32 math)
 *   the worker's result: that value + 1.0f (float32), compared bit for bit.
 *
 * The values repeat every 1000 elements, so a tensor is described by one
 * "period" of 1000 floats; generating and checking are memcpy / memcmp of it.
 *
 * Items are built in ONE exact-size buffer each (header, data and trailer
 * written in place, no second copy), byte-identical to what lib/payload/items.c
 * writes for the same tensor (sim_model_selftest checks that):
 *   safetensors (DOT 6): one tensor keyed "T<t>", dtype F32, shape [n]
 *   numpy (DOT 3):       an npz with the member "T<t>.npy", <f4, shape (n,)
 * Inline ("native") tensors for --inline: numpy an .npy file, torch a
 * safetensors blob of {"t": tensor}. */
#ifndef CJ_SIM_MODEL_H
#define CJ_SIM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_PERIOD 1000
#define SIM_DOT_NUMPY 3
#define SIM_DOT_TORCH 6
#define SIM_MAX_TENSOR_BYTES ((uint64_t)3 << 30)   /* npz and bin32 stay below 4 GiB */

/* The first SIM_PERIOD values of tensor t in round r (+1.0f each when plus_one). */
void sim_period(long round, size_t t, bool plus_one, float out[SIM_PERIOD]);

/* Exact size of the item of tensor t (key "T<t>") holding nelem floats. */
uint64_t sim_item_size(int dot, size_t t, uint64_t nelem);

/* Builds that item (malloc'd, *len = sim_item_size).  NULL on no memory. */
uint8_t *sim_item_build(int dot, size_t t, uint64_t nelem, const float period[SIM_PERIOD], size_t *len);

/* Inline tensor bytes (numpy: .npy; torch: safetensors {"t": ...}), malloc'd. */
uint8_t *sim_native_build(int dot, uint64_t nelem, const float period[SIM_PERIOD], size_t *len);

/* Checks an item received for tensor item id `key` ("T<k>"): it parses as the
 * DOT's format (npz CRC included), holds that tensor (or exactly one tensor),
 * F32/<f4, nelem elements, 1-D, each element bit-equal to the period's.
 * 0, or -1 with why filled. */
int sim_item_verify(int dot, const uint8_t *p, size_t n, const char *key, uint64_t nelem,
                    const float period[SIM_PERIOD], char *why, size_t whysz);

/* Checks inline tensor bytes the same way (numpy .npy / torch safetensors). */
int sim_native_verify(int dot, const uint8_t *p, size_t n, uint64_t nelem, const float period[SIM_PERIOD],
                      char *why, size_t whysz);

/* CRC-32 (zlib's), slicing by 8. */
uint32_t sim_crc32(uint32_t crc, const void *p, size_t n);

/* Compares the generators with lib/payload/items.c's writers and the
 * verifiers with corrupted items.  0, or -1 with why filled. */
int sim_model_selftest(char *why, size_t whysz);

#endif
