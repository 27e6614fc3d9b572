/* Model configs as JSON (config_json.h): one table of fields per model, both directions. */
#include "config_json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *rms_form_name(mt_rms_form f) { return f == MT_RMS_PAPER ? "paper" : "llama"; }

char *mt_cf_to_json(const mt_cf_field *fields, int n, const void *cfg) {
    cJSON *o = cJSON_CreateObject();
    MT_ASSERT(o, "config: out of memory for JSON");
    for (int i = 0; i < n; i++) {
        const void *p = (const char *)cfg + fields[i].off;
        const char *k = fields[i].key, *s = NULL;
        int e = fields[i].type >= MT_CF_NORM ? *(const int *)p : 0; /* an enum: int-sized */
        switch (fields[i].type) {
        case MT_CF_INT: cJSON_AddNumberToObject(o, k, *(const int *)p); break;
        case MT_CF_FLOAT: cJSON_AddNumberToObject(o, k, *(const float *)p); break;
        case MT_CF_BOOL: cJSON_AddBoolToObject(o, k, *(const bool *)p); break;
        case MT_CF_NORM: s = mt_norm_name((mt_norm_kind)e); break;
        case MT_CF_RMS_FORM: s = rms_form_name((mt_rms_form)e); break;
        case MT_CF_PLACE: s = mt_placement_name((mt_placement)e); break;
        case MT_CF_INIT: s = mt_init_scheme_name((mt_init_scheme)e); break;
        case MT_CF_ACT: s = mt_act_name((mt_act)e); break;
        case MT_CF_POOL: s = mt_vit_pool_name((mt_vit_pool)e); break;
        }
        if (s) cJSON_AddStringToObject(o, k, s);
    }
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    MT_ASSERT(json, "config: out of memory for JSON");
    return json;
}

/* Sets one field from a JSON value, checking its type. */
static mt_status set_field(const mt_cf_field *f, void *cfg, const cJSON *v, mt_err *err) {
    void *p = (char *)cfg + f->off;
    const char *k = f->key;
    mt_cf_type t = f->type;
    if (t == MT_CF_INT || t == MT_CF_FLOAT) {
        if (!cJSON_IsNumber(v))
            return mt_errorf(err, MT_EINVAL, "config: %s must be a number", k);
        double d = v->valuedouble;
        if (t == MT_CF_FLOAT) return *(float *)p = (float)d, MT_OK;
        if (d != floor(d) || fabs(d) > 1e9)
            return mt_errorf(err, MT_EINVAL, "config: %s = %g, must be a whole number within "
                             "+-1e9", k, d);
        return *(int *)p = (int)d, MT_OK;
    }
    if (t == MT_CF_BOOL) {
        if (!cJSON_IsBool(v))
            return mt_errorf(err, MT_EINVAL, "config: %s must be true or false", k);
        return *(bool *)p = cJSON_IsTrue(v), MT_OK;
    }
    if (!cJSON_IsString(v)) return mt_errorf(err, MT_EINVAL, "config: %s must be a string", k);
    const char *s = v->valuestring;
    switch (t) {
    case MT_CF_NORM: return mt_norm_parse(s, (mt_norm_kind *)p, err);
    case MT_CF_PLACE: return mt_placement_parse(s, (mt_placement *)p, err);
    case MT_CF_INIT: return mt_init_scheme_parse(s, (mt_init_scheme *)p, err);
    case MT_CF_ACT: return mt_act_parse(s, (mt_act *)p, err);
    case MT_CF_POOL: return mt_vit_pool_parse(s, (mt_vit_pool *)p, err);
    case MT_CF_RMS_FORM:
        if (strcmp(s, "llama") && strcmp(s, "paper"))
            return mt_errorf(err, MT_EINVAL, "config: rms_form '%s' (accepted: llama, paper)", s);
        return *(mt_rms_form *)p = strcmp(s, "paper") ? MT_RMS_LLAMA : MT_RMS_PAPER, MT_OK;
    default: break;
    }
    MT_ASSERT(0, "config: field type %d", (int)t);
}

mt_status mt_cf_from_json(const mt_cf_field *fields, int n, const char *json, void *cfg,
                          mt_err *err) {
    cJSON *o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return mt_errorf(err, MT_EFORMAT, "config: not a JSON object: %.80s", json);
    }
    mt_status st = MT_OK;
    for (const cJSON *v = o->child; v && st == MT_OK; v = v->next) {
        int i = 0;
        while (i < n && strcmp(fields[i].key, v->string)) i++;
        if (i == n) {
            char keys[768] = "";
            for (int j = 0; j < n; j++)
                snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", j ? ", " : "",
                         fields[j].key);
            st = mt_errorf(err, MT_EINVAL, "config: unknown key '%s' (accepted: %s)", v->string,
                           keys);
        } else {
            st = set_field(&fields[i], cfg, v, err);
        }
    }
    cJSON_Delete(o);
    return st;
}
