/* Model configs described by tables of fields: one table per config struct drives its JSON (the
 * checkpoint's "config"), the flags and config-file keys of ./train, and their --help. */
#ifndef MT_MODEL_CONFIG_H
#define MT_MODEL_CONFIG_H

#include <stddef.h>

#include "../io/io.h"
#include "../tensor/base.h"

typedef enum {
    MT_CF_INT,   /* int */
    MT_CF_FLOAT, /* float */
    MT_CF_BOOL,  /* bool */
    MT_CF_ENUM,  /* an int-sized enum, by the names of its mt_enum */
    MT_CF_TABLE, /* a struct inside the config, with a table of its own; its keys stand among the
                    others' in JSON and flags (the block stack) */
} mt_cf_type;

typedef struct mt_cf_table mt_cf_table;

typedef struct {
    const char *key; /* the JSON key; the flag is the key with '-' for '_' unless flag is set */
    mt_cf_type type;
    size_t off;         /* offsetof the field in the config struct */
    const char *help;   /* NULL: not a flag (a field the data sets, such as n_vocab) */
    const char *range;  /* INT and FLOAT flags: the accepted range, as mt_opt's */
    const void *of;     /* ENUM: its mt_enum; TABLE: its mt_cf_table */
    const char *flag;   /* a flag of another name, which negates a BOOL ("untie" for tied) */
} mt_cf_field;

struct mt_cf_table {
    int n;
    const mt_cf_field *f;
};
#define MT_CF_TABLE_OF(fields) {.n = (int)(sizeof fields / sizeof fields[0]), .f = fields}

/* Every field of cfg as one flat JSON object; malloc'd. */
char *mt_cf_to_json(const mt_cf_table *t, const void *cfg);
/* Sets the fields json names (others keep their values); an unknown key, a value of the wrong
   type or an unknown name is an error naming the key and what is accepted. */
mt_status mt_cf_from_json(const mt_cf_table *t, const char *json, void *cfg, mt_err *err);

/* The flags of t's fields that have help, as options whose values lie in cfg: up to cap of them
   into opts, their names (the flags) into names; returns how many there are (more than cap:
   the rest did not fit). Options named like one of opts[0..skip) are left out. */
typedef char mt_cf_name[32];
int mt_cf_options(const mt_cf_table *t, void *cfg, mt_opt *opts, mt_cf_name *names, int skip,
                  int cap);

#endif
