/* The GEMM layer (gemm.c): every matrix product of the linear layers and mt_matmul, fp32 or on
 * bf16 inputs, on OpenBLAS or oneDNN; the bf16 type and its rounding; the precision of the
 * products (mt_precision) and the backend of fp32's (mt_gemm_backend). Knows no tensor. */
#ifndef MT_GEMM_H
#define MT_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base.h"

/* bfloat16: the high half of a float32's bits. */
typedef uint16_t mt_bf16;

/* ---- products: every one of the linear layers, attention and mt_matmul ------------------------
 * Row-major with dense leading dimensions: C (M, N) = op(A) op(B) + beta C, A stored (M, K) or
 * (K, M) when ta, B (K, N) or (N, K) when tb; with bias (N floats) every row of C is set to bias
 * first and beta is ignored. Called outside a parallel region it runs on the pool's threads,
 * inside one (a replica) on the calling thread. */
void mt_gemm(bool ta, bool tb, int M, int N, int K, const float *A, const float *B, float beta,
             float *C, const float *bias);
/* C = alpha op(A) op(B) + beta C on blocks of larger buffers, lda, ldb, ldc their row strides (the
   attention's heads, side by side in (B, T, C) buffers); fp32, OpenBLAS, no bias. A product of
   one row (M = 1, !ta) in either, as a token of generation has, runs mt's matrix-vector kernel
   (gemm.c), split over C's entries across the pool when large: the same bits on any thread count.
   */
void mt_gemm_strided(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);
/* The same product on bf16 inputs, accumulated and written in fp32 (oneDNN only: mt_bf16_check
   must have passed). */
void mt_gemm_bf16(bool ta, bool tb, int M, int N, int K, const mt_bf16 *A, const mt_bf16 *B,
                  float beta, float *C, const float *bias);

/* ---- bf16 ----------------------------------------------------------------------------------- */
/* x rounded to nearest even: add 0x7fff plus the lowest kept bit, keep the high half; a NaN
   stays a (quiet) NaN instead of rounding into the exponent. Inline so that loops over it
   vectorise. */
static inline mt_bf16 mt_bf16_from_float(float x) {
    union {
        float f;
        uint32_t u;
    } v = {.f = x};
    uint32_t r = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16;
    return (mt_bf16)((v.u & 0x7fffffffu) > 0x7f800000u ? (v.u >> 16) | 0x40u : r);
}
/* dst = src rounded (mt_bf16_from_float), n values, on the pool when n is large. */
void mt_bf16_from_floats(mt_bf16 *dst, const float *src, size_t n);
static inline float mt_bf16_to_float(mt_bf16 h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}

/* ---- precision and backend ----------------------------------------------------------------- */
/* The precision of the products of the ops that offer bf16 (the linear layers; mt_ctx). */
typedef enum { MT_FP32, MT_BF16 } mt_precision;
extern const mt_enum MT_PRECISIONS;
/* MT_OK when bf16 products can run here: mt built with oneDNN, a CPU with AVX512_BF16; else
   MT_EINVAL with what is missing. */
mt_status mt_bf16_check(mt_err *err);
/* fp32's backend: AUTO picks per product; the environment's MT_GEMM=openblas|onednn|auto
   forces one, as does mt_gemm_set_backend (MT_EINVAL for onednn in a build without it).
   mt_gemm_backend_from_env reads MT_GEMM (MT_EINVAL naming it when bad): the programs call it at
   start; otherwise the first product reads it and a bad value is fatal. */
typedef enum { MT_GEMM_AUTO, MT_GEMM_OPENBLAS, MT_GEMM_ONEDNN } mt_gemm_backend;
extern const mt_enum MT_GEMM_BACKENDS;
mt_status mt_gemm_set_backend(mt_gemm_backend b, mt_err *err);
mt_status mt_gemm_backend_from_env(mt_err *err);
mt_gemm_backend mt_gemm_backend_forced(void);
bool mt_gemm_has_onednn(void);
/* The name of oneDNN's implementation of a product without bias or beta (benchmarks). */
const char *mt_gemm_impl(bool ta, bool tb, int M, int N, int K, bool bf16);

#endif
