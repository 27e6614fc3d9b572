/* LoRA (Hu et al. 2021) by peft's target names: which matrices of a parameter table each name
   reaches, the adapters added and the base frozen (mt_ckpt_lora). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

/* peft's target module names and mt's matrices: a block's self-attention's projections, and its
   FFN's (SwiGLU: fc1 the gate, fc3 up, fc2 down; else fc1 up, fc2 down: GPT-2's c_fc, c_proj). */
static const char *const TARGETS[] = {"q", "k", "v", "o", "gate", "up", "down"};
enum { N_TARGETS = sizeof TARGETS / sizeof *TARGETS };

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* The target (an index of TARGETS) that entry i of P is, or -1. */
static int target_of(const mt_params *P, int i) {
    static const char *const attn[] = {".attn.q_proj.weight", ".attn.k_proj.weight",
                                       ".attn.v_proj.weight", ".attn.out_proj.weight"};
    const char *name = P->p[i].name;
    for (int t = 0; t < 4; t++)
        if (ends_with(name, attn[t])) return t;
    if (ends_with(name, ".ffn.fc2.weight")) return 6;
    if (ends_with(name, ".ffn.fc3.weight")) return 5;
    if (!ends_with(name, ".ffn.fc1.weight")) return -1;
    char gated[sizeof P->p[i].name];
    snprintf(gated, sizeof gated, "%.*sfc3.weight", (int)(strlen(name) - strlen("fc1.weight")),
             name);
    return mt_params_find(P, gated) >= 0 ? 4 : 5;
}

/* The targets named in list ("q,v") as bits of TARGETS, or an error naming an unknown one. */
static mt_status parse_targets(const char *list, unsigned *bits, mt_err *err) {
    *bits = 0;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        int t = 0;
        while (t < N_TARGETS && (strlen(TARGETS[t]) != n || strncmp(TARGETS[t], p, n))) t++;
        if (t == N_TARGETS)
            return mt_errorf(err, MT_EINVAL,
                             "--lora-targets: '%.*s' is no target: expected names among q, k, v, "
                             "o, gate, up, down (',' between them)",
                             (int)n, p);
        *bits |= 1u << t;
        p += n + (p[n] == ',');
    }
    if (!*bits)
        return mt_errorf(err, MT_EINVAL,
                         "--lora-targets is empty: expected names among q, k, v, o, gate, up, "
                         "down (',' between them)");
    return MT_OK;
}

/* Every target of bits reaches a matrix of P, and r fits each: at most its smaller side. */
static mt_status check_targets(const mt_params *P, unsigned bits, int r, mt_err *err) {
    for (int t = 0; t < N_TARGETS; t++) {
        if (!(bits >> t & 1)) continue;
        int found = 0;
        for (int i = 0; i < P->n; i++) {
            if (target_of(P, i) != t) continue;
            const mt_param *e = &P->p[i];
            int side = e->shape[0] < e->shape[1] ? e->shape[0] : e->shape[1];
            if (r > side)
                return mt_errorf(err, MT_EINVAL,
                                 "--lora-rank %d: above the smaller side of %s (%d, %d): expected "
                                 "1 to %d",
                                 r, e->name, e->shape[0], e->shape[1], side);
            found++;
        }
        if (!found)
            return mt_errorf(err, MT_EINVAL,
                             "--lora-targets: '%s' matches no matrix of the model (q, k, v, o: "
                             "attn.{q,k,v,out}_proj; gate: a SwiGLU FFN's fc1; up: its fc3, else "
                             "fc1; down: ffn.fc2)",
                             TARGETS[t]);
    }
    return MT_OK;
}

mt_status mt_ckpt_lora(mt_params *P, const mt_lora_cfg *l, mt_err *err) {
    if (l->rank == 0) return MT_OK;
    if (l->rank < 0)
        return mt_errorf(err, MT_EINVAL, "--lora-rank %d: expected 1 or more (0: no LoRA)",
                         l->rank);
    if (!(l->alpha > 0))
        return mt_errorf(err, MT_EINVAL, "--lora-alpha %g: expected a number above 0", l->alpha);
    if (!(l->dropout >= 0 && l->dropout < 1))
        return mt_errorf(err, MT_EINVAL, "--lora-dropout %g: expected a probability in [0, 1)",
                         l->dropout);
    unsigned bits;
    mt_status s = parse_targets(l->targets, &bits, err);
    if (s == MT_OK) s = check_targets(P, bits, l->rank, err);
    if (s != MT_OK) return s;
    int n = P->n; /* the base: every entry before the adapters */
    for (int i = 0; i < n; i++) mt_params_freeze(P, i);
    for (int i = 0; i < n; i++) {
        int t = target_of(P, i);
        if (t >= 0 && bits >> t & 1)
            mt_params_add_lora(P, i, l->rank, (float)l->alpha, (float)l->dropout);
    }
    return MT_OK;
}

bool mt_ckpt_lora_describe(const mt_params *P, char *buf, size_t len) {
    unsigned bits = 0;
    const mt_param *w = NULL; /* an adapted matrix */
    for (int i = 0; i < P->n; i++)
        if (P->p[i].lora) bits |= 1u << target_of(P, i), w = &P->p[i];
    if (!w) return false;
    size_t o = (size_t)snprintf(buf, len, "%d %.9g %.9g ", P->p[w->lora].shape[0],
                                w->lora_scale * P->p[w->lora].shape[0], w->lora_dropout);
    for (int t = 0, k = 0; t < N_TARGETS && o < len; t++)
        if (bits >> t & 1)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", k++ ? "," : "", TARGETS[t]);
    return true;
}

mt_status mt_ckpt_lora_read(mt_params *P, const char *desc, const char *path, mt_err *err) {
    mt_lora_cfg l = {0};
    if (sscanf(desc, "%d %lf %lf %127s", &l.rank, &l.alpha, &l.dropout, l.targets) != 4 ||
        l.rank < 1)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: the metadata 'lora' is '%s', not 'rank alpha dropout targets'", path,
                         desc);
    mt_err e;
    return mt_ckpt_lora(P, &l, &e) == MT_OK
               ? MT_OK
               : mt_errorf(err, MT_EFORMAT, "%s: the metadata 'lora': %s", path, e.msg);
}

/* The adapters in peft's names: base_model.model.<mt's module path>.lora_{A,B}.weight. */
static int adapter_items(const mt_params *P, mt_st_item *items, char (*names)[128]) {
    int n = 0;
    for (int i = 0; i < P->n; i++) {
        const mt_param *e = &P->p[i];
        if (!ends_with(e->name, ".lora_A.weight") && !ends_with(e->name, ".lora_B.weight"))
            continue;
        snprintf(names[n], sizeof names[n], "base_model.model.%s", e->name);
        items[n] = (mt_st_item){names[n], e->ndim, e->shape, P->data + e->offset};
        n++;
    }
    return n;
}

/* Entry e's module path without its block ("blocks.3.attn.q_proj.weight": "attn.q_proj"), into
   buf: peft matches target_modules as suffixes of the module paths. */
static const char *module_of(const mt_param *e, char *buf, size_t len) {
    const char *m = e->name, *dot = strchr(m, '.');
    if (!strncmp(m, "blocks.", 7) && dot && (dot = strchr(dot + 1, '.'))) m = dot + 1;
    snprintf(buf, len, "%.*s", (int)(strlen(m) - strlen(".weight")), m);
    return buf;
}

/* adapter_config.json: the fields of peft's LoraConfig that a load reads; target_modules the
   adapted matrices' module paths, once each. */
static mt_status write_config(const char *path, const mt_params *P, const mt_lora_cfg *l,
                              mt_err *err) {
    mt_atomic_file a;
    mt_status s = mt_atomic_open(&a, path, err);
    if (s != MT_OK) return s;
    bool ok = fprintf(a.f,
                      "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n"
                      "  \"r\": %d,\n  \"lora_alpha\": %.9g,\n  \"lora_dropout\": %.9g,\n"
                      "  \"bias\": \"none\",\n  \"fan_in_fan_out\": false,\n"
                      "  \"inference_mode\": true,\n  \"init_lora_weights\": true,\n"
                      "  \"target_modules\": [",
                      l->rank, l->alpha, l->dropout) > 0;
    int n = 0;
    for (int i = 0; i < P->n; i++) {
        char m[sizeof P->p[i].name], prev[sizeof m];
        bool seen = false;
        if (!P->p[i].lora) continue;
        module_of(&P->p[i], m, sizeof m);
        for (int j = 0; j < i && !seen; j++)
            seen = P->p[j].lora && !strcmp(module_of(&P->p[j], prev, sizeof prev), m);
        if (!seen) ok = ok && fprintf(a.f, "%s\"%s\"", n++ ? ", " : "", m) > 0;
    }
    ok = ok && fprintf(a.f, "]\n}\n") > 0;
    return mt_atomic_close(&a, ok, err);
}

mt_status mt_ckpt_save_lora(const char *dir, const mt_params *P, const mt_lora_cfg *l,
                            mt_err *err) {
    if (l->rank == 0) return MT_OK;
    mt_status s = MT_OK;
    mt_st_item *items = calloc((size_t)P->n + 1, sizeof *items);
    char(*names)[128] = calloc((size_t)P->n + 1, sizeof *names);
    char path[4200];
    if (s == MT_OK && (!items || !names))
        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory saving the adapters", dir);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (s == MT_OK) s = mt_st_save(path, adapter_items(P, items, names), items, 0, NULL, NULL, err);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (s == MT_OK) s = write_config(path, P, l, err);
    free(items);
    free(names);
    return s;
}
