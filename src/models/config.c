/* Model configs as tables of fields (config.h): JSON both ways, and the flags. */
#include "config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static void add_json(cJSON *o, const mt_cf_table *t, const void *cfg) {
    for (int i = 0; i < t->n; i++) {
        const mt_cf_field *f = &t->f[i];
        const void *p = (const char *)cfg + f->off;
        switch (f->type) {
        case MT_CF_INT: cJSON_AddNumberToObject(o, f->key, *(const int *)p); break;
        case MT_CF_FLOAT: cJSON_AddNumberToObject(o, f->key, *(const float *)p); break;
        case MT_CF_BOOL: cJSON_AddBoolToObject(o, f->key, *(const bool *)p); break;
        case MT_CF_ENUM:
            cJSON_AddStringToObject(o, f->key, mt_enum_name(f->of, *(const int *)p));
            break;
        case MT_CF_TABLE: add_json(o, f->of, p); break;
        }
    }
}

char *mt_cf_to_json(const mt_cf_table *t, const void *cfg) {
    cJSON *o = cJSON_CreateObject();
    MT_ASSERT(o, "config: out of memory for JSON");
    add_json(o, t, cfg);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    MT_ASSERT(json, "config: out of memory for JSON");
    return json;
}

/* The field of key in t (or a table inside it), and in *at the struct that holds it. */
static const mt_cf_field *find(const mt_cf_table *t, const char *key, void *cfg, void **at) {
    for (int i = 0; i < t->n; i++) {
        const mt_cf_field *f = &t->f[i];
        void *p = (char *)cfg + f->off;
        const mt_cf_field *hit = f->type == MT_CF_TABLE ? find(f->of, key, p, at)
                                 : strcmp(f->key, key) == 0 ? (*at = cfg, f)
                                                            : NULL;
        if (hit) return hit;
    }
    return NULL;
}

static void list_keys(const mt_cf_table *t, char *buf, size_t len) {
    for (int i = 0; i < t->n; i++) {
        if (t->f[i].type == MT_CF_TABLE) {
            list_keys(t->f[i].of, buf, len);
            continue;
        }
        size_t at = strlen(buf);
        snprintf(buf + at, len - at, "%s%s", at ? ", " : "", t->f[i].key);
    }
}

/* Sets one field from a JSON value, checking its type. */
static mt_status set_field(const mt_cf_field *f, void *cfg, const cJSON *v, mt_err *err) {
    void *p = (char *)cfg + f->off;
    const char *k = f->key;
    switch (f->type) {
    case MT_CF_INT:
    case MT_CF_FLOAT: {
        if (!cJSON_IsNumber(v)) return mt_errorf(err, MT_EINVAL, "config: %s must be a number", k);
        double d = v->valuedouble;
        if (f->type == MT_CF_FLOAT) return *(float *)p = (float)d, MT_OK;
        if (d != floor(d) || fabs(d) > 1e9)
            return mt_errorf(err, MT_EINVAL, "config: %s = %g, must be a whole number within "
                             "+-1e9", k, d);
        return *(int *)p = (int)d, MT_OK;
    }
    case MT_CF_BOOL:
        if (!cJSON_IsBool(v))
            return mt_errorf(err, MT_EINVAL, "config: %s must be true or false", k);
        return *(bool *)p = cJSON_IsTrue(v), MT_OK;
    case MT_CF_ENUM: {
        if (!cJSON_IsString(v)) return mt_errorf(err, MT_EINVAL, "config: %s must be a string", k);
        mt_err e;
        if (mt_enum_parse(f->of, v->valuestring, (int *)p, &e) != MT_OK)
            return mt_errorf(err, MT_EINVAL, "config: %s: %s", k, e.msg);
        return MT_OK;
    }
    case MT_CF_TABLE: break;
    }
    MT_ASSERT(0, "config: field %s of type %d", k, (int)f->type);
}

mt_status mt_cf_from_json(const mt_cf_table *t, const char *json, void *cfg, mt_err *err) {
    cJSON *o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return mt_errorf(err, MT_EFORMAT, "config: not a JSON object: %.80s", json);
    }
    mt_status st = MT_OK;
    for (const cJSON *v = o->child; v && st == MT_OK; v = v->next) {
        void *at = NULL;
        const mt_cf_field *f = find(t, v->string, cfg, &at);
        if (f) {
            st = set_field(f, at, v, err);
        } else {
            char keys[768] = "";
            list_keys(t, keys, sizeof keys);
            st = mt_errorf(err, MT_EINVAL, "config: unknown key '%s' (accepted: %s)", v->string,
                           keys);
        }
    }
    cJSON_Delete(o);
    return st;
}

int mt_cf_options(const mt_cf_table *t, void *cfg, mt_opt *opts, mt_cf_name *names, int skip,
                  int cap) {
    static const mt_opt_type TYPES[] = {[MT_CF_INT] = MT_OPT_INT, [MT_CF_FLOAT] = MT_OPT_FLOAT,
                                        [MT_CF_BOOL] = MT_OPT_BOOL, [MT_CF_ENUM] = MT_OPT_CHOICE};
    int n = skip;
    for (int i = 0; i < t->n; i++) {
        const mt_cf_field *f = &t->f[i];
        void *p = (char *)cfg + f->off;
        if (f->type == MT_CF_TABLE) {
            n = mt_cf_options(f->of, p, opts, names, n, cap);
            continue;
        }
        if (!f->help) continue;
        mt_cf_name name;
        snprintf(name, sizeof name, "%s", f->flag ? f->flag : f->key);
        for (char *c = name; *c; c++) *c = *c == '_' ? '-' : *c;
        if (mt_opts_find(opts, n < cap ? n : cap, name)) continue;
        if (n < cap) {
            memcpy(names[n], name, sizeof name);
            opts[n] = (mt_opt){.name = names[n],
                               .type = TYPES[f->type],
                               .value = p,
                               .range = f->range,
                               .help = f->help,
                               .flags = f->flag && f->type == MT_CF_BOOL ? MT_OPT_NEGATE : 0,
                               .choices = f->type == MT_CF_ENUM ? f->of : NULL};
        }
        n++;
    }
    return n;
}
