/* AdamW's scalars and kernel, shared by adam.c (Adam, AdamW) and muon.c (AdamW for the tensors
 * that are not hidden matrices); internal to src/optim. */
#ifndef MT_ADAM_INTERNAL_H
#define MT_ADAM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "optim.h"

/* Computed in double, as torch does in Python, and rounded to float once. */
typedef struct {
    float b1, b2, omb1, omb2; /* beta1, beta2, 1 - beta1, 1 - beta2 */
    float step_size;          /* lr / (1 - beta1^t) */
    float bc2_sqrt;           /* sqrt(1 - beta2^t) */
    float eps;
    float l2, keep; /* of the entries that decay: Adam wd, 1; AdamW 0, 1 - lr*wd */
    float lr_wd;    /* AdamW: lr*wd, for an entry's scaled keep */
    bool cautious;  /* AdamW: keep only where the update u and p share a sign (u p >= 0) */
} mt_adam_scalars;

/* Update t's scalars at lr with c's betas, eps and weight decay (L2 or decoupled). */
mt_adam_scalars mt_adam_scalars_at(const mt_optim_config *c, long t, double lr, bool decoupled);

/* k for entry e, at its lr_scale, wd_scale and eps_scale (--param): step_size, eps and l2 scaled,
   keep 1 - lr lr_scale wd wd_scale (AdamW), l2 and keep those of no decay where e does not decay;
   k itself, bit for bit, at scales of 1. */
mt_adam_scalars mt_adam_entry(const mt_adam_scalars *k, const mt_param *e);

/* g' = g + l2*p;  m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'^2;  u = m / (sqrt(v)/bc2_sqrt + eps)
   p = keep'*p - step_size * u, n elements; keep' = keep, or with k->cautious 1 where u p < 0. */
void mt_adam_kernel(float *restrict p, const float *restrict g, float *restrict m,
                    float *restrict v, size_t n, const mt_adam_scalars *k, float l2, float keep);

#endif
