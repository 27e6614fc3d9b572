/* Float exp, sigmoid, erfc and tanh written so that loops over them vectorise (libm's expf,
 * erfcf and tanhf are scalar calls that stop the vectoriser). Internal to the ops; deterministic
 * (no table, no state). Errors are measured against double precision in tests/test_ops.c. */
#ifndef MT_VMATH_H
#define MT_VMATH_H

#include <math.h>

/* a * b + c in one rounding where the CPU has FMA (-march=native on x86-64-v3 and later; every
   aarch64, which names it __ARM_FEATURE_FMA), else two: results differ between such builds,
   never between runs of one build */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define MT_MADD(a, b, c) fmaf(a, b, c)
#else
#define MT_MADD(a, b, c) ((a) * (b) + (c))
#endif

/* 2^n for an integer n in [-126, 127], built in the exponent bits */
static inline float mt_vpow2i(int n) {
    union {
        int i;
        float f;
    } u = {.i = (n + 127) << 23};
    return u.f;
}

/* exp(c) = 2^n exp(r), n = round(c log2(e)), r = c - n ln2, |r| <= ln2/2; ln2 = HI + LO
   (Cody-Waite): HI has 9 significant bits, so n HI is exact and r loses no digits */
#define MT_LOG2E 1.44269504088896341f
#define MT_LN2_HI 0.693359375f
#define MT_LN2_LO (-2.12194440e-4f)

/* P(r), exp(r) = 1 + r + r^2 P(r) for |r| <= ln2/2: the Cephes expf polynomial */
static inline float mt_vexp_poly(float r) {
    float p = 1.9875691500e-4f;
    p = MT_MADD(p, r, 1.3981999507e-3f);
    p = MT_MADD(p, r, 8.3334519073e-3f);
    p = MT_MADD(p, r, 4.1665795894e-2f);
    p = MT_MADD(p, r, 1.6666665459e-1f);
    return MT_MADD(p, r, 5.0000001201e-1f);
}

/* exp(c) = 2^n exp(r) for c in [-87.5, 88.75] (n rounded by adding and subtracting 1.5 * 2^23,
   as floorf does not vectorise without -ffast-math); returns exp(r), *n receives n. */
static inline float mt_vexp_reduced(float c, float *n) {
    *n = (c * MT_LOG2E + 12582912.0f) - 12582912.0f;
    float r = c - *n * MT_LN2_HI - *n * MT_LN2_LO;
    return mt_vexp_poly(r) * r * r + r + 1.0f;
}

/* exp(x): exp(r) times 2^n as two halves so that n = 128 (x near 88.7) stays representable.
   Relative error < 3e-7. 0 below -87.33 (where floats turn subnormal), inf above 88.72, NaN
   stays NaN. */
static inline float mt_vexpf(float x) {
    float c = x > -87.5f ? x : -87.5f; /* NaN -> -87.5, put back at the end */
    c = c < 88.75f ? c : 88.75f;
    float n, p = mt_vexp_reduced(c, &n);
    int ni = (int)n, h = ni >> 1;
    float y = p * mt_vpow2i(h) * mt_vpow2i(ni - h);
    return x < -87.33654f ? 0.0f : x > 88.72283f ? INFINITY : x != x ? x : y;
}

/* max_j x[j] (-inf for n = 0; a NaN is passed over, as `x > m ? x : m` does) as 16 running maxima,
   lane by lane, then the largest of them. One maximum under `omp simd reduction(max : m)` is a
   float max reduction, which clang vectorises only when NaNs and signed zeros may be ignored
   (-ffinite-math-only -fno-signed-zeros); lanes are plain selects (vmaxps) to GCC and clang. */
static inline float mt_vmaxf(const float *x, int n) {
    enum { LANES = 16 };
    float m[LANES], mx = -INFINITY;
    for (int k = 0; k < LANES; k++) m[k] = -INFINITY;
    int j = 0;
    for (; j + LANES <= n; j += LANES)
#pragma omp simd
        for (int k = 0; k < LANES; k++) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
    for (; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    for (int k = 0; k < LANES; k++) mx = m[k] > mx ? m[k] : mx;
    return mx;
}

/* exp(x) for arguments that are never large (x <= 88: -z^2 + P(t) in erfc, -x^2 / 2 in GELU's
   derivative), without mt_vexpf's selects at the edges: below -87 it gives exp(-87) = 1.6e-38
   instead of 0, and NaN gives exp(-87) (callers multiply by a factor that keeps the NaN). Relative
   error < 3e-7 on [-87, 88]. */
static inline float mt_vexpf_below88(float x) {
    float c = x > -87.0f ? x : -87.0f; /* NaN -> -87 */
    float n, p = mt_vexp_reduced(c, &n);
    return p * mt_vpow2i((int)n);
}

/* sigmoid(z) = 1 / (1 + exp(-z)), z clamped to [-80, 80] first: 2^n then fits one exponent and
   exp needs none of the selects at its edges (GELU through it is faster than through mt_vexpf:
   bench/ops.py). Relative error < 4e-7 on [-80, 80]; beyond, 1 or sigmoid(-80) = 1.8e-35 (absolute
   error < 2e-35). NaN gives a number: multiply it by its argument (x sigmoid(..), as GELU and
   SiLU do) to keep the NaN. */
static inline float mt_vsigmoidf(float z) {
    float c = z < 80.0f ? z : 80.0f; /* NaN -> 80 */
    c = c > -80.0f ? -c : 80.0f;
    float n, p = mt_vexp_reduced(c, &n);
    return 1.0f / (1.0f + p * mt_vpow2i((int)n));
}

/* erfc(x) = 1 - erf(x) (Numerical Recipes' erfcc, a Chebyshev fit with fractional error 1.2e-7):
   t = 1/(1 + |x|/2),  erfc(|x|) = t exp(-x^2 + P(t)),  erfc(-x) = 2 - erfc(x). In float the
   relative error grows with the rounding of x^2: < 2e-6 for x < 3; erf = 1 - erfc has an absolute
   error < 4e-7. Computing erfc directly keeps Phi(x) = erfc(-x / sqrt 2) / 2 accurate in the left
   tail, where 1 + erf(x) would cancel. */
static inline float mt_verfcf(float x) {
    float z = fabsf(x), t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = MT_MADD(p, t, -0.82215223f);
    p = MT_MADD(p, t, 1.48851587f);
    p = MT_MADD(p, t, -1.13520398f);
    p = MT_MADD(p, t, 0.27886807f);
    p = MT_MADD(p, t, -0.18628806f);
    p = MT_MADD(p, t, 0.09678418f);
    p = MT_MADD(p, t, 0.37409196f);
    p = MT_MADD(p, t, 1.00002368f);
    p = MT_MADD(p, t, -1.26551223f);
    float e = t * mt_vexpf_below88(p - z * z); /* p - z^2 <= 3e-8 */
    return x < 0.0f ? 2.0f - e : e;
}

/* tanh(x), and *d = tanh'(x) = 1 - tanh(x)^2 = 4e / (1 + e)^2, e = exp(-2|x|) (no cancellation
   where tanh nears +-1, as 1 - tanh^2 would have). tanh: for |x| < 0.25 its Taylor series to x^9
   (the next term, 1382/155925 x^11, is below 2e-8 of tanh there), else sign(x) (1 - e) / (1 + e)
   (1 - e > 0.39: no cancellation; 2 sigmoid(2x) - 1 would cancel near 0). Relative errors
   < 4e-7 and 1e-6 (test_ops); tanh +-1 beyond |x| = 9, NaN stays NaN. */
static inline float mt_vtanhf_d(float x, float *d) {
    float a = fabsf(x), x2 = x * x;
    float p = MT_MADD(x2, 0.0218694885f, -0.0539682540f); /* 62/2835, -17/315 */
    p = MT_MADD(p, x2, 0.133333333f);                     /* 2/15 */
    p = MT_MADD(p, x2, -0.333333333f);
    float small = MT_MADD(p * x2, x, x);
    float e = mt_vexpf_below88(-2.0f * (a < 40.0f ? a : 40.0f)); /* NaN -> 40 */
    float big = (1.0f - e) / (1.0f + e), q = 1.0f + e;
    *d = 4.0f * e / (q * q);
    return x != x ? x : a < 0.25f ? small : x < 0 ? -big : big;
}
static inline float mt_vtanhf(float x) {
    float d;
    return mt_vtanhf_d(x, &d);
}

/* The soft cap of logits (Gemma 2, arXiv 2408.00118): y = cap tanh(x / cap), cap > 0, and *d =
   y' = 1 - tanh(x / cap)^2. */
static inline float mt_softcap_fd(float x, float cap, float *d) {
    return cap * mt_vtanhf_d(x / cap, d);
}
static inline float mt_softcapf(float x, float cap) { return cap * mt_vtanhf(x / cap); }

#endif
