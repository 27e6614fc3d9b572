/* Checkpoints of any model: the parameter table plus the model type, its config, what it reads
   inputs with, the step, the RNG states and the options (ckpt.h), and a model started from
   one's weights. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

/* The metadata "step" and "rng" of a state. */
static void format_state(const mt_ckpt_state *state, char step[32], char rng[8 * 17 + 1]) {
    snprintf(step, 32, "%ld", state->step);
    const uint64_t *a = state->sampler.s, *b = state->dropout.s;
    snprintf(rng, 8 * 17 + 1,
             "%016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64
             " %016" PRIx64 " %016" PRIx64 " %016" PRIx64,
             a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
}

mt_status mt_ckpt_save(const char *path, const mt_model *m, const mt_ckpt_state *state,
                       const char *options, mt_err *err) {
    char step[32], rng[8 * 17 + 1];
    format_state(state, step, rng);
    char *config = mt_model_config_json(m), *meta = m->type->meta_to_json(m);
    const char *keys[] = {"model", "config", m->type->meta_key, "step", "rng", "options"};
    const char *vals[] = {m->type->name, config, meta, step, rng, options ? options : ""};
    mt_status s = mt_ckpt_save_params(path, m->P, 6, keys, vals, err);
    free(config);
    free(meta);
    return s;
}

static mt_status parse_state(const mt_safetensors *st, const char *path, mt_ckpt_state *state,
                             mt_err *err) {
    const char *step = mt_st_meta(st, "step"), *rng = mt_st_meta(st, "rng");
    uint64_t *a = state->sampler.s, *b = state->dropout.s;
    char *end;
    if (!step || !rng || (state->step = strtol(step, &end, 10)) < 0 || *end ||
        sscanf(rng,
               "%" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64
               " %" SCNx64,
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
    mt_status s = mt_ckpt_check_params(st, path, P, err);
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
    mt_status s = mt_ckpt_load_params(st, path, P, err);
    if (s == MT_OK && state) s = parse_state(st, path, state, err);
    if (s == MT_OK && options) {
        const char *o = mt_st_meta(st, "options");
        if (!(*options = strdup(o ? o : "")))
            s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for the options", path);
    }
    return s;
}

mt_status mt_ckpt_load(const char *path, mt_model **m, mt_ckpt_state *state, char **options,
                       mt_err *err) {
    *m = NULL;
    if (options) *options = NULL;
    mt_safetensors st;
    mt_status s = mt_st_load(path, &st, err);
    if (s != MT_OK) return s;
    s = mt_ckpt_parse(&st, path, m, state, options, err);
    mt_st_free(&st);
    return s;
}

/* The model type, config (malloc'd) and meta JSON (in st) of a checkpoint. */
static mt_status file_model(const mt_safetensors *st, const char *path, const mt_model_type **type,
                            void **cfg, const char **meta, mt_err *err) {
    /* files from before models were named hold the first registered type */
    const char *name = mt_st_meta(st, "model"), *config = mt_st_meta(st, "config");
    mt_err e;
    *type = mt_model_types[0];
    *cfg = NULL;
    if (name && mt_model_type_find(name, type, &e) != MT_OK)
        return mt_errorf(err, MT_EFORMAT, "%s: %s", path, e.msg);
    if (!config || !(*meta = mt_st_meta(st, (*type)->meta_key)))
        return mt_errorf(err, MT_EFORMAT,
                         "%s: not an mt checkpoint of a %s model (no 'config' and '%s' in "
                         "__metadata__)",
                         path, (*type)->name, (*type)->meta_key);
    if (!(*cfg = malloc((*type)->config_size)))
        return mt_errorf(err, MT_ENOMEM, "out of memory for a config");
    if (mt_model_config_from_json(*type, config, *cfg, &e) != MT_OK) {
        free(*cfg);
        *cfg = NULL;
        return mt_errorf(err, MT_EFORMAT, "%s: %s", path, e.msg);
    }
    return MT_OK;
}

mt_status mt_ckpt_parse(const mt_safetensors *st, const char *path, mt_model **m,
                        mt_ckpt_state *state, char **options, mt_err *err) {
    *m = NULL;
    if (options) *options = NULL;
    const mt_model_type *type;
    void *cfg;
    const char *meta;
    mt_err e;
    mt_status s = file_model(st, path, &type, &cfg, &meta, err);
    if (s != MT_OK) return s;
    s = check_layers(st, path, mt_config_stack(cfg)->n_layer, err);
    if (s == MT_OK) s = mt_model_table(m, type, cfg, err);
    free(cfg);
    if (s == MT_OK && (s = type->meta_from_json(*m, meta, &e)) != MT_OK)
        s = mt_errorf(err, MT_EFORMAT, "%s: %s", path, e.msg);
    if (s == MT_OK && (s = alloc_checked(st, path, (*m)->P, err)) == MT_OK)
        s = load_common(st, path, (*m)->P, state, options, err);
    if (s != MT_OK) {
        mt_model_free(*m);
        *m = NULL;
    }
    return s;
}
