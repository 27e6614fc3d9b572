/* Field tables: one table of {key, type, offset, help, range, ...} per config struct gives its
 * flags (--key), its config-file lines (key = value), its JSON (a checkpoint's "config"), its
 * --help, the text a checkpoint saves (to_ini) and the range checks of its values.
 *
 * A flag is --name VALUE or --name=VALUE (a bool: --name alone, or --name=true|false); a config
 * file has lines "name = value" with '#' comments; in both, '_' may stand for '-'
 * (n_layer = n-layer). [sections] are rejected: mt's config files are flat. The name of a field
 * is its key with '-' for '_' ("n_layer": --n-layer), or its flag for a negated bool ("tied":
 * --untie). JSON uses the keys ("n_layer", "tied"). */
#ifndef MT_FIELDS_H
#define MT_FIELDS_H

#include <stddef.h>

#include "../tensor/base.h"

typedef enum {
    MT_FIELD_INT,   /* int, or a long holding an int */
    MT_FIELD_FLOAT, /* float, finite; or a double holding a float: read at float precision
                       (strtof), printed as that float, so a double field takes the same bits a
                       float flag would */
    MT_FIELD_BOOL,  /* bool */
    MT_FIELD_STR,   /* char[size] */
    MT_FIELD_ENUM,  /* an int-sized enum, by the names of its mt_enum (.of) */
    MT_FIELD_TABLE, /* a struct inside the struct, with a table of its own (.of); its fields
                       stand among the others' in flags, files and JSON (the block stack) */
} mt_field_type;

enum {
    MT_FIELD_CLI = 1u,      /* a command-line flag only: no config key, not saved, not in JSON */
    MT_FIELD_NO_FLAG = 2u,  /* set by the program (n_vocab: by the data): JSON only */
    MT_FIELD_SET_READ = 4u, /* with .read: refused set (not at its default) where not read, by
                               its component's validation (mt_fields_check_unread), too */
};

/* A value an older build saved that this one names otherwise (a retired enum name): saved data
   (a checkpoint's config JSON, its options through mt_fieldset_parse_saved) reads it as now; a
   flag or config line giving it is refused with why. */
typedef struct {
    const char *was, *now, *why;
} mt_field_retired;

/* The strings of the programs' options (paths, prompts): char[MT_FIELD_STR_MAX]. */
#define MT_FIELD_STR_MAX 512

typedef struct {
    const char *key; /* JSON key and config key: "n_layer" (the flag --n-layer) */
    mt_field_type type;
    size_t off, size; /* offsetof and sizeof the member */
    const char *help;
    const char *range; /* INT, FLOAT: the accepted "lo..hi" or "lo.." (no upper bound; "(lo..":
                           above lo), or NULL: any value; flags and files only (JSON is checked
                           by its reader) */
    const void *of;    /* ENUM: its mt_enum; TABLE: its mt_fields */
    const char *flag;  /* BOOL: the name of a flag that sets the opposite ("untie" for tied) */
    unsigned flags;    /* MT_FIELD_CLI, MT_FIELD_NO_FLAG, MT_FIELD_SET_READ */
    /* Whether the run reads the field, on the resolved values of the struct that holds it (NULL:
       always); read_by names what reads it ("--schedule wsd"), instead (or NULL) what the others
       read in its place. A flag or config key given for a field the run does not read is refused
       (mt_settings_check_read). */
    bool (*read)(const void *obj);
    const char *read_by, *instead;
    const mt_field_retired *retired; /* ended by {0}; NULL: none */
    /* A default derived from the other values of obj (the struct that holds it) where no setting
       gives the field one (mt_fieldset_derive); derived says what it is, for --help ("lr / 10").
       An empty value ("--warmup=", "warmup =") gives none: the derivation again. A derived value
       is not saved (mt_fieldset_to_ini): a resumed run derives it anew. */
    void (*derive)(void *obj);
    const char *derived;
} mt_field;

typedef struct {
    int n;
    const mt_field *f;
} mt_fields;
#define MT_FIELDS_OF(fields)                                                                       \
    { (int)(sizeof fields / sizeof fields[0]), fields }

/* A field of struct T: MT_FIELD(mt_stack_config, n_layer, INT, "n_layer", "blocks",
   .range = "1.."). The other members (.range, .of, .flag, .flags) by designator. */
#define MT_FIELD(T, member, TYPE, key_, help_, ...)                                                \
    {                                                                                              \
        .key = key_, .type = MT_FIELD_##TYPE, .off = offsetof(T, member),                          \
        .size = sizeof(((T *)0)->member), .help = help_, __VA_ARGS__                               \
    }

/* ---- one struct --------------------------------------------------------------------------- */
/* Every field of obj (but MT_FIELD_CLI ones) as one flat JSON object; malloc'd. */
char *mt_fields_to_json(const mt_fields *t, const void *obj);
/* Sets the fields json names (others keep their values); an unknown key, a value of the wrong
   type or an unknown name is an error naming the key and what is accepted. */
mt_status mt_fields_from_json(const mt_fields *t, const char *json, void *obj, mt_err *err);
/* The name of f: its key with '-' for '_' ("n_layer": "n-layer"), or a negated bool's flag. */
const char *mt_field_name(const mt_field *f, char *buf, size_t len);
/* The error of an option what ("--decay-frac 0.3", "f.ini:2: decay-frac = 0.3") given for f,
   which the run does not read: names what reads it (f->read_by). */
mt_status mt_field_unread(const mt_field *f, const char *what, mt_err *err);
/* The first MT_FIELD_SET_READ field of t (not its tables') that obj does not read
   (mt_field.read) at a value other than unset's (the struct's defaults) is that error: a
   component's check of its own options in a config that did not come from flags (a
   checkpoint's, a program's). */
mt_status mt_fields_check_unread(const mt_fields *t, const void *obj, const void *unset,
                                 mt_err *err);
/* The value of field f of obj (the struct that holds it) as text ("4", "rms", "true") into buf;
   a negated bool as its flag reads ("untie": "false" while tied). */
const char *mt_field_format(const mt_field *f, const void *obj, char *buf, size_t len);
/* Applies the value text (as a flag or a config line would) to field f of obj; where names it in
   messages ("--lr", "f.ini:3: lr"). A retired value is refused with its reason. */
mt_status mt_field_parse(const mt_field *f, void *obj, const char *text, const char *where,
                         mt_err *err);
/* text as saved data reads it: a retired value's replacement, else text. */
const char *mt_field_saved_value(const mt_field *f, const char *text);

/* ---- a program's options: several structs, each with its table --------------------------------
 * A name found in two of them is the first's (a model's copy of the stack's flags is not listed
 * twice). */
typedef struct {
    const mt_fields *fields;
    void *obj;
} mt_fieldset;

/* The field named name (the first len bytes; '_' for '-'), in *obj the struct that holds it;
   NULL when none (NO_FLAG fields have no name). */
const mt_field *mt_fieldset_find(const mt_fieldset *sets, int n, const char *name, size_t len,
                                 void **obj);

/* Settings read from flags and config files, in order, each with where it came from: the
   layering of a program's options applies them to the sets it settles on (mt_settings_apply). */
typedef struct {
    char *name, *value;
    char *source; /* the file, or NULL: a flag */
    int line;
} mt_setting;
typedef struct {
    mt_setting *s;
    int n, cap;
} mt_settings;
void mt_settings_free(mt_settings *s);

/* Applies argv[1..argc-1], each flag as it comes, to the sets, and appends each to out (NULL:
   none kept). An unknown flag, a missing, malformed or out-of-range value, or a positional
   argument is an error that names it (and the nearest known flag). */
mt_status mt_fieldset_parse_args(const mt_fieldset *sets, int n, int argc, char **argv,
                                 mt_settings *out, mt_err *err);
/* Applies the lines of text; source names it in messages ("configs/tiny.ini:3: ..."). A
   MT_FIELD_CLI key is refused. */
mt_status mt_fieldset_parse_ini(const mt_fieldset *sets, int n, const char *text,
                                const char *source, mt_settings *out, mt_err *err);
/* The same for the options a checkpoint saved: a retired value reads as its replacement (which
   out keeps). */
mt_status mt_fieldset_parse_saved(const mt_fieldset *sets, int n, const char *text,
                                  const char *source, mt_settings *out, mt_err *err);
/* The same from a file's bytes: UTF-8 (its byte order mark skipped); UTF-16 and NUL bytes are
   refused; a key set twice is refused naming both lines. */
mt_status mt_fieldset_parse_ini_bytes(const mt_fieldset *sets, int n, const char *bytes, size_t len,
                                      const char *source, mt_settings *out, mt_err *err);
mt_status mt_fieldset_read_ini(const mt_fieldset *sets, int n, const char *path, mt_settings *out,
                               mt_err *err);
/* Applies settings read before to (other) sets, with the messages the reading would give. */
mt_status mt_settings_apply(const mt_settings *s, const mt_fieldset *sets, int n, mt_err *err);
/* Whether s would change the value of its field in sets (a name it does not know: true). */
bool mt_setting_changes(const mt_setting *s, const mt_fieldset *sets, int n);
/* The first setting of s whose field its holder in sets (the resolved values) does not read
   (mt_field.read) is an error naming it and what reads it; an empty value of a derived field
   asks for nothing and is never refused. */
mt_status mt_settings_check_read(const mt_settings *s, const mt_fieldset *sets, int n, mt_err *err);

/* "  --name VALUE    help (default: x)" for every named field, its default the value in the set's
   struct, but those named in skip[0..n_skip); malloc'd. */
char *mt_fieldset_help(const mt_fieldset *sets, int n, const mt_fieldset *skip, int n_skip);
/* The current values of every named field but MT_FIELD_CLI ones, as config lines; malloc'd.
   given NULL: every derived field too; else a derived field only where given (in order: the
   last setting that names it) gives it a value. */
char *mt_fieldset_to_ini(const mt_fieldset *sets, int n, const mt_settings *given);
/* Each derived field (mt_field.derive) to which given (as above) gives no value is derived. */
void mt_fieldset_derive(const mt_fieldset *sets, int n, const mt_settings *given);

#endif
