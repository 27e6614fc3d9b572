/* GPT checkpoints: the parameter table plus config, tokenizer, step, RNG states and options. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

mt_status mt_ckpt_save(const char *path, const mt_gpt *m, const mt_tokenizer *tok,
                       const mt_ckpt_state *state, const char *options, mt_err *err) {
    char step[32], rng[8 * 17 + 1];
    snprintf(step, sizeof step, "%ld", state->step);
    const uint64_t *a = state->sampler.s, *b = state->dropout.s;
    snprintf(rng, sizeof rng,
             "%016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64
             " %016" PRIx64 " %016" PRIx64 " %016" PRIx64,
             a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
    char *config = mt_gpt_config_to_json(&m->cfg), *tokj = mt_tok_to_json(tok);
    const char *keys[] = {"config", "tokenizer", "step", "rng", "options"};
    const char *vals[] = {config, tokj, step, rng, options ? options : ""};
    mt_status s = mt_st_save_params(path, &m->P, 5, keys, vals, err);
    free(config);
    free(tokj);
    return s;
}

static mt_status parse_state(const mt_safetensors *st, const char *path, mt_ckpt_state *state,
                             mt_err *err) {
    const char *step = mt_st_meta(st, "step"), *rng = mt_st_meta(st, "rng");
    uint64_t *a = state->sampler.s, *b = state->dropout.s;
    char *end;
    if (!step || !rng || (state->step = strtol(step, &end, 10)) < 0 || *end ||
        sscanf(rng, "%" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64
                    " %" SCNx64 " %" SCNx64,
               &a[0], &a[1], &a[2], &a[3], &b[0], &b[1], &b[2], &b[3]) != 8)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: the metadata 'step' and 'rng' of a training checkpoint are missing "
                         "or malformed",
                         path);
    return MT_OK;
}

mt_status mt_ckpt_load(const char *path, mt_gpt *m, mt_tokenizer *tok, mt_ckpt_state *state,
                       char **options, mt_err *err) {
    memset(m, 0, sizeof *m);
    memset(tok, 0, sizeof *tok);
    if (options) *options = NULL;
    mt_safetensors st;
    mt_status s = mt_st_load(path, &st, err);
    if (s != MT_OK) return s;
    const char *config = mt_st_meta(&st, "config"), *tokj = mt_st_meta(&st, "tokenizer");
    mt_gpt_config cfg;
    mt_err e;
    if (!config || !tokj) {
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: not an mt GPT checkpoint (no 'config' and 'tokenizer' in __metadata__)",
                      path);
        goto out;
    }
    if ((s = mt_gpt_config_from_json(config, &cfg, &e)) != MT_OK ||
        (s = mt_gpt_config_validate(&cfg, &e)) != MT_OK ||
        (s = mt_tok_from_json(tokj, tok, &e)) != MT_OK) {
        s = mt_errorf(err, MT_EFORMAT, "%s: %s", path, e.msg);
        goto out;
    }
    if (tok->n_vocab != cfg.n_vocab) {
        s = mt_errorf(err, MT_EFORMAT, "%s: the config has n_vocab %d, the tokenizer %d tokens",
                      path, cfg.n_vocab, tok->n_vocab);
        goto out;
    }
    if ((s = mt_gpt_build(m, &cfg, err)) != MT_OK) goto out;
    if ((s = mt_st_load_params(&st, path, &m->P, err)) != MT_OK) goto out;
    if (state && (s = parse_state(&st, path, state, err)) != MT_OK) goto out;
    if (options) {
        const char *o = mt_st_meta(&st, "options");
        *options = strdup(o ? o : "");
        MT_ASSERT(*options, "checkpoint: out of memory");
    }
out:
    mt_st_free(&st);
    if (s != MT_OK) {
        mt_gpt_free(m);
        mt_tok_free(tok);
    }
    return s;
}
