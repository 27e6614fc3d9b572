/* Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", arXiv 2302.06675;
 * lucidrains/lion-pytorch's update_fn) as an optimizer kind: one state slot "m".
 *   c = b1 m + (1 - b1) g;  p = (1 - lr wd) p - lr sign(c);  m = b2 m + (1 - b2) g
 * with sign(0) = 0 (torch.sign), the decay decoupled and on the entries that decay. */
#include <string.h>

#include "optim.h"

typedef struct {
    float lr, keep; /* keep: 1 - lr wd, of the entries that decay */
    float b1, omb1, b2, omb2;
} lion_scalars;
_Static_assert(sizeof(lion_scalars) <= MT_OPTIM_SCALARS, "lion_scalars");

static int lion_slots(const mt_optim_config *c) {
    (void)c;
    return 1;
}

static void lion_scalars_at(const mt_optim_config *c, long t, double lr, void *out) {
    (void)t;
    lion_scalars k = {
        .lr = (float)lr,
        .keep = (float)(1 - lr * c->weight_decay),
        .b1 = (float)c->lion_beta1,
        .omb1 = (float)(1 - c->lion_beta1),
        .b2 = (float)c->lion_beta2,
        .omb2 = (float)(1 - c->lion_beta2),
    };
    memcpy(out, &k, sizeof k);
}

static void lion_step(const mt_optim_tensor *x, const void *scalars) {
    lion_scalars k;
    memcpy(&k, scalars, sizeof k);
    float *restrict p = x->p, *restrict m = x->s[0];
    const float *restrict g = x->g;
    const float keep = x->e->decay ? k.keep : 1.0f, lr = k.lr, b1 = k.b1, omb1 = k.omb1, b2 = k.b2,
                omb2 = k.omb2;
#pragma omp simd
    for (size_t i = 0; i < x->n; i++) {
        float c = b1 * m[i] + omb1 * g[i];
        p[i] = p[i] * keep - lr * (float)((c > 0) - (c < 0));
        m[i] = b2 * m[i] + omb2 * g[i];
    }
}

static mt_status lion_validate(const mt_optim_config *c, mt_err *err) {
    if (!(c->lion_beta1 >= 0 && c->lion_beta1 < 1 && c->lion_beta2 >= 0 && c->lion_beta2 < 1))
        return mt_errorf(err, MT_EINVAL,
                         "--lion-beta1 is %g and --lion-beta2 %g; each must be in [0, 1)",
                         c->lion_beta1, c->lion_beta2);
    return MT_OK;
}

const mt_optim_type mt_optim_lion = {
    .name = "lion",
    .slot_names = {"m"},
    .slots = lion_slots,
    .scalars = lion_scalars_at,
    .step = lion_step,
    .validate = lion_validate,
};
