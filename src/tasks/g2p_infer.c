/* ./infer's use of the G2P task's models: words' phones (--source) by a transducer of letters
 * into phones (model.h's mt_g2p_ops), or its WER and PER on a part of a pronunciation dictionary
 * (--score-file). */
#include <stdlib.h>
#include <string.h>

#include "../data/data.h"
#include "../io/fields.h"
#include "../io/io.h"
#include "../models/model.h"
#include "../tensor/tensor.h"
#include "inference.h"

enum { SCORE_WORDS = 64 /* words decoded a batch */ };
typedef struct {
    char source[MT_FIELD_STR_MAX], score_file[MT_FIELD_STR_MAX];
    int beam; /* 1: greedy */
    mt_g2p_part split;
} g2p_options;
static const g2p_options DEFAULTS = {.beam = 1, .split = MT_G2P_ALL};

static bool no_source(const void *o) { return !((const g2p_options *)o)->source[0]; }
static bool scores(const void *o) { return ((const g2p_options *)o)->score_file[0] != 0; }
#define F(member, TYPE, key, help, ...) MT_FIELD(g2p_options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(source, STR, "source", "words (separated by spaces or commas) whose phones to print"),
    F(beam, INT, "beam", "beam width; 1: greedy", .range = "1..64"),
    F(score_file, STR, "score_file",
      "a pronunciation dictionary (CMUdict lines, or plain: word ph ph1 ...): WER and PER of the "
      "model on it",
      .read = no_source, .read_by = "a run without --source"),
    F(split, ENUM, "split",
      "--score-file: the part of the dictionary scored (train's split by word)",
      .of = &MT_G2P_SPLITS, .read = scores, .read_by = "--score-file"),
};
#undef F
static const mt_fields OPTIONS = MT_FIELDS_OF(FIELDS);

/* What --score-file found. */
typedef struct {
    int words;         /* scored */
    mt_g2p_tally t[2]; /* with stress, without */
    double seconds;    /* decoding's */
    int n_skipped;     /* the dictionary's lines that are no entry */
    char skipped[128]; /* "line 1, ..." */
} g2p_scored;

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

/* The context of both uses: SCORE_WORDS words of a beam each. */
static mt_status open_ctx(mt_ctx *c, const mt_model *m, int beam, const mt_infer_io *io,
                          mt_err *err) {
    return mt_model_infer_ctx(c, m, SCORE_WORDS * beam, io->precision, err);
}

/* Each word of words (separated by spaces or commas; cut and lower-cased in place) and its
   phones, "word  ph ph1 ..." (the plain dictionary format), to io->out: MT_EINVAL at the first
   word with a character outside the model's letters or longer than it reads, or for no word. */
static mt_status phones(const mt_model *m, int beam, char *words, mt_infer_io *io, mt_err *err) {
    const mt_g2p_ops *ops = m->type->g2p;
    const mt_g2p_vocab *v = ops->vocab(m);
    int S, T, seen = 0;
    ops->limits(m, &S, &T);
    mt_ctx c;
    mt_status s = open_ctx(&c, m, beam, io, err);
    if (s != MT_OK) return s;
    FILE *out = io->out;
    int *ids = malloc((size_t)T * sizeof *ids), *src = malloc((size_t)S * sizeof *src);
    if (!ids || !src) s = mt_errorf(err, MT_ENOMEM, "out of memory");
    for (char *w = strtok(words, " ,\t\n"); w && s == MT_OK; w = strtok(NULL, " ,\t\n")) {
        int n;
        if ((s = word_ids(v, w, S, src, &n, err)) != MT_OK) break;
        mt_ctx_reset(&c);
        int len = ops->transduce(&c, m, src, n, beam, ids);
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

/* The tallies of the words idx (count), SCORE_WORDS a batch. */
static mt_status tally_words(const mt_model *m, const g2p_options *o, const mt_infer_io *io,
                             const mt_g2p_dict *d, const int *idx, int count, g2p_scored *r,
                             mt_err *err) {
    mt_ctx c;
    mt_status s = open_ctx(&c, m, o->beam, io, err);
    if (s != MT_OK) return s;
    double t0 = mt_clock();
    for (int i = 0; i < count; i += SCORE_WORDS) {
        int n = count - i < SCORE_WORDS ? count - i : SCORE_WORDS;
        mt_ctx_reset(&c);
        m->type->g2p->tally(&c, m, d, idx + i, n, o->beam, r->t);
    }
    r->seconds = mt_clock() - t0;
    mt_ctx_free(&c);
    return MT_OK;
}

/* The dictionary o->score_file (mt_g2p_load) scored on its part o->split (mt_g2p_split;
   MT_G2P_ALL: every word): MT_EINVAL for a word longer than the model reads or an empty part. */
static mt_status score_file(const mt_model *m, const g2p_options *o, const mt_infer_io *io,
                            g2p_scored *r, mt_err *err) {
    const char *path = o->score_file;
    mt_g2p_part part = o->split;
    mt_g2p_dict d;
    *r = (g2p_scored){0};
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
    if (s == MT_OK) s = tally_words(m, o, io, &d, idx, r->words, r, err);
    r->n_skipped = d.n_skipped;
    snprintf(r->skipped, sizeof r->skipped, "%s", d.skipped);
    free(idx);
    mt_g2p_free(&d);
    return s;
}

/* --source: each word's phones; --score-file: WER and PER of the words of a dictionary's
   --split. */
static mt_status run(mt_model *m, const void *options, mt_infer_io *io, mt_err *err) {
    g2p_options o = *(const g2p_options *)options; /* a copy: phones cuts the words */
    g2p_scored r;
    if (o.source[0]) return phones(m, o.beam, o.source, io, err);
    if (!o.score_file[0])
        return mt_errorf(err, MT_EINVAL,
                         "%s is a %s checkpoint, which gives words' phones: --source \"WORD ...\" "
                         "or --score-file DICT",
                         io->checkpoint, m->type->name);
    mt_status s = mt_file_check("--score-file", o.score_file, err);
    if (s == MT_OK) s = score_file(m, &o, io, &r, err);
    if (s != MT_OK) return s;
    fprintf(io->out,
            "words=%d wer=%.4f per=%.4f wer_nostress=%.4f per_nostress=%.4f beam=%d split=%s "
            "seconds=%.1f\n",
            r.words, mt_g2p_wer(&r.t[0]), mt_g2p_per(&r.t[0]), mt_g2p_wer(&r.t[1]),
            mt_g2p_per(&r.t[1]), o.beam, mt_enum_name(&MT_G2P_SPLITS, o.split), r.seconds);
    if (r.n_skipped)
        fprintf(io->log, "%s: skipped %d line(s) that are no dictionary entry (line %s%s)\n",
                io->program, r.n_skipped, r.skipped, r.n_skipped > 5 ? ", ..." : "");
    return MT_OK;
}

const mt_infer_use mt_g2p_infer = {
    .name = "g2p",
    .does = "give words' phones, or score a pronunciation dictionary",
    .fields = &OPTIONS,
    .options_size = sizeof(g2p_options),
    .defaults = &DEFAULTS,
    .run = run,
};
