/* Adam (L2 weight decay) and AdamW (decoupled weight decay), torch.optim's rules, as optimizer
 * kinds: two state slots, "m" and "v" (the first and second moments). */
#include <math.h>
#include <string.h>

#include "optim.h"

/* Computed in double, as torch does in Python, and rounded to float once. */
typedef struct {
    float b1, b2, omb1, omb2; /* beta1, beta2, 1 - beta1, 1 - beta2 */
    float step_size;          /* lr / (1 - beta1^t) */
    float bc2_sqrt;           /* sqrt(1 - beta2^t) */
    float eps;
    float l2, keep; /* of the entries that decay: Adam wd, 1; AdamW 0, 1 - lr*wd */
} adam_scalars;
_Static_assert(sizeof(adam_scalars) <= MT_OPTIM_SCALARS, "adam_scalars");

static int adam_slots(const mt_optim_config *c) {
    (void)c;
    return 2;
}

static void adam_scalars_at(const mt_optim_config *c, long t, double lr, bool decoupled,
                            void *out) {
    adam_scalars k = {
        .b1 = (float)c->beta1,
        .b2 = (float)c->beta2,
        .omb1 = (float)(1 - c->beta1),
        .omb2 = (float)(1 - c->beta2),
        .step_size = (float)(lr / (1 - pow(c->beta1, (double)t))),
        .bc2_sqrt = (float)sqrt(1 - pow(c->beta2, (double)t)),
        .eps = (float)c->eps,
        .l2 = decoupled ? 0.0f : (float)c->weight_decay,
        .keep = decoupled ? (float)(1 - lr * c->weight_decay) : 1.0f,
    };
    memcpy(out, &k, sizeof k);
}

static void adam_scalars_l2(const mt_optim_config *c, long t, double lr, void *out) {
    adam_scalars_at(c, t, lr, false, out);
}

static void adamw_scalars(const mt_optim_config *c, long t, double lr, void *out) {
    adam_scalars_at(c, t, lr, true, out);
}

/* g' = g + l2*p;  m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'^2;
   p = keep*p - step_size * m / (sqrt(v)/bc2_sqrt + eps). */
static void adam_kernel(float *restrict p, const float *restrict g, float *restrict m,
                        float *restrict v, size_t n, const adam_scalars *k, float l2, float keep) {
    const float b1 = k->b1, b2 = k->b2, omb1 = k->omb1, omb2 = k->omb2, ss = k->step_size,
                bc2 = k->bc2_sqrt, eps = k->eps;
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + l2 * p[i];
        m[i] = b1 * m[i] + omb1 * gi;
        v[i] = b2 * v[i] + omb2 * (gi * gi);
        p[i] = p[i] * keep - ss * (m[i] / (sqrtf(v[i]) / bc2 + eps));
    }
}

/* The kernel with the entry's decay: l2 = 0 and keep = 1 where it does not decay. */
static void adam_step(const mt_optim_tensor *x, const void *scalars) {
    adam_scalars k;
    memcpy(&k, scalars, sizeof k);
    bool decay = x->e->decay;
    adam_kernel(x->p, x->g, x->s[0], x->s[1], x->n, &k, decay ? k.l2 : 0.0f, decay ? k.keep : 1.0f);
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
