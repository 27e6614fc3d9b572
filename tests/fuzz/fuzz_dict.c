/* libFuzzer target: the pronunciation-dictionary reader (festival's CMUdict lines and plain
   "word phones" lines, data.h) must accept or reject any bytes without crashing or reading out
   of bounds; what it accepts must hold together: words sorted, lowercase and distinct, every
   word with a pronunciation and every pronunciation with phones of the vocabulary, a split that
   covers every word once, a vocabulary that reads back from its JSON, and the same file read
   again under its own vocabulary. A word's first pronunciation scores as right. mt_g2p_load
   takes a path, so each input goes through a file in /dev/shm (or /tmp). */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/data/data.h"

static char path[64];

/* d's words and pronunciations hold together (the checks above); aborts when not */
static void check_dict(const mt_g2p_dict *d) {
    const mt_g2p_vocab *v = &d->vocab;
    if (d->n_words < 1 || d->pron_start[0] != 0 || d->phone_start[0] != 0) abort();
    for (int w = 0; w < d->n_words; w++) {
        if (w && strcmp(d->words[w - 1], d->words[w]) >= 0) abort();
        if (d->pron_start[w + 1] <= d->pron_start[w]) abort();
        for (const char *c = d->words[w]; *c; c++)
            if (isupper((unsigned char)*c) || mt_g2p_letter_id(v, *c) < 0) abort();
    }
    if (d->pron_start[d->n_words] != d->n_prons) abort();
    for (int p = 0; p < d->n_prons; p++) {
        if (d->phone_start[p + 1] <= d->phone_start[p]) abort();
        for (int k = d->phone_start[p]; k < d->phone_start[p + 1]; k++)
            if (d->phones[k] < 0 || d->phones[k] >= v->n_phones) abort();
    }
}

/* The split covers every word once; word 0's first pronunciation scores as right. */
static void check_split_and_score(const mt_g2p_dict *d) {
    int *idx = malloc((size_t)d->n_words * sizeof *idx), n[MT_G2P_PARTS];
    char *hit = calloc((size_t)d->n_words, 1);
    if (!idx || !hit) abort();
    mt_g2p_split(d, idx, n);
    if (n[MT_G2P_TRAIN] + n[MT_G2P_VALID] + n[MT_G2P_TEST] != d->n_words) abort();
    for (int i = 0; i < d->n_words; i++) {
        if (idx[i] < 0 || idx[i] >= d->n_words || hit[idx[i]]) abort();
        hit[idx[i]] = 1;
    }
    int len = d->phone_start[1] - d->phone_start[0],
        first = MT_G2P_TOK_SPECIAL + d->vocab.n_letters;
    int *pred = malloc((size_t)len * sizeof *pred);
    if (!pred) abort();
    for (int k = 0; k < len; k++) pred[k] = first + d->phones[d->phone_start[0] + k];
    mt_g2p_tally t[2] = {{0}};
    mt_g2p_tally_add(d, 0, pred, len, t);
    if (t[0].words != 1 || t[0].wrong != 0 || t[0].edits != 0 || t[1].wrong != 0) abort();
    free(pred);
    free(hit);
    free(idx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0])
        snprintf(path, sizeof path, "%s/mt_fuzz_dict.%d.txt",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    mt_g2p_dict d, again;
    mt_err err;
    if (mt_g2p_load(path, NULL, &d, &err) != MT_OK) return 0;
    check_dict(&d);
    check_split_and_score(&d);
    char *json = mt_g2p_vocab_to_json(&d.vocab);
    mt_g2p_vocab back;
    if (!json || mt_g2p_vocab_from_json(json, &back, &err) != MT_OK ||
        back.n_letters != d.vocab.n_letters || back.n_phones != d.vocab.n_phones ||
        mt_g2p_vocab_size(&back) != mt_g2p_vocab_size(&d.vocab))
        abort(); /* the vocabulary a checkpoint saves reads back */
    if (mt_g2p_load(path, &back, &again, &err) != MT_OK || again.n_words != d.n_words ||
        again.n_prons != d.n_prons)
        abort(); /* the file under its own vocabulary (a model's) reads the same */
    mt_g2p_free(&again);
    free(json);
    mt_g2p_free(&d);
    return 0;
}
