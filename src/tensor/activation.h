/* The activation kernels, shared by the standalone activation ops (mt_gelu, ...) and fused ops
 * that apply an activation inside (the FFN, nn/linear.c). Defined in ops_elementwise.c with the
 * value/derivative pairs; OpenMP-parallel above MT_PAR_MIN elements and vectorised. */
#ifndef MT_ACTIVATION_H
#define MT_ACTIVATION_H

#include "tensor.h"

/* y (n) = F(x); act is not MT_ACT_SWIGLU (two inputs: below) */
void mt_act_forward(mt_act act, float *y, const float *x, size_t n);
/* y (n) = F(x) and d (n) = F'(x) from one pass; d may be x. The FFN's pass that makes h for fc2
   (its weight gradient) and F' for dh's way back through the activation: fp32's backward, bf16's
   forward. */
void mt_act_forward_grad(mt_act act, float *y, float *d, const float *x, size_t n);
/* dx (n) = dy * F'(x), or dx += dy * F'(x) when acc; dx may be dy (in place). */
void mt_act_backward(mt_act act, float *dx, const float *dy, const float *x, size_t n, bool acc);

/* h (n) = silu(a) g;  backward: da = dh g silu'(a), dg = dh silu(a), set or added (acc); a NULL
   da or dg is skipped (acc only); da may be dh (in place). silu'(a) = s (1 + a (1 - s)),
   s = sigmoid(a). */
void mt_swiglu_forward(float *h, const float *a, const float *g, size_t n);
/* h (n) = silu(a) g, and in place a = g silu'(a), g = silu(a): dh's factors in da and dg, from
   one sigmoid (the FFN's pass, as mt_act_forward_grad) */
void mt_swiglu_forward_grad(float *h, float *a, float *g, size_t n);
void mt_swiglu_backward(float *da, float *dg, const float *dh, const float *a, const float *g,
                        size_t n, bool acc);

#endif
