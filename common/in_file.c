/*
 * in_file.c: non-blocking regular-file opens, checked pread, small whole files, UTF-8
 * (in_file.h).
 */
#include "in_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

moe_status moe_in_open(const char *path, int *fd, uint64_t *size, moe_error *err) {
    *fd = -1;
    if (!path || !path[0]) return moe_fail(err, MOE_ERR_ARG, "file '': empty path");
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return moe_fail(err, MOE_ERR_IO, "file %s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) || !S_ISREG(sb.st_mode)) {
        close(f);
        return moe_fail(err, MOE_ERR_IO, "file %s: not a regular file", path);
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) < 0) {
        close(f);
        return moe_fail(err, MOE_ERR_IO, "file %s: cannot set blocking mode: %s", path, strerror(errno));
    }
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return MOE_OK;
}

moe_status moe_in_pread(int fd, void *buf, size_t n, uint64_t offset, const char *label,
                        const char *what, moe_error *err) {
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done > ((size_t)1 << 30) ? ((size_t)1 << 30) : n - done;
        ssize_t r = pread(fd, (char *)buf + done, chunk, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return moe_fail(err, MOE_ERR_IO, "file %s: %s: read error: %s", label, what, strerror(errno));
        if (r == 0)
            return moe_fail(err, MOE_ERR_IO,
                            "file %s: %s: only %zu of %zu bytes could be read (the file shrank: "
                            "truncated while being read?)",
                            label, what, done, n);
        done += (size_t)r;
    }
    return MOE_OK;
}

moe_status moe_in_read_small(const char *path, size_t max, char **text, size_t *len,
                             moe_error *err) {
    *text = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    moe_status st = moe_in_open(path, &fd, &size, err);
    if (st) return st;
    if (size > max) {
        close(fd);
        return moe_fail(err, MOE_ERR_FORMAT, "file %s: %llu bytes, more than the %zu allowed", path,
                        (unsigned long long)size, max);
    }
    char *buf = malloc((size_t)size + 1);
    if (!buf) st = moe_fail(err, MOE_ERR_NOMEM, "file %s: out of memory", path);
    else st = moe_in_pread(fd, buf, (size_t)size, 0, path, "contents", err);
    close(fd);
    if (st) {
        free(buf);
        return st;
    }
    buf[size] = '\0';
    *text = buf;
    *len = (size_t)size;
    return MOE_OK;
}

int moe_utf8_seq_len(const unsigned char *s) {
    if (s[0] < 0x80) return s[0] ? 1 : 0;
    int n = s[0] >= 0xf5 ? 0 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (!n) return 0;
    uint32_t cp = s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

bool moe_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        int n = moe_utf8_seq_len(p);
        if (!n || p + n > end) return false;
        p += n;
    }
    return true;
}
