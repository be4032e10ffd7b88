/* exec_path.c: external programs as paths, one-shot and persistent (exec_path.h). */
#define _DEFAULT_SOURCE /* mkdtemp */
#include "exec_path.h"

#include "bound_backend.h"
#include "case_files.h"
#include "plugin_host.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    char command[1024];
    char name[64];
    bool worker;
    char stderr_path[600]; /* the program's stderr (one file per path) */
    pid_t pid;             /* the running worker, 0 when none */
    int to_worker, from_worker;
} exec_ctx;

typedef struct {
    exec_ctx *ctx;
    moe_config cfg;
    moe_precision precision;
    char dir[512]; /* model.safetensors, config.json, input and output files */
} exec_state;

/* ---------------------------------------------------------------- small helpers */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *tmp_root(void) {
    const char *t = getenv("TMPDIR");
    return t && t[0] ? t : "/tmp";
}

/* The last few hundred bytes of the program's stderr on one line, into buf. */
static const char *stderr_tail(const exec_ctx *ctx, char *buf, size_t len) {
    buf[0] = '\0';
    FILE *f = fopen(ctx->stderr_path, "rb");
    if (!f) return buf;
    fseek(f, 0, SEEK_END);
    long size = ftell(f), keep = (long)len - 1 < 300 ? (long)len - 1 : 300;
    fseek(f, size > keep ? size - keep : 0, SEEK_SET);
    size_t n = fread(buf, 1, (size_t)keep, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\n') buf[i] = '|';
        else if ((unsigned char)buf[i] < 0x20) buf[i] = ' ';
    return buf;
}

static moe_status failed(const exec_ctx *ctx, moe_error *err, const char *what) {
    char tail[320];
    stderr_tail(ctx, tail, sizeof tail);
    return moe_fail(err, MOE_ERR_DEVICE, "%s: %s; stderr: %s", ctx->name, what, tail[0] ? tail : "(empty)");
}

/* Describes a wait status: "exited with status N" or "killed by signal N (NAME)". */
static void describe_status(int status, char *buf, size_t len) {
    if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(buf, len, "exited with status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* Starts `sh -c command` with stdin/stdout from the given fds (-1: /dev/null) and stderr into
 * the path's stderr file. Returns the pid, or -1. */
static pid_t start_program(const exec_ctx *ctx, int in_fd, int out_fd, int close_a, int close_b) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    int null_fd = open("/dev/null", O_RDWR);
    int err_fd = open(ctx->stderr_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(in_fd >= 0 ? in_fd : null_fd, 0);
    dup2(out_fd >= 0 ? out_fd : null_fd, 1);
    dup2(err_fd >= 0 ? err_fd : null_fd, 2);
    if (close_a >= 0) close(close_a);
    if (close_b >= 0) close(close_b);
    signal(SIGPIPE, SIG_DFL);
    execl("/bin/sh", "sh", "-c", ctx->command, (char *)NULL);
    _exit(127);
}

/* Waits for pid up to limit seconds (then kills it). Returns 0 when it ended, -1 on timeout. */
static int wait_limited(pid_t pid, double limit, int *status) {
    const double end = now_s() + limit;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) return 0;
        if (now_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            return -1;
        }
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
}

/* ---------------------------------------------------------------- one call */

static moe_status run_once(exec_state *s, const char *input, const char *output, moe_error *err) {
    exec_ctx *ctx = s->ctx;
    setenv("INKLING_MOE_MODEL", s->dir, 1);
    setenv("INKLING_MOE_INPUT", input, 1);
    setenv("INKLING_MOE_OUTPUT", output, 1);
    setenv("INKLING_MOE_PRECISION", s->precision == MOE_PRECISION_EXACT ? "exact" : "serving", 1);
    setenv("INKLING_MOE_LAYER", "0", 1);
    if (truncate(ctx->stderr_path, 0)) {} /* a fresh file per call; absent is fine */
    pid_t pid = start_program(ctx, -1, -1, -1, -1);
    if (pid < 0) return moe_fail(err, MOE_ERR_DEVICE, "%s: cannot start: %s", ctx->name, strerror(errno));
    int status = 0, limit = moe_external_timeout_s();
    char what[160];
    if (wait_limited(pid, limit, &status)) {
        snprintf(what, sizeof what, "timed out after %d s (INKLING_MOE_PATH_TIMEOUT), killed", limit);
        return failed(ctx, err, what);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return MOE_OK;
    describe_status(status, what, sizeof what);
    return failed(ctx, err, what);
}

static void worker_stop(exec_ctx *ctx) {
    if (!ctx->pid) return;
    close(ctx->to_worker);
    close(ctx->from_worker);
    int status;
    if (wait_limited(ctx->pid, 2.0, &status)) {} /* killed if it does not end on EOF */
    ctx->pid = 0;
}

static moe_status worker_start(exec_ctx *ctx, moe_error *err) {
    int in[2], out[2];
    if (pipe(in)) return moe_fail(err, MOE_ERR_DEVICE, "%s: pipe: %s", ctx->name, strerror(errno));
    if (pipe(out)) {
        close(in[0]), close(in[1]);
        return moe_fail(err, MOE_ERR_DEVICE, "%s: pipe: %s", ctx->name, strerror(errno));
    }
    signal(SIGPIPE, SIG_IGN); /* a worker that died is an error answer, not the tool's end */
    if (truncate(ctx->stderr_path, 0)) {} /* a fresh file per call; absent is fine */
    pid_t pid = start_program(ctx, in[0], out[1], in[1], out[0]);
    close(in[0]);
    close(out[1]);
    if (pid < 0) {
        close(in[1]), close(out[0]);
        return moe_fail(err, MOE_ERR_DEVICE, "%s: cannot start: %s", ctx->name, strerror(errno));
    }
    fcntl(in[1], F_SETFD, FD_CLOEXEC);
    fcntl(out[0], F_SETFD, FD_CLOEXEC);
    ctx->pid = pid, ctx->to_worker = in[1], ctx->from_worker = out[0];
    return MOE_OK;
}

/* Reads one answer line from the worker within limit seconds: 0 a line, -1 timeout, -2 EOF. */
static int read_answer(exec_ctx *ctx, double limit, char *line, size_t len) {
    const double end = now_s() + limit;
    size_t n = 0;
    while (n + 1 < len) {
        int left_ms = (int)((end - now_s()) * 1000.0);
        if (left_ms <= 0) return -1;
        struct pollfd p = {ctx->from_worker, POLLIN, 0};
        int r = poll(&p, 1, left_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) return -1;
        char ch;
        ssize_t got = read(ctx->from_worker, &ch, 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -2;
        if (ch == '\n') break;
        line[n++] = ch;
    }
    line[n] = '\0';
    return 0;
}

static moe_status run_worker(exec_state *s, const char *input, const char *output, moe_error *err) {
    exec_ctx *ctx = s->ctx;
    if (!ctx->pid && worker_start(ctx, err)) return err ? err->status : MOE_ERR_DEVICE;
    char req[2200];
    int n = snprintf(req, sizeof req, "%s\t%s\t%s\t%s\n", s->dir, input, output,
                     s->precision == MOE_PRECISION_EXACT ? "exact" : "serving");
    const int limit = moe_external_timeout_s();
    char answer[512], what[700];
    int r = write(ctx->to_worker, req, (size_t)n) == n ? read_answer(ctx, limit, answer, sizeof answer) : -2;
    if (r == 0 && !strcmp(answer, "ok")) return MOE_OK;
    if (r == 0 && !strncmp(answer, "error", 5)) {
        snprintf(what, sizeof what, "answered: %.480s", answer);
        return failed(ctx, err, what);
    }
    if (r == 0) {
        snprintf(what, sizeof what, "answered '%.400s' (expected ok or error MESSAGE)", answer);
        return failed(ctx, err, what);
    }
    if (r == -1) {
        kill(ctx->pid, SIGKILL);
        worker_stop(ctx);
        snprintf(what, sizeof what, "worker gave no answer within %d s (INKLING_MOE_PATH_TIMEOUT), killed", limit);
        return failed(ctx, err, what);
    }
    int status = 0;
    close(ctx->to_worker);
    close(ctx->from_worker);
    wait_limited(ctx->pid, 2.0, &status);
    ctx->pid = 0; /* the next call starts a new one */
    char how[160];
    describe_status(status, how, sizeof how);
    snprintf(what, sizeof what, "worker ended without an answer (%s)", how);
    return failed(ctx, err, what);
}

/* ---------------------------------------------------------------- the bound table */

static bool exec_available(void *vctx, char *why, size_t len) {
    (void)vctx, (void)why, (void)len;
    return true;
}

static bool exec_supports(void *vctx, const moe_config *cfg, const moe_split *split,
                          const moe_options *opt, char *why, size_t len) {
    (void)vctx, (void)cfg;
    if (split->kind != MOE_SPLIT_NONE || split->pad_inter_to) {
        snprintf(why, len, "an external program computes the whole layer: unsplit, unpadded runs only");
        return false;
    }
    if (opt->precision != MOE_PRECISION_EXACT && opt->precision != MOE_PRECISION_SERVING) {
        snprintf(why, len, "precision %d has no name for external programs", (int)opt->precision);
        return false;
    }
    return true;
}

static void remove_dir(const char *dir) {
    static const char *const files[] = {"config.json", "model.safetensors", "input.safetensors",
                                        "output.safetensors"};
    char path[700];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

static moe_status exec_create(void *vctx, const moe_shard *sh, const moe_options *opt, void **out,
                              moe_error *err) {
    exec_state *s = calloc(1, sizeof *s);
    if (!s) return moe_fail(err, MOE_ERR_NOMEM, "exec: out of memory");
    s->ctx = vctx;
    s->cfg = sh->cfg;
    s->precision = opt->precision;
    snprintf(s->dir, sizeof s->dir, "%s/inkling-moe-case.XXXXXX", tmp_root());
    if (!mkdtemp(s->dir)) {
        free(s);
        return moe_fail(err, MOE_ERR_IO, "%s: cannot create a directory under %s: %s", ((exec_ctx *)vctx)->name,
                        tmp_root(), strerror(errno));
    }
    /* unsplit and unpadded (supports): the shard's arrays are the full layer's */
    moe_weights w = {.gate_w = sh->gate_w, .gate_bias = sh->gate_bias, .global_scale = sh->global_scale,
                     .w13_mx = sh->w13_mx, .w13_scale = sh->w13_scale, .w2_mx = sh->w2_mx,
                     .w2_scale = sh->w2_scale, .w13_bf16 = sh->w13_bf16, .w2_bf16 = sh->w2_bf16,
                     .sink_w13 = sh->sink_w13, .sink_w2 = sh->sink_w2, .w13_scale2 = sh->w13_scale2,
                     .w2_scale2 = sh->w2_scale2};
    moe_status st = moe_export_checkpoint(s->dir, &sh->cfg, &w, err);
    if (st) {
        remove_dir(s->dir);
        free(s);
        return st;
    }
    *out = s;
    return MOE_OK;
}

static moe_status exec_forward(void *state, int T, const uint16_t *x, float *out, moe_stages *stages,
                               moe_error *err) {
    exec_state *s = state;
    char input[700], output[700];
    snprintf(input, sizeof input, "%s/input.safetensors", s->dir);
    snprintf(output, sizeof output, "%s/output.safetensors", s->dir);
    unlink(output);
    moe_status st = moe_export_input(input, T, s->cfg.D, x, err);
    if (st) return st;
    st = s->ctx->worker ? run_worker(s, input, output, err) : run_once(s, input, output, err);
    if (st) return st;
    moe_stages none = {0};
    moe_error read_err = {0};
    st = moe_read_outputs(output, &s->cfg, T, out, stages ? stages : &none, &read_err);
    if (st) return moe_fail(err, st, "%s: its output: %.440s", s->ctx->name, read_err.msg);
    return MOE_OK;
}

static void exec_destroy(void *state) {
    exec_state *s = state;
    if (!s) return;
    remove_dir(s->dir);
    free(s);
}

static const moe_bound_ops exec_ops = {exec_available, exec_supports, exec_create, exec_forward, NULL,
                                       exec_destroy};

static exec_ctx *workers[MOE_BOUND_SLOTS];
static int n_workers;

/* Workers end with the tool: EOF on their stdin, then a wait (they are killed after 2 s). */
static void worker_at_exit(void) {
    for (int i = 0; i < n_workers; i++) {
        worker_stop(workers[i]);
        unlink(workers[i]->stderr_path);
    }
}

const moe_backend *moe_exec_open(const char *spec, moe_error *err) {
    const bool worker = !strncmp(spec, "worker:", 7);
    const char *command = spec + (worker ? 7 : 5);
    if (!command[0]) {
        moe_fail(err, MOE_ERR_ARG, "path %s: needs a command, as in %sCOMMAND", spec, worker ? "worker:" : "exec:");
        return NULL;
    }
    exec_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        moe_fail(err, MOE_ERR_NOMEM, "path %s: out of memory", spec);
        return NULL;
    }
    snprintf(ctx->command, sizeof ctx->command, "%s", command);
    ctx->worker = worker;
    /* named after the program's file name: "exec:my_engine" */
    const char *first = command + strspn(command, " \t");
    size_t len = strcspn(first, " \t");
    const char *base = first;
    for (const char *p = first; p < first + len; p++)
        if (*p == '/') base = p + 1;
    int base_len = (int)(first + len - base);
    snprintf(ctx->name, sizeof ctx->name, "%s%.*s", worker ? "worker:" : "exec:", base_len > 24 ? 24 : base_len, base);
    snprintf(ctx->stderr_path, sizeof ctx->stderr_path, "%s/inkling-moe-stderr.XXXXXX", tmp_root());
    int fd = mkstemp(ctx->stderr_path);
    if (fd < 0) {
        moe_fail(err, MOE_ERR_IO, "path %s: cannot create a file under %s", spec, tmp_root());
        free(ctx);
        return NULL;
    }
    close(fd);
    const moe_backend *b = moe_bound_backend(ctx->name, ctx->command, &exec_ops, ctx, NULL, err);
    if (!b) {
        unlink(ctx->stderr_path);
        free(ctx);
        return NULL;
    }
    if (n_workers == 0) atexit(worker_at_exit);
    workers[n_workers++] = ctx;
    return b;
}
