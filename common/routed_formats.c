/*
 * routed_formats.c: the one table of routed-weight formats (moe.h, moe_routed_format_info).
 *
 * Rules:
 *   - every layer of the project that depends on the routed format reads it from here: block
 *     size (so scale array sizes, alignment of D, I, TP slabs and padding), whether a per-expert
 *     scale2 exists, and the names used in messages and case lines;
 *   - the loader's checkpoint naming of each format (tensor suffixes, dtypes) is the table in
 *     common/checkpoint.c; the element and scale decoders are numeric.h's moe_block_format.
 */
#include "moe.h"
#include "numeric.h"

#include <string.h>

static const moe_routed_format_info formats[MOE_ROUTED_FORMAT_COUNT] = {
    [MOE_ROUTED_MXFP4] = {"MXFP4", "mxfp4", 32, false, &moe_format_mxfp4},
    [MOE_ROUTED_BF16] = {"bf16", "bf16", 0, false, NULL},
    [MOE_ROUTED_NVFP4] = {"NVFP4", "nvfp4", 16, true, &moe_format_nvfp4},
};

const moe_routed_format_info *moe_routed_format_get(moe_routed_format fmt) {
    return (unsigned)fmt < MOE_ROUTED_FORMAT_COUNT ? &formats[fmt] : NULL;
}

int moe_routed_format_from_key(const char *key) {
    for (int i = 0; key && i < MOE_ROUTED_FORMAT_COUNT; i++)
        if (!strcmp(formats[i].key, key)) return i;
    return -1;
}
