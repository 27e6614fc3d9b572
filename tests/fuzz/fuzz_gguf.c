/* libFuzzer target: the GGUF reader (src/ckpt/gguf.c) on any bytes, as a file: the header alone
   and the whole file agree (both refuse it, or both read its shape), a file read holds every
   tensor once under its name, and the vocabulary of a file whose header is read is read or
   refused without a fault. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/ckpt/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_gguf_%d.gguf", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    mt_import_arch a, b;
    mt_safetensors st;
    mt_err err;
    bool head = mt_gguf_arch(path, &a, &err) == MT_OK;
    bool whole = mt_gguf_read(path, &st, &b, &err) == MT_OK;
    if (head != whole || (head && memcmp(&a, &b, sizeof a) != 0)) abort();
    if (whole) {
        for (int i = 0; i < st.n; i++)
            if (mt_st_find(&st, st.t[i].name) != &st.t[i]) abort();
        mt_st_free(&st);
        mt_gguf_vocab v;
        if (mt_gguf_vocab_read(path, &v, &err) == MT_OK) {
            if (v.n != a.n_vocab) abort();
            mt_gguf_vocab_free(&v);
        }
    }
    unlink(path);
    return 0;
}
