/* libFuzzer target: the checkpoint loader past the safetensors framing: the model type, the
   config JSON, the tokenizer JSON or image metadata, the training state and the tensors checked
   against the
   config (a config claiming a huge model must be refused before it is allocated). */
#include <stdint.h>
#include <stdlib.h>

#include "../../src/ckpt/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mt_safetensors st;
    mt_err err;
    if (mt_st_parse("fuzz", data, size, &st, &err) != MT_OK) return 0;
    mt_ckpt_state state;
    char *options;
    mt_model *m;
    if (mt_ckpt_parse(&st, "fuzz", &m, &state, &options, &err) == MT_OK) {
        free(options);
        mt_model_free(m);
    }
    mt_st_free(&st);
    return 0;
}
