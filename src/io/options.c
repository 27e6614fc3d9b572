/* A program's options (fields.h): the named fields of several structs read from flags and config
 * files, kept as settings to apply again, listed in --help and saved as config lines. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fields.h"
#include "io.h"

/* A named field of a set, with the struct that holds it. */
typedef struct {
    const mt_field *f;
    void *obj;
    char name[64];
} entry;

typedef struct {
    entry *e;
    int n, cap;
} entries;

/* name (len bytes, '_' for '-') is the entry's name */
static bool name_eq(const char *opt, const char *name, size_t len) {
    for (size_t i = 0; i < len; i++) {
        char c = name[i] == '_' ? '-' : name[i];
        if (opt[i] != c) return false;
    }
    return opt[len] == 0;
}

static const entry *find_n(const entries *E, const char *name, size_t len) {
    for (int i = 0; i < E->n; i++)
        if (name_eq(E->e[i].name, name, len)) return &E->e[i];
    return NULL;
}

static void add_fields(entries *E, const mt_fields *t, void *obj) {
    for (int i = 0; i < t->n; i++) {
        const mt_field *f = &t->f[i];
        if (f->type == MT_FIELD_TABLE) {
            add_fields(E, f->of, (char *)obj + f->off);
            continue;
        }
        if (f->flags & MT_FIELD_NO_FLAG) continue;
        entry x = {.f = f, .obj = obj};
        mt_field_name(f, x.name, sizeof x.name);
        if (find_n(E, x.name, strlen(x.name))) continue; /* the first of a name holds it */
        if (E->n == E->cap) {
            E->cap = 2 * E->cap + 32;
            E->e = realloc(E->e, (size_t)E->cap * sizeof *E->e);
            MT_ASSERT(E->e, "options: out of memory");
        }
        E->e[E->n++] = x;
    }
}

/* Every named field of the sets, a name once (its first). */
static entries flatten(const mt_fieldset *sets, int n) {
    entries E = {0};
    for (int i = 0; i < n; i++) add_fields(&E, sets[i].fields, sets[i].obj);
    return E;
}

const mt_field *mt_fieldset_find(const mt_fieldset *sets, int n, const char *name, size_t len,
                                 void **obj) {
    entries E = flatten(sets, n);
    const entry *x = find_n(&E, name, len);
    const mt_field *f = x ? x->f : NULL;
    if (x && obj) *obj = x->obj;
    free(E.e);
    return f;
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

/* How many words (split at '-') opt has besides those of name (len bytes, split at '-' or '_'),
   which must all be words of opt in order; -1 when they are not. */
static int extra_words(const char *name, size_t len, const char *opt) {
    int extra = 0;
    for (size_t i = 0; i < len;) {
        size_t w = 0;
        while (i + w < len && name[i + w] != '-' && name[i + w] != '_') w++;
        for (bool found = false; !found; extra += !found) {
            if (!*opt) return -1;
            size_t ow = strcspn(opt, "-");
            found = ow == w && !strncmp(opt, name + i, w);
            opt += ow + (opt[ow] == '-');
        }
        i += w + 1;
    }
    for (; *opt; extra++) opt += strcspn(opt, "-") + (opt[strcspn(opt, "-")] == '-');
    return extra;
}

/* " (did you mean --x?)" for the name a field's key has ("bias": --no-bias), else the names that
   hold all of its words with the fewest others ("qk-affine": --qk-norm-affine; up to 3), else
   one within 3 edits; "" when none is */
static const char *suggest(const entries *E, const char *name, size_t len, const char *dashes,
                           char *buf, size_t cap) {
    const char *hit[3] = {0};
    int n = 0;
    for (int i = 0; i < E->n && !n; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s", E->e[i].f->key);
        for (char *c = key; *c; c++) *c = *c == '_' ? '-' : *c;
        if (name_eq(key, name, len)) hit[n++] = E->e[i].name;
    }
    for (int i = 0, best = INT_MAX, d, keyed = n; i < E->n && len > 0 && !keyed; i++) {
        if ((d = extra_words(name, len, E->e[i].name)) < 1 || d > best) continue;
        if (d < best) best = d, n = 0;
        if (n < 3) hit[n++] = E->e[i].name;
    }
    for (int i = 0, best = 4, d; i < E->n && !n; i++)
        if ((d = edit_distance(name, len, E->e[i].name)) < best) best = d, hit[0] = E->e[i].name;
    if (!n && hit[0]) n = 1;
    if (!n) return "";
    size_t k = (size_t)snprintf(buf, cap, " (did you mean");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%s%s",
                              i == 0       ? " "
                              : i == n - 1 ? " or "
                                           : ", ",
                              dashes, hit[i]);
    if (k < cap) snprintf(buf + k, cap - k, "?)");
    return buf;
}

/* ---- settings ------------------------------------------------------------------------------- */

void mt_settings_free(mt_settings *s) {
    for (int i = 0; i < s->n; i++) free(s->s[i].name); /* one block: name, value, source */
    free(s->s);
    *s = (mt_settings){0};
}

static void settings_add(mt_settings *s, const char *name, size_t len, const char *value,
                         const char *source, int line) {
    if (!s) return;
    if (s->n == s->cap) {
        s->cap = 2 * s->cap + 16;
        s->s = realloc(s->s, (size_t)s->cap * sizeof *s->s);
        MT_ASSERT(s->s, "options: out of memory");
    }
    size_t lv = strlen(value) + 1, ls = source ? strlen(source) + 1 : 0;
    char *block = malloc(len + 1 + lv + ls);
    MT_ASSERT(block, "options: out of memory");
    memcpy(block, name, len);
    block[len] = 0;
    memcpy(block + len + 1, value, lv);
    if (source) memcpy(block + len + 1 + lv, source, ls);
    s->s[s->n++] = (mt_setting){.name = block,
                                .value = block + len + 1,
                                .source = source ? block + len + 1 + lv : NULL,
                                .line = line};
}

/* One flag (--name, its value) to the entries: the messages of an unknown or bad flag. */
static mt_status apply_flag(const entries *E, const char *name, size_t len, const char *value,
                            mt_err *err) {
    char where[160], hint[160];
    const entry *x = find_n(E, name, len);
    if (!x)
        return mt_errorf(err, MT_EINVAL, "unknown flag --%.*s%s; --help lists them", (int)len, name,
                         suggest(E, name, len, "--", hint, sizeof hint));
    snprintf(where, sizeof where, "--%s", x->name);
    return mt_field_parse(x->f, x->obj, value, where, err);
}

/* One config line (key = value, line lineno of source) to the entries; seen (NULL: not
   checked): the line that set each entry, 0 for none yet. */
static mt_status apply_line(const entries *E, const char *key, const char *value,
                            const char *source, int lineno, int *seen, mt_err *err) {
    char where[MT_FIELD_STR_MAX + 64], hint[160];
    const entry *x = find_n(E, key, strlen(key));
    if (!x)
        return mt_errorf(err, MT_EINVAL, "%s:%d: unknown key '%s'%s", source, lineno, key,
                         suggest(E, key, strlen(key), "", hint, sizeof hint));
    if (seen && seen[x - E->e])
        return mt_errorf(err, MT_EINVAL, "%s:%d: '%s' is set on line %d already: keep one", source,
                         lineno, key, seen[x - E->e]);
    if (seen) seen[x - E->e] = lineno;
    if (x->f->flags & MT_FIELD_CLI)
        return mt_errorf(err, MT_EINVAL,
                         "%s:%d: '%s' is a command-line flag only (--%s), not a config key", source,
                         lineno, key, x->name);
    snprintf(where, sizeof where, "%s:%d: %s", source, lineno, x->name);
    return mt_field_parse(x->f, x->obj, value, where, err);
}

mt_status mt_settings_apply(const mt_settings *s, const mt_fieldset *sets, int n, mt_err *err) {
    entries E = flatten(sets, n);
    mt_status st = MT_OK;
    for (int i = 0; i < s->n && st == MT_OK; i++) {
        const mt_setting *x = &s->s[i];
        st = x->source ? apply_line(&E, x->name, x->value, x->source, x->line, NULL, err)
                       : apply_flag(&E, x->name, strlen(x->name), x->value, err);
    }
    free(E.e);
    return st;
}

bool mt_setting_changes(const mt_setting *s, const mt_fieldset *sets, int n) {
    entries E = flatten(sets, n);
    const entry *x = find_n(&E, s->name, strlen(s->name));
    bool changes = true;
    char before[MT_FIELD_STR_MAX + 8], after[MT_FIELD_STR_MAX + 8], kept[MT_FIELD_STR_MAX];
    mt_err e;
    if (x && x->f->size <= sizeof kept) { /* the value applied and put back */
        char *at = (char *)x->obj + x->f->off;
        mt_field_format(x->f, x->obj, before, sizeof before);
        memcpy(kept, at, x->f->size);
        changes = mt_field_parse(x->f, x->obj, s->value, "", &e) != MT_OK ||
                  strcmp(before, mt_field_format(x->f, x->obj, after, sizeof after)) != 0;
        memcpy(at, kept, x->f->size);
    }
    free(E.e);
    return changes;
}

mt_status mt_settings_check_read(const mt_settings *s, const mt_fieldset *sets, int n,
                                 mt_err *err) {
    entries E = flatten(sets, n);
    mt_status st = MT_OK;
    for (int i = 0; i < s->n && st == MT_OK; i++) {
        const mt_setting *x = &s->s[i];
        const entry *e = find_n(&E, x->name, strlen(x->name));
        if (!e || !e->f->read || e->f->read(e->obj) || (e->f->derive && !*x->value)) continue;
        char what[2 * MT_FIELD_STR_MAX + 64];
        if (x->source)
            snprintf(what, sizeof what, "%s:%d: %s = %s", x->source, x->line, e->name, x->value);
        else snprintf(what, sizeof what, "--%s %s", e->name, x->value);
        st = mt_field_unread(e->f, what, err);
    }
    free(E.e);
    return st;
}

/* ---- flags and config files ----------------------------------------------------------------- */

/* argv[*i] to the entries; *i moves past its value. */
static mt_status parse_arg(const entries *E, int argc, char **argv, int *i, mt_settings *out,
                           mt_err *err) {
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0 || !a[2])
        return mt_errorf(err, MT_EINVAL, "unexpected argument '%s': flags start with --", a);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const entry *x = find_n(E, name, len);
    const char *value = eq ? eq + 1 : NULL;
    if (x && !value && x->f->type == MT_FIELD_BOOL) value = "true";
    if (x && !value && *i + 1 >= argc) {
        char choices[256] = "";
        if (x->f->type == MT_FIELD_ENUM) mt_enum_choices(x->f->of, choices, sizeof choices);
        return mt_errorf(err, MT_EINVAL, "--%s needs a value%s%s", x->name,
                         *choices ? ": one of " : "", choices);
    }
    if (x && !value) value = argv[++*i];
    mt_status s = apply_flag(E, name, len, value ? value : "", err);
    if (s == MT_OK) settings_add(out, name, len, value, NULL, 0);
    return s;
}

mt_status mt_fieldset_parse_args(const mt_fieldset *sets, int n, int argc, char **argv,
                                 mt_settings *out, mt_err *err) {
    entries E = flatten(sets, n);
    mt_status s = MT_OK;
    for (int i = 1; i < argc && s == MT_OK; i++) s = parse_arg(&E, argc, argv, &i, out, err);
    free(E.e);
    return s;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) *--e = 0;
    return s;
}

/* The value after '=' (blanks trimmed, a comment cut): "quoted", taken as it is between the
   first and the last quote of the line (after which only a comment may follow), or plain, up to
   a comment: a # at its start or after a blank (so a path may hold one: d#7.txt). NULL: a
   quote that does not close. */
static char *line_value(char *v) {
    v = trim(v);
    if (*v == '"') {
        char *q = strrchr(v + 1, '"');
        if (!q) return NULL;
        char *rest = trim(q + 1);
        if (*rest && *rest != '#') return NULL;
        *q = 0;
        return v + 1;
    }
    for (char *c = v; *c; c++)
        if (*c == '#' && (c == v || c[-1] == ' ' || c[-1] == '\t')) {
            *c = 0;
            break;
        }
    return trim(v);
}

/* One line of a config file to the entries; blank and comment lines do nothing. saved: a
   checkpoint's options (a retired value reads as its replacement). */
static mt_status parse_line(const entries *E, char *line, const char *source, int lineno, int *seen,
                            bool saved, mt_settings *out, mt_err *err) {
    char *s = trim(line);
    if (!*s || *s == '#') return MT_OK;
    if (*s == '[')
        return mt_errorf(err, MT_EINVAL,
                         "%s:%d: '%s': config files have no sections, only key = value lines",
                         source, lineno, s);
    char *eq = strchr(s, '=');
    if (!eq)
        return mt_errorf(err, MT_EINVAL, "%s:%d: '%s': expected key = value", source, lineno, s);
    *eq = 0;
    char *key = trim(s), *value = line_value(eq + 1);
    if (!value)
        return mt_errorf(err, MT_EINVAL,
                         "%s:%d: %s: a value that starts with a quote ends with one (then only a "
                         "# comment may follow)",
                         source, lineno, key);
    const entry *x = find_n(E, key, strlen(key));
    const char *v = saved && x ? mt_field_saved_value(x->f, value) : value;
    mt_status st = apply_line(E, key, v, source, lineno, seen, err);
    if (st == MT_OK) settings_add(out, key, strlen(key), v, source, lineno);
    return st;
}

static mt_status parse_text(const mt_fieldset *sets, int n, const char *text, const char *source,
                            bool saved, mt_settings *out, mt_err *err) {
    char line[MT_FIELD_STR_MAX + 256];
    int lineno = 0;
    entries E = flatten(sets, n);
    int *seen = calloc((size_t)E.n + 1, sizeof *seen);
    mt_status st = seen ? MT_OK : mt_errorf(err, MT_ENOMEM, "%s: out of memory", source);
    for (const char *p = text; *p && st == MT_OK;) {
        size_t len = strcspn(p, "\n");
        lineno++;
        if (len >= sizeof line) {
            st = mt_errorf(err, MT_EINVAL, "%s:%d: the line is too long", source, lineno);
            break;
        }
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (p[len] == '\n');
        st = parse_line(&E, line, source, lineno, seen, saved, out, err);
    }
    free(seen);
    free(E.e);
    return st;
}

mt_status mt_fieldset_parse_ini(const mt_fieldset *sets, int n, const char *text,
                                const char *source, mt_settings *out, mt_err *err) {
    return parse_text(sets, n, text, source, false, out, err);
}

mt_status mt_fieldset_parse_saved(const mt_fieldset *sets, int n, const char *text,
                                  const char *source, mt_settings *out, mt_err *err) {
    return parse_text(sets, n, text, source, true, out, err);
}

mt_status mt_fieldset_parse_ini_bytes(const mt_fieldset *sets, int n, const char *bytes, size_t len,
                                      const char *source, mt_settings *out, mt_err *err) {
    const unsigned char *u = (const unsigned char *)bytes;
    if (len >= 2 && ((u[0] == 0xfe && u[1] == 0xff) || (u[0] == 0xff && u[1] == 0xfe)))
        return mt_errorf(err, MT_EINVAL,
                         "%s: the file is UTF-16 (it starts with a byte order mark): a config "
                         "file is UTF-8 text; save it as UTF-8",
                         source);
    size_t mark = len >= 3 && u[0] == 0xef && u[1] == 0xbb && u[2] == 0xbf ? 3 : 0;
    bytes += mark, len -= mark; /* UTF-8's byte order mark: skipped */
    const char *nul = memchr(bytes, 0, len);
    if (nul)
        return mt_errorf(err, MT_EINVAL,
                         "%s holds a NUL byte at offset %zu: a config file is UTF-8 text (UTF-16 "
                         "without its mark?)",
                         source, (size_t)(nul - bytes) + mark);
    char *text = malloc(len + 1);
    if (!text) return mt_errorf(err, MT_ENOMEM, "%s: out of memory", source);
    memcpy(text, bytes, len);
    text[len] = 0;
    mt_status s = mt_fieldset_parse_ini(sets, n, text, source, out, err);
    free(text);
    return s;
}

mt_status mt_fieldset_read_ini(const mt_fieldset *sets, int n, const char *path, mt_settings *out,
                               mt_err *err) {
    FILE *f;
    mt_status s = mt_file_open("--config", path, "rb", &f, err);
    if (s != MT_OK) return s;
    char *text = NULL;
    size_t len = 0;
    off_t size = -1;
    if (fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
    bool ok = size >= 0 && size < (1 << 20) && fseeko(f, 0, SEEK_SET) == 0 &&
              (text = malloc((size_t)size + 1)) &&
              (len = fread(text, 1, (size_t)size, f)) == (size_t)size;
    fclose(f);
    s = ok ? mt_fieldset_parse_ini_bytes(sets, n, text, len, path, out, err)
           : mt_errorf(err, MT_EIO, "%s: cannot read (a config file is under 1 MiB)", path);
    free(text);
    return s;
}

/* ---- help and saved text -------------------------------------------------------------------- */

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

static void help_line(strbuf *b, const entry *x) {
    static const char *META[] = {[MT_FIELD_INT] = " N",
                                 [MT_FIELD_FLOAT] = " X",
                                 [MT_FIELD_STR] = " S",
                                 [MT_FIELD_BOOL] = ""};
    char val[MT_FIELD_STR_MAX + 8], flag[96], choices[256];
    const mt_field *f = x->f;
    if (f->type == MT_FIELD_ENUM)
        snprintf(flag, sizeof flag, "--%s %s", x->name,
                 mt_enum_choices(f->of, choices, sizeof choices));
    else snprintf(flag, sizeof flag, "--%s%s", x->name, META[f->type]);
    mt_field_format(f, x->obj, val, sizeof val);
    if (f->derive) snprintf(val, sizeof val, "%s", f->derived);
    if (strlen(flag) > 26) sb_printf(b, "  %s\n  %-26s %s", flag, "", f->help);
    else sb_printf(b, "  %-26s %s", flag, f->help);
    if (f->type != MT_FIELD_BOOL || strcmp(val, "true") == 0)
        sb_printf(b, " (default: %s)", *val ? val : "none");
    sb_printf(b, "\n");
}

char *mt_fieldset_help(const mt_fieldset *sets, int n, const mt_fieldset *skip, int n_skip) {
    strbuf b = {0};
    sb_printf(&b, "%s", ""); /* nothing to list still gives a string */
    entries E = flatten(sets, n), S = flatten(skip, n_skip);
    for (int i = 0; i < E.n; i++)
        if (!find_n(&S, E.e[i].name, strlen(E.e[i].name))) help_line(&b, &E.e[i]);
    free(E.e);
    free(S.e);
    return b.s;
}

/* Whether given (NULL: all values) gives x's field a value: the last setting that names it. */
static bool gives(const mt_settings *given, const entry *x) {
    if (!given) return true;
    const char *v = NULL;
    for (int i = 0; i < given->n; i++)
        if (name_eq(x->name, given->s[i].name, strlen(given->s[i].name))) v = given->s[i].value;
    return v && *v;
}

void mt_fieldset_derive(const mt_fieldset *sets, int n, const mt_settings *given) {
    entries E = flatten(sets, n);
    for (int i = 0; i < E.n; i++)
        if (E.e[i].f->derive && !gives(given, &E.e[i])) E.e[i].f->derive(E.e[i].obj);
    free(E.e);
}

char *mt_fieldset_to_ini(const mt_fieldset *sets, int n, const mt_settings *given) {
    strbuf b = {0};
    sb_printf(&b, "%s", ""); /* an empty table still gives a string */
    char val[MT_FIELD_STR_MAX + 8];
    entries E = flatten(sets, n);
    for (int i = 0; i < E.n; i++)
        if (!(E.e[i].f->flags & MT_FIELD_CLI) && (!E.e[i].f->derive || gives(given, &E.e[i]))) {
            const char *v = mt_field_format(E.e[i].f, E.e[i].obj, val, sizeof val);
            size_t k = strlen(v);
            bool quote = strchr(v, '#') ||
                         (k && (strchr(" \t\"", v[0]) || strchr(" \t\r", v[k - 1])));
            sb_printf(&b, quote ? "%s = \"%s\"\n" : "%s = %s\n", E.e[i].name, v);
        }
    free(E.e);
    return b.s;
}
