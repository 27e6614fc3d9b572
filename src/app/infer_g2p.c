/* ./infer --source and --score-file: words' phones by a transducer of letters into phones (the
 * encoder-decoder), and its WER and PER on a part of a pronunciation dictionary. */
#include <stdlib.h>
#include <string.h>

#include "../data/data.h"
#include "../io/fields.h"
#include "../models/model.h"
#include "../tensor/tensor.h"
#include "app.h"

/* The letter ids of word w (lower-cased in place) into src (*n of them); MT_EINVAL naming the
   characters outside the model's letters, or a word longer than the S it reads. */
static mt_status word_ids(const mt_g2p_vocab *v, char *w, int S, int *src, int *n, mt_err *err) {
    char bad[MT_FIELD_STR_MAX] = "";
    *n = (int)strlen(w);
    for (int i = 0; i < *n; i++) {
        w[i] = (char)(w[i] >= 'A' && w[i] <= 'Z' ? w[i] - 'A' + 'a' : w[i]);
        if (mt_g2p_letter_id(v, w[i]) < 0 && !strchr(bad, w[i])) bad[strlen(bad)] = w[i];
    }
    if (bad[0])
        return mt_errorf(err, MT_EINVAL,
                         "--source: \"%s\" has characters outside the model's letters \"%.*s\": "
                         "\"%s\"",
                         w, v->n_letters, v->letters, bad);
    if (*n > S)
        return mt_errorf(err, MT_EINVAL,
                         "--source: \"%s\" has %d letters; the model reads at most %d", w, *n, S);
    for (int i = 0; i < *n; i++) src[i] = mt_g2p_letter_id(v, w[i]);
    return MT_OK;
}

/* The context of both uses: MT_G2P_SCORE_WORDS words of a beam each. */
static mt_status open_ctx(mt_ctx *c, const mt_model *m, const mt_g2p_run *g, mt_err *err) {
    return mt_infer_ctx_open(c, m, MT_G2P_SCORE_WORDS * g->beam, g->precision, err);
}

mt_status mt_g2p_words(const mt_model *m, const mt_g2p_run *g, char *words, FILE *out,
                       mt_err *err) {
    const mt_g2p_ops *ops = m->type->g2p;
    const mt_g2p_vocab *v = ops->vocab(m);
    int S, T, seen = 0;
    ops->limits(m, &S, &T);
    mt_ctx c;
    mt_status s = open_ctx(&c, m, g, err);
    if (s != MT_OK) return s;
    int *ids = malloc((size_t)T * sizeof *ids), *src = malloc((size_t)S * sizeof *src);
    if (!ids || !src) s = mt_errorf(err, MT_ENOMEM, "out of memory");
    for (char *w = strtok(words, " ,\t\n"); w && s == MT_OK; w = strtok(NULL, " ,\t\n")) {
        int n;
        if ((s = word_ids(v, w, S, src, &n, err)) != MT_OK) break;
        mt_ctx_reset(&c);
        int len = ops->transduce(&c, m, src, n, g->beam, ids);
        fprintf(out, "%s ", w);
        for (int i = 0; i < len; i++) {
            char buf[8];
            fprintf(out, " %s", mt_g2p_token_name(v, ids[i], buf));
        }
        fputc('\n', out);
        seen++;
    }
    if (s == MT_OK && !seen) s = mt_errorf(err, MT_EINVAL, "--source: no word given");
    free(ids);
    free(src);
    mt_ctx_free(&c);
    return s;
}

/* The words of the dictionary's part into idx (*count of them), checked against the longest
   word the model reads (S). */
static mt_status part_words(const mt_g2p_dict *d, mt_g2p_part part, int S, int *idx, int *count,
                            mt_err *err) {
    int n[MT_G2P_PARTS], from = 0;
    *count = d->n_words;
    if (part != MT_G2P_ALL) {
        mt_g2p_split(d, idx, n);
        for (int k = 0; k < (int)part; k++) from += n[k];
        *count = n[part];
        memmove(idx, idx + from, (size_t)*count * sizeof *idx);
    } else
        for (int i = 0; i < d->n_words; i++) idx[i] = i;
    for (int i = 0; i < *count; i++) {
        int len = (int)strlen(d->words[idx[i]]);
        if (len > S)
            return mt_errorf(err, MT_EINVAL,
                             "--score-file: \"%s\" has %d letters; the model reads at most %d",
                             d->words[idx[i]], len, S);
    }
    return MT_OK;
}

/* The tallies of the words idx (count), MT_G2P_SCORE_WORDS a batch. */
static mt_status tally_words(const mt_model *m, const mt_g2p_run *g, const mt_g2p_dict *d,
                             const int *idx, int count, mt_g2p_scored *r, mt_err *err) {
    mt_ctx c;
    mt_status s = open_ctx(&c, m, g, err);
    if (s != MT_OK) return s;
    double t0 = mt_clock();
    for (int i = 0; i < count; i += MT_G2P_SCORE_WORDS) {
        int n = count - i < MT_G2P_SCORE_WORDS ? count - i : MT_G2P_SCORE_WORDS;
        mt_ctx_reset(&c);
        m->type->g2p->tally(&c, m, d, idx + i, n, g->beam, r->t);
    }
    r->seconds = mt_clock() - t0;
    mt_ctx_free(&c);
    return MT_OK;
}

mt_status mt_g2p_score_file(const mt_model *m, const mt_g2p_run *g, const char *path,
                            mt_g2p_part part, mt_g2p_scored *r, mt_err *err) {
    mt_g2p_dict d;
    *r = (mt_g2p_scored){0};
    mt_status s = mt_g2p_load(path, m->type->g2p->vocab(m), &d, err);
    if (s != MT_OK) return s;
    int *idx = malloc((size_t)d.n_words * sizeof *idx), S, T;
    if (!idx) s = mt_errorf(err, MT_ENOMEM, "out of memory");
    m->type->g2p->limits(m, &S, &T);
    if (s == MT_OK) s = part_words(&d, part, S, idx, &r->words, err);
    if (s == MT_OK && r->words == 0)
        s = mt_errorf(err, MT_EINVAL,
                      "--score-file %s: the %s part of its %d word(s) is empty: nothing to score "
                      "(--split all scores every word)",
                      path, mt_enum_name(&MT_G2P_SPLITS, part), d.n_words);
    if (s == MT_OK) s = tally_words(m, g, &d, idx, r->words, r, err);
    r->n_skipped = d.n_skipped;
    snprintf(r->skipped, sizeof r->skipped, "%s", d.skipped);
    free(idx);
    mt_g2p_free(&d);
    return s;
}
