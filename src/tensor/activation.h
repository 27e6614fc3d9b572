/* The activation kernels, shared by the standalone activation ops (mt_gelu, ...) and fused ops
 * that apply an activation inside (the FFN, nn/linear.c). Defined in ops_elementwise.c with the
 * value/derivative pairs; OpenMP-parallel above MT_PAR_MIN elements and vectorised. */
#ifndef MT_ACTIVATION_H
#define MT_ACTIVATION_H

#include "tensor.h"

/* y (n) = F(x) */
void mt_act_forward(mt_act act, float *y, const float *x, size_t n);
/* dx (n) = dy * F'(x), or dx += dy * F'(x) when acc; dx may be dy (in place). */
void mt_act_backward(mt_act act, float *dx, const float *dy, const float *x, size_t n, bool acc);

#endif
