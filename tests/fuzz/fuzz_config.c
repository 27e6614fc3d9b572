/* libFuzzer target: the config-file reader (a file's bytes: NUL bytes, byte order marks, quotes,
   comments, keys set twice) and the JSON reader, over a field table with a field of every type
   (int, long, float, double, string, bool, negated bool, enum, command-line only, not a flag, an
   inner table), must accept or reject any input without crashing, leave accepted values in range,
   and save (to_ini, JSON) what reads back as the same values. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/io/fields.h"

typedef struct {
    int n_head;
    bool bias;
} inner;

typedef struct {
    int n_layer, norm, n_vocab;
    long warmup;
    float lr;
    double beta;
    char path[24];
    bool tied, resume;
    inner in;
} options;

static const mt_enum_item NORM_ITEMS[] = {{.name = "ln"},    {.name = "rms"}, {.name = "prms"},
                                          {.name = "bn"},    {.name = "in"},  {.name = "gn"},
                                          {.name = "scale"}, {.name = "none"}};
static const mt_enum NORMS = MT_ENUM("norm", NORM_ITEMS);

static const mt_field INNER[] = {
    MT_FIELD(inner, n_head, INT, "n_head", "heads", .range = "1..64"),
    MT_FIELD(inner, bias, BOOL, "bias", "no biases", .flag = "no_bias"),
};
static const mt_fields INNER_FIELDS = MT_FIELDS_OF(INNER);

#define F(member, TYPE, key, help, ...) MT_FIELD(options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(n_layer, INT, "n_layer", "layers", .range = "1.."),
    F(warmup, INT, "warmup", "warmup", .range = "-1.."),
    F(lr, FLOAT, "lr", "learning rate"),
    F(beta, FLOAT, "beta", "decay", .range = "0..1"),
    F(path, STR, "data", "data file"),
    F(tied, BOOL, "tied", "untie", .flag = "untie"),
    F(norm, ENUM, "norm", "norm", .of = &NORMS),
    F(resume, BOOL, "resume", "flag only", .flags = MT_FIELD_CLI),
    F(n_vocab, INT, "n_vocab", NULL, .flags = MT_FIELD_NO_FLAG),
    F(in, TABLE, "in", NULL, .of = &INNER_FIELDS),
};
#undef F
static const mt_fields TABLE = MT_FIELDS_OF(FIELDS);

static void check_values(const options *o) {
    if (o->norm < 0 || o->norm > 7 || !isfinite(o->lr) || !(o->beta >= 0 && o->beta <= 1) ||
        o->beta != (float)o->beta || o->n_layer < 1 || o->warmup < -1 ||
        strnlen(o->path, sizeof o->path) >= sizeof o->path || o->in.n_head < 1 ||
        o->in.n_head > 64 || o->n_vocab != 256 || o->resume)
        abort();
}

/* The values a config line can hold read back the same, strings included (to_ini quotes one
   with a #, a quote at its start or blanks at its ends). */
static bool same(const options *a, const options *b) {
    return a->n_layer == b->n_layer && a->warmup == b->warmup && a->lr == b->lr &&
           a->beta == b->beta && a->tied == b->tied && a->norm == b->norm &&
           a->resume == b->resume && a->n_vocab == b->n_vocab && a->in.n_head == b->in.n_head &&
           a->in.bias == b->in.bias && strcmp(a->path, b->path) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const options defaults = {.n_layer = 4,
                              .warmup = -1,
                              .lr = 1e-3f,
                              .beta = 0.9f,
                              .path = "data/x.txt",
                              .tied = true,
                              .n_vocab = 256,
                              .in = {.n_head = 4, .bias = true}};
    options o = defaults, back = defaults;
    mt_fieldset set = {&TABLE, &o}, set_back = {&TABLE, &back};
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    mt_err err;
    /* the file's bytes as read: NUL bytes, byte order marks, keys set twice are refused */
    if (mt_fieldset_parse_ini_bytes(&set, 1, (const char *)data, size, "fuzz.ini", NULL, &err) ==
        MT_OK) {
        check_values(&o);
        char *saved = mt_fieldset_to_ini(&set, 1, NULL);
        if (mt_fieldset_parse_ini(&set_back, 1, saved, "saved", NULL, &err) != MT_OK ||
            !same(&o, &back))
            abort(); /* what is saved reads back as the same values */
        free(saved);
    }
    options j = defaults;
    if (mt_fields_from_json(&TABLE, text, &j, &err) == MT_OK) free(mt_fields_to_json(&TABLE, &j));
    free(mt_fieldset_help(&set, 1, NULL, 0));
    free(text);
    return 0;
}
