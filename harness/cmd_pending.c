/* cmd_pending.c: subcommands whose implementation has not landed yet. Each one is removed from
 * here when its own file arrives. */
#include "commands.h"

/* Every subcommand has landed; a future one starts here as
 *   static int pending(const char *name) { fprintf(stderr, "... not implemented ...\n"); return 2; }
 * until its own file arrives. */
typedef int moe_cmd_pending_placeholder; /* keeps the translation unit non-empty */
