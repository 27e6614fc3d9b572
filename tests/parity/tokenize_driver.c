/* Tokenizer driver for tests/test_sp_hf.sh: tokenize_driver TOKENIZER TEXTS. TOKENIZER is read as
   --tokenizer sp --tokenizer-file reads it (tokenizer.bin or Hugging Face's tokenizer.json),
   then carried through mt's tokenizer JSON (as a checkpoint carries it); TEXTS holds texts
   separated by NUL bytes. Per text one line: its ids (BOS and EOS as the tokenizer says), a tab,
   and the hex of the bytes the text's ids (not BOS, EOS) decode to (mt_tok_decode_after each after
   the one before). An
   error: its message, exit 2. */
#include <stdlib.h>
#include <string.h>

#include "../../src/data/data.h"
#include "../../src/io/io.h"

static void encode(const mt_tokenizer *t, const char *text, size_t len) {
    uint16_t *ids = malloc((len + 3) * sizeof *ids);
    size_t n = 0;
    MT_ASSERT(ids, "out of memory");
    mt_sp_encode(t, text, len, mt_sp_add_bos(t), mt_sp_add_eos(t), ids, &n);
    for (size_t i = 0; i < n; i++) printf("%s%u", i ? " " : "", ids[i]);
    putchar('\t');
    bool bos = mt_sp_add_bos(t), eos = mt_sp_add_eos(t);
    for (size_t i = bos; i + eos < n; i++) {
        int m;
        const unsigned char *b = (const unsigned char *)mt_tok_decode_after(t, i ? ids[i - 1] : -1,
                                                                            ids[i], &m);
        for (int j = 0; j < m; j++) printf("%02x", b[j]);
    }
    putchar('\n');
    free(ids);
}

int main(int argc, char **argv) {
    MT_ASSERT(argc == 3, "usage: tokenize_driver TOKENIZER TEXTS");
    mt_tokenizer read, t;
    mt_err err;
    char *texts = NULL;
    size_t len;
    if (mt_file_read("TEXTS", argv[2], &texts, &len, &err) != MT_OK ||
        mt_sp_read_llama2c(argv[1], &read, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        free(texts);
        return 2;
    }
    char *json = mt_tok_to_json(&read);
    mt_tok_free(&read);
    mt_status s = mt_tok_from_json(json, &t, &err);
    free(json);
    if (s != MT_OK) {
        fprintf(stderr, "mt's JSON of it: %s\n", err.msg);
        free(texts);
        return 2;
    }
    for (size_t at = 0; at < len;) {
        size_t n = strnlen(texts + at, len - at);
        encode(&t, texts + at, n);
        at += n + 1;
    }
    free(texts);
    mt_tok_free(&t);
    return 0;
}
