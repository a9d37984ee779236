/* stats.c — the relay's shared counters (see stats.h). */
#include "util/stats.h"

struct cj_stats cj_stats;
