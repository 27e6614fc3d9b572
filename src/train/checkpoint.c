/* GPT and ViT checkpoints: the parameter table plus config, tokenizer (GPT) or image metadata
   (ViT), step, RNG states and options. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

/* The metadata "step" and "rng" of a state. */
static void format_state(const mt_ckpt_state *state, char step[32], char rng[8 * 17 + 1]) {
    snprintf(step, 32, "%ld", state->step);
    const uint64_t *a = state->sampler.s, *b = state->dropout.s;
    snprintf(rng, 8 * 17 + 1,
             "%016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64
             " %016" PRIx64 " %016" PRIx64 " %016" PRIx64,
             a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
}

mt_status mt_ckpt_save(const char *path, const mt_gpt *m, const mt_tokenizer *tok,
                       const mt_ckpt_state *state, const char *options, mt_err *err) {
    char step[32], rng[8 * 17 + 1];
    format_state(state, step, rng);
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

/* Allocates P once its table is known to match the file's tensors: a config claiming a huge
   model is refused before any allocation (P's size is then bounded by the file's). */
static mt_status alloc_checked(const mt_safetensors *st, const char *path, mt_params *P,
                               mt_err *err) {
    mt_status s = mt_st_check_params(st, path, P, err);
    return s == MT_OK ? mt_params_alloc(P, err) : s;
}

/* n_layer is bounded before the table is built: that takes time and memory in n_layer. */
static mt_status check_layers(const mt_safetensors *st, const char *path, int n_layer,
                              mt_err *err) {
    if (n_layer <= st->n) return MT_OK; /* every block holds several tensors */
    return mt_errorf(err, MT_EFORMAT, "%s: the config has n_layer %d, the file only %d tensors",
                     path, n_layer, st->n);
}

/* What every checkpoint loads after its model is built: the weights, the state, the options. */
static mt_status load_common(const mt_safetensors *st, const char *path, mt_params *P,
                             mt_ckpt_state *state, char **options, mt_err *err) {
    mt_status s = mt_st_load_params(st, path, P, err);
    if (s == MT_OK && state) s = parse_state(st, path, state, err);
    if (s == MT_OK && options) {
        const char *o = mt_st_meta(st, "options");
        *options = strdup(o ? o : "");
        MT_ASSERT(*options, "checkpoint: out of memory");
    }
    return s;
}

static bool is_vit(const mt_safetensors *st) {
    const char *model = mt_st_meta(st, "model");
    return model && strcmp(model, "vit") == 0;
}

mt_status mt_ckpt_load(const char *path, mt_gpt *m, mt_tokenizer *tok, mt_ckpt_state *state,
                       char **options, mt_err *err) {
    memset(m, 0, sizeof *m);
    memset(tok, 0, sizeof *tok);
    if (options) *options = NULL;
    mt_safetensors st;
    mt_status s = mt_st_load(path, &st, err);
    if (s != MT_OK) return s;
    s = mt_ckpt_parse(&st, path, m, tok, state, options, err);
    mt_st_free(&st);
    return s;
}

mt_status mt_ckpt_parse(const mt_safetensors *st, const char *path, mt_gpt *m, mt_tokenizer *tok,
                        mt_ckpt_state *state, char **options, mt_err *err) {
    memset(m, 0, sizeof *m);
    memset(tok, 0, sizeof *tok);
    if (options) *options = NULL;
    mt_status s;
    const char *config = mt_st_meta(st, "config"), *tokj = mt_st_meta(st, "tokenizer");
    mt_gpt_config cfg;
    mt_err e;
    if (is_vit(st)) {
        s = mt_errorf(err, MT_EINVAL, "%s is a ViT checkpoint: it classifies images (./infer "
                      "--checkpoint FILE --classify IMAGES) and does not generate text", path);
        goto out;
    }
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
    if ((s = check_layers(st, path, cfg.n_layer, err)) != MT_OK ||
        (s = mt_gpt_build_table(m, &cfg, err)) != MT_OK ||
        (s = alloc_checked(st, path, &m->P, err)) != MT_OK)
        goto out;
    s = load_common(st, path, &m->P, state, options, err);
out:
    if (s != MT_OK) {
        mt_gpt_free(m);
        mt_tok_free(tok);
    }
    return s;
}

/* ---- ViT ------------------------------------------------------------------------------------------ */

mt_status mt_vit_ckpt_save(const char *path, const mt_vit *m, const mt_images *meta,
                           const mt_ckpt_state *state, const char *options, mt_err *err) {
    char step[32], rng[8 * 17 + 1];
    format_state(state, step, rng);
    char *config = mt_vit_config_to_json(&m->cfg), *images = mt_images_meta_to_json(meta);
    const char *keys[] = {"model", "config", "images", "step", "rng", "options"};
    const char *vals[] = {"vit", config, images, step, rng, options ? options : ""};
    mt_status s = mt_st_save_params(path, &m->P, 6, keys, vals, err);
    free(config);
    free(images);
    return s;
}

mt_status mt_vit_ckpt_load(const char *path, mt_vit *m, mt_images *meta, mt_ckpt_state *state,
                           char **options, mt_err *err) {
    memset(m, 0, sizeof *m);
    memset(meta, 0, sizeof *meta);
    if (options) *options = NULL;
    mt_safetensors st;
    mt_status s = mt_st_load(path, &st, err);
    if (s != MT_OK) return s;
    s = mt_vit_ckpt_parse(&st, path, m, meta, state, options, err);
    mt_st_free(&st);
    return s;
}

mt_status mt_vit_ckpt_parse(const mt_safetensors *st, const char *path, mt_vit *m,
                            mt_images *meta, mt_ckpt_state *state, char **options, mt_err *err) {
    memset(m, 0, sizeof *m);
    memset(meta, 0, sizeof *meta);
    if (options) *options = NULL;
    mt_status s;
    const char *config = mt_st_meta(st, "config"), *images = mt_st_meta(st, "images");
    mt_vit_config cfg;
    mt_err e;
    if (!is_vit(st) || !config || !images) {
        s = mt_errorf(err, MT_EINVAL, "%s: not an mt ViT checkpoint (its metadata has no model = "
                      "vit, config and images)%s", path,
                      mt_st_meta(st, "tokenizer") ? "; it is a GPT's, which generates text" : "");
        goto out;
    }
    if ((s = mt_vit_config_from_json(config, &cfg, &e)) != MT_OK ||
        (s = mt_images_meta_from_json(images, meta, &e)) != MT_OK) {
        s = mt_errorf(err, MT_EFORMAT, "%s: %s", path, e.msg);
        goto out;
    }
    if (meta->H != cfg.image_h || meta->W != cfg.image_w || meta->C != cfg.channels ||
        meta->n_classes != cfg.n_classes) {
        s = mt_errorf(err, MT_EFORMAT, "%s: the model takes %dx%dx%d images into %d classes, the "
                      "image metadata says %dx%dx%d and %d", path, cfg.image_h, cfg.image_w,
                      cfg.channels, cfg.n_classes, meta->H, meta->W, meta->C, meta->n_classes);
        goto out;
    }
    if ((s = check_layers(st, path, cfg.n_layer, err)) != MT_OK ||
        (s = mt_vit_build_table(m, &cfg, err)) != MT_OK ||
        (s = alloc_checked(st, path, &m->P, err)) != MT_OK)
        goto out;
    s = load_common(st, path, &m->P, state, options, err);
out:
    if (s != MT_OK) {
        mt_vit_free(m);
        mt_images_free(meta);
    }
    return s;
}

bool mt_ckpt_is_vit(const char *path) {
    mt_safetensors st;
    if (mt_st_load(path, &st, NULL) != MT_OK) return false;
    bool vit = is_vit(&st);
    mt_st_free(&st);
    return vit;
}
