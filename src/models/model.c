/* What every model does through its type (model.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/gemm.h"
#include "model.h"

mt_status mt_model_table(mt_model **m, const mt_model_type *type, const void *cfg, mt_err *err) {
    void *p = malloc(type->size);
    *m = p;
    if (!p) return mt_errorf(err, MT_ENOMEM, "out of memory for a model");
    mt_status s = type->build_table(p, cfg, err);
    if ((*m)->cfg) (*m)->type = type; /* the instance was set up: type->free releases it */
    if (s != MT_OK) {
        mt_model_free(p);
        *m = NULL;
    }
    return s;
}

mt_status mt_model_build(mt_model **m, const mt_model_type *type, const void *cfg, mt_err *err) {
    mt_status s = mt_model_table(m, type, cfg, err);
    if (s == MT_OK && (s = mt_params_alloc((*m)->P, err)) != MT_OK) {
        mt_model_free(*m);
        *m = NULL;
    }
    return s;
}

void mt_model_free(mt_model *m) {
    if (m && m->type) m->type->free(m);
    free(m);
}

char *mt_model_config_json(const mt_model *m) { return mt_fields_to_json(m->type->fields, m->cfg); }

mt_status mt_model_config_from_json(const mt_model_type *type, const char *json, void *cfg,
                                    mt_err *err) {
    type->config_default(cfg);
    mt_status s = mt_fields_from_json(type->fields, json, cfg, err);
    return s == MT_OK ? type->config_validate(cfg, err) : s;
}

size_t mt_model_arena_bytes(const mt_model_type *type, const void *cfg, int B, bool training) {
    double bytes = 3 * type->activation_bytes(cfg, B, training) + (double)((size_t)64 << 20);
    return bytes < (double)SIZE_MAX / 2 ? (size_t)bytes : SIZE_MAX / 2;
}

mt_status mt_model_infer_ctx(mt_ctx *c, const mt_model *m, int B, mt_precision precision,
                             mt_err *err) {
    mt_status s = mt_ctx_init(c, mt_model_arena_bytes(m->type, m->cfg, B, false), 0, err);
    if (s != MT_OK) return s;
    c->training = false;
    c->grad_enabled = false;
    c->precision = precision;
    return MT_OK;
}
