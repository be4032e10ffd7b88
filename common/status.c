/* status.c: error records (moe.h: library code reports, it never exits). */
#include "moe.h"

#include <stdarg.h>
#include <stdio.h>

moe_status moe_fail(moe_error *err, moe_status st, const char *fmt, ...) {
    if (err) {
        err->status = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

void moe_error_clear(moe_error *err) {
    if (err) {
        err->status = MOE_OK;
        err->msg[0] = '\0';
    }
}

const char *moe_status_name(moe_status st) {
    switch (st) {
    case MOE_OK: return "ok";
    case MOE_ERR_ARG: return "invalid argument";
    case MOE_ERR_CONFIG: return "invalid configuration";
    case MOE_ERR_SHAPE: return "wrong shape";
    case MOE_ERR_DTYPE: return "wrong dtype";
    case MOE_ERR_VALUE: return "bad value";
    case MOE_ERR_NONFINITE_INPUT: return "non-finite input";
    case MOE_ERR_UNSUPPORTED: return "unsupported";
    case MOE_ERR_UNAVAILABLE: return "unavailable";
    case MOE_ERR_NOMEM: return "out of memory";
    case MOE_ERR_IO: return "i/o error";
    case MOE_ERR_FORMAT: return "malformed file";
    case MOE_ERR_DEVICE: return "device error";
    case MOE_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
