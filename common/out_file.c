/*
 * out_file.c: the temporary-fsync-rename writer and its signal cleanup (out_file.h).
 *
 * Rules:
 *   - the signal handler touches only what is async-signal-safe: it reads lock-free atomic
 *     flags and fixed buffers filled before the flag was set, calls unlink(), resets the
 *     action and re-raises;
 *   - a temporary's path is armed before the file is created and disarmed only after it was
 *     renamed or removed: a signal may land on any thread (OpenMP workers included), so no
 *     mask can close a window; unlinking a path that does not exist (yet, or any more) is
 *     harmless, and the random name makes it another process's file only by a 2^-48 chance.
 */
#include "out_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef O_NOFOLLOW
#define O_NOFOLLOW 0
#endif
#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

#define MAX_LIVE 8          /* temporaries open at once in one process */
#define TMP_MAX_LEN 4096

/* ---------------------------------------------------------------- the signal table */

static atomic_int slot_taken[MAX_LIVE];
static atomic_int slot_armed[MAX_LIVE];
static char slot_path[MAX_LIVE][TMP_MAX_LEN];
static const int guarded[] = {SIGINT, SIGTERM, SIGHUP};

static void on_signal(int sig) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (atomic_load(&slot_armed[i])) unlink(slot_path[i]);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig); /* delivered when the handler returns: the default action, as if never caught */
}

void moe_out_guard_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof guarded / sizeof guarded[0]; i++) {
        struct sigaction old;
        /* a signal ignored by the parent (nohup, background jobs) stays ignored */
        if (sigaction(guarded[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaddset(&sa.sa_mask, guarded[i]);
    }
    for (size_t i = 0; i < sizeof guarded / sizeof guarded[0]; i++)
        if (sigismember(&sa.sa_mask, guarded[i])) sigaction(guarded[i], &sa, NULL);
    signal(SIGXFSZ, SIG_IGN); /* a write past the file size limit fails with EFBIG instead */
}

/* A slot holding tmp, armed (the handler removes tmp from now on); -1 if all are taken. */
static int arm_slot(const char *tmp) {
    for (int i = 0; i < MAX_LIVE; i++) {
        int expected = 0;
        if (atomic_compare_exchange_strong(&slot_taken[i], &expected, 1)) {
            snprintf(slot_path[i], sizeof slot_path[i], "%s", tmp);
            atomic_store(&slot_armed[i], 1);
            return i;
        }
    }
    return -1;
}

static void release_slot(int slot) {
    if (slot < 0) return;
    atomic_store(&slot_armed[slot], 0);
    atomic_store(&slot_taken[slot], 0);
}

/* ---------------------------------------------------------------- names */

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t random_bits(void) {
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t v = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    v ^= mix((uint64_t)getpid() << 20 ^ atomic_fetch_add(&counter, 1));
    return mix(v ^ (uint64_t)(uintptr_t)&ts);
}

/* The directory part of path ("." when there is none): malloc'ed. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

/* ---------------------------------------------------------------- the writer */

void moe_out_abort(moe_out_file *o) {
    if (!o) return;
    if (o->fd >= 0 || o->fd == -2) { /* -2: closed, the temporary still there */
        if (o->fd >= 0) close(o->fd);
        unlink(o->tmp);
        release_slot(o->slot);
    }
    free(o->path);
    free(o->tmp);
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->slot = -1;
}

static moe_status check_destination(const char *path, moe_error *err) {
    size_t len = strlen(path);
    if (!len) return moe_fail(err, MOE_ERR_ARG, "output file: the path is empty");
    struct stat sb;
    if (path[len - 1] == '/' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
        return moe_fail(err, MOE_ERR_IO, "file %s: is a directory, not an output file", path);
    if (len + 32 >= TMP_MAX_LEN)
        return moe_fail(err, MOE_ERR_IO, "file %s: path too long (at most %d bytes)", path,
                        TMP_MAX_LEN - 32);
    return MOE_OK;
}

moe_status moe_out_open(const char *path, moe_out_file *o, moe_error *err) {
    if (!o) return moe_fail(err, MOE_ERR_ARG, "output file: NULL");
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->slot = -1;
    if (!path) return moe_fail(err, MOE_ERR_ARG, "output file: NULL path");
    moe_status st = check_destination(path, err);
    if (st) return st;
    char *dir = dir_of(path);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    o->path = strdup(path);
    o->tmp = malloc(TMP_MAX_LEN);
    if (!dir || !o->path || !o->tmp) {
        free(dir);
        moe_out_abort(o);
        return moe_fail(err, MOE_ERR_NOMEM, "file %s: out of memory", path);
    }
    int e = EEXIST;
    for (int tries = 0; tries < 64 && o->fd < 0 && e == EEXIST; tries++) {
        /* the name part is cut so that the temporary's name stays within NAME_MAX */
        snprintf(o->tmp, TMP_MAX_LEN, "%s/.%.200s.%012llx.tmp", dir, base,
                 (unsigned long long)(random_bits() & 0xffffffffffffull));
        o->slot = arm_slot(o->tmp); /* armed before it exists: no window for a signal */
        if (o->slot >= 0) {
            o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
            e = errno;
            if (o->fd < 0) release_slot(o->slot), o->slot = -1;
        } else {
            e = EMFILE;
        }
    }
    if (o->fd < 0) {
        moe_fail(err, MOE_ERR_IO, "file %s: cannot create a temporary file in directory %s: %s",
                 path, dir, e == EMFILE ? "too many output files open" : strerror(e));
        free(dir);
        moe_out_abort(o);
        return err ? err->status : MOE_ERR_IO;
    }
    free(dir);
    return MOE_OK;
}

moe_status moe_out_write(moe_out_file *o, const void *buf, size_t n, moe_error *err) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(o->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            moe_fail(err, MOE_ERR_IO, "file %s: write failed: %s", o->path,
                     w < 0 ? strerror(errno) : "no progress");
            moe_out_abort(o);
            return MOE_ERR_IO;
        }
        p += w;
        n -= (size_t)w;
    }
    return MOE_OK;
}

/* fsync of the directory, so that the rename itself survives a crash. Filesystems that
 * cannot sync a directory (EINVAL) are accepted: the rename is then as durable as they are. */
static int sync_dir(const char *path) {
    char *dir = dir_of(path);
    if (!dir) return ENOMEM;
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return errno;
    int rc = fsync(fd) && errno != EINVAL ? errno : 0;
    close(fd);
    return rc;
}

moe_status moe_out_commit(moe_out_file *o, moe_error *err) {
    if (!o || o->fd < 0) return moe_fail(err, MOE_ERR_ARG, "output file: not open");
    if (fsync(o->fd)) {
        moe_fail(err, MOE_ERR_IO, "file %s: fsync failed: %s", o->path, strerror(errno));
        moe_out_abort(o);
        return MOE_ERR_IO;
    }
    if (close(o->fd)) {
        o->fd = -2; /* closed, but the temporary is still there: abort removes it */
        moe_fail(err, MOE_ERR_IO, "file %s: close failed: %s", o->path, strerror(errno));
        moe_out_abort(o);
        return MOE_ERR_IO;
    }
    int rc = rename(o->tmp, o->path) ? errno : 0;
    if (rc) unlink(o->tmp);
    release_slot(o->slot); /* after the rename: a signal before it still removes the temporary */
    o->fd = -1;
    moe_status st = MOE_OK;
    if (rc)
        st = moe_fail(err, MOE_ERR_IO, "file %s: cannot rename the temporary into place: %s",
                      o->path, strerror(rc));
    else if ((rc = sync_dir(o->path)))
        st = moe_fail(err, MOE_ERR_IO, "file %s: written, but syncing its directory failed: %s",
                      o->path, strerror(rc));
    moe_out_abort(o);
    return st;
}

moe_status moe_out_refuse_same(const char *what, const char *path, const char *const *inputs,
                               int n, moe_error *err) {
    struct stat out;
    if (stat(path, &out)) return MOE_OK; /* not there yet: nothing to clobber */
    if (!S_ISREG(out.st_mode))
        return moe_fail(err, MOE_ERR_ARG, "%s: %s exists and is not a regular file", what, path);
    for (int i = 0; i < n; i++) {
        struct stat in;
        if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == out.st_dev &&
            in.st_ino == out.st_ino)
            return moe_fail(err, MOE_ERR_ARG, "%s: %s is the same file as the input %s", what,
                            path, inputs[i]);
    }
    return MOE_OK;
}

moe_status moe_out_write_whole(const char *path, const void *buf, size_t n, moe_error *err) {
    moe_out_file o;
    moe_status st = moe_out_open(path, &o, err);
    if (!st) st = moe_out_write(&o, buf, n, err);
    if (!st) st = moe_out_commit(&o, err);
    return st;
}
