/* libFuzzer target: llm.c's gpt2 model reader (src/ckpt/llmc.c) on any bytes, as a file: the
   header alone and the whole file agree (both refuse it, or both read its shape), a header whose
   sizes disagree with the length is refused before anything is allocated, and a file read holds
   every tensor of its shape once, wte cut to the vocabulary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/ckpt/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_llmc_%d.bin", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    mt_import_arch a, b;
    mt_safetensors st;
    mt_err err;
    bool head = mt_llmc_arch(path, &a, &err) == MT_OK;
    bool whole = mt_llmc_read(path, &st, &b, &err) == MT_OK;
    if (head != whole || (head && memcmp(&a, &b, sizeof a) != 0)) abort();
    if (whole) {
        if (st.n != 16 * a.n_layer + 4) abort();
        const mt_st_entry *wte = mt_st_find(&st, "transformer.wte.weight");
        if (!wte || wte->shape[0] != a.n_vocab || wte->shape[1] != a.n_embd) abort();
        for (int i = 0; i < st.n; i++)
            if (mt_st_find(&st, st.t[i].name) != &st.t[i]) abort();
        mt_st_free(&st);
    }
    unlink(path);
    return 0;
}
