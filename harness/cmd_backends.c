/* cmd_backends.c: `inkling-moe backends`: which paths this build knows and which can run. */
#include "../common/moe.h"
#include "cli_args.h"
#include "commands.h"

#include <stdio.h>

static void usage(FILE *f) { fprintf(f, "usage: inkling-moe backends\n"); }

int cmd_backends(int argc, char **argv) {
    int rc = cli_parse("backends", NULL, 0, argc, argv, usage);
    if (rc >= 0) return rc;
    for (int i = 0; i < moe_backend_count(); i++) {
        const moe_backend *b = moe_backend_at(i);
        char why[256] = "";
        bool ok = b->available(why, sizeof why);
        printf("%-9s %-11s %s%s%s\n", b->name, ok ? "available" : "unavailable", b->description,
               ok ? "" : ": ", ok ? "" : why);
    }
    return 0;
}
