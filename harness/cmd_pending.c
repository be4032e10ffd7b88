/* cmd_pending.c: subcommands whose implementation has not landed yet. Each one is removed from
 * here when its own file arrives. */
#include "commands.h"

#include <stdio.h>

static int pending(const char *name) {
    fprintf(stderr, "inkling-moe %s: not implemented in this build yet\n", name);
    return 2;
}

int cmd_run(int argc, char **argv) { (void)argc; (void)argv; return pending("run"); }
int cmd_diff(int argc, char **argv) { (void)argc; (void)argv; return pending("diff"); }
int cmd_fuzz(int argc, char **argv) { (void)argc; (void)argv; return pending("fuzz"); }
