/* ./infer's text: a sample streamed from a prompt (with a KV cache), the loss on a text file, by a
 * model that has text ops (model.h's mt_text_ops). */
#include <stdlib.h>
#include <string.h>

#include "../data/data.h"
#include "../models/model.h"
#include "../models/models.h"
#include "app.h"

/* A text file encoded with tok (*ids malloc'd, *n of them); MT_EINVAL when it cannot be opened
   or encoded. */
static mt_status encode_file(const char *path, const mt_tokenizer *tok, uint16_t **ids, size_t *n,
                             mt_err *err) {
    FILE *f = fopen(path, "rb");
    *ids = NULL;
    if (!f) return mt_errorf(err, MT_EINVAL, "--score: cannot open the file");
    char *text = NULL;
    size_t len = 0, cap = 0, k;
    mt_status s = MT_OK;
    do {
        char *grown = len == cap ? realloc(text, cap = 2 * cap + 65536) : text;
        if (!grown) {
            s = mt_errorf(err, MT_ENOMEM, "out of memory");
            break;
        }
        text = grown;
        k = fread(text + len, 1, cap - len, f);
        len += k;
    } while (k > 0);
    fclose(f);
    *ids = s == MT_OK ? malloc((len ? len : 1) * sizeof **ids) : NULL;
    if (s == MT_OK && !*ids) s = mt_errorf(err, MT_ENOMEM, "out of memory");
    if (s == MT_OK && mt_tok_encode(tok, text, len, *ids, n, err) != MT_OK) s = MT_EINVAL;
    free(text);
    if (s != MT_OK) free(*ids), *ids = NULL;
    return s;
}

mt_status mt_text_score_file(const mt_model *m, const char *path, mt_precision precision,
                             mt_text_scored *r, mt_err *err) {
    const mt_text_ops *t = m->type->text;
    size_t n;
    uint16_t *ids;
    mt_status s = encode_file(path, t->tokenizer(m), &ids, &n, err);
    if (s != MT_OK) return s;
    if (n < 2)
        s = mt_errorf(err, MT_EINVAL,
                      "--score: the file holds fewer than 2 tokens: nothing to "
                      "predict");
    else s = t->score(m, ids, n, precision, &r->nll, &r->count, &r->bytes, err);
    free(ids);
    return s;
}

/* The prompt's token ids (*ids malloc'd, *n of them); MT_EINVAL when it cannot be encoded or
   is empty. */
static mt_status prompt_ids(const mt_tokenizer *tok, const char *prompt, int **ids, size_t *n,
                            mt_err *err) {
    size_t plen = strlen(prompt);
    uint16_t *p16 = malloc((plen ? plen : 1) * sizeof *p16);
    mt_status s = MT_OK;
    *ids = malloc((plen ? plen : 1) * sizeof **ids);
    if (!p16 || !*ids) s = mt_errorf(err, MT_ENOMEM, "out of memory");
    else if (mt_tok_encode(tok, prompt, plen, p16, n, err) != MT_OK) s = MT_EINVAL;
    else if (*n == 0)
        s = mt_errorf(err, MT_EINVAL, "--prompt is empty: give at least one character");
    for (size_t i = 0; s == MT_OK && i < *n; i++) (*ids)[i] = p16[i];
    free(p16);
    if (s != MT_OK) free(*ids), *ids = NULL;
    return s;
}

/* The prompt's ids fed, then g->tokens sampled, each written to out as it comes. */
static void sample(void *gen, const mt_text_ops *t, const mt_tokenizer *tok, const mt_gen_run *g,
                   const int *prompt, size_t n, int *iscratch, float *pscratch, FILE *out) {
    mt_rng r;
    mt_rng_seed(&r, (uint64_t)g->seed);
    const float *logits = t->gen_feed(gen, prompt, (int)n);
    for (int i = 0; i < g->tokens; i++) {
        int next = mt_sample_token(logits, tok->n_vocab, &g->sampling, &r, pscratch, iscratch), len;
        const char *bytes = mt_tok_decode(tok, next, &len);
        fwrite(bytes, 1, (size_t)len, out);
        fflush(out);
        if (i + 1 < g->tokens) logits = t->gen_feed(gen, &next, 1);
    }
}

mt_status mt_text_generate(mt_model *m, const mt_gen_run *g, FILE *out, double *seconds,
                           mt_err *err) {
    const mt_text_ops *t = m->type->text;
    const mt_tokenizer *tok = t->tokenizer(m);
    void *gen;
    mt_status s = t->gen_open(m, g->no_cache, g->precision, &gen, err);
    if (s != MT_OK) return s;
    size_t n;
    int *prompt = NULL, V = tok->n_vocab, *iscratch = malloc(V * sizeof(int));
    float *pscratch = malloc((size_t)V * sizeof(float));
    if ((s = prompt_ids(tok, g->prompt, &prompt, &n, err)) == MT_OK && (!iscratch || !pscratch))
        s = mt_errorf(err, MT_ENOMEM, "out of memory");
    if (s == MT_OK) {
        fputs(g->prompt, out);
        fflush(out);
        double t0 = mt_clock();
        sample(gen, t, tok, g, prompt, n, iscratch, pscratch, out);
        *seconds = mt_clock() - t0;
    }
    free(prompt);
    free(iscratch);
    free(pscratch);
    t->gen_close(gen);
    return s;
}
