/* libFuzzer target: the token-file reader must reject or accept any bytes without crashing or
   reading out of bounds, and what it accepts must be in range; so must the shard reader (mt token
   files and llm.c shards, detected by their magic). mt_tokfile_read takes a path, so
   each input goes through a file in /dev/shm (or /tmp). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../src/data/data.h"

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0])
        snprintf(path, sizeof path, "%s/mt_fuzz_tok.%d.bin",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    mt_tokenizer tok;
    mt_tokens d;
    mt_err err;
    mt_text_cfg c = {.kind = MT_TOK_BYTE, .val_fraction = 0.1};
    if (mt_shards_load(path, &c, &tok, &d, &err) == MT_OK) {
        for (size_t i = 0; i < d.n; i++)
            if (d.n_span != 1 || mt_span_id(&d.span[0], d.width, i) >= (uint32_t)tok.n_vocab)
                abort();
        mt_tokens_free(&d);
        mt_tok_free(&tok);
    }
    if (mt_tokfile_read(path, &tok, &d, &err) != MT_OK) return 0;
    if (d.n_span != 1 || d.span[0].n != d.n || d.width != 2) abort();
    for (size_t i = 0; i < d.n; i++) /* read from the file's mapping */
        if (mt_span_id(&d.span[0], 2, i) >= (uint32_t)d.n_vocab || d.n_vocab != tok.n_vocab)
            abort();
    unsigned sum = 0; /* every byte of every token is read: ASan checks the reads */
    for (int id = 0; id < tok.n_vocab; id++) {
        int len;
        const char *b = mt_tok_decode(&tok, id, &len);
        if (len < 1 || len > MT_TOK_MAX_BYTES) abort();
        for (int i = 0; i < len; i++) sum += (unsigned char)b[i];
    }
    volatile unsigned keep = sum;
    (void)keep;
    mt_tokens_free(&d);
    mt_tok_free(&tok);
    return 0;
}
