/* Explicit vectors, for the kernels whose loops the compiler does not vectorise well on its own
 * (attention's register tiles, the row norms' blocks of 8 rows): GCC's vector types (also
 * clang's), loads and stores, and the few operations the kernels share. Internal to the ops.
 * Scalar code written to vectorise (exp, sigmoid, erfc, MT_MADD) is vmath.h's; the vector exp
 * below uses its pieces.
 *
 * The functions are always inlined (MT_VINLINE), never an ABI boundary. Builds without AVX
 * (PORTABLE=1) warn (-Wpsabi) that returning an 8-float vector changes the ABI, moot here, so
 * that warning is off in every file that includes this header; GCC also notes that passing one
 * changed in GCC 4.6, which no pragma silences: so no function takes an mt_v8 by value, and
 * the store and the shuffles are macros. (mt_vf is always the build's own register width.) */
#ifndef MT_SIMD_H
#define MT_SIMD_H

#include <string.h>

#include "vmath.h"

#pragma GCC diagnostic ignored "-Wpsabi"
#define MT_VINLINE static inline __attribute__((always_inline))

/* MT_VW: the floats of the widest vector register; mt_vf: such a vector */
#if defined(__AVX512F__)
#include <immintrin.h>
#define MT_VW 16
#elif defined(__AVX__)
#define MT_VW 8
#else
#define MT_VW 4
#endif
typedef float mt_vf __attribute__((vector_size(MT_VW * sizeof(float))));
/* 8 floats whatever the registers (two of them without AVX): lane r of a block of 8 rows, the
   8 x 8 transposes */
typedef float mt_v8 __attribute__((vector_size(8 * sizeof(float))));

/* Loads and stores (of an mt_vf or an mt_v8) at any float address: memcpy, no alignment or
   aliasing assumed */
MT_VINLINE mt_vf mt_vf_load(const float *p) {
    mt_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
MT_VINLINE mt_v8 mt_v8_load(const float *p) {
    mt_v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
#define MT_VSTORE(p, v) memcpy((p), (__typeof__(v)[]){v}, sizeof(v))

/* a b + c lane by lane, in one rounding where the CPU has FMA (MT_MADD): a loop over the lanes
   that the compiler turns into one vector instruction */
MT_VINLINE mt_vf mt_vf_madd(mt_vf a, mt_vf b, mt_vf c) {
    mt_vf y;
    for (int j = 0; j < MT_VW; j++) y[j] = MT_MADD(a[j], b[j], c[j]);
    return y;
}

/* exp(x) lane by lane for x <= 0 (a score minus its row's max in a softmax), -inf included; NaN
   stays NaN. With AVX-512: x clamped to -104 (below, exp is 0 in float), exp(r) by
   mt_vexp_reduced's reduction and polynomial in FMAs, 2^n by vscalefps (denormals and 0
   included, no edge selects). Else: 0 below -80 (where exp is 1.8e-35, an absolute error below
   that on probabilities summing to 1), so that 2^n fits one exponent. */
MT_VINLINE mt_vf mt_vf_exp_le0(mt_vf x) {
#if defined(__AVX512F__) && defined(__FMA__)
    mt_vf c = (mt_vf)_mm512_max_ps(_mm512_set1_ps(-104.0f), (__m512)x); /* NaN: x */
    mt_vf n = (mt_vf)_mm512_roundscale_ps((__m512)(c * MT_LOG2E),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    mt_vf p;
    for (int j = 0; j < MT_VW; j++) {
        float r = fmaf(-n[j], MT_LN2_LO, fmaf(-n[j], MT_LN2_HI, c[j]));
        p[j] = fmaf(mt_vexp_poly(r) * r, r, r) + 1.0f;
    }
    return (mt_vf)_mm512_scalef_ps((__m512)p, (__m512)n);
#else
    mt_vf y;
    for (int j = 0; j < MT_VW; j++) {
        float c = x[j] > -80.0f ? x[j] : -80.0f, n, p = mt_vexp_reduced(c, &n);
        y[j] = x[j] >= -80.0f ? p * mt_vpow2i((int)n) : x[j] != x[j] ? x[j] : 0.0f;
    }
    return y;
#endif
}

/* ---- 8 x 8 shuffles ---------------------------------------------------------------------------
 * The three rounds of an 8 x 8 transpose (as _MM_TRANSPOSE8_PS), each a pair of shuffles of two
 * vectors a, b (lanes a0..a7, b0..b7):
 *   LO1 a0 b0 a1 b1 a4 b4 a5 b5   HI1 a2 b2 a3 b3 a6 b6 a7 b7   (floats within 4-float halves)
 *   LO2 a0 a1 b0 b1 a4 a5 b4 b5   HI2 a2 a3 b2 b3 a6 a7 b6 b7   (pairs within halves)
 *   LO4 a0 a1 a2 a3 b0 b1 b2 b3   HI4 a4 a5 a6 a7 b4 b5 b6 b7   (halves) */
#if defined(__clang__) || __GNUC__ >= 12
#define MT_V8_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else /* GCC 11 and older: __builtin_shuffle with the lanes as a vector of ints */
typedef int mt_v8_lanes __attribute__((vector_size(8 * sizeof(int))));
#define MT_V8_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (mt_v8_lanes){__VA_ARGS__})
#endif
#define MT_V8_LO1(a, b) MT_V8_SHUFFLE(a, b, 0, 8, 1, 9, 4, 12, 5, 13)
#define MT_V8_HI1(a, b) MT_V8_SHUFFLE(a, b, 2, 10, 3, 11, 6, 14, 7, 15)
#define MT_V8_LO2(a, b) MT_V8_SHUFFLE(a, b, 0, 1, 8, 9, 4, 5, 12, 13)
#define MT_V8_HI2(a, b) MT_V8_SHUFFLE(a, b, 2, 3, 10, 11, 6, 7, 14, 15)
#define MT_V8_LO4(a, b) MT_V8_SHUFFLE(a, b, 0, 1, 2, 3, 8, 9, 10, 11)
#define MT_V8_HI4(a, b) MT_V8_SHUFFLE(a, b, 4, 5, 6, 7, 12, 13, 14, 15)

/* r (8) rows of an 8 x 8 block -> its columns, in place */
MT_VINLINE void mt_v8_transpose(mt_v8 r[8]) {
    mt_v8 u[8];
    for (int j = 0; j < 8; j += 2) /* interleave row pairs within halves */
        u[j] = MT_V8_LO1(r[j], r[j + 1]), u[j + 1] = MT_V8_HI1(r[j], r[j + 1]);
    for (int j = 0; j < 8; j += 4) { /* then pairs of pairs */
        r[j] = MT_V8_LO2(u[j], u[j + 2]), r[j + 1] = MT_V8_HI2(u[j], u[j + 2]);
        r[j + 2] = MT_V8_LO2(u[j + 1], u[j + 3]), r[j + 3] = MT_V8_HI2(u[j + 1], u[j + 3]);
    }
    for (int j = 0; j < 4; j++) /* then the halves: column j and column j + 4 */
        u[j] = MT_V8_LO4(r[j], r[j + 4]), u[j + 4] = MT_V8_HI4(r[j], r[j + 4]);
    memcpy(r, u, sizeof u);
}

/* lane r = the sum of a[r]'s lanes: the transpose's rounds with each pair added at once (7
   shuffle pairs), so the sums run in a fixed tree */
MT_VINLINE mt_v8 mt_v8_sum_lanes(const mt_v8 a[8]) {
    mt_v8 u[4], v[2];
    for (int j = 0; j < 4; j++) /* rows 2j, 2j + 1: lanes (0, 2), (1, 3), (4, 6), (5, 7) */
        u[j] = MT_V8_LO1(a[2 * j], a[2 * j + 1]) + MT_V8_HI1(a[2 * j], a[2 * j + 1]);
    for (int j = 0; j < 2; j++) /* rows 4j .. 4j + 3: their two halves */
        v[j] = MT_V8_LO2(u[2 * j], u[2 * j + 1]) + MT_V8_HI2(u[2 * j], u[2 * j + 1]);
    return MT_V8_LO4(v[0], v[1]) + MT_V8_HI4(v[0], v[1]);
}

#endif
