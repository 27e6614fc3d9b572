/* Model configs as JSON, private to src/models: each model describes its config struct by one
 * table of {key, type, offset}, which drives both directions (checkpoints carry the JSON). */
#ifndef MT_CONFIG_JSON_H
#define MT_CONFIG_JSON_H

#include <stddef.h>

#include "models.h"

typedef enum {
    MT_CF_INT,      /* int */
    MT_CF_FLOAT,    /* float */
    MT_CF_BOOL,     /* bool */
    MT_CF_NORM,     /* mt_norm_kind, by mt_norm_name; this and the rest: int-sized enums */
    MT_CF_RMS_FORM, /* mt_rms_form: "llama", "paper" */
    MT_CF_PLACE,    /* mt_placement, by mt_placement_name */
    MT_CF_INIT,     /* mt_init_scheme, by mt_init_scheme_name */
    MT_CF_ACT,      /* mt_act, by mt_act_name */
    MT_CF_POOL,     /* mt_vit_pool, by mt_vit_pool_name */
} mt_cf_type;

typedef struct {
    const char *key;
    mt_cf_type type;
    size_t off; /* offsetof the field in the config struct */
} mt_cf_field;

/* The fields of the block stack, which both model configs (mt_gpt_config, mt_vit_config) hold
   under the same names: entries of the field table of config type T. */
#define MT_CF_FIELD(T, key, type, field) {key, MT_CF_##type, offsetof(T, field)}
#define MT_CF_BLOCK_FIELDS(T)                                                                      \
    MT_CF_FIELD(T, "n_layer", INT, n_layer), MT_CF_FIELD(T, "n_head", INT, n_head),                \
    MT_CF_FIELD(T, "n_embd", INT, n_embd), MT_CF_FIELD(T, "n_ff", INT, n_ff),                      \
    MT_CF_FIELD(T, "norm", NORM, norm.kind), MT_CF_FIELD(T, "placement", PLACE, placement),        \
    MT_CF_FIELD(T, "norm_eps", FLOAT, norm.eps), MT_CF_FIELD(T, "prms_p", FLOAT, norm.prms_p),     \
    MT_CF_FIELD(T, "gn_groups", INT, norm.gn_groups),                                              \
    MT_CF_FIELD(T, "rms_form", RMS_FORM, norm.rms_form),                                           \
    MT_CF_FIELD(T, "rms_bias", BOOL, norm.rms_bias),                                               \
    MT_CF_FIELD(T, "in_affine", BOOL, norm.in_affine),                                             \
    MT_CF_FIELD(T, "deepnorm_alpha", FLOAT, deepnorm_alpha),                                       \
    MT_CF_FIELD(T, "deepnorm_beta", FLOAT, deepnorm_beta), MT_CF_FIELD(T, "init", INIT, init),     \
    MT_CF_FIELD(T, "bias", BOOL, bias), MT_CF_FIELD(T, "act", ACT, act),                           \
    MT_CF_FIELD(T, "dropout", FLOAT, dropout)

/* Every field of cfg as one JSON object; malloc'd. */
char *mt_cf_to_json(const mt_cf_field *fields, int n, const void *cfg);
/* Sets the fields json names (others keep their values); an unknown key, a value of the wrong
   type or an unknown name is an error naming the key and what is accepted. */
mt_status mt_cf_from_json(const mt_cf_field *fields, int n, const char *json, void *cfg,
                          mt_err *err);

#endif
