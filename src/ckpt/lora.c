/* LoRA (Hu et al. 2021) by peft's target names: which matrices of a parameter table each name
   reaches, the adapters added and the base frozen (mt_ckpt_lora). */
#include <stdio.h>
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
