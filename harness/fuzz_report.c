/*
 * fuzz_report.c: publishing a fuzz report whole (rules in fuzz_report.h).
 */
#include "fuzz_report.h"

#include "cli_args.h"

#include "../common/out_file.h"

#include <stdlib.h>

int fuzz_report_publish(const char *path, FILE *f, char **buf, size_t *len) {
    moe_error err = {0};
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    moe_status st = bad ? moe_fail(&err, MOE_ERR_NOMEM, "file %s: out of memory", path)
                        : moe_out_write_whole(path, *buf, *len, &err);
    free(*buf);
    return st ? cli_fail("fuzz", "%s", err.msg) : 0;
}
