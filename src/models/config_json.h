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

/* Every field of cfg as one JSON object; malloc'd. */
char *mt_cf_to_json(const mt_cf_field *fields, int n, const void *cfg);
/* Sets the fields json names (others keep their values); an unknown key, a value of the wrong
   type or an unknown name is an error naming the key and what is accepted. */
mt_status mt_cf_from_json(const mt_cf_field *fields, int n, const char *json, void *cfg,
                          mt_err *err);

#endif
