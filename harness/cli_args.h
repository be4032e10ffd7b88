/*
 * cli_args.h: the one option parser of every inkling-moe command, and its error line.
 *
 * Rules (docs/harness.md, "Options and errors"):
 *   - options are "--name VALUE", "--name=VALUE" or a bare "--flag"; nothing positional;
 *   - numbers are checked whole: an integer is decimal digits with an optional leading '-'
 *     (no spaces, no trailing text, no hex), within the option's range; a real number must be
 *     finite and within its range ("nan", "inf", "1e999" are refused); a choice must be one
 *     of its listed words;
 *   - an option given twice, an unknown option, a value missing, a required option missing,
 *     or two options that exclude each other (e.g. --tp with --ep) are errors;
 *   - usage goes to stdout on --help (or -h) only, with exit status 0;
 *   - every error is exactly one line "inkling-moe COMMAND: argument --name: ..." on stderr
 *     and exit status 2; control characters and invalid UTF-8 in any message are escaped
 *     (\n, \t, \xHH), so a hostile file name or tensor name cannot forge a second line.
 */
#ifndef INKLING_CLI_ARGS_H
#define INKLING_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_MAX_THREADS 256 /* --threads: more only exhausts stacks and thread limits */

typedef enum {
    CLI_FLAG,   /* no value: *(bool *)out = true */
    CLI_STRING, /* *(const char **)out = the value (may be empty unless nonempty is set) */
    CLI_INT,    /* *(int *)out, within [lo, hi] */
    CLI_LONG,   /* *(long *)out, within [lo, hi] */
    CLI_U64,    /* *(uint64_t *)out, any non-negative 64-bit integer (decimal or 0x hex) */
    CLI_REAL,   /* *(double *)out, finite, within [lo, hi] */
    CLI_CHOICE, /* *(int *)out = index of the value in choices ("exact,serving") */
} cli_kind;

typedef struct {
    const char *name;     /* "--threads" */
    cli_kind kind;
    void *out;
    double lo, hi;        /* CLI_INT, CLI_LONG, CLI_REAL: the inclusive range */
    const char *choices;  /* CLI_CHOICE: comma-separated words */
    const char *excludes; /* another option's name that may not be given with this one */
    bool required;
    bool nonempty;        /* CLI_STRING: "" is refused */
    bool given;           /* set by the parser */
} cli_option;

/* Parses argv [argc] (the arguments after the command's name) into opts [n]. Returns -1 to
 * go on, 0 after printing usage for --help, 2 after printing one error line. command is the
 * command's name for messages ("run"); usage prints its usage. */
int cli_parse(const char *command, cli_option *opts, int n, int argc, char **argv,
              void (*usage)(FILE *));

/* Prints "inkling-moe COMMAND: MESSAGE" as one escaped line on stderr; returns 2. command may
 * be NULL for the top level ("inkling-moe: MESSAGE"). */
int cli_fail(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* msg with control characters and invalid UTF-8 escaped (\n, \t, \\xHH) into out [cap]. */
const char *cli_escape(const char *msg, char *out, size_t cap);

/* The option named name in opts [n], or NULL. */
cli_option *cli_find(cli_option *opts, int n, const char *name);

/* The running tool's own path as it was started (argv[0]), for the command lines the tool
 * prints for a user to paste (a fuzz failure's rerun line); "inkling-moe" until set. */
void cli_set_program(const char *argv0);
const char *cli_program(void);

#endif /* INKLING_CLI_ARGS_H */
