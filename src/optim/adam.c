/* Adam (L2 weight decay) and AdamW (decoupled weight decay), torch.optim's rules, as optimizer
 * kinds: two state slots, "m" and "v" (the first and second moments). The kernel is shared with
 * muon.c through adam_internal.h. */
#include <math.h>
#include <string.h>

#include "adam_internal.h"

_Static_assert(sizeof(mt_adam_scalars) <= MT_OPTIM_SCALARS, "mt_adam_scalars");

static int adam_slots(const mt_optim_config *c) {
    (void)c;
    return 2;
}

mt_adam_scalars mt_adam_scalars_at(const mt_optim_config *c, long t, double lr, bool decoupled) {
    return (mt_adam_scalars){
        .b1 = (float)c->beta1,
        .b2 = (float)c->beta2,
        .omb1 = (float)(1 - c->beta1),
        .omb2 = (float)(1 - c->beta2),
        .step_size = (float)(lr / (1 - pow(c->beta1, (double)t))),
        .bc2_sqrt = (float)sqrt(1 - pow(c->beta2, (double)t)),
        .eps = (float)c->eps,
        .l2 = decoupled ? 0.0f : (float)c->weight_decay,
        .keep = decoupled ? (float)(1 - lr * c->weight_decay) : 1.0f,
        .lr_wd = decoupled ? (float)(lr * c->weight_decay) : 0.0f,
        .cautious = decoupled && c->cautious_wd,
    };
}

mt_adam_scalars mt_adam_entry(const mt_adam_scalars *k, const mt_param *e) {
    mt_adam_scalars x = *k;
    if (e->lr_scale != 1 || e->wd_scale != 1) {
        x.step_size *= e->lr_scale, x.l2 *= e->wd_scale;
        if (x.lr_wd > 0) x.keep = 1 - x.lr_wd * e->lr_scale * e->wd_scale;
    }
    x.eps *= e->eps_scale;
    if (!e->decay) x.l2 = 0, x.keep = 1;
    return x;
}

static void adam_scalars_l2(const mt_optim_config *c, long t, double lr, void *out) {
    mt_adam_scalars k = mt_adam_scalars_at(c, t, lr, false);
    memcpy(out, &k, sizeof k);
}

static void adamw_scalars(const mt_optim_config *c, long t, double lr, void *out) {
    mt_adam_scalars k = mt_adam_scalars_at(c, t, lr, true);
    memcpy(out, &k, sizeof k);
}

void mt_adam_kernel(float *restrict p, const float *restrict g, float *restrict m,
                    float *restrict v, size_t n, const mt_adam_scalars *k, float l2, float keep) {
    const float b1 = k->b1, b2 = k->b2, omb1 = k->omb1, omb2 = k->omb2, ss = k->step_size,
                bc2 = k->bc2_sqrt, eps = k->eps;
    const bool cautious = k->cautious;
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + l2 * p[i];
        m[i] = b1 * m[i] + omb1 * gi;
        v[i] = b2 * v[i] + omb2 * (gi * gi);
        float u = m[i] / (sqrtf(v[i]) / bc2 + eps);
        float kp = cautious && u * p[i] < 0 ? 1.0f : keep;
        p[i] = p[i] * kp - ss * u;
    }
}

/* The kernel with the entry's decay and scales (mt_adam_entry). */
static void adam_step(const mt_optim_tensor *x, const void *scalars) {
    mt_adam_scalars k;
    memcpy(&k, scalars, sizeof k);
    k = mt_adam_entry(&k, x->e);
    mt_adam_kernel(x->p, x->g, x->s[0], x->s[1], x->n, &k, k.l2, k.keep);
}

const mt_optim_type mt_optim_adam = {
    .name = "adam",
    .slot_names = {"m", "v"},
    .slots = adam_slots,
    .scalars = adam_scalars_l2,
    .step = adam_step,
};

const mt_optim_type mt_optim_adamw = {
    .name = "adamw",
    .slot_names = {"m", "v"},
    .slots = adam_slots,
    .scalars = adamw_scalars,
    .step = adam_step,
};
