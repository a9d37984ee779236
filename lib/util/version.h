/* SPDX-License-Identifier: Apache-2.0 */
/* version.h — the one place the version lives. */
#ifndef CJ_UTIL_VERSION_H
#define CJ_UTIL_VERSION_H
#define CJRELAY_VERSION "0.6.0"
/* The NVFlare release the FOBS/LOBS payload format is pinned to (it has no version field). */
#define CJRELAY_NVFLARE_PIN "NVFlare development tree > 2.9 (Client API cell protocol 1, bootstrap schema 1)"
#endif
