/* Options: one table of {name, type, value, help} read from flags and config files. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

/* name matches the option's name with '_' standing for '-'; len bytes of name are compared */
static bool name_eq(const char *opt, const char *name, size_t len) {
    for (size_t i = 0; i < len; i++) {
        char c = name[i] == '_' ? '-' : name[i];
        if (opt[i] != c) return false;
    }
    return opt[len] == 0;
}

static const mt_opt *find_n(const mt_opt *opts, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++)
        if (name_eq(opts[i].name, name, len)) return &opts[i];
    return NULL;
}

const mt_opt *mt_opts_find(const mt_opt *opts, int n, const char *name) {
    return find_n(opts, n, name, strlen(name));
}

/* Edit distance (insert, delete, substitute), for "did you mean"; capped at 64 characters. */
static int edit_distance(const char *a, size_t la, const char *b) {
    size_t lb = strlen(b);
    if (la > 64 || lb > 64) return 99;
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            char ca = a[i - 1] == '_' ? '-' : a[i - 1];
            int sub = diag + (ca != b[j - 1]), up = row[j] + 1, left = row[j - 1] + 1;
            diag = row[j];
            row[j] = sub < up ? (sub < left ? sub : left) : (up < left ? up : left);
        }
    }
    return row[lb];
}

/* " (did you mean --x?)" when a known name is within 3 edits, else "" */
static const char *suggest(const mt_opt *opts, int n, const char *name, size_t len,
                           const char *dashes, char *buf, size_t cap) {
    int best = 4;
    const char *hit = NULL;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(name, len, opts[i].name);
        if (d < best) best = d, hit = opts[i].name;
    }
    if (!hit) return "";
    snprintf(buf, cap, " (did you mean %s%s?)", dashes, hit);
    return buf;
}

/* the shortest %g form that reads back as v (9 digits always do) */
static void format_float(float v, char *buf, size_t len) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
}

const char *mt_opt_format(const mt_opt *o, char *buf, size_t len) {
    switch (o->type) {
    case MT_OPT_INT: snprintf(buf, len, "%d", *(const int *)o->value); break;
    case MT_OPT_FLOAT: format_float(*(const float *)o->value, buf, len); break;
    case MT_OPT_STR: snprintf(buf, len, "%s", (const char *)o->value); break;
    case MT_OPT_BOOL:
        snprintf(buf, len, "%s", *(const bool *)o->value != !!(o->flags & MT_OPT_NEGATE) ? "true"
                                                                                         : "false");
        break;
    case MT_OPT_CHOICE:
        snprintf(buf, len, "%s", mt_enum_name(o->choices, *(const int *)o->value));
        break;
    }
    return buf;
}

/* The range "lo..hi" or "lo.." of a number option: out of it is an error quoting the help (which
   explains special values such as -1: default). */
static mt_status check_range(const mt_opt *o, double v, const char *text, const char *where,
                             mt_err *err) {
    if (!o->range) return MT_OK;
    const char *dots = strstr(o->range, "..");
    MT_ASSERT(dots, "option --%s: range '%s' is not lo..hi", o->name, o->range);
    double lo = strtod(o->range, NULL), hi = dots[2] ? strtod(dots + 2, NULL) : INFINITY;
    if (v >= lo && v <= hi) return MT_OK;
    char range[96];
    if (isinf(hi)) snprintf(range, sizeof range, "at least %g", lo);
    else snprintf(range, sizeof range, "from %g to %g", lo, hi);
    return mt_errorf(err, MT_EINVAL, "%s: %s is out of range: expected %s (%s)", where, text,
                     range, o->help);
}

/* Parses text into the option; where names the source in messages ("--lr", "f.ini:3: lr"). */
static mt_status set_value(const mt_opt *o, const char *text, const char *where, mt_err *err) {
    char *end;
    errno = 0;
    switch (o->type) {
    case MT_OPT_INT: {
        long v = strtol(text, &end, 10);
        if (!*text || *end || errno || v < INT_MIN || v > INT_MAX)
            return mt_errorf(err, MT_EINVAL, "%s: '%s' is not an integer", where, text);
        if (check_range(o, (double)v, text, where, err) != MT_OK) return MT_EINVAL;
        *(int *)o->value = (int)v;
        return MT_OK;
    }
    case MT_OPT_FLOAT: {
        float v = strtof(text, &end);
        if (!*text || *end || !isfinite(v))
            return mt_errorf(err, MT_EINVAL, "%s: '%s' is not a finite number", where, text);
        if (check_range(o, (double)v, text, where, err) != MT_OK) return MT_EINVAL;
        *(float *)o->value = v;
        return MT_OK;
    }
    case MT_OPT_STR:
        if (strlen(text) >= MT_OPT_STR_MAX)
            return mt_errorf(err, MT_EINVAL, "%s: the value is longer than %d characters", where,
                             MT_OPT_STR_MAX - 1);
        strcpy((char *)o->value, text);
        return MT_OK;
    case MT_OPT_BOOL: {
        static const char *yes[] = {"true", "1", "yes", "on"}, *no[] = {"false", "0", "no", "off"};
        for (int i = 0; i < 4; i++) {
            bool negate = o->flags & MT_OPT_NEGATE;
            if (strcmp(text, yes[i]) == 0) return *(bool *)o->value = !negate, MT_OK;
            if (strcmp(text, no[i]) == 0) return *(bool *)o->value = negate, MT_OK;
        }
        return mt_errorf(err, MT_EINVAL, "%s: '%s' is not true or false", where, text);
    }
    case MT_OPT_CHOICE: {
        int v;
        char choices[256];
        if (mt_enum_parse(o->choices, text, &v, NULL) != MT_OK)
            return mt_errorf(err, MT_EINVAL, "%s: '%s' is not one of %s", where, text,
                             mt_enum_choices(o->choices, choices, sizeof choices));
        *(int *)o->value = v;
        return MT_OK;
    }
    }
    return MT_OK;
}

mt_status mt_opts_parse_args(const mt_opt *opts, int n, int argc, char **argv, mt_err *err) {
    char where[160], hint[160];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || !a[2])
            return mt_errorf(err, MT_EINVAL, "unexpected argument '%s': flags start with --", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const mt_opt *o = find_n(opts, n, name, len);
        if (!o)
            return mt_errorf(err, MT_EINVAL, "unknown flag --%.*s%s; --help lists them", (int)len,
                             name, suggest(opts, n, name, len, "--", hint, sizeof hint));
        snprintf(where, sizeof where, "--%s", o->name);
        const char *value = eq ? eq + 1 : NULL;
        if (!value && o->type == MT_OPT_BOOL) value = "true";
        char choices[256] = "";
        if (o->type == MT_OPT_CHOICE) mt_enum_choices(o->choices, choices, sizeof choices);
        if (!value && i + 1 >= argc)
            return mt_errorf(err, MT_EINVAL, "--%s needs a value%s%s", o->name,
                             *choices ? ": one of " : "", choices);
        if (!value) value = argv[++i];
        mt_status s = set_value(o, value, where, err);
        if (s != MT_OK) return s;
    }
    return MT_OK;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) *--e = 0;
    return s;
}

mt_status mt_opts_parse_ini(const mt_opt *opts, int n, const char *text, const char *source,
                            mt_err *err) {
    char line[MT_OPT_STR_MAX + 256], where[MT_OPT_STR_MAX + 64], hint[160];
    int lineno = 0;
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        lineno++;
        if (len >= sizeof line)
            return mt_errorf(err, MT_EINVAL, "%s:%d: the line is too long", source, lineno);
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (p[len] == '\n');
        line[strcspn(line, "#")] = 0; /* a comment runs from # to the end of the line */
        char *s = trim(line);
        if (!*s) continue;
        if (*s == '[')
            return mt_errorf(err, MT_EINVAL,
                             "%s:%d: '%s': config files have no sections, only key = value lines",
                             source, lineno, s);
        char *eq = strchr(s, '=');
        if (!eq) return mt_errorf(err, MT_EINVAL, "%s:%d: '%s': expected key = value", source, lineno, s);
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1);
        size_t vlen = strlen(value);
        if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') { /* "a value" */
            value[vlen - 1] = 0;
            value++;
        }
        const mt_opt *o = mt_opts_find(opts, n, key);
        if (!o)
            return mt_errorf(err, MT_EINVAL, "%s:%d: unknown key '%s'%s", source, lineno, key,
                             suggest(opts, n, key, strlen(key), "", hint, sizeof hint));
        if (o->flags & MT_OPT_CLI)
            return mt_errorf(err, MT_EINVAL,
                             "%s:%d: '%s' is a command-line flag only (--%s), not a config key",
                             source, lineno, key, o->name);
        snprintf(where, sizeof where, "%s:%d: %s", source, lineno, o->name);
        mt_status st = set_value(o, value, where, err);
        if (st != MT_OK) return st;
    }
    return MT_OK;
}

mt_status mt_opts_read_ini(const mt_opt *opts, int n, const char *path, mt_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return mt_errorf(err, MT_EIO, "%s: cannot open: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    bool ok = size >= 0 && size < (1 << 20) && fseek(f, 0, SEEK_SET) == 0 &&
              (text = malloc((size_t)size + 1)) && (len = fread(text, 1, (size_t)size, f)) == (size_t)size;
    fclose(f);
    if (!ok) {
        free(text);
        return mt_errorf(err, MT_EIO, "%s: cannot read (a config file is under 1 MiB)", path);
    }
    text[len] = 0;
    mt_status s = mt_opts_parse_ini(opts, n, text, path, err);
    free(text);
    return s;
}

/* A growing string for help and ini text. */
typedef struct {
    char *s;
    size_t len, cap;
} strbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(strbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        MT_ASSERT(k >= 0, "options: formatting failed");
        if (b->s && b->len + (size_t)k < b->cap) {
            b->len += (size_t)k;
            return;
        }
        b->cap = 2 * (b->cap + (size_t)k + 64);
        b->s = realloc(b->s, b->cap);
        MT_ASSERT(b->s, "options: out of memory");
    }
}

char *mt_opts_help(const mt_opt *opts, int n) {
    strbuf b = {0};
    char val[MT_OPT_STR_MAX + 8], flag[96];
    for (int i = 0; i < n; i++) {
        const mt_opt *o = &opts[i];
        const char *meta = o->type == MT_OPT_INT     ? " N"
                           : o->type == MT_OPT_FLOAT ? " X"
                           : o->type == MT_OPT_STR   ? " S"
                                                     : "";
        char choices[256];
        if (o->type == MT_OPT_CHOICE)
            snprintf(flag, sizeof flag, "--%s %s", o->name,
                     mt_enum_choices(o->choices, choices, sizeof choices));
        else snprintf(flag, sizeof flag, "--%s%s", o->name, meta);
        mt_opt_format(o, val, sizeof val);
        if (strlen(flag) > 26) sb_printf(&b, "  %s\n  %-26s %s", flag, "", o->help);
        else sb_printf(&b, "  %-26s %s", flag, o->help);
        if (o->type != MT_OPT_BOOL || strcmp(val, "true") == 0)
            sb_printf(&b, " (default: %s)", *val ? val : "none");
        sb_printf(&b, "\n");
    }
    return b.s;
}

char *mt_opts_to_ini(const mt_opt *opts, int n) {
    strbuf b = {0};
    sb_printf(&b, "%s", ""); /* an empty table still gives a string */
    char val[MT_OPT_STR_MAX + 8];
    for (int i = 0; i < n; i++)
        if (!(opts[i].flags & MT_OPT_CLI))
            sb_printf(&b, "%s = %s\n", opts[i].name, mt_opt_format(&opts[i], val, sizeof val));
    return b.s;
}

int mt_exit_code(mt_status s) { return s == MT_EINVAL || s == MT_EFORMAT ? 2 : 1; }
