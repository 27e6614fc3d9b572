/* Field tables (fields.h): one field's text both ways, a struct's JSON, and a program's options
 * from flags and config files, their help and their saved text. */
#include "fields.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AT(obj, f) ((char *)(obj) + (f)->off)
#define AT_C(obj, f) ((const char *)(obj) + (f)->off)

/* The storage a field's type allows: a table that says otherwise is a bug. */
static void check_size(const mt_field *f) {
    size_t s = f->size;
    bool ok = f->type == MT_FIELD_INT     ? s == sizeof(int) || s == sizeof(long)
              : f->type == MT_FIELD_FLOAT ? s == sizeof(float) || s == sizeof(double)
              : f->type == MT_FIELD_BOOL  ? s == sizeof(bool)
              : f->type == MT_FIELD_ENUM  ? s == sizeof(int)
                                          : s > 0;
    MT_ASSERT(ok, "field %s: type %d in %zu bytes", f->key, (int)f->type, s);
}

static long get_int(const mt_field *f, const void *obj) {
    return f->size == sizeof(int) ? *(const int *)AT_C(obj, f) : *(const long *)AT_C(obj, f);
}
static void set_int(const mt_field *f, void *obj, long v) {
    if (f->size == sizeof(int)) *(int *)AT(obj, f) = (int)v;
    else *(long *)AT(obj, f) = v;
}
static float get_float(const mt_field *f, const void *obj) {
    return f->size == sizeof(float) ? *(const float *)AT_C(obj, f)
                                    : (float)*(const double *)AT_C(obj, f);
}
static void set_float(const mt_field *f, void *obj, float v) {
    if (f->size == sizeof(float)) *(float *)AT(obj, f) = v;
    else *(double *)AT(obj, f) = v;
}
/* A negated bool holds the opposite of what its flag says. */
static bool negated(const mt_field *f) { return f->type == MT_FIELD_BOOL && f->flag; }

/* ---- one field as text ---------------------------------------------------------------------- */

/* the shortest %g form that reads back as v (9 digits always do) */
static void format_float(float v, char *buf, size_t len) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
}

const char *mt_field_format(const mt_field *f, const void *obj, char *buf, size_t len) {
    check_size(f);
    switch (f->type) {
    case MT_FIELD_INT: snprintf(buf, len, "%ld", get_int(f, obj)); break;
    case MT_FIELD_FLOAT: format_float(get_float(f, obj), buf, len); break;
    case MT_FIELD_STR: snprintf(buf, len, "%s", AT_C(obj, f)); break;
    case MT_FIELD_BOOL:
        snprintf(buf, len, "%s", *(const bool *)AT_C(obj, f) != negated(f) ? "true" : "false");
        break;
    case MT_FIELD_ENUM:
        snprintf(buf, len, "%s", mt_enum_name(f->of, *(const int *)AT_C(obj, f)));
        break;
    case MT_FIELD_TABLE: MT_ASSERT(0, "field %s: a table has no value of its own", f->key);
    }
    return buf;
}

/* The range "lo..hi" or "lo.." of a number field, "(lo.." with lo itself out: out of it is an
   error quoting the help (which explains special values such as -1: default). */
static mt_status check_range(const mt_field *f, double v, const char *text, const char *where,
                             mt_err *err) {
    if (!f->range) return MT_OK;
    const char *dots = strstr(f->range, "..");
    MT_ASSERT(dots, "field %s: range '%s' is not lo..hi", f->key, f->range);
    bool open = f->range[0] == '(';
    double lo = strtod(f->range + open, NULL), hi = dots[2] ? strtod(dots + 2, NULL) : INFINITY;
    if ((open ? v > lo : v >= lo) && v <= hi) return MT_OK;
    char range[96];
    if (isinf(hi)) snprintf(range, sizeof range, "%s %.10g", open ? "more than" : "at least", lo);
    else snprintf(range, sizeof range, "from %.10g to %.10g", lo, hi);
    return mt_errorf(err, MT_EINVAL, "%s: %s is out of range: expected %s (%s)", where, text, range,
                     f->help);
}

static mt_status parse_number(const mt_field *f, void *obj, const char *text, const char *where,
                              mt_err *err) {
    char *end;
    errno = 0;
    if (f->type == MT_FIELD_INT) {
        long v = strtol(text, &end, 10);
        if (!*text || *end || errno || v < INT_MIN || v > INT_MAX)
            return mt_errorf(err, MT_EINVAL, "%s: '%s' is not an integer", where, text);
        if (check_range(f, (double)v, text, where, err) != MT_OK) return MT_EINVAL;
        return set_int(f, obj, v), MT_OK;
    }
    float v = strtof(text, &end);
    if (!*text || *end || !isfinite(v))
        return mt_errorf(err, MT_EINVAL, "%s: '%s' is not a finite number", where, text);
    if (check_range(f, (double)v, text, where, err) != MT_OK) return MT_EINVAL;
    return set_float(f, obj, v), MT_OK;
}

const char *mt_field_name(const mt_field *f, char *buf, size_t len) {
    snprintf(buf, len, "%s", f->flag ? f->flag : f->key);
    for (char *c = buf; *c; c++) *c = *c == '_' ? '-' : *c;
    return buf;
}

mt_status mt_field_unread(const mt_field *f, const char *what, mt_err *err) {
    return mt_errorf(err, MT_EINVAL, "%s: this run does not read it (only %s does%s%s): drop it",
                     what, f->read_by, f->instead ? "; " : "", f->instead ? f->instead : "");
}

mt_status mt_fields_check_unread(const mt_fields *t, const void *obj, const void *unset,
                                 mt_err *err) {
    for (int i = 0; i < t->n; i++) {
        const mt_field *f = &t->f[i];
        char v[64], u[64], name[64], what[160];
        if (!(f->flags & MT_FIELD_SET_READ) || !f->read || f->read(obj) ||
            strcmp(mt_field_format(f, obj, v, sizeof v), mt_field_format(f, unset, u, sizeof u)) ==
                0)
            continue;
        snprintf(what, sizeof what, "--%s %s", mt_field_name(f, name, sizeof name), v);
        return mt_field_unread(f, what, err);
    }
    return MT_OK;
}

static const mt_field_retired *retired(const mt_field *f, const char *text) {
    for (const mt_field_retired *r = f->retired; r && r->was; r++)
        if (strcmp(text, r->was) == 0) return r;
    return NULL;
}

const char *mt_field_saved_value(const mt_field *f, const char *text) {
    const mt_field_retired *r = retired(f, text);
    return r ? r->now : text;
}

mt_status mt_field_parse(const mt_field *f, void *obj, const char *text, const char *where,
                         mt_err *err) {
    check_size(f);
    const mt_field_retired *r = retired(f, text);
    if (r) return mt_errorf(err, MT_EINVAL, "%s: '%s' is retired: %s", where, text, r->why);
    if (f->derive && !*text) return MT_OK; /* no value: derived (mt_fieldset_derive) */
    switch (f->type) {
    case MT_FIELD_INT:
    case MT_FIELD_FLOAT: return parse_number(f, obj, text, where, err);
    case MT_FIELD_STR:
        if (strlen(text) >= f->size)
            return mt_errorf(err, MT_EINVAL, "%s: the value is longer than %zu characters", where,
                             f->size - 1);
        strcpy(AT(obj, f), text);
        return MT_OK;
    case MT_FIELD_BOOL: {
        static const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
        for (int i = 0; i < 4; i++) {
            if (strcmp(text, yes[i]) == 0) return *(bool *)AT(obj, f) = !negated(f), MT_OK;
            if (strcmp(text, no[i]) == 0) return *(bool *)AT(obj, f) = negated(f), MT_OK;
        }
        return mt_errorf(err, MT_EINVAL, "%s: '%s' is not true or false", where, text);
    }
    case MT_FIELD_ENUM: {
        int v;
        char choices[256];
        if (mt_enum_parse(f->of, text, &v, NULL) != MT_OK)
            return mt_errorf(err, MT_EINVAL, "%s: '%s' is not one of %s", where, text,
                             mt_enum_choices(f->of, choices, sizeof choices));
        *(int *)AT(obj, f) = v;
        return MT_OK;
    }
    case MT_FIELD_TABLE: break;
    }
    MT_ASSERT(0, "field %s: a table has no value of its own", f->key);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static void add_json(cJSON *o, const mt_fields *t, const void *obj) {
    for (int i = 0; i < t->n; i++) {
        const mt_field *f = &t->f[i];
        const void *p = AT_C(obj, f);
        if (f->flags & MT_FIELD_CLI) continue;
        check_size(f);
        switch (f->type) {
        case MT_FIELD_INT: cJSON_AddNumberToObject(o, f->key, (double)get_int(f, obj)); break;
        case MT_FIELD_FLOAT:
            cJSON_AddNumberToObject(o, f->key,
                                    f->size == sizeof(float) ? *(const float *)p
                                                             : *(const double *)p);
            break;
        case MT_FIELD_BOOL: cJSON_AddBoolToObject(o, f->key, *(const bool *)p); break;
        case MT_FIELD_STR: cJSON_AddStringToObject(o, f->key, p); break;
        case MT_FIELD_ENUM:
            cJSON_AddStringToObject(o, f->key, mt_enum_name(f->of, *(const int *)p));
            break;
        case MT_FIELD_TABLE: add_json(o, f->of, p); break;
        }
    }
}

char *mt_fields_to_json(const mt_fields *t, const void *obj) {
    cJSON *o = cJSON_CreateObject();
    MT_ASSERT(o, "config: out of memory for JSON");
    add_json(o, t, obj);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    MT_ASSERT(json, "config: out of memory for JSON");
    return json;
}

/* The field of key in t (or a table inside it), and in *at the struct that holds it. */
static const mt_field *find_key(const mt_fields *t, const char *key, void *obj, void **at) {
    for (int i = 0; i < t->n; i++) {
        const mt_field *f = &t->f[i];
        if (f->flags & MT_FIELD_CLI) continue;
        const mt_field *hit = f->type == MT_FIELD_TABLE  ? find_key(f->of, key, AT(obj, f), at)
                              : strcmp(f->key, key) == 0 ? (*at = obj, f)
                                                         : NULL;
        if (hit) return hit;
    }
    return NULL;
}

static void list_keys(const mt_fields *t, char *buf, size_t len) {
    for (int i = 0; i < t->n; i++) {
        if (t->f[i].flags & MT_FIELD_CLI) continue;
        if (t->f[i].type == MT_FIELD_TABLE) {
            list_keys(t->f[i].of, buf, len);
            continue;
        }
        size_t at = strlen(buf);
        snprintf(buf + at, len - at, "%s%s", at ? ", " : "", t->f[i].key);
    }
}

/* Sets one field from a JSON value, checking its type. */
static mt_status set_json(const mt_field *f, void *obj, const cJSON *v, mt_err *err) {
    const char *k = f->key;
    switch (f->type) {
    case MT_FIELD_INT:
    case MT_FIELD_FLOAT: {
        if (!cJSON_IsNumber(v)) return mt_errorf(err, MT_EINVAL, "config: %s must be a number", k);
        double d = v->valuedouble;
        if (f->type == MT_FIELD_FLOAT) return set_float(f, obj, (float)d), MT_OK;
        if (d != floor(d) || fabs(d) > 1e9)
            return mt_errorf(err, MT_EINVAL,
                             "config: %s = %g, must be a whole number within "
                             "+-1e9",
                             k, d);
        return set_int(f, obj, (long)d), MT_OK;
    }
    case MT_FIELD_BOOL:
        if (!cJSON_IsBool(v))
            return mt_errorf(err, MT_EINVAL, "config: %s must be true or false", k);
        return *(bool *)AT(obj, f) = cJSON_IsTrue(v), MT_OK;
    case MT_FIELD_STR:
    case MT_FIELD_ENUM: {
        if (!cJSON_IsString(v)) return mt_errorf(err, MT_EINVAL, "config: %s must be a string", k);
        mt_err e;
        if (f->type == MT_FIELD_STR && mt_field_parse(f, obj, v->valuestring, k, &e) != MT_OK)
            return mt_errorf(err, MT_EINVAL, "config: %s", e.msg);
        if (f->type == MT_FIELD_ENUM &&
            mt_enum_parse(f->of, mt_field_saved_value(f, v->valuestring), (int *)AT(obj, f), &e) !=
                MT_OK)
            return mt_errorf(err, MT_EINVAL, "config: %s: %s", k, e.msg);
        return MT_OK;
    }
    case MT_FIELD_TABLE: break;
    }
    MT_ASSERT(0, "config: field %s of type %d", k, (int)f->type);
}

mt_status mt_fields_from_json(const mt_fields *t, const char *json, void *obj, mt_err *err) {
    cJSON *o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return mt_errorf(err, MT_EFORMAT, "config: not a JSON object: %.80s", json);
    }
    mt_status st = MT_OK;
    for (const cJSON *v = o->child; v && st == MT_OK; v = v->next) {
        void *at = NULL;
        const mt_field *f = find_key(t, v->string, obj, &at);
        if (f) {
            check_size(f);
            st = set_json(f, at, v, err);
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
