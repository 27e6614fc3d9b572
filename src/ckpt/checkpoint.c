/* Checkpoints of any model: the parameter table plus the model type, its config, what it reads
   inputs with, the step, the RNG states and the options (ckpt.h), and a model started from
   one's weights. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/fields.h"
#include "ckpt.h"

/* The metadata "step" and "rng" of a state. */
static void format_state(const mt_ckpt_state *state, char step[32], char rng[8 * 17 + 1]) {
    snprintf(step, 32, "%ld", state->step);
    const uint64_t *a = state->sampler.s, *b = state->dropout.s;
    snprintf(rng, 8 * 17 + 1,
             "%016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64
             " %016" PRIx64 " %016" PRIx64 " %016" PRIx64,
             a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
}

mt_status mt_ckpt_save(const char *path, const mt_model *m, const mt_ckpt_state *state,
                       const char *options, mt_err *err) {
    char step[32], rng[8 * 17 + 1];
    format_state(state, step, rng);
    char *config = mt_model_config_json(m), *meta = m->type->meta_to_json(m);
    char lora[256];
    const char *keys[] = {"model", "config", m->type->meta_key, "step", "rng", "options", "lora"};
    const char *vals[] = {m->type->name, config, meta, step, rng, options ? options : "", lora};
    int n_meta = mt_ckpt_lora_describe(m->P, lora, sizeof lora) ? 7 : 6;
    mt_status s = mt_ckpt_save_params(path, m->P, n_meta, keys, vals, err);
    free(config);
    free(meta);
    return s;
}

static mt_status parse_state(const mt_safetensors *st, const char *path, mt_ckpt_state *state,
                             mt_err *err) {
    const char *step = mt_st_meta(st, "step"), *rng = mt_st_meta(st, "rng");
    uint64_t *a = state->sampler.s, *b = state->dropout.s;
    char *end;
    if (!step || !rng || (state->step = strtol(step, &end, 10)) < 0 || *end ||
        sscanf(rng,
               "%" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64
               " %" SCNx64,
               &a[0], &a[1], &a[2], &a[3], &b[0], &b[1], &b[2], &b[3]) != 8)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: the metadata 'step' and 'rng' of a training checkpoint are missing "
                         "or malformed",
                         path);
    return MT_OK;
}

/* Allocates P once its table is known to match the file's tensors: a config claiming a huge
   model is refused before any allocation (P's size is then bounded by the file's). */
static mt_status alloc_checked(const mt_safetensors *st, const char *path, mt_params *P,
                               mt_err *err) {
    mt_status s = mt_ckpt_check_params(st, path, P, err);
    return s == MT_OK ? mt_params_alloc(P, err) : s;
}

/* n_layer is bounded before the table is built: that takes time and memory in n_layer. */
static mt_status check_layers(const mt_safetensors *st, const char *path, int n_layer,
                              mt_err *err) {
    if (n_layer <= st->n) return MT_OK; /* every block holds several tensors */
    return mt_errorf(err, MT_EFORMAT, "%s: the config has n_layer %d, the file only %d tensors",
                     path, n_layer, st->n);
}

/* What every checkpoint loads after its model is built: the weights, the state, the options. */
static mt_status load_common(const mt_safetensors *st, const char *path, mt_params *P,
                             mt_ckpt_state *state, char **options, mt_err *err) {
    mt_status s = mt_ckpt_load_params(st, path, P, err);
    if (s == MT_OK && state) s = parse_state(st, path, state, err);
    if (s == MT_OK && options) {
        const char *o = mt_st_meta(st, "options");
        if (!(*options = strdup(o ? o : "")))
            s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for the options", path);
    }
    return s;
}

mt_status mt_ckpt_load(const char *path, mt_model **m, mt_ckpt_state *state, char **options,
                       mt_err *err) {
    *m = NULL;
    if (options) *options = NULL;
    mt_safetensors st;
    mt_status s = mt_st_load(path, &st, err);
    if (s != MT_OK) return s;
    s = mt_ckpt_parse(&st, path, m, state, options, err);
    mt_st_free(&st);
    return s;
}

/* The model type, config (malloc'd) and meta JSON (in st) of a checkpoint. */
static mt_status file_model(const mt_safetensors *st, const char *path, const mt_model_type **type,
                            void **cfg, const char **meta, mt_err *err) {
    /* files from before models were named hold the first registered type */
    const char *name = mt_st_meta(st, "model"), *config = mt_st_meta(st, "config");
    mt_err e;
    *type = mt_model_types[0];
    *cfg = NULL;
    if (name && mt_model_type_find(name, type, &e) != MT_OK)
        return mt_errorf(err, MT_EFORMAT, "%s: %s", path, e.msg);
    if (!config || !(*meta = mt_st_meta(st, (*type)->meta_key)))
        return mt_errorf(err, MT_EFORMAT,
                         "%s: not an mt checkpoint of a %s model (no 'config' and '%s' in "
                         "__metadata__)",
                         path, (*type)->name, (*type)->meta_key);
    if (!(*cfg = malloc((*type)->config_size)))
        return mt_errorf(err, MT_ENOMEM, "out of memory for a config");
    if (mt_model_config_from_json(*type, config, *cfg, &e) != MT_OK) {
        free(*cfg);
        *cfg = NULL;
        return mt_errorf(err, MT_EFORMAT, "%s: %s", path, e.msg);
    }
    return MT_OK;
}

mt_status mt_ckpt_parse(const mt_safetensors *st, const char *path, mt_model **m,
                        mt_ckpt_state *state, char **options, mt_err *err) {
    *m = NULL;
    if (options) *options = NULL;
    const mt_model_type *type;
    void *cfg;
    const char *meta;
    mt_err e;
    mt_status s = file_model(st, path, &type, &cfg, &meta, err);
    if (s != MT_OK) return s;
    s = check_layers(st, path, mt_config_stack(cfg)->n_layer, err);
    if (s == MT_OK) s = mt_model_table(m, type, cfg, err);
    free(cfg);
    if (s == MT_OK && (s = type->meta_from_json(*m, meta, &e)) != MT_OK)
        s = mt_errorf(err, MT_EFORMAT, "%s: %s", path, e.msg);
    const char *lora = mt_st_meta(st, "lora");
    if (s == MT_OK && lora) s = mt_ckpt_lora_read((*m)->P, lora, path, err);
    if (s == MT_OK && (s = alloc_checked(st, path, (*m)->P, err)) == MT_OK)
        s = load_common(st, path, (*m)->P, state, options, err);
    if (s != MT_OK) {
        mt_model_free(*m);
        *m = NULL;
    }
    return s;
}

/* ---- a fresh model from a checkpoint's weights ---------------------------------------------- */
/* Whether the entry name of P fits the file (its name there as spec maps it): both lack it, or
   both hold it with one shape. */
static bool fits(const mt_params *P, const mt_safetensors *st, const mt_load_spec *spec,
                 const char *name) {
    char buf[256];
    int i = mt_params_find(P, name);
    const mt_st_entry *e = mt_st_find(st, mt_load_file_name(spec, name, buf, sizeof buf));
    if (i < 0 || !e) return i < 0 && !e;
    bool same = e->ndim == P->p[i].ndim;
    for (int d = 0; same && d < e->ndim; d++) same = e->shape[d] == P->p[i].shape[d];
    return same;
}

/* The name a field of a config goes by (a negated bool's flag, "untie"), its value in cfg (the
   config that holds it at base) as that name reads, and the flag that sets that value. */
static void field_text(const mt_field *fd, const char *cfg, size_t base, const char **name,
                       char *value, size_t len, char *flag, size_t flag_len) {
    *name = fd->type == MT_FIELD_BOOL && fd->flag ? fd->flag : fd->key;
    mt_field_format(fd, cfg + base, value, len);
    bool on = !strcmp(value, "true"), empty = fd->type == MT_FIELD_STR && !*value;
    if (empty) snprintf(value, len, "\"\""); /* a string option not given: drop its flag */
    char dashed[64];
    snprintf(dashed, sizeof dashed, "%s", *name);
    for (char *c = dashed; *c; c++) *c = *c == '_' ? '-' : *c;
    if (fd->flags & MT_FIELD_NO_FLAG) snprintf(flag, flag_len, "a value the data decides");
    else if (fd->type == MT_FIELD_BOOL || empty)
        snprintf(flag, flag_len, "%s--%s", on ? "" : "drop ", dashed);
    else snprintf(flag, flag_len, "--%s %s", dashed, value);
}

/* fn(field, base, arg) for each field of t (at base in the configs) whose values in have and
   want differ, until one returns true (then true). */
typedef bool (*diff_fn)(const mt_field *fd, size_t base, void *arg);
static bool each_diff(const mt_fields *t, size_t base, const char *have, const char *want,
                      diff_fn fn, void *arg) {
    for (int i = 0; i < t->n; i++) {
        const mt_field *fd = &t->f[i];
        size_t off = base + fd->off;
        if (fd->type == MT_FIELD_TABLE
                ? each_diff(fd->of, off, have, want, fn, arg)
                : memcmp(have + off, want + off, fd->size) && fn(fd, base, arg))
            return true;
    }
    return false;
}

typedef struct {
    const mt_model *m;
    const char *file_cfg;
    const mt_safetensors *st;
    const mt_load_spec *spec;
    const char *name; /* the entry that failed */
    void *trial;      /* (config_size) */
    char *out;        /* what each_diff's function writes */
    size_t len;
} diff_search;

/* Whether the file's value of fd alone makes the failed entry fit (then the hint in out). */
static bool fit_hint(const mt_field *fd, size_t base, void *arg) {
    diff_search *f = arg;
    const mt_model_type *type = f->m->type;
    memcpy(f->trial, f->m->cfg, type->config_size);
    memcpy((char *)f->trial + base + fd->off, f->file_cfg + base + fd->off, fd->size);
    mt_err e;
    mt_model *m = NULL;
    bool ok = type->config_validate(f->trial, &e) == MT_OK &&
              mt_model_table(&m, type, f->trial, &e) == MT_OK &&
              fits(m->P, f->st, f->spec, f->name);
    mt_model_free(m);
    if (!ok) return false;
    const char *name;
    char a[64], b[64], flag[96], unused[96];
    field_text(fd, f->file_cfg, base, &name, a, sizeof a, flag, sizeof flag);
    field_text(fd, f->m->cfg, base, &name, b, sizeof b, unused, sizeof unused);
    snprintf(f->out, f->len, ": %s is %s in the file, %s here (%s)", name, a, b, flag);
    return true;
}

/* ", n_head 2 (here 4)" appended to out. */
static bool list_diff(const mt_field *fd, size_t base, void *arg) {
    diff_search *f = arg;
    const char *name;
    char a[64], b[64], flag[96];
    field_text(fd, f->file_cfg, base, &name, a, sizeof a, flag, sizeof flag);
    field_text(fd, f->m->cfg, base, &name, b, sizeof b, flag, sizeof flag);
    size_t o = strlen(f->out);
    snprintf(f->out + o, f->len - o, "%s%s %s (here %s)", o ? ", " : "", name, a, b);
    return false;
}

/* The message of a failed load with, where one config value of the file's makes the failed
   entry fit, that value and its flag. */
static mt_status explain(const mt_safetensors *st, const mt_load_spec *spec, const char *path,
                         const mt_model *m, const void *file_cfg, const char *name, mt_err *err) {
    char hint[300] = "", msg[sizeof err->msg];
    diff_search f = {.m = m,
                     .file_cfg = file_cfg,
                     .st = st,
                     .spec = spec,
                     .name = name,
                     .trial = malloc(m->type->config_size),
                     .out = hint,
                     .len = sizeof hint};
    snprintf(msg, sizeof msg, "%s", err->msg);
    if (!f.trial || !each_diff(m->type->fields, 0, m->cfg, file_cfg, fit_hint, &f))
        snprintf(hint, sizeof hint,
                 " (no one value of the file's config makes it fit: ./infer --info %s shows it)",
                 path);
    free(f.trial);
    return mt_errorf(err, MT_EINVAL, "%s%s; or --init-skip '%s' leaves it at its initialisation",
                     msg, hint, name);
}

/* The file's model is of m's type and reads its inputs as m does. */
static mt_status same_kind(const mt_model *m, const mt_model_type *type, const char *meta,
                           const char *path, mt_err *err) {
    if (type != m->type)
        return mt_errorf(err, MT_EINVAL, "%s holds a %s model, this run builds a %s (--model %s)",
                         path, type->name, m->type->name, type->name);
    char *mine = type->meta_to_json(m), diff[256];
    bool same = mt_json_same(meta, mine, diff, sizeof diff);
    free(mine);
    if (same) return MT_OK;
    return mt_errorf(err, MT_EINVAL,
                     "%s: the file's %s differs from this run's (%s): its weights read inputs "
                     "through the file's, so the data must give the same",
                     path, type->meta_key, diff);
}

/* ---- imports --------------------------------------------------------------------------------- */
/* The importers, each its format's test (its magic or its name), its header and its tensors;
   GGUF's and llm.c's before llama2.c's, which takes any *.bin; a Hugging Face directory (or a
   *.safetensors beside a config.json) first. */
typedef struct {
    bool (*is)(const char *path);
    mt_status (*arch)(const char *path, mt_import_arch *arch, mt_err *err);
    mt_status (*read)(const char *path, mt_safetensors *st, mt_import_arch *arch, mt_err *err);
} importer;
static const importer IMPORTERS[] = {
    {mt_hf_is, mt_hf_arch, mt_hf_read},
    {mt_gguf_is, mt_gguf_arch, mt_gguf_read},
    {mt_llmc_is, mt_llmc_arch, mt_llmc_read},
    {mt_llama2c_is, mt_llama2c_arch, mt_llama2c_read},
};

/* The importer that reads path; NULL: an mt checkpoint. */
static const importer *importer_of(const char *path) {
    for (size_t i = 0; i < sizeof IMPORTERS / sizeof *IMPORTERS; i++)
        if (IMPORTERS[i].is(path)) return &IMPORTERS[i];
    return NULL;
}

/* The type (the first registered whose import reads the file's model) and what it makes of a. */
static mt_status import_type(const mt_import_arch *a, const char *path, const mt_model_type **type,
                             mt_import *imp, mt_err *err) {
    mt_err e = {.msg = "no model type reads its format"};
    for (const mt_model_type *const *t = mt_model_types; *t; t++)
        if ((*t)->import && (*t)->import(a, imp, &e) == MT_OK) {
            *type = *t;
            return MT_OK;
        }
    return mt_errorf(err, MT_EINVAL, "%s: %s", path, e.msg);
}

/* The config (malloc'd) an import's lines give, with the file's vocabulary. */
static mt_status import_config(const mt_model_type *type, const mt_import *imp,
                               const mt_import_arch *a, const char *path, void **cfg, mt_err *err) {
    mt_err e;
    if (!(*cfg = malloc(type->config_size)))
        return mt_errorf(err, MT_ENOMEM, "out of memory for a config");
    type->config_default(*cfg);
    mt_input_set(*cfg, type->input->n_vocab, a->n_vocab);
    mt_fieldset set = {type->fields, *cfg};
    mt_settings lines = {0};
    mt_status s = mt_fieldset_parse_ini(&set, 1, imp->options, path, &lines, &e);
    mt_settings_free(&lines);
    if (s == MT_OK) s = type->config_validate(*cfg, &e);
    if (s == MT_OK) return MT_OK;
    free(*cfg);
    *cfg = NULL;
    return mt_errorf(err, MT_EFORMAT, "%s: its model as a %s: %s", path, type->name, e.msg);
}

mt_status mt_ckpt_import_options(const char *path, char **lines, mt_err *err) {
    *lines = NULL;
    const importer *in = mt_hf_is(path) ? importer_of(path) : NULL; /* a directory */
    mt_status s = in ? MT_OK : mt_file_check("--init-from", path, err);
    if (s == MT_OK && !in) in = importer_of(path);
    if (!in) return s;
    mt_import_arch a;
    const mt_model_type *type = NULL;
    mt_import imp;
    s = in->arch(path, &a, err);
    if (s == MT_OK) s = import_type(&a, path, &type, &imp, err);
    if (s != MT_OK) return s;
    size_t n = strlen(type->name) + strlen(imp.options) + 16;
    if (!(*lines = malloc(n))) return mt_errorf(err, MT_ENOMEM, "out of memory");
    snprintf(*lines, n, "model = %s\n%s", type->name, imp.options);
    return MT_OK;
}

/* The file --init-from reads: its tensors, its model's type and config, what that reads inputs
   with (meta: NULL for an import, whose inputs the run's data decides) and the name map. */
typedef struct {
    mt_safetensors st;
    const mt_model_type *type;
    void *cfg;
    const char *meta;
    mt_import imp;
} init_source;

static mt_status read_source(const char *path, init_source *src, mt_err *err) {
    *src = (init_source){0};
    mt_import_arch a;
    mt_status s;
    const importer *in = importer_of(path);
    if (!in) {
        if ((s = mt_st_load(path, &src->st, err)) == MT_OK)
            s = file_model(&src->st, path, &src->type, &src->cfg, &src->meta, err);
    } else if ((s = in->read(path, &src->st, &a, err)) == MT_OK &&
               (s = import_type(&a, path, &src->type, &src->imp, err)) == MT_OK)
        s = import_config(src->type, &src->imp, &a, path, &src->cfg, err);
    return s;
}

mt_status mt_ckpt_init_from(const char *path, mt_model *m, const char *skip, mt_load_report *report,
                            mt_err *err) {
    *report = (mt_load_report){.failed = -1};
    init_source src;
    mt_status s = read_source(path, &src, err);
    if (s == MT_OK && src.meta) s = same_kind(m, src.type, src.meta, path, err);
    else if (s == MT_OK && src.type != m->type)
        s = mt_errorf(err, MT_EINVAL, "%s holds a %s model, this run builds a %s (--model %s)",
                      path, src.type->name, m->type->name, src.type->name);
    if (s == MT_OK) {
        mt_load_spec spec = {.map = src.imp.map, .n_map = src.imp.n_map, .skip = skip};
        s = mt_ckpt_load_names(&src.st, path, m->P, &spec, report, err);
        const char *failed = report->failed >= 0 ? m->P->p[report->failed].name : NULL;
        if (s != MT_OK && failed &&
            !fits(m->P, &src.st, &spec, failed)) /* missing, or another shape */
            s = explain(&src.st, &spec, path, m, src.cfg, failed, err);
        diff_search f = {.m = m,
                         .file_cfg = src.cfg,
                         .out = report->differs,
                         .len = sizeof report->differs};
        if (s == MT_OK) each_diff(m->type->fields, 0, m->cfg, src.cfg, list_diff, &f);
    }
    free(src.cfg);
    mt_st_free(&src.st);
    return s;
}
