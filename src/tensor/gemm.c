/* The GEMM layer: every product of the linear layers, the attention (mt_gemm_strided: heads in
 * wider buffers) and mt_matmul goes through mt_gemm (fp32) or mt_gemm_bf16 (bf16 inputs, fp32
 * accumulation and output), row-major, transposes as flags. One-row fp32 products (a token of
 * generation) on OpenBLAS's side run mt's matrix-vector kernel (gemv, below) instead of sgemm.
 * Two backends:
 *   OpenBLAS  cblas_sgemm; fp32 only. C's rows split across the pool by mt (gemm_rows below) or
 *             left to OpenBLAS's own threading.
 *   oneDNN    a matmul primitive per (thread slot, threads, ta, tb, M, N, K, precision, beta,
 *             bias), created on its first call and cached: src, weights, dst and bias are memory
 *             objects whose data handles are set per call, and the scratchpad is allocated once
 *             with the primitive (user scratchpad mode). Debian's libdnnl is built on OpenMP
 *             (DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP): it forks on mt's pool, and inside
 *             a parallel region (a replica) it runs on the calling thread alone.
 * fp32 picks its backend by the rule in pick_fp32 (OpenBLAS; why: docs/performance.md);
 * MT_GEMM=openblas or MT_GEMM=onednn in the environment, or mt_gemm_set_backend, forces one.
 * bf16 is oneDNN's only, on a CPU with AVX512_BF16 (mt_bf16_check). */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "simd.h"

#ifdef MT_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static const mt_enum_item PRECISIONS[] = {
    [MT_FP32] = {.name = "fp32", .help = "float32 everywhere"},
    [MT_BF16] =
        {.name = "bf16",
         .help = "the linear layers' products on bf16 inputs, accumulated in fp32 (AVX512_BF16, "
                 "oneDNN); weights, gradients, optimizer state, norms, softmax and loss stay fp32"},
};
const mt_enum MT_PRECISIONS = MT_ENUM("precision", PRECISIONS);

static const mt_enum_item BACKENDS[] = {
    [MT_GEMM_AUTO] = {.name = "auto",
                      .help = "the faster backend for the product (the rule in src/tensor/gemm.c)"},
    [MT_GEMM_OPENBLAS] = {.name = "openblas", .help = "OpenBLAS's cblas_sgemm"},
    [MT_GEMM_ONEDNN] = {.name = "onednn", .help = "oneDNN's matmul primitive"},
};
const mt_enum MT_GEMM_BACKENDS = MT_ENUM("GEMM backend", BACKENDS);

/* ---- bf16 conversion ---------------------------------------------------------------------- */
void mt_bf16_from_floats(mt_bf16 *dst, const float *src, size_t n) {
    MT_PARALLEL_FOR_SIMD(n >= 4 * MT_PAR_MIN,
                         for (size_t i = 0; i < n; i++) dst[i] = mt_bf16_from_float(src[i]););
}

/* ---- one row: the products of one token ---------------------------------------------------
 * y (N) = alpha x (K) op(B) + beta y, or + bias: M = 1, what a token of generation multiplies.
 * sgemm packs all of B to multiply one row by it (OpenBLAS's incopy took 40% of a generation);
 * these read B once, in place, and split y across the pool (each thread streams its share of B,
 * as a matrix-vector product must: it is bound by B's bytes). tb (x W^T, B (N, K) row stride
 * ldb): y_j = x . B_j, GEMV_ROWS rows of B at a time, each row a vector sum over k in order whose
 * lanes are then added in a fixed tree. !tb (B (K, N) row stride ldb): y += x_k B_k over k in
 * order, GEMV_VECS vectors of y at a time. Every y_j is computed by one thread with the same code
 * wherever the split falls, so the result does not depend on the thread count. */

/* rows a pass of tb (one accumulator each, so they are the FMA chains in flight: 8 fill the two
   FMA pipes of 4-cycle latency with 8-float vectors, 4 suffice with 16-float ones); vectors of y
   a pass of !tb; B's floats worth a fork */
enum { GEMV_ROWS = MT_VW >= 16 ? 4 : 8, GEMV_VECS = 4, GEMV_PAR_MIN = 2 * MT_PAR_MIN };

static inline float lanes_sum(mt_vf v) {
#if defined(__AVX512F__)
    return _mm512_reduce_add_ps((__m512)v);
#else
    float s = 0;
    for (int j = 0; j < MT_VW; j++) s += v[j];
    return s;
#endif
}

/* y_j = alpha x . B_j + (bias_j, or beta y_j, or 0) */
static inline float gemv_out(float dot, float alpha, float beta, const float *y, const float *bias,
                             int j) {
    float add = bias ? bias[j] : beta != 0.0f ? beta * y[j] : 0.0f;
    return alpha * dot + add;
}

/* tb: y_j for j in [j0, j1); the loops over the rows unrolled whole, so that their sums stay in
   registers */
static void gemv_t(int K, float alpha, const float *x, const float *B, int ldb, float beta,
                   float *y, const float *bias, int j0, int j1) {
    int KV = K / MT_VW * MT_VW;
    for (int j = j0; j < j1; j += GEMV_ROWS) {
        int nr = j1 - j < GEMV_ROWS ? j1 - j : GEMV_ROWS;
        const float *b[GEMV_ROWS]; /* rows past j1 repeat row j: computed, not stored */
        mt_vf acc[GEMV_ROWS];
#pragma GCC unroll 8
        for (int r = 0; r < GEMV_ROWS; r++)
            b[r] = B + (size_t)(j + (r < nr ? r : 0)) * ldb, acc[r] = (mt_vf){0};
        for (int k = 0; k < KV; k += MT_VW) {
            mt_vf xv = mt_vf_load(x + k);
#pragma GCC unroll 8
            for (int r = 0; r < GEMV_ROWS; r++)
                acc[r] = mt_vf_madd(xv, mt_vf_load(b[r] + k), acc[r]);
        }
        for (int r = 0; r < nr; r++) {
            float dot = lanes_sum(acc[r]);
            for (int k = KV; k < K; k++) dot = MT_MADD(x[k], b[r][k], dot);
            y[j + r] = gemv_out(dot, alpha, beta, y, bias, j + r);
        }
    }
}

/* !tb: y_j for the nv vectors of y from j (nv a constant once inlined: the sums stay in
   registers) */
static inline __attribute__((always_inline)) void gemv_n_block(int nv, int K, float alpha,
                                                               const float *x, const float *B,
                                                               int ldb, float beta, float *y,
                                                               const float *bias, int j) {
    mt_vf acc[GEMV_VECS] = {{0}};
    for (int k = 0; k < K; k++) {
        mt_vf xk = x[k] - (mt_vf){0};
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[v] = mt_vf_madd(xk, mt_vf_load(B + (size_t)k * ldb + j + v * MT_VW), acc[v]);
    }
    for (int v = 0; v < nv; v++)
        for (int l = 0; l < MT_VW; l++) {
            int o = j + v * MT_VW + l;
            y[o] = gemv_out(acc[v][l], alpha, beta, y, bias, o);
        }
}

/* !tb: y_j for j in [j0, j1), j0 a multiple of MT_VW */
static void gemv_n(int K, float alpha, const float *x, const float *B, int ldb, float beta,
                   float *y, const float *bias, int j0, int j1) {
    int jv = j0 + (j1 - j0) / MT_VW * MT_VW;
    for (int j = j0; j < jv; j += GEMV_VECS * MT_VW) {
        switch ((jv - j) / MT_VW) {
        case 1: gemv_n_block(1, K, alpha, x, B, ldb, beta, y, bias, j); break;
        case 2: gemv_n_block(2, K, alpha, x, B, ldb, beta, y, bias, j); break;
        case 3: gemv_n_block(3, K, alpha, x, B, ldb, beta, y, bias, j); break;
        default: gemv_n_block(GEMV_VECS, K, alpha, x, B, ldb, beta, y, bias, j);
        }
    }
    for (int j = jv; j < j1; j++) {
        float dot = 0;
        for (int k = 0; k < K; k++) dot = MT_MADD(x[k], B[(size_t)k * ldb + j], dot);
        y[j] = gemv_out(dot, alpha, beta, y, bias, j);
    }
}

/* y (N) = alpha x (K) op(B) + beta y (or + bias), split over y's entries across the pool when B
   is large enough and no parallel region is active */
static void gemv(bool tb, int N, int K, float alpha, const float *x, const float *B, int ldb,
                 float beta, float *y, const float *bias) {
    int nt = (size_t)N * K >= GEMV_PAR_MIN && !omp_in_parallel() ? mt_threads() : 1;
    int unit = tb ? GEMV_ROWS : MT_VW; /* a split falls on whole passes */
    int per = ((N + nt - 1) / nt + unit - 1) / unit * unit;
    MT_PARALLEL_FOR(nt > 1, for (int j0 = 0; j0 < N; j0 += per) {
        int j1 = j0 + per < N ? j0 + per : N;
        if (tb) gemv_t(K, alpha, x, B, ldb, beta, y, bias, j0, j1);
        else gemv_n(K, alpha, x, B, ldb, beta, y, bias, j0, j1);
    });
}

/* ---- OpenBLAS ------------------------------------------------------------------------------ */

/* Rows [r0, r1) of C: one single-threaded sgemm (OpenBLAS's OpenMP build runs one thread inside
   a parallel region), C's rows first set to bias when given. */
static void gemm_rows(bool ta, bool tb, int M, int N, int K, const float *A, const float *B,
                      float beta, float *C, const float *bias, int r0, int r1) {
    if (r1 <= r0) return;
    if (bias) { /* on the pool when called outside a parallel region (the unsplit product) */
        MT_PARALLEL_FOR((size_t)(r1 - r0) * N >= MT_PAR_MIN, for (int r = r0; r < r1; r++)
                            memcpy(C + (size_t)r * N, bias, (size_t)N * sizeof(float)););
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                r1 - r0, N, K, 1.0f, ta ? A + r0 : A + (size_t)r0 * K, ta ? M : K, B, tb ? K : N,
                beta, C + (size_t)r0 * N, N);
}

/* C's rows are split across the pool's threads in blocks of whole 16-row tiles, each block one
   single-threaded sgemm. For the narrow matrices of deep models this beats OpenBLAS's own split
   (bench/gemm.c compares the two), and it is one fork/join with the bias copy inside. Each thread
   packs all of B, so a B above 64K floats (256 KiB) is left to OpenBLAS, which shares its packed
   B (splitting the small config's 384 x 1536 products was slower); so are products below
   OpenBLAS's own threading threshold
   (M N K <= 4 * 65536) and C of fewer than two 16-row tiles. */
static void gemm_openblas(bool ta, bool tb, int M, int N, int K, const float *A, const float *B,
                          float beta, float *C, const float *bias) {
    if (M == 1 && !ta) {
        gemv(tb, N, K, 1.0f, A, B, tb ? K : N, beta, C, bias);
        return;
    }
    int nt = omp_in_parallel() ? 1 : mt_threads();
    bool split = nt >= 2 && M >= 32 && (double)N * K <= 65536 && (double)M * N * K > 4.0 * 65536;
    int per = split ? ((M + 15) / 16 + nt - 1) / nt * 16 : M; /* rows a block, one block a thread */
    MT_PARALLEL_FOR(split, for (int r0 = 0; r0 < M; r0 += per)
                        gemm_rows(ta, tb, M, N, K, A, B, beta, C, bias, r0,
                                  r0 + per < M ? r0 + per : M););
}

/* ---- oneDNN ---------------------------------------------------------------------------------- */
#ifdef MT_DNNL

typedef struct {
    int threads, ta, tb, M, N, K, bf16, bias;
    float beta;
} prim_key;

typedef struct {
    prim_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst, bia, pad; /* pad: the scratchpad, or NULL */
    void *pad_buf;
    unsigned long used; /* the slot's call count at its last use */
} prim_entry;

/* Slot s < MAX_SLOTS: thread s of a parallel region (a replica); slot MAX_SLOTS: outside one.
   Each slot is touched by its own thread only: no lock. A slot holds SLOT_PRIMS primitives, more
   than a training step of fixed shapes uses; ragged batches (the encoder-decoder's lengths) can
   ask for more, and then the least recently used one is destroyed to make room. */
enum { MAX_SLOTS = 64, SLOT_PRIMS = 256 };
typedef struct {
    dnnl_stream_t stream;
    prim_entry e[SLOT_PRIMS];
    int n;
    unsigned long calls;
} prim_slot;
static prim_slot slots[MAX_SLOTS + 1];
static dnnl_engine_t engine;

#define DNNL_OK(call)                                                                              \
    do {                                                                                           \
        dnnl_status_t st_ = (call);                                                                \
        MT_ASSERT(st_ == dnnl_success, "oneDNN: %s failed (status %d)", #call, (int)st_);          \
    } while (0)

static void md_2d(dnnl_memory_desc_t *md, int rows, int cols, bool trans, bool bf16) {
    dnnl_dims_t dims = {rows, cols}, strides = {trans ? 1 : cols, trans ? rows : 1};
    DNNL_OK(dnnl_memory_desc_init_by_strides(md, 2, dims, bf16 ? dnnl_bf16 : dnnl_f32, strides));
}

static void prim_create(prim_entry *e, const prim_key *k) {
    dnnl_memory_desc_t a, b, c, bias;
    md_2d(&a, k->M, k->K, k->ta, k->bf16);
    md_2d(&b, k->K, k->N, k->tb, k->bf16);
    md_2d(&c, k->M, k->N, false, false);
    md_2d(&bias, 1, k->N, false, false);
    dnnl_matmul_desc_t d;
    DNNL_OK(dnnl_matmul_desc_init(&d, &a, &b, k->bias ? &bias : NULL, &c));
    dnnl_primitive_attr_t attr;
    DNNL_OK(dnnl_primitive_attr_create(&attr));
    DNNL_OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_post_ops_t po = NULL;
    if (!k->bias && k->beta != 0.0f) { /* C = A B + beta C */
        DNNL_OK(dnnl_post_ops_create(&po));
        DNNL_OK(dnnl_post_ops_append_sum(po, k->beta));
        DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po));
    }
    dnnl_primitive_desc_t pd;
    DNNL_OK(dnnl_primitive_desc_create(&pd, &d, attr, engine, NULL));
    DNNL_OK(dnnl_primitive_create(&e->prim, pd));
    DNNL_OK(dnnl_memory_create(&e->src, &a, engine, DNNL_MEMORY_NONE));
    DNNL_OK(dnnl_memory_create(&e->wei, &b, engine, DNNL_MEMORY_NONE));
    DNNL_OK(dnnl_memory_create(&e->dst, &c, engine, DNNL_MEMORY_NONE));
    DNNL_OK(dnnl_memory_create(&e->bia, &bias, engine, DNNL_MEMORY_NONE));
    const dnnl_memory_desc_t *pmd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t pad = pmd ? dnnl_memory_desc_get_size(pmd) : 0;
    e->pad = NULL, e->pad_buf = NULL;
    if (pad) {
        MT_ASSERT((e->pad_buf = mt_alloc_big(pad)), "oneDNN: no memory for a %zu-byte scratchpad",
                  pad);
        DNNL_OK(dnnl_memory_create(&e->pad, pmd, engine, e->pad_buf));
    }
    DNNL_OK(dnnl_primitive_desc_destroy(pd));
    if (po) DNNL_OK(dnnl_post_ops_destroy(po));
    DNNL_OK(dnnl_primitive_attr_destroy(attr));
    e->key = *k;
}

static void prim_destroy(prim_entry *e) {
    DNNL_OK(dnnl_primitive_destroy(e->prim));
    dnnl_memory_t m[] = {e->src, e->wei, e->dst, e->bia, e->pad};
    for (int i = 0; i < 5; i++)
        if (m[i]) DNNL_OK(dnnl_memory_destroy(m[i]));
    free(e->pad_buf);
}

/* The primitive of k in the calling thread's slot, created on first use. */
static prim_entry *prim_get(const prim_key *k, int slot) {
    if (!engine) {
#pragma omp critical(mt_dnnl_engine)
        if (!engine) DNNL_OK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    }
    prim_slot *s = &slots[slot];
    s->calls++;
    for (int i = 0; i < s->n; i++)
        if (!memcmp(&s->e[i].key, k, sizeof *k)) return s->e[i].used = s->calls, &s->e[i];
    if (!s->stream) DNNL_OK(dnnl_stream_create(&s->stream, engine, dnnl_stream_default_flags));
    int at = s->n;
    if (s->n == SLOT_PRIMS) { /* full: the least recently used makes room */
        at = 0;
        for (int i = 1; i < s->n; i++)
            if (s->e[i].used < s->e[at].used) at = i;
        prim_destroy(&s->e[at]);
    } else {
        s->n++;
    }
    prim_create(&s->e[at], k);
    s->e[at].used = s->calls;
    return &s->e[at];
}

static void gemm_dnnl(bool ta, bool tb, int M, int N, int K, const void *A, const void *B,
                      float beta, float *C, const float *bias, bool bf16) {
    bool nested = omp_in_parallel();
    int slot = nested ? omp_get_thread_num() : MAX_SLOTS;
    MT_ASSERT(slot <= MAX_SLOTS, "oneDNN: thread %d of a parallel region: at most %d", slot,
              MAX_SLOTS);
    /* inside a parallel region the product runs on the calling thread alone: plan it for one */
    int outer = omp_get_max_threads();
    if (nested) omp_set_num_threads(1);
    prim_key k;
    memset(&k, 0, sizeof k); /* padding too: keys compare with memcmp */
    k.threads = omp_get_max_threads(), k.ta = ta, k.tb = tb, k.M = M, k.N = N, k.K = K;
    k.bf16 = bf16, k.bias = bias != NULL, k.beta = bias ? 0.0f : beta;
    prim_entry *e = prim_get(&k, slot);
    DNNL_OK(dnnl_memory_set_data_handle(e->src, (void *)A));
    DNNL_OK(dnnl_memory_set_data_handle(e->wei, (void *)B));
    DNNL_OK(dnnl_memory_set_data_handle(e->dst, C));
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->src},
                               {DNNL_ARG_WEIGHTS, e->wei},
                               {DNNL_ARG_DST, e->dst}};
    int n = 3;
    if (bias) {
        DNNL_OK(dnnl_memory_set_data_handle(e->bia, (void *)bias));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bia};
    }
    if (e->pad) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->pad};
    DNNL_OK(dnnl_primitive_execute(e->prim, slots[slot].stream, n, args));
    DNNL_OK(dnnl_stream_wait(slots[slot].stream));
    if (nested) omp_set_num_threads(outer);
}

/* Whether oneDNN can make the bf16 products of the linear layers (A B, A B^T, A^T B): a CPU limit
   of its own (ONEDNN_MAX_CPU_ISA below AVX512_BF16) leaves it none; *status: the first failure. */
static bool dnnl_bf16_works(int *status) {
    *status = dnnl_success;
    if (!engine) {
#pragma omp critical(mt_dnnl_engine)
        if (!engine) *status = dnnl_engine_create(&engine, dnnl_cpu, 0);
    }
    for (int t = 0; t < 3 && *status == dnnl_success; t++) {
        dnnl_memory_desc_t a, b, c;
        md_2d(&a, 64, 64, t == 2, true);
        md_2d(&b, 64, 64, t == 1, true);
        md_2d(&c, 64, 64, false, false);
        dnnl_matmul_desc_t d;
        dnnl_primitive_desc_t pd;
        if ((*status = dnnl_matmul_desc_init(&d, &a, &b, NULL, &c)) == dnnl_success &&
            (*status = dnnl_primitive_desc_create(&pd, &d, NULL, engine, NULL)) == dnnl_success)
            dnnl_primitive_desc_destroy(pd);
    }
    return *status == dnnl_success;
}

/* The implementation oneDNN chose for a product (bench/gemm.c prints it). */
const char *mt_gemm_impl(bool ta, bool tb, int M, int N, int K, bool bf16) {
    dnnl_memory_desc_t a, b, c;
    md_2d(&a, M, K, ta, bf16);
    md_2d(&b, K, N, tb, bf16);
    md_2d(&c, M, N, false, false);
    dnnl_matmul_desc_t d;
    dnnl_primitive_desc_t pd;
    const char *name = "?";
    if (!engine) DNNL_OK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    if (dnnl_matmul_desc_init(&d, &a, &b, NULL, &c) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &d, NULL, engine, NULL) == dnnl_success) {
        const char *s = NULL;
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
        static _Thread_local char buf[64];
        snprintf(buf, sizeof buf, "%s", s ? s : "?");
        name = buf;
        dnnl_primitive_desc_destroy(pd);
    }
    return name;
}
#else
const char *mt_gemm_impl(bool ta, bool tb, int M, int N, int K, bool bf16) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)bf16;
    return "none (built without oneDNN)";
}
#endif

/* ---- the interface --------------------------------------------------------------------------- */

static int forced = -1; /* mt_gemm_backend; -1: not yet read from MT_GEMM */

bool mt_gemm_has_onednn(void) {
#ifdef MT_DNNL
    return true;
#else
    return false;
#endif
}

mt_status mt_gemm_set_backend(mt_gemm_backend b, mt_err *err) {
    if (b == MT_GEMM_ONEDNN && !mt_gemm_has_onednn())
        return mt_errorf(err, MT_EINVAL,
                         "GEMM backend onednn: mt was built without oneDNN "
                         "(install libdnnl-dev, then make clean && make)");
    forced = (int)b;
    return MT_OK;
}

mt_status mt_gemm_backend_from_env(mt_err *err) {
    const char *env = getenv("MT_GEMM");
    int b = MT_GEMM_AUTO;
    mt_err e = {0};
    mt_status s;
    if (env && *env &&
        ((s = mt_enum_parse(&MT_GEMM_BACKENDS, env, &b, &e)) != MT_OK ||
         (s = mt_gemm_set_backend((mt_gemm_backend)b, &e)) != MT_OK))
        return mt_errorf(err, s, "environment variable MT_GEMM: %s", e.msg);
    forced = b;
    return MT_OK;
}

mt_gemm_backend mt_gemm_backend_forced(void) {
    if (forced < 0) { /* a program that did not call mt_gemm_backend_from_env itself */
        mt_err err = {0};
        MT_ASSERT(mt_gemm_backend_from_env(&err) == MT_OK, "%s", err.msg);
    }
    return (mt_gemm_backend)forced;
}

mt_status mt_bf16_check(mt_err *err) {
    if (!mt_gemm_has_onednn())
        return mt_errorf(err, MT_EINVAL,
                         "precision bf16 needs oneDNN, and mt was built without "
                         "it (install libdnnl-dev, then make clean && make); "
                         "use --precision fp32");
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16"))
        return mt_errorf(err, MT_EINVAL,
                         "precision bf16 needs a CPU with AVX512_BF16 (Intel "
                         "Cooper Lake, Sapphire Rapids or later, AMD Zen 4 or "
                         "later), and this one has none; use --precision fp32");
#else /* mt's bf16 products are oneDNN's AVX512_BF16 kernels */
    return mt_errorf(err, MT_EINVAL,
                     "precision bf16 runs on x86-64 CPUs with AVX512_BF16 only, and this "
                     "build is for another architecture; use --precision fp32");
#endif
#ifdef MT_DNNL
    int status;
    const char *isa = getenv("ONEDNN_MAX_CPU_ISA");
    if (!isa) isa = getenv("DNNL_MAX_CPU_ISA");
    if (!dnnl_bf16_works(&status))
        return mt_errorf(err, MT_EINVAL,
                         "precision bf16: oneDNN cannot make a bf16 matrix product here (status "
                         "%d)%s%s%s; use --precision fp32",
                         status, isa ? ": the environment limits it to ONEDNN_MAX_CPU_ISA=" : "",
                         isa ? isa : "",
                         isa ? " (unset it, or set it to AVX512_CORE_BF16 or higher)" : "");
#endif
    return MT_OK;
}

#ifdef MT_DNNL
/* fp32: OpenBLAS unless forced. oneDNN's fp32 gains a few percent of a step at most, and its
   results depend on M (the KV cache's one-row products would differ from the full window's);
   docs/performance.md has the measurements. */
static mt_gemm_backend pick_fp32(int M, int N, int K) {
    (void)M, (void)N, (void)K;
    mt_gemm_backend f = mt_gemm_backend_forced();
    return f == MT_GEMM_AUTO ? MT_GEMM_OPENBLAS : f;
}
#endif

void mt_gemm(bool ta, bool tb, int M, int N, int K, const float *A, const float *B, float beta,
             float *C, const float *bias) {
#ifdef MT_DNNL
    if (pick_fp32(M, N, K) == MT_GEMM_ONEDNN) {
        gemm_dnnl(ta, tb, M, N, K, A, B, beta, C, bias, false);
        return;
    }
#endif
    gemm_openblas(ta, tb, M, N, K, A, B, beta, C, bias);
}

void mt_gemm_strided(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 1 && !ta) gemv(tb, N, K, alpha, A, B, ldb, beta, C, NULL);
    else
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void mt_gemm_bf16(bool ta, bool tb, int M, int N, int K, const mt_bf16 *A, const mt_bf16 *B,
                  float beta, float *C, const float *bias) {
#ifdef MT_DNNL
    gemm_dnnl(ta, tb, M, N, K, A, B, beta, C, bias, true);
#else
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)B, (void)beta, (void)C,
        (void)bias;
    MT_ASSERT(0, "mt_gemm_bf16: mt was built without oneDNN (mt_bf16_check refuses bf16)");
#endif
}
