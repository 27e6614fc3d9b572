/* libFuzzer target: bpe learnt from part of any bytes must encode all of them so that decoding
   gives them back, and its JSON must read back as the same tokenizer. Input: byte 0 picks the
   vocabulary (257 + 4 byte0), byte 1 the share of the rest learnt from, then the text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/data/data.h"

static void round_trip(const mt_tokenizer *t, const char *text, size_t len, uint16_t *ids,
                       char *back) {
    size_t n, k = 0;
    if (mt_tok_encode(t, text, len, ids, &n, NULL) != MT_OK || n > len) abort();
    for (size_t i = 0; i < n; i++) {
        int m;
        if (ids[i] >= t->n_vocab) abort();
        const char *b = mt_tok_decode(t, ids[i], &m);
        if (m < 1 || m > MT_TOK_MAX_BYTES || k + (size_t)m > len) abort();
        memcpy(back + k, b, (size_t)m);
        k += (size_t)m;
    }
    if (k != len || memcmp(back, text, len) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int vocab = 257 + 4 * data[0];
    const char *text = (const char *)data + 2;
    size_t len = size - 2, learn = len * data[1] / 255;
    mt_tokenizer t, u;
    if (mt_tok_build_bpe(&t, text, learn, vocab, NULL) != MT_OK) abort();
    uint16_t *ids = malloc((len + 1) * sizeof *ids);
    char *back = malloc(len + 1);
    round_trip(&t, text, len, ids, back);
    char *json = mt_tok_to_json(&t);
    if (mt_tok_from_json(json, &u, NULL) != MT_OK || u.n_vocab != t.n_vocab ||
        memcmp(u.merges, t.merges, (size_t)(t.n_vocab - 256) * sizeof *t.merges) != 0)
        abort();
    round_trip(&u, text, len, ids, back);
    free(json);
    free(ids);
    free(back);
    mt_tok_free(&t);
    mt_tok_free(&u);
    return 0;
}
