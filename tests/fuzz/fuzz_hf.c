/* libFuzzer target: the Hugging Face reader (src/ckpt/hf.c) on any bytes as a model.safetensors
   beside a fixed config.json (a LlamaForCausalLM of 1 layer, 8 channels, 2 heads, 1 key-value
   head, MLP 16, 4 tokens, untied): a file read holds every tensor of the config's shape once
   (9 per layer, the embedding, the norm and lm_head) under its name and shape;
   any other is refused with a message, never read past its end. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/ckpt/ckpt.h"

static const char CONFIG[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 8, \"intermediate_size\": 16, "
    "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
    "\"max_position_embeddings\": 16, \"vocab_size\": 4, \"rms_norm_eps\": 1e-05, "
    "\"rope_theta\": 10000.0, \"rope_scaling\": null, \"hidden_act\": \"silu\", "
    "\"tie_word_embeddings\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[64], path[96];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_hf_%d", (int)getpid());
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *c = (mkdir(dir, 0700), fopen(path, "wb"));
        if (!c || fwrite(CONFIG, 1, sizeof CONFIG - 1, c) != sizeof CONFIG - 1 || fclose(c))
            abort();
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    mt_import_arch a, b;
    mt_safetensors st;
    mt_err err = {0};
    if (mt_hf_arch(dir, &a, &err) != MT_OK) abort(); /* the config alone: always read */
    if (mt_hf_read(dir, &st, &b, &err) == MT_OK) {
        if (memcmp(&a, &b, sizeof a) != 0 || st.n != 9 + 3) abort();
        const mt_st_entry *q = mt_st_find(&st, "blk.0.attn_q.weight");
        const mt_st_entry *k = mt_st_find(&st, "blk.0.attn_k.weight");
        if (!q || q->shape[0] != 8 || q->shape[1] != 8 || !k || k->shape[0] != 4) abort();
        for (int i = 0; i < st.n; i++)
            if (mt_st_find(&st, st.t[i].name) != &st.t[i]) abort();
        mt_st_free(&st);
    } else if (!err.msg[0]) abort();
    return 0;
}
