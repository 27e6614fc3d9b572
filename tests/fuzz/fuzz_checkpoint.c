/* libFuzzer target: the checkpoint loaders past the safetensors framing: the config JSON, the
   tokenizer JSON or image metadata, the training state and the tensors checked against the
   config (a config claiming a huge model must be refused before it is allocated). */
#include <stdint.h>
#include <stdlib.h>

#include "../../src/train/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mt_safetensors st;
    mt_err err;
    if (mt_st_parse("fuzz", data, size, &st, &err) != MT_OK) return 0;
    mt_ckpt_state state;
    char *options;
    mt_gpt m;
    mt_tokenizer tok;
    if (mt_ckpt_parse(&st, "fuzz", &m, &tok, &state, &options, &err) == MT_OK) {
        free(options);
        mt_tok_free(&tok);
        mt_gpt_free(&m);
    }
    mt_vit v;
    mt_images meta;
    if (mt_vit_ckpt_parse(&st, "fuzz", &v, &meta, &state, &options, &err) == MT_OK) {
        free(options);
        mt_images_free(&meta);
        mt_vit_free(&v);
    }
    mt_st_free(&st);
    return 0;
}
