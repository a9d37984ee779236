/* SPDX-License-Identifier: Apache-2.0 */
/* ctl.h — cjrelayctl helpers. */
#ifndef CJ_CTL_H
#define CJ_CTL_H
#include <stddef.h>
/* Reads [status] socket from an INI file (default when absent). 0 or -1 (message printed). */
int ctl_socket_from_config(const char *file, char *out, size_t outsz);
#endif
