/* Parity driver for the optimizers (tests/parity/test_optim.py).
 *
 * IN.safetensors metadata "mode":
 *   run       parameters "p.<name>" (names and roles in the metadata "names", "roles", comma
 *             separated, in table order), gradients "g<s>.<name>" for steps s < "steps"; the
 *             optimizer and schedule options as mt_optim_config's fields ("optim", "lr", "beta1",
 *             ..., "schedule", "warmup", "sched_steps"); "resume_at" k > 0 saves the state after
 *             k steps and continues in a fresh optimizer loaded from it.
 *             OUT: "p<s>.<name>" after every step, "lr" and "norm" (the pre-clip norm) per step.
 *             With metadata "model" (a type's name) and "config" (its JSON) the table is that
 *             model's instead of "names" and "roles"; "precision" = "bf16" runs the parameters'
 *             bf16 copy (Muon's products in bf16). OUT also "whole.<name>" (1: stepped whole, a
 *             Muon matrix; 0: in pieces) for every trainable entry.
 *   table     "model" and "config": OUT "p.<name>", the model's initialised parameters.
 *   clip      gradients "g.<name>" and "max_norm"; OUT: "norm" and the clipped "g.<name>".
 *   schedule  the schedule options; OUT: "lr" for steps 0 .. sched_steps + 1.
 * Options absent from the metadata keep mt_optim_defaults' values. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"

/* A table with the names, roles and shapes of the "<prefix><name>" tensors, filled from them. */
static void build_params(mt_params *P, const mt_safetensors *in, const char *prefix) {
    char names[4096], roles[4096];
    snprintf(names, sizeof names, "%s", mt_st_meta(in, "names"));
    snprintf(roles, sizeof roles, "%s", mt_st_meta(in, "roles"));
    const char *role_names[] = {"matrix", "bias", "norm", "embedding", "buffer", "head"};
    mt_params_init_table(P);
    char *sn, *sr, *n = strtok_r(names, ",", &sn), *r = strtok_r(roles, ",", &sr);
    for (; n && r; n = strtok_r(NULL, ",", &sn), r = strtok_r(NULL, ",", &sr)) {
        char key[160];
        snprintf(key, sizeof key, "%s%s", prefix, n);
        const mt_st_entry *e = mt_st_find(in, key);
        MT_ASSERT(e, "optim driver: no tensor '%s'", key);
        int role = 0;
        while (role < 6 && strcmp(r, role_names[role]) != 0) role++;
        MT_ASSERT(role < 6, "optim driver: unknown role '%s'", r);
        mt_params_add(P, n, e->ndim, e->shape, (mt_param_role)role, MT_INIT_ZEROS, 0);
    }
    MT_ASSERT(mt_params_alloc(P, NULL) == MT_OK, "optim driver: alloc");
    for (int i = 0; i < P->n; i++) {
        char key[160];
        snprintf(key, sizeof key, "%s%s", prefix, P->p[i].name);
        float *dst = prefix[0] == 'p' ? P->t[i].data : P->t[i].grad;
        if (dst) memcpy(dst, mt_st_find(in, key)->data, P->p[i].n * sizeof(float));
    }
}

/* The model the metadata names, its parameters initialised from seed 1 (none: NULL). */
static mt_model *build_model(const mt_safetensors *in) {
    const char *name = mt_st_meta(in, "model"), *json = mt_st_meta(in, "config");
    if (!name) return NULL;
    const mt_model_type *type;
    mt_err err;
    MT_ASSERT(json && mt_model_type_find(name, &type, &err) == MT_OK, "optim driver: model");
    void *cfg = malloc(type->config_size);
    mt_model *m = NULL;
    MT_ASSERT(mt_model_config_from_json(type, json, cfg, &err) == MT_OK &&
                  mt_model_build(&m, type, cfg, &err) == MT_OK,
              "optim driver: %s", err.msg);
    free(cfg);
    mt_rng r;
    mt_rng_seed(&r, 1);
    mt_params_initialize(m->P, &r);
    return m;
}

/* Metadata key as a number, or dflt when absent. */
static double opt_or(const mt_safetensors *in, const char *key, double dflt) {
    return mt_st_meta(in, key) ? parity_opt(in, key) : dflt;
}

/* The Muon (with Polar Express, NorMuon), cautious decay, Lion and wsd options the metadata
   gives. */
static void read_new_kinds(const mt_safetensors *in, mt_optim_config *c) {
    struct {
        const char *key;
        double *v;
    } nums[] = {{"muon_lr", &c->muon_lr},
                {"adam_lr", &c->adam_lr},
                {"muon_wd", &c->muon_wd},
                {"muon_momentum", &c->muon_momentum},
                {"ns_a", &c->ns_a},
                {"ns_b", &c->ns_b},
                {"ns_c", &c->ns_c},
                {"ns_eps", &c->ns_eps},
                {"muon_rms", &c->muon_rms},
                {"normuon_beta2", &c->normuon_beta2},
                {"lion_beta1", &c->lion_beta1},
                {"lion_beta2", &c->lion_beta2},
                {"decay_frac", &c->sched.decay_frac}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) /* at float precision, as flags */
        *nums[i].v = (float)opt_or(in, nums[i].key, *nums[i].v);
    c->ns_steps = (int)opt_or(in, "ns_steps", c->ns_steps);
    c->muon_nesterov = opt_or(in, "muon_nesterov", c->muon_nesterov) != 0;
    c->normuon = opt_or(in, "normuon", c->normuon) != 0;
    c->cautious_wd = opt_or(in, "cautious_wd", c->cautious_wd) != 0;
    const char *scale = mt_st_meta(in, "muon_scale"), *ortho = mt_st_meta(in, "muon_ortho");
    int v;
    if (scale) {
        MT_ASSERT(mt_enum_parse(&MT_MUON_SCALES, scale, &v, NULL) == MT_OK, "muon_scale");
        c->muon_scale = (mt_muon_scale)v;
    }
    if (ortho) {
        MT_ASSERT(mt_enum_parse(&MT_MUON_ORTHOS, ortho, &v, NULL) == MT_OK, "muon_ortho");
        c->muon_ortho = (mt_muon_ortho)v;
    }
}

static mt_optim_config read_config(const mt_safetensors *in) {
    mt_optim_config c = mt_optim_defaults();
    int kind, sched, scope;
    MT_ASSERT(mt_enum_parse(&MT_OPTIMS, mt_st_meta(in, "optim"), &kind, NULL) == MT_OK, "optim");
    MT_ASSERT(mt_enum_parse(&MT_SCHEDULES, mt_st_meta(in, "schedule"), &sched, NULL) == MT_OK,
              "schedule");
    MT_ASSERT(mt_enum_parse(&MT_DECAY_SCOPES, mt_st_meta(in, "decay_scope"), &scope, NULL) == MT_OK,
              "decay_scope");
    c.kind = (mt_optim_kind)kind, c.sched.kind = (mt_sched_kind)sched;
    c.decay_scope = (mt_decay_scope)scope;
    c.beta1 = parity_opt(in, "beta1");
    c.beta2 = parity_opt(in, "beta2");
    c.eps = parity_opt(in, "eps");
    c.weight_decay = parity_opt(in, "weight_decay");
    c.momentum = parity_opt(in, "momentum");
    c.nesterov = parity_opt(in, "nesterov") != 0;
    c.clip = parity_opt(in, "clip");
    c.sched.lr = parity_opt(in, "lr");
    c.sched.min_lr = parity_opt(in, "min_lr");
    c.sched.warmup_init_lr = parity_opt(in, "warmup_init_lr");
    c.sched.warmup = (long)parity_opt(in, "warmup");
    c.sched.steps = (long)parity_opt(in, "sched_steps");
    read_new_kinds(in, &c);
    return c;
}

/* Output items own copies of their name, shape and data until the file is written. */
typedef struct {
    mt_st_item *items;
    int n, cap;
} outputs;

static void out_add(outputs *o, const char *name, int ndim, const int *shape, const float *data,
                    size_t n) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->items = realloc(o->items, (size_t)o->cap * sizeof *o->items);
    }
    float *copy = malloc(n * sizeof(float));
    int *sh = malloc(MT_MAX_DIMS * sizeof(int));
    memcpy(copy, data, n * sizeof(float));
    memcpy(sh, shape, (size_t)ndim * sizeof(int));
    o->items[o->n++] = (mt_st_item){strdup(name), ndim, sh, copy};
}

/* The model's parameters from the "p.<name>" tensors. */
static void load_model_params(mt_params *P, const mt_safetensors *in) {
    for (int i = 0; i < P->n; i++) {
        char key[160];
        snprintf(key, sizeof key, "p.%s", P->p[i].name);
        const mt_st_entry *x = mt_st_find(in, key);
        MT_ASSERT(x && x->n == P->p[i].n, "optim driver: no tensor '%s'", key);
        memcpy(P->t[i].data, x->data, x->n * sizeof(float));
    }
}

/* "whole.<name>": 1 for the entries o steps whole, 0 for the others it steps. */
static void out_groups(outputs *out, const mt_optim *o, const mt_params *P) {
    for (int j = 0; j < o->n_pieces + o->n_whole; j++) {
        char key[160];
        float whole = j >= o->n_pieces;
        snprintf(key, sizeof key, "whole.%s", P->p[o->walk[j]].name);
        out_add(out, key, 1, (int[]){1}, &whole, 1);
    }
}

static void run(const mt_safetensors *in, outputs *out, const char *state_path) {
    mt_params own, *P = &own;
    mt_model *model = build_model(in);
    if (model) P = model->P, load_model_params(P, in);
    else build_params(P, in, "p.");
    const char *precision = mt_st_meta(in, "precision");
    if (precision && strcmp(precision, "bf16") == 0)
        MT_ASSERT(mt_params_enable_bf16(P, NULL) == MT_OK, "optim driver: bf16");
    mt_optim_config c = read_config(in);
    int steps = (int)parity_opt(in, "steps"), resume_at = (int)parity_opt(in, "resume_at");
    mt_optim o;
    mt_err err;
    MT_ASSERT(mt_optim_init(&o, &c, P, &err) == MT_OK, "optim driver: %s", err.msg);
    float *lr = malloc((size_t)steps * sizeof(float)),
          *norm = malloc((size_t)steps * sizeof(float));
    for (int s = 0; s < steps; s++) {
        if (s == resume_at && s > 0) {
            MT_ASSERT(mt_optim_save(&o, P, state_path, &err) == MT_OK, "%s", err.msg);
            mt_optim_free(&o);
            MT_ASSERT(mt_optim_init(&o, &c, P, &err) == MT_OK, "%s", err.msg);
            MT_ASSERT(mt_optim_load(&o, P, state_path, &err) == MT_OK, "%s", err.msg);
        }
        for (int i = 0; i < P->n; i++) {
            char key[160];
            snprintf(key, sizeof key, "g%d.%s", s, P->p[i].name);
            const mt_st_entry *g = mt_st_find(in, key);
            if (P->t[i].grad) memcpy(P->t[i].grad, g->data, P->p[i].n * sizeof(float));
        }
        norm[s] = (float)mt_optim_clip(P, c.clip);
        lr[s] = (float)mt_optim_lr_at(&c.sched, o.t);
        mt_optim_step(&o, P, mt_optim_lr_at(&c.sched, o.t));
        for (int i = 0; i < P->n; i++) {
            char key[160];
            snprintf(key, sizeof key, "p%d.%s", s, P->p[i].name);
            out_add(out, key, P->p[i].ndim, P->p[i].shape, P->t[i].data, P->p[i].n);
        }
    }
    out_add(out, "lr", 1, (int[]){steps}, lr, (size_t)steps);
    out_add(out, "norm", 1, (int[]){steps}, norm, (size_t)steps);
    free(lr);
    free(norm);
    out_groups(out, &o, P);
    mt_optim_free(&o);
    if (model) mt_model_free(model);
    else mt_params_free(P);
}

static void clip(const mt_safetensors *in, outputs *out) {
    mt_params P;
    build_params(&P, in, "g.");
    float norm = (float)mt_optim_clip(&P, parity_opt(in, "max_norm"));
    out_add(out, "norm", 1, (int[]){1}, &norm, 1);
    for (int i = 0; i < P.n; i++) {
        char key[160];
        snprintf(key, sizeof key, "g.%s", P.p[i].name);
        out_add(out, key, P.p[i].ndim, P.p[i].shape, P.t[i].grad, P.p[i].n);
    }
    mt_params_free(&P);
}

static void table(const mt_safetensors *in, outputs *out) {
    mt_model *m = build_model(in);
    MT_ASSERT(m, "optim driver: mode table needs 'model' and 'config'");
    for (int i = 0; i < m->P->n; i++) {
        char key[160];
        snprintf(key, sizeof key, "p.%s", m->P->p[i].name);
        out_add(out, key, m->P->p[i].ndim, m->P->p[i].shape, m->P->t[i].data, m->P->p[i].n);
    }
    mt_model_free(m);
}

static void schedule(const mt_safetensors *in, outputs *out) {
    mt_optim_config c = read_config(in);
    mt_err err;
    MT_ASSERT(mt_optim_validate(&c, &err) == MT_OK, "optim driver: %s", err.msg);
    int n = (int)c.sched.steps + 2;
    float *lr = malloc((size_t)n * sizeof(float));
    for (int s = 0; s < n; s++) lr[s] = (float)mt_optim_lr_at(&c.sched, s);
    out_add(out, "lr", 1, &n, lr, (size_t)n);
    free(lr);
}

int main(int argc, char **argv) {
    mt_err err;
    mt_safetensors in;
    int rc = parity_open(argc, argv, &in);
    if (rc) return rc;
    const char *mode = mt_st_meta(&in, "mode");
    char state_path[4096];
    snprintf(state_path, sizeof state_path, "%s.state", argv[2]);
    outputs out = {0};
    if (mode && strcmp(mode, "run") == 0) run(&in, &out, state_path);
    else if (mode && strcmp(mode, "clip") == 0) clip(&in, &out);
    else if (mode && strcmp(mode, "schedule") == 0) schedule(&in, &out);
    else if (mode && strcmp(mode, "table") == 0) table(&in, &out);
    else {
        fprintf(stderr, "%s: unknown mode '%s' (run|clip|schedule|table)\n", argv[0],
                mode ? mode : "");
        return 2;
    }
    rc = 0;
    if (mt_st_save(argv[2], out.n, out.items, 0, NULL, NULL, &err) != MT_OK) {
        fprintf(stderr, "%s\n", err.msg);
        rc = 1;
    }
    for (int i = 0; i < out.n; i++) {
        free((char *)out.items[i].name);
        free((int *)out.items[i].shape);
        free((float *)out.items[i].data);
    }
    free(out.items);
    unlink(state_path);
    mt_st_free(&in);
    return rc;
}
