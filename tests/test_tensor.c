/* The core: RNG, arena, parameter table, tape; matmul and add against naive loops and by
   finite differences. The other primitive ops are tested in test_ops.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void test_rng(void) {
    mt_rng a, b;
    mt_rng_seed(&a, 5);
    mt_rng_seed(&b, 5);
    for (int i = 0; i < 100; i++) CHECK(mt_rng_u64(&a) == mt_rng_u64(&b), "rng not reproducible");
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = mt_rng_normal(&a);
        s += x;
        s2 += x * x;
    }
    CHECK(fabs(s / n) < 0.01 && fabs(s2 / n - 1) < 0.02, "normal: mean %g var %g", s / n, s2 / n);
    double u = 0;
    for (int i = 0; i < n; i++) {
        float x = mt_rng_uniform(&a);
        CHECK(x >= 0 && x < 1, "uniform out of [0,1): %g", x);
        u += x;
    }
    CHECK(fabs(u / n - 0.5) < 0.01, "uniform mean %g", u / n);
}

static void test_params(void) {
    mt_params P;
    mt_params_init_table(&P);
    int w = mt_params_add(&P, "fc.weight", 2, (int[]){3, 5}, MT_ROLE_MATRIX, MT_INIT_NORMAL, 0.5f);
    int b = mt_params_add(&P, "fc.bias", 1, (int[]){3}, MT_ROLE_BIAS, MT_INIT_CONST, 0.25f);
    int r = mt_params_add(&P, "bn.running_var", 1, (int[]){7}, MT_ROLE_BUFFER, MT_INIT_ONES, 0);
    CHECK(mt_params_alloc(&P, NULL) == MT_OK, "alloc");
    CHECK(mt_params_find(&P, "fc.bias") == b && mt_params_find(&P, "nope") == -1, "find");
    CHECK(P.p[w].decay && !P.p[b].decay && !P.p[r].decay, "decay defaults by role");
    CHECK(P.p[b].offset % 16 == 0 && P.p[r].offset % 16 == 0, "entries aligned");
    CHECK(mt_params_count_trainable(&P) == 18, "trainable count %zu",
          mt_params_count_trainable(&P));
    CHECK(P.t[r].grad == NULL && !P.t[r].requires_grad && P.t[w].requires_grad,
          "buffers have no grad");
    mt_rng rng;
    mt_rng_seed(&rng, 1);
    mt_params_initialize(&P, &rng);
    CHECK(P.t[b].data[2] == 0.25f && P.t[r].data[6] == 1.0f, "const and ones init");
    mt_params_free(&P);
}

static void test_arena(void) {
    mt_ctx c;
    CHECK(mt_ctx_init(&c, 1 << 20, 1, NULL) == MT_OK, "ctx");
    float *a = mt_arena_floats(&c, 3);
    float *b = mt_arena_floats(&c, 100);
    CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0, "64-byte aligned");
    size_t peak = c.arena.peak;
    mt_ctx_reset(&c);
    CHECK(c.arena.used == 0 && c.arena.peak == peak && peak >= 400, "reset keeps the peak");
    mt_ctx_free(&c);
}

/* ---- matmul ---- */
typedef struct {
    bool ta, tb;
} mm_arg;

static mt_tensor *build_matmul(mt_ctx *c, mt_tensor **in, const void *arg) {
    const mm_arg *m = arg;
    return mt_matmul(c, in[0], in[1], m->ta, m->tb);
}

/* naive C[b] = op(A[b]) op(B[b or shared]) */
static void ref_matmul(const mt_tensor *a, const mt_tensor *b, bool ta, bool tb, float *out) {
    int ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    int M = ta ? ac : ar, K = ta ? ar : ac, N = tb ? br : bc;
    int nb = (int)(a->n / ((size_t)ar * ac));
    for (int q = 0; q < nb; q++) {
        const float *A = a->data + (size_t)q * ar * ac;
        const float *B = b->data + (b->ndim == 2 ? 0 : (size_t)q * br * bc);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++)
                    s += (double)(ta ? A[k * ac + i] : A[i * ac + k]) *
                         (tb ? B[j * bc + k] : B[k * bc + j]);
                out[((size_t)q * M + i) * N + j] = (float)s;
            }
    }
}

static void test_matmul(void) {
    mt_rng r;
    mt_rng_seed(&r, 3);
    struct {
        int andim, ashape[4], bndim, bshape[4];
        bool ta, tb;
    } cases[] = {
        {2, {5, 7}, 2, {7, 3}, false, false},
        {2, {7, 5}, 2, {7, 3}, true, false},
        {2, {5, 7}, 2, {3, 7}, false, true},
        {2, {7, 5}, 2, {3, 7}, true, true},
        {3, {2, 5, 17}, 2, {9, 17}, false, true},
        {3, {2, 17, 5}, 2, {17, 3}, true, false},
        {4, {2, 3, 4, 5}, 4, {2, 3, 5, 6}, false, false},
        {4, {2, 3, 5, 4}, 4, {2, 3, 6, 5}, true, true},
        {3, {3, 1, 33}, 3, {3, 33, 1}, false, false},
    };
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        mt_tensor *a = test_tensor(&r, cases[k].andim, cases[k].ashape, -1, 1, true);
        mt_tensor *b = test_tensor(&r, cases[k].bndim, cases[k].bshape, -1, 1, true);
        mm_arg m = {cases[k].ta, cases[k].tb};
        mt_ctx_reset(&c);
        mt_tensor *y = mt_matmul(&c, a, b, m.ta, m.tb);
        float *ref = malloc(y->n * sizeof(float));
        ref_matmul(a, b, m.ta, m.tb, ref);
        CHECK(max_rel_err(y->data, ref, y->n) < 1e-5, "matmul case %zu vs naive: %g", k,
              max_rel_err(y->data, ref, y->n));
        char name[32];
        snprintf(name, sizeof name, "matmul[%zu]", k);
        gradcheck(name, build_matmul, &m, 2, (mt_tensor *[]){a, b}, 1e-2, 1e-3);
        free(ref);
        test_tensor_free(a);
        test_tensor_free(b);
    }
    mt_ctx_free(&c);
}

/* bf16 rounding written another way than mt_bf16_from_floats: of the two bf16 values around f
   (f with its low 16 bits cleared, and the next one away from zero), the nearer; on a tie the
   one whose last kept bit is 0; above the largest bf16, infinity stands for 2^128 (IEEE's
   overflow rule). */
static float bf16_ref(float f) {
    if (isnan(f) || isinf(f)) return f;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lo_u = u & 0xffff0000u, hi_u = lo_u + 0x10000u;
    float lo, hi;
    memcpy(&lo, &lo_u, 4);
    memcpy(&hi, &hi_u, 4);
    double dl = fabs((double)f - lo), dh = fabs((isinf(hi) ? copysign(0x1p128, f) : hi) - f);
    return dl < dh ? lo : dh < dl ? hi : ((lo_u >> 16) & 1) ? hi : lo;
}

/* Round to nearest even at the ties, NaN and infinities kept, overflow to infinity. */
static void test_bf16_rounding(void) {
    const float cases[] = {1.0f + 0x1p-8f,
                           1.0f + 3 * 0x1p-8f,
                           -(1.0f + 0x1p-8f),
                           1.0f + 0x1p-8f + 0x1p-20f,
                           3.14159265f,
                           -2.5e-30f,
                           1e-40f,
                           0x1.fffffep127f,
                           INFINITY,
                           -INFINITY,
                           0.0f,
                           -0.0f};
    enum { N = sizeof cases / sizeof *cases };
    mt_bf16 h[N];
    mt_bf16_from_floats(h, cases, N);
    for (int i = 0; i < N; i++) {
        float got = mt_bf16_to_float(h[i]), want = bf16_ref(cases[i]);
        CHECK(memcmp(&got, &want, 4) == 0, "bf16(%a) = %a, expected %a", cases[i], got, want);
    }
    float nan = NAN;
    mt_bf16 hn;
    mt_bf16_from_floats(&hn, &nan, 1);
    CHECK(isnan(mt_bf16_to_float(hn)), "bf16(NaN) is not a NaN: %a", mt_bf16_to_float(hn));
    /* many random values, and every sign and exponent */
    mt_rng r;
    mt_rng_seed(&r, 5);
    enum { R = 4096 };
    static float x[R];
    static mt_bf16 y[R];
    for (int i = 0; i < R; i++) {
        uint32_t u = (uint32_t)mt_rng_u64(&r);
        memcpy(&x[i], &u, 4);
        if (isnan(x[i])) x[i] = 1.0f;
    }
    mt_bf16_from_floats(y, x, R);
    int bad = 0;
    for (int i = 0; i < R; i++) {
        float got = mt_bf16_to_float(y[i]), want = bf16_ref(x[i]);
        bad += memcmp(&got, &want, 4) != 0;
    }
    CHECK(bad == 0, "bf16 rounding: %d of %d random floats rounded wrongly", bad, R);
}

/* The GEMM layer on a size above mt's split threshold, M not a multiple of 16, every transpose,
   with and without bias, beta 0 and 1; every backend (OpenBLAS, oneDNN fp32, oneDNN bf16 when
   available), on 1 and 2 threads and inside a parallel region (each thread its own product, as
   the replicas): the row blocks must cover C exactly once, and a bf16 product must equal the
   fp32 product of the bf16-rounded operands (accumulation aside). */
static void test_gemm(void) {
    mt_rng r;
    mt_rng_seed(&r, 11);
    enum { M = 100, N = 70, K = 60 };
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C = malloc(sizeof(float) * 2 * M * N), *C0 = malloc(sizeof(float) * M * N);
    float *Ar = malloc(sizeof(float) * M * K), *Br = malloc(sizeof(float) * K * N);
    mt_bf16 *Ab = malloc(sizeof(mt_bf16) * M * K), *Bb = malloc(sizeof(mt_bf16) * K * N);
    float bias[N];
    for (int i = 0; i < M * K; i++) A[i] = 2 * mt_rng_uniform(&r) - 1, Ar[i] = bf16_ref(A[i]);
    for (int i = 0; i < K * N; i++) B[i] = 2 * mt_rng_uniform(&r) - 1, Br[i] = bf16_ref(B[i]);
    for (int i = 0; i < M * N; i++) C0[i] = 2 * mt_rng_uniform(&r) - 1;
    for (int i = 0; i < N; i++) bias[i] = 2 * mt_rng_uniform(&r) - 1;
    mt_bf16_from_floats(Ab, A, M * K);
    mt_bf16_from_floats(Bb, B, K * N);
    int threads = mt_threads();
    mt_gemm_backend forced = mt_gemm_backend_forced();
    const char *way_names[] = {"OpenBLAS", "oneDNN fp32", "oneDNN bf16"};
    for (int way = 0; way < 3; way++) {
        if (way == 1 && !mt_gemm_has_onednn()) continue;
        if (way == 2 && mt_bf16_check(NULL) != MT_OK) continue;
        if (way < 2) mt_gemm_set_backend(way ? MT_GEMM_ONEDNN : MT_GEMM_OPENBLAS, NULL);
        for (int th = 1; th <= 3; th++) /* 3: two threads, each its own product */
            for (int v = 0; v < 12; v++) {
                bool ta = v & 1, tb = v & 2;
                int mode = v >> 2; /* 0: beta 0, 1: beta 1, 2: bias */
                mt_set_threads(th == 1 ? 1 : 2);
                memcpy(C, C0, sizeof(float) * M * N);
                memcpy(C + M * N, C0, sizeof(float) * M * N);
                float beta = mode == 1 ? 1.0f : 0.0f;
                const float *bs = mode == 2 ? bias : NULL;
                /* the replicas' case in a real region (an if(false) region would be an inactive
                   one, where mt_gemm sees no parallel region and splits as at top level) */
#define PRODUCT(t)                                                                                 \
    (way == 2 ? mt_gemm_bf16(ta, tb, M, N, K, Ab, Bb, beta, C + (t)*M * N, bs)                     \
              : mt_gemm(ta, tb, M, N, K, A, B, beta, C + (t)*M * N, bs))
                if (th == 3) {
#pragma omp parallel num_threads(2)
                    PRODUCT(omp_get_thread_num());
                } else {
                    PRODUCT(0);
                }
#undef PRODUCT
                const float *a = way == 2 ? Ar : A, *b = way == 2 ? Br : B;
                double worst = 0;
                for (int t = 0; t < (th == 3 ? 2 : 1); t++)
                    for (int i = 0; i < M; i++)
                        for (int j = 0; j < N; j++) {
                            double s = mode == 1 ? C0[i * N + j] : mode == 2 ? bias[j] : 0;
                            for (int k = 0; k < K; k++)
                                s += (double)(ta ? a[k * M + i] : a[i * K + k]) *
                                     (tb ? b[j * K + k] : b[k * N + j]);
                            worst = worst_err(worst, fabs(C[t * M * N + i * N + j] - s));
                        }
                CHECK(worst < 1e-4, "%s ta %d tb %d mode %d, %s: error %g", way_names[way], ta, tb,
                      mode,
                      th == 1   ? "1 thread"
                      : th == 2 ? "2 threads"
                                : "2 replicas",
                      worst);
            }
    }
    /* more shapes than oneDNN's cache holds on a thread (256): the least recently used
       primitives are destroyed to make room, and every product stays right, twice over */
    if (mt_bf16_check(NULL) == MT_OK) {
        double worst = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int m = 1; m <= 300; m++) {
                mt_gemm_bf16(false, false, m, 8, 8, Ab, Bb, 0.0f, C, NULL);
                for (int i = 0; i < m; i += 7)
                    for (int j = 0; j < 8; j++) {
                        double sum = 0;
                        for (int k = 0; k < 8; k++) sum += (double)Ar[i * 8 + k] * Br[k * 8 + j];
                        worst = worst_err(worst, fabs(C[i * 8 + j] - sum));
                    }
            }
        CHECK(worst < 1e-5, "oneDNN bf16 on 300 shapes, twice: error %g", worst);
    }
    mt_set_threads(threads);
    mt_gemm_set_backend(forced, NULL);
    free(A), free(B), free(C), free(C0), free(Ar), free(Br), free(Ab), free(Bb);
}

/* ---- add ---- */
static mt_tensor *build_add(mt_ctx *c, mt_tensor **in, const void *arg) {
    (void)arg;
    return mt_add(c, in[0], in[1]);
}

static void test_add(void) {
    mt_rng r;
    mt_rng_seed(&r, 4);
    mt_ctx c;
    mt_ctx_init(&c, 16 << 20, 1, NULL);
    int shapes[][3] = {{1, 1, 1}, {2, 3, 17}, {4, 5, 33}};
    for (int k = 0; k < 3; k++) {
        for (int row = 0; row < 2; row++) {
            mt_tensor *a = test_tensor(&r, 3, shapes[k], -1, 1, true);
            mt_tensor *b = row ? test_tensor(&r, 1, &shapes[k][2], -1, 1, true)
                               : test_tensor(&r, 3, shapes[k], -1, 1, true);
            mt_ctx_reset(&c);
            mt_tensor *y = mt_add(&c, a, b);
            int C = shapes[k][2];
            for (size_t i = 0; i < y->n; i++)
                CHECK(y->data[i] == a->data[i] + b->data[row ? i % C : i], "add value");
            gradcheck(row ? "add_row" : "add", build_add, NULL, 2, (mt_tensor *[]){a, b}, 1e-2,
                      1e-3);
            test_tensor_free(a);
            test_tensor_free(b);
        }
    }
    mt_ctx_free(&c);
}

/* The tape: a tensor used twice accumulates both paths; grad-free inputs get no grad;
   no-grad mode records nothing. */
static void test_tape(void) {
    mt_rng r;
    mt_rng_seed(&r, 9);
    mt_ctx c;
    mt_ctx_init(&c, 1 << 20, 1, NULL);
    mt_tensor *x = test_tensor(&r, 2, (int[]){2, 3}, -1, 1, true);
    mt_tensor *k = test_tensor(&r, 2, (int[]){2, 3}, -1, 1, false);
    mt_tensor *y = mt_add(&c, mt_add(&c, x, x), k); /* y = 2x + k */
    CHECK(c.n_nodes == 2 && y->requires_grad, "two nodes recorded");
    float dy[6] = {1, 2, 3, 4, 5, 6};
    mt_backward_from(&c, y, dy);
    for (int i = 0; i < 6; i++) CHECK(x->grad[i] == 2 * dy[i], "dx = 2 dy");
    CHECK(k->grad == NULL, "no grad for a constant");
    mt_ctx_reset(&c);
    c.grad_enabled = false;
    y = mt_add(&c, x, k);
    CHECK(c.n_nodes == 0 && !y->requires_grad && c.tape == NULL, "no-grad records nothing");
    test_tensor_free(x);
    test_tensor_free(k);
    mt_ctx_free(&c);
}

/* An add hands its output's gradient on to its first input when that has none yet (the tape's
   grad_through): the same gradients as summing, with an input used twice and with the first
   input's other consumers adding into the handed-on buffer afterwards. */
static void test_grad_through(void) {
    mt_rng r;
    mt_rng_seed(&r, 11);
    mt_ctx c;
    mt_ctx_init(&c, 1 << 20, 1, NULL);
    mt_tensor *x = test_tensor(&r, 2, (int[]){3, 5}, -1, 1, true);
    float dy[15];
    for (int i = 0; i < 15; i++) dy[i] = (float)(i + 1);
    for (int k = 0; k < 2; k++) {
        memset(x->grad, 0, sizeof dy);
        mt_ctx_reset(&c);
        mt_tensor *h = mt_scale(&c, x, 3.0f), *y;
        if (k == 0) /* h + h: h takes the gradient, then adds it to itself */
            y = mt_scale(&c, mt_add(&c, h, h), 1.0f); /* 6 x */
        else /* (h + h) + h: h + h takes it, h's own adds come later */
            y = mt_scale(&c, mt_add(&c, mt_add(&c, h, h), h), 1.0f); /* 9 x */
        mt_backward_from(&c, y, dy);
        for (int i = 0; i < 15; i++)
            CHECK(x->grad[i] == (k ? 9.0f : 6.0f) * dy[i],
                  "grad through add, case %d: dx[%d] = "
                  "%g, expected %g",
                  k, i, x->grad[i], (k ? 9.0f : 6.0f) * dy[i]);
    }
    test_tensor_free(x);
    mt_ctx_free(&c);
}

/* The op profile: a forward and a backward per recorded node, counted under the node's op, with
   results equal to an unprofiled run. */
static void test_profile(void) {
    mt_rng r;
    mt_rng_seed(&r, 10);
    mt_ctx c;
    mt_ctx_init(&c, 1 << 20, 1, NULL);
    mt_profile prof = {0};
    c.profile = &prof;
    mt_tensor *x = test_tensor(&r, 2, (int[]){4, 3}, -1, 1, true);
    mt_tensor *w = test_tensor(&r, 2, (int[]){3, 5}, -1, 1, true);
    mt_tensor *h = mt_matmul(&c, x, w, false, false);
    mt_tensor *y = mt_add(&c, mt_add(&c, h, h), mt_scale(&c, h, 2.0f)); /* 4 x w */
    mt_backward(&c, mt_sum(&c, y));
    CHECK(prof.n == 4, "profile rows: %d kinds of op, expected 4", prof.n);
    const char *names[] = {"matmul", "add", "scale", "sum"};
    long calls[] = {1, 2, 1, 1};
    for (int k = 0; k < 4; k++) {
        int i = 0;
        while (i < prof.n && strcmp(prof.row[i].op->name, names[k])) i++;
        CHECK(i < prof.n && prof.row[i].calls[0] == calls[k] && prof.row[i].calls[1] == calls[k] &&
                  prof.row[i].s[0] >= 0 && prof.row[i].s[1] >= 0,
              "profile of %s: expected %ld forward and backward calls", names[k], calls[k]);
    }
    for (int i = 0; i < 12; i++) { /* d sum(4 x w) / dx_ij = 4 sum_k w_jk */
        double g = 0;
        for (int k = 0; k < 5; k++) g += 4.0 * w->data[(i % 3) * 5 + k];
        CHECK(fabs(x->grad[i] - g) < 1e-5, "profiled backward: dx[%d] = %g, expected %g", i,
              x->grad[i], g);
    }
    test_tensor_free(x);
    test_tensor_free(w);
    mt_ctx_free(&c);
}

/* The GEMM layer's one-row products (M = 1, what a token of generation multiplies), through
   mt_gemm (dense, with bias and beta) and mt_gemm_strided (blocks of wider rows, alpha): against
   double loops, for B read as B^T and as B, lengths with and without vector tails, B small and
   large enough to split across threads; the bits are the same on 1 and 2 threads (each output
   is one thread's). */
static void test_gemv(void) {
    mt_rng r;
    mt_rng_seed(&r, 12);
    enum { NMAX = 301, KMAX = 133, LD = 140 }; /* B's rows stride LD in the strided products */
    float *A = malloc(sizeof(float) * KMAX), *B = malloc(sizeof(float) * NMAX * LD);
    float *C0 = malloc(sizeof(float) * NMAX), *C = malloc(sizeof(float) * 2 * NMAX);
    float bias[NMAX];
    for (int i = 0; i < KMAX; i++) A[i] = 2 * mt_rng_uniform(&r) - 1;
    for (int i = 0; i < NMAX * LD; i++) B[i] = 2 * mt_rng_uniform(&r) - 1;
    for (int i = 0; i < NMAX; i++) C0[i] = 2 * mt_rng_uniform(&r) - 1, bias[i] = C0[i] / 2;
    int shapes[][2] = {{48, 16}, {7, 5}, {301, 133}, {130, 131}}; /* N, K; 2 and 3 split */
    int threads = mt_threads();
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int v = 0; v < 8; v++) {
            int N = shapes[sh][0], K = shapes[sh][1], mode = v >> 1; /* beta 0, 1, bias, strided */
            bool tb = v & 1;
            int ldb = mode == 3 ? (tb ? LD : N + 3) : tb ? K : N;
            float alpha = mode == 3 ? 0.5f : 1.0f, beta = mode == 1 ? 1.0f : 0.0f;
            for (int th = 1; th <= 2; th++) {
                mt_set_threads(th);
                float *c = C + (th - 1) * NMAX;
                memcpy(c, C0, sizeof(float) * N);
                if (mode == 3) mt_gemm_strided(false, tb, 1, N, K, alpha, A, K, B, ldb, 1.0f, c, N);
                else mt_gemm(false, tb, 1, N, K, A, B, beta, c, mode == 2 ? bias : NULL);
            }
            double worst = 0;
            for (int j = 0; j < N; j++) {
                double s = mode == 1 || mode == 3 ? C0[j] : mode == 2 ? bias[j] : 0;
                double dot = 0;
                for (int k = 0; k < K; k++)
                    dot += (double)A[k] * (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                worst = worst_err(worst, fabs(C[j] - (s + alpha * dot)));
            }
            CHECK(worst < 1e-4, "one-row product N %d K %d tb %d mode %d: error %g", N, K, tb, mode,
                  worst);
            CHECK(!memcmp(C, C + NMAX, sizeof(float) * N),
                  "one-row product N %d K %d tb %d mode %d: 1 and 2 threads differ", N, K, tb,
                  mode);
        }
    mt_set_threads(threads);
    free(A), free(B), free(C0), free(C);
}

int main(void) {
    mt_set_threads(0);
    test_rng();
    test_params();
    test_arena();
    test_tape();
    test_grad_through();
    test_profile();
    test_matmul();
    test_bf16_rounding();
    test_gemm();
    test_gemv();
    test_add();
    return check_finish("test_tensor");
}
