/*
 * fuzz_parse.c: libFuzzer target for the two parsers that read untrusted text: the safetensors
 * header (moe_st_parse), config.json (moe_model_config_parse) and ModelOpt's
 * hf_quant_config.json (moe_model_config_add_hf_quant, on top of a fixed valid config).
 *
 * Rules: every input is fed to both parsers; each must return a status (never crash, leak,
 * read out of bounds or hit undefined behaviour). A safetensors image that parses is walked
 * completely (every tensor looked up by name, every byte it claims read) so that a header
 * accepted with offsets out of range would be caught by AddressSanitizer.
 */
#include "../common/checkpoint.h"
#include "../common/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A private copy of exactly size bytes, so that any over-read is outside the allocation. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);

    moe_error err;
    moe_st_file f;
    if (moe_st_parse(copy, size, "fuzz", &f, &err) == MOE_OK) {
        unsigned sum = 0;
        for (int i = 0; i < f.n_tensors; i++) {
            const moe_st_tensor *t = moe_st_find(&f, f.tensors[i].name);
            if (t != &f.tensors[i]) abort(); /* the sorted table must find every name */
            const uint8_t *p = t->data;
            for (uint64_t b = 0; b < t->nbytes; b++) sum += p[b];
        }
        (void)sum;
        moe_st_close(&f);
    }

    moe_model_config mc;
    if (moe_model_config_parse((const char *)copy, size, "fuzz", &mc, &err) == MOE_OK) {
        (void)moe_model_config_excludes(&mc, "model.llm.layers.2.mlp.experts");
        moe_model_config_free(&mc);
    }
    static const char base[] = "{\"hidden_size\": 64, \"intermediate_size\": 64, "
                               "\"n_routed_experts\": 4, \"num_experts_per_tok\": 2, "
                               "\"n_shared_experts\": 1, \"route_scale\": 8.0, "
                               "\"quantization_config\": {\"quant_algo\": \"NVFP4\"}}";
    if (moe_model_config_parse(base, sizeof base - 1, "base", &mc, &err) == MOE_OK) {
        if (moe_model_config_add_hf_quant((const char *)copy, size, "fuzz", &mc, &err) == MOE_OK)
            (void)moe_model_config_excludes(&mc, "model.llm.layers.2.mlp.experts");
        moe_model_config_free(&mc);
    }
    free(copy);
    return 0;
}
