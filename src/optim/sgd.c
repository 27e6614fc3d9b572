/* SGD with optional momentum and Nesterov, torch.optim.SGD's rule (no dampening), as an
 * optimizer kind: one state slot "m" (the momentum buffer) when momentum > 0, none otherwise. */
#include <string.h>

#include "optim.h"

typedef struct {
    float lr, l2, mu; /* l2: the weight decay of the entries that decay */
    bool nesterov;
} sgd_scalars;
_Static_assert(sizeof(sgd_scalars) <= MT_OPTIM_SCALARS, "sgd_scalars");

static int sgd_slots(const mt_optim_config *c) { return c->momentum > 0; }

static void sgd_scalars_at(const mt_optim_config *c, long t, double lr, void *out) {
    (void)t;
    sgd_scalars k = {(float)lr, (float)c->weight_decay, (float)c->momentum, c->nesterov};
    memcpy(out, &k, sizeof k);
}

/* d = g + l2*p;  b = mu*b + d (b starts at 0, so the first step gives b = d, as torch's clone);
   d = nesterov ? d + mu*b : b;  p -= lr*d.  b == NULL (no slot): p -= lr*d. */
static void sgd_kernel(float *restrict p, const float *restrict g, float *restrict b, size_t n,
                       float lr, float l2, float mu, bool nesterov) {
    if (!b) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + l2 * p[i]);
        return;
    }
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + l2 * p[i];
        b[i] = mu * b[i] + d;
        p[i] -= lr * (nesterov ? d + mu * b[i] : b[i]);
    }
}

static void sgd_step(const mt_optim_tensor *x, const void *scalars) {
    sgd_scalars k;
    memcpy(&k, scalars, sizeof k);
    sgd_kernel(x->p, x->g, x->s[0], x->n, k.lr, x->e->decay ? k.l2 : 0.0f, k.mu, k.nesterov);
}

const mt_optim_type mt_optim_sgd = {
    .name = "sgd",
    .slot_names = {"m"},
    .slots = sgd_slots,
    .scalars = sgd_scalars_at,
    .step = sgd_step,
};
