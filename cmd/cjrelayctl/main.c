/* cjrelayctl — entry point.  This binary is a placeholder until its issue lands:
 * it answers --version and otherwise says what it does not do yet. */
#include <stdio.h>
#include <string.h>

#include "util/version.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("cjrelayctl %s\n", CJRELAY_VERSION);
            return 0;
        }
    }
    fprintf(stderr, "cjrelayctl: not yet implemented (see the issues); only --version works\n");
    return 2;
}
