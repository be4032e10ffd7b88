/*
 * cli_args.c: option parsing and one-line errors for every command (cli_args.h).
 *
 * Rules: a value is checked entirely here, so that commands only read typed results; the
 * messages always start "argument --name:" and quote the offending value (escaped).
 */
#include "cli_args.h"

#include "../common/in_file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- one escaped line */

/* Length of the printable UTF-8 sequence at s (moe_utf8_seq_len, without C0/C1 controls and
 * DEL), or 0. */
static int utf8_len(const unsigned char *s) {
    int n = moe_utf8_seq_len(s);
    if (n == 1 && (s[0] < 0x20 || s[0] == 0x7f)) return 0;
    if (n == 2 && s[0] == 0xc2 && s[1] < 0xa0) return 0; /* U+0080..U+009F */
    return n;
}

const char *cli_escape(const char *msg, char *out, size_t cap) {
    size_t o = 0;
    for (const unsigned char *s = (const unsigned char *)msg; *s && o + 5 < cap;) {
        int n = utf8_len(s);
        if (n) {
            if (o + (size_t)n + 1 >= cap) break;
            memcpy(out + o, s, (size_t)n);
            o += (size_t)n, s += n;
        } else {
            o += (size_t)snprintf(out + o, cap - o, *s == '\n' ? "\\n" : *s == '\t' ? "\\t" : "\\x%02X",
                                  *s);
            s++;
        }
    }
    out[o < cap ? o : cap - 1] = '\0';
    return out;
}

int cli_fail(const char *command, const char *fmt, ...) {
    char msg[2048], line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "inkling-moe%s%s: %s\n", command ? " " : "", command ? command : "",
            cli_escape(msg, line, sizeof line));
    fflush(stderr);
    return 2;
}

/* ---------------------------------------------------------------- values */

/* A whole decimal integer (optional '-') in [lo, hi]. */
static bool parse_integer(const char *v, double lo, double hi, long long *out) {
    const char *p = v + (v[0] == '-');
    if (!*p || strspn(p, "0123456789") != strlen(p)) return false;
    errno = 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || (double)x < lo || (double)x > hi) return false;
    *out = x;
    return true;
}

static bool parse_u64(const char *v, uint64_t *out) {
    bool hex = v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
    const char *digits = hex ? v + 2 : v;
    if (!*digits || strspn(digits, hex ? "0123456789abcdefABCDEF" : "0123456789") != strlen(digits))
        return false;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(digits, &end, hex ? 16 : 10);
    if (errno || *end) return false;
    *out = (uint64_t)x;
    return true;
}

static bool parse_real(const char *v, double lo, double hi, double *out) {
    if (!*v || strchr(" \t\n\v\f\r", v[0])) return false;
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (*end || !isfinite(x) || x < lo || x > hi) return false;
    *out = x;
    return true;
}

static int choice_index(const char *choices, const char *v) {
    size_t len = strlen(v);
    int i = 0;
    for (const char *p = choices; *p; i++) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && len && !strncmp(p, v, n)) return i;
        p += n + (end ? 1 : 0);
    }
    return -1;
}

/* Stores v into o; returns 2 after an error line. */
static int set_value(const char *command, cli_option *o, const char *v) {
    long long x;
    switch (o->kind) {
    case CLI_FLAG: break;
    case CLI_STRING:
        if (o->nonempty && !v[0]) return cli_fail(command, "argument %s: empty", o->name);
        *(const char **)o->out = v;
        return 0;
    case CLI_INT:
    case CLI_LONG:
        if (!parse_integer(v, o->lo, o->hi, &x))
            return cli_fail(command, "argument %s: '%s' is not an integer in [%.0f, %.0f]", o->name,
                            v, o->lo, o->hi);
        if (o->kind == CLI_INT) *(int *)o->out = (int)x;
        else *(long *)o->out = (long)x;
        return 0;
    case CLI_U64:
        if (!parse_u64(v, (uint64_t *)o->out))
            return cli_fail(command,
                            "argument %s: '%s' is not an integer in [0, 2^64 - 1] (decimal or 0x hex)",
                            o->name, v);
        return 0;
    case CLI_REAL:
        if (!parse_real(v, o->lo, o->hi, (double *)o->out))
            return cli_fail(command, "argument %s: '%s' is not a finite number in [%g, %g]", o->name,
                            v, o->lo, o->hi);
        return 0;
    case CLI_CHOICE: {
        int i = choice_index(o->choices, v);
        if (i < 0) return cli_fail(command, "argument %s: '%s' is not one of %s", o->name, v, o->choices);
        *(int *)o->out = i;
        return 0;
    }
    }
    return 0;
}

/* ---------------------------------------------------------------- the parser */

cli_option *cli_find(cli_option *opts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(opts[i].name, name)) return &opts[i];
    return NULL;
}

/* The option that arg names ("--name" or "--name=value"); *value points after '=' or is NULL. */
static cli_option *lookup(cli_option *opts, int n, const char *arg, const char **value) {
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    *value = eq ? eq + 1 : NULL;
    for (int i = 0; i < n; i++)
        if (strlen(opts[i].name) == len && !strncmp(opts[i].name, arg, len)) return &opts[i];
    return NULL;
}

/* After all options: required ones present, no two that exclude each other. */
static int check_combination(const char *command, cli_option *opts, int n) {
    for (int i = 0; i < n; i++) {
        cli_option *o = &opts[i];
        if (o->required && !o->given)
            return cli_fail(command, "argument %s: missing (see --help)", o->name);
        cli_option *x = o->excludes ? cli_find(opts, n, o->excludes) : NULL;
        if (o->given && x && x->given)
            return cli_fail(command, "argument %s: cannot be combined with %s", o->name, x->name);
    }
    return -1;
}

int cli_parse(const char *command, cli_option *opts, int n, int argc, char **argv,
              void (*usage)(FILE *)) {
    for (int i = 0; i < n; i++) opts[i].given = false;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *value;
        if (strncmp(arg, "--", 2) || !arg[2])
            return cli_fail(command, "argument '%s': unexpected (options are --name VALUE; see --help)",
                            arg);
        cli_option *o = lookup(opts, n, arg, &value);
        if (!o) {
            size_t len = strcspn(arg, "=");
            return cli_fail(command, "argument %.*s: unknown option (see --help)", (int)len, arg);
        }
        if (o->given) return cli_fail(command, "argument %s: given twice", o->name);
        o->given = true;
        if (o->kind == CLI_FLAG) {
            if (value) return cli_fail(command, "argument %s: takes no value", o->name);
            *(bool *)o->out = true;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) return cli_fail(command, "argument %s: needs a value", o->name);
            if (!strncmp(argv[i + 1], "--", 2) && argv[i + 1][2])
                return cli_fail(command, "argument %s: needs a value, got the option %s (write %s=VALUE "
                                "for a value that starts with --)", o->name, argv[i + 1], o->name);
            value = argv[++i];
        }
        if (set_value(command, o, value)) return 2;
    }
    return check_combination(command, opts, n);
}

static const char *program_path = "inkling-moe";

void cli_set_program(const char *argv0) {
    if (argv0 && argv0[0]) program_path = argv0;
}

const char *cli_program(void) { return program_path; }
