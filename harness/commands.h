/* commands.h: the subcommands of inkling-moe. Each takes the arguments after its own name and
 * returns the process exit status (0 success, 1 a check failed, 2 bad usage or bad input). */
#ifndef INKLING_COMMANDS_H
#define INKLING_COMMANDS_H

typedef struct {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);
} moe_command;

int cmd_backends(int argc, char **argv); /* harness/cmd_backends.c */
int cmd_run(int argc, char **argv);      /* harness/cmd_run.c */
int cmd_diff(int argc, char **argv);     /* harness/cmd_diff.c */
int cmd_fuzz(int argc, char **argv);     /* harness/cmd_fuzz.c */
int cmd_inspect(int argc, char **argv);  /* harness/cmd_inspect.c */
int cmd_export(int argc, char **argv);   /* harness/cmd_export.c */
int cmd_check(int argc, char **argv);    /* harness/cmd_check.c */
int cmd_lab(int argc, char **argv);      /* harness/cmd_lab.c */
int cmd_lab_compare(int argc, char **argv); /* harness/cmd_lab_compare.c */

#endif
