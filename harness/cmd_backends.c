/* cmd_backends.c: `inkling-moe backends`: which paths this build knows and which can run. */
#include "../common/moe.h"
#include "commands.h"

#include <stdio.h>

int cmd_backends(int argc, char **argv) {
    (void)argv;
    if (argc > 0) {
        fprintf(stdout, "usage: inkling-moe backends\n");
        return 0;
    }
    for (int i = 0; i < moe_backend_count(); i++) {
        const moe_backend *b = moe_backend_at(i);
        char why[256] = "";
        bool ok = b->available(why, sizeof why);
        printf("%-9s %-11s %s%s%s\n", b->name, ok ? "available" : "unavailable", b->description,
               ok ? "" : ": ", ok ? "" : why);
    }
    return 0;
}
