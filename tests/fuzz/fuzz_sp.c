/* libFuzzer target: llama2.c's tokenizer.bin reader (src/data/sp.c) on any bytes, as a file: it
   refuses or accepts without reading out of bounds; what it accepts encodes any text (here the
   input itself, with BOS and EOS) into ids below its vocabulary, at most one per byte and the
   dummy prefix, each decoding to 0 to MT_TOK_MAX_BYTES bytes; and its checkpoint JSON reads back
   to the same JSON. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_sp_%d.bin", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    mt_tokenizer t, back;
    mt_err err;
    if (mt_sp_read_llama2c(path, &t, &err) == MT_OK) {
        uint16_t *ids = malloc((size + 3) * sizeof *ids);
        size_t n;
        mt_sp_encode(&t, (const char *)data, size, true, true, ids, &n);
        if (!ids || n > size + 3 || ids[0] != MT_SP_BOS || ids[n - 1] != MT_SP_EOS) abort();
        for (size_t i = 0; i < n; i++) {
            int len;
            if (ids[i] >= t.n_vocab) abort();
            mt_tok_decode_after(&t, i ? ids[i - 1] : -1, ids[i], &len);
            if (len < 0 || len > MT_TOK_MAX_BYTES) abort();
        }
        free(ids);
        char *json = mt_tok_to_json(&t);
        if (mt_tok_from_json(json, &back, &err) != MT_OK) abort();
        char *again = mt_tok_to_json(&back);
        if (strcmp(json, again) != 0) abort();
        free(json);
        free(again);
        mt_tok_free(&back);
        mt_tok_free(&t);
    }
    unlink(path);
    return 0;
}
