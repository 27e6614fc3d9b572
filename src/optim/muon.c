/* Muon (KellerJordan/Muon muon.py, "MomentUm Orthogonalized by Newton-Schulz") for the hidden
 * matrices, AdamW for every other tensor, as one optimizer kind. Dimension letters: R, K the
 * matrix's rows and columns (torch's [out, in]), S = min(R, K).
 *
 * A hidden matrix (role MT_ROLE_MATRIX, 2-D: the attention's q, k, v and output projections, the
 * FFN's, each its own matrix) is stepped whole, with gradient g:
 *   m = beta m + (1 - beta) g;  u = nesterov ? (1 - beta) g + beta m : m
 *   X = u / (|u|_F + eps);  ns_steps times: A = X X^T, B = b A + c A A, X = a X + B X
 *     (a, b, c) = (3.4445, -4.7750, 2.0315); a tall X (R > K) is iterated as X^T, which here is
 *     A = X^T X, X = a X + X B: the same products, no transpose stored
 *   p = (1 - lr wd) p - lr s X,  s = sqrt(max(1, R / K)) (reference) or rms sqrt(max(R, K))
 * Every other trainable tensor (embeddings, the head, norms' gains, biases, scalars) takes AdamW
 * (adam.c's kernel) at its own rate. State: "m" (Muon's momentum, Adam's first moment) and "v"
 * (Adam's second moment; zero for the hidden matrices). The products go through mt_gemm, or
 * mt_gemm_bf16 on inputs rounded to bf16 when the model runs bf16 (the reference runs the whole
 * iteration in bf16; here the sums and the elementwise terms stay fp32). */
#include <math.h>
#include <string.h>

#include "../tensor/gemm.h"
#include "adam_internal.h"

typedef struct {
    mt_adam_scalars adam; /* the other tensors: AdamW at their rate */
    float lr, keep;       /* the hidden matrices: rate, 1 - lr wd (of those that decay) */
    float beta, omb;      /* momentum, 1 - momentum */
    float a, b, c, eps, rms;
    int ns_steps;
    bool nesterov, match_adamw;
} muon_scalars;
_Static_assert(sizeof(muon_scalars) <= MT_OPTIM_SCALARS, "muon_scalars");

static int muon_slots(const mt_optim_config *c) {
    (void)c;
    return 2;
}

/* A group's rate at schedule lr: its own rate scaled by the schedule's shape, or lr itself. */
static double group_lr(double rate, const mt_optim_config *c, double lr) {
    return rate < 0 ? lr : rate * (lr / c->sched.lr);
}

static void muon_scalars_at(const mt_optim_config *c, long t, double lr, void *out) {
    double mlr = group_lr(c->muon_lr, c, lr), wd = c->muon_wd < 0 ? c->weight_decay : c->muon_wd;
    muon_scalars k = {
        .adam = mt_adam_scalars_at(c, t, group_lr(c->adam_lr, c, lr), true),
        .lr = (float)mlr,
        .keep = (float)(1 - mlr * wd),
        .beta = (float)c->muon_momentum,
        .omb = (float)(1 - c->muon_momentum),
        .a = (float)c->ns_a,
        .b = (float)c->ns_b,
        .c = (float)c->ns_c,
        .eps = (float)c->ns_eps,
        .rms = (float)c->muon_rms,
        .ns_steps = c->ns_steps,
        .nesterov = c->muon_nesterov,
        .match_adamw = c->muon_scale == MT_MUON_SCALE_MATCH_ADAMW,
    };
    memcpy(out, &k, sizeof k);
}

/* The hidden matrices: the 2-D linear weights (the head and the patch projection have role
   MT_ROLE_HEAD, embeddings MT_ROLE_EMBEDDING). */
static bool muon_whole(const mt_optim_config *c, const mt_param *e) {
    (void)c;
    return e->role == MT_ROLE_MATRIX && e->ndim == 2;
}

/* Floats, each part padded to 16 (64 bytes): X and the next X (R K each), A and B (S^2 each),
   and their bf16 copies (half a float each). */
static size_t part(size_t floats) { return (floats + 15) / 16 * 16; }
static size_t muon_scratch(const mt_optim_config *c, const mt_param *e) {
    (void)c;
    size_t n = e->n, S = (size_t)(e->shape[0] < e->shape[1] ? e->shape[0] : e->shape[1]);
    return 2 * part(n) + 2 * part(S * S) + part((n + 1) / 2) + 2 * part((S * S + 1) / 2);
}

/* The Newton-Schulz buffers, carved from the scratch. */
typedef struct {
    float *X, *Xn, *A, *B;
    mt_bf16 *Xh, *Ah, *Bh; /* bf16 copies of X, A, B: the products' inputs in bf16 */
    int R, K, S;
    bool bf16;
} ns_bufs;

static ns_bufs ns_carve(const mt_optim_tensor *x) {
    ns_bufs w = {.R = x->e->shape[0], .K = x->e->shape[1], .bf16 = x->bf16};
    size_t n = x->n;
    w.S = w.R < w.K ? w.R : w.K;
    size_t SS = (size_t)w.S * (size_t)w.S;
    float *at = x->scratch;
    w.X = at, at += part(n);
    w.Xn = at, at += part(n);
    w.A = at, at += part(SS);
    w.B = at, at += part(SS);
    w.Xh = (mt_bf16 *)at, at += part((n + 1) / 2);
    w.Ah = (mt_bf16 *)at, at += part((SS + 1) / 2);
    w.Bh = (mt_bf16 *)at;
    return w;
}

/* C (M, N) = op(A) op(B) + beta C, fp32 or on the bf16 copies Ah, Bh. */
static void product(bool bf16, bool ta, bool tb, int M, int N, int K, const float *A,
                    const mt_bf16 *Ah, const float *B, const mt_bf16 *Bh, float beta, float *C) {
    if (bf16) mt_gemm_bf16(ta, tb, M, N, K, Ah, Bh, beta, C, NULL);
    else mt_gemm(ta, tb, M, N, K, A, B, beta, C, NULL);
}

/* One iteration: A = X X^T (wide) or X^T X (tall), B = b A + c A A, X = a X + B X or a X + X B. */
static void ns_iteration(ns_bufs *w, const muon_scalars *k) {
    int R = w->R, K = w->K, S = w->S;
    size_t n = (size_t)R * (size_t)K, SS = (size_t)S * (size_t)S;
    bool wide = R <= K;
    if (w->bf16) mt_bf16_from_floats(w->Xh, w->X, n);
    if (wide) product(w->bf16, false, true, R, R, K, w->X, w->Xh, w->X, w->Xh, 0, w->A);
    else product(w->bf16, true, false, K, K, R, w->X, w->Xh, w->X, w->Xh, 0, w->A);
    if (w->bf16) mt_bf16_from_floats(w->Ah, w->A, SS);
    product(w->bf16, false, false, S, S, S, w->A, w->Ah, w->A, w->Ah, 0, w->B);
    const float a = k->a, b = k->b, c = k->c;
#pragma omp simd
    for (size_t i = 0; i < SS; i++) w->B[i] = b * w->A[i] + c * w->B[i];
#pragma omp simd
    for (size_t i = 0; i < n; i++) w->Xn[i] = a * w->X[i];
    if (w->bf16) mt_bf16_from_floats(w->Bh, w->B, SS);
    if (wide) product(w->bf16, false, false, R, K, R, w->B, w->Bh, w->X, w->Xh, 1, w->Xn);
    else product(w->bf16, false, false, R, K, K, w->X, w->Xh, w->B, w->Bh, 1, w->Xn);
    float *t = w->X;
    w->X = w->Xn, w->Xn = t;
}

/* m = beta m + (1 - beta) g, X = the Nesterov or plain momentum, normalised by its Frobenius
   norm (summed in double, in a fixed order). */
static void momentum_into(const mt_optim_tensor *x, const muon_scalars *k, float *X) {
    float *restrict m = x->s[0];
    const float *restrict g = x->g;
    const float beta = k->beta, omb = k->omb;
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (size_t i = 0; i < x->n; i++) {
        m[i] = beta * m[i] + omb * g[i];
        X[i] = k->nesterov ? omb * g[i] + beta * m[i] : m[i];
        ss += (double)X[i] * X[i];
    }
    const float inv = (float)(1 / (sqrt(ss) + k->eps));
#pragma omp simd
    for (size_t i = 0; i < x->n; i++) X[i] *= inv;
}

static void muon_matrix(const mt_optim_tensor *x, const muon_scalars *k) {
    ns_bufs w = ns_carve(x);
    momentum_into(x, k, w.X);
    for (int i = 0; i < k->ns_steps; i++) ns_iteration(&w, k);
    double R = w.R, K = w.K;
    float s = k->match_adamw ? (float)(k->rms * sqrt(R > K ? R : K))
                             : (float)sqrt(R > K ? R / K : 1);
    const float step = k->lr * s, keep = x->e->decay ? k->keep : 1.0f;
    float *restrict p = x->p;
    const float *restrict X = w.X;
#pragma omp simd
    for (size_t i = 0; i < x->n; i++) p[i] = p[i] * keep - step * X[i];
}

/* A hidden matrix whole (it comes with scratch), or a piece of another tensor: AdamW. */
static void muon_step(const mt_optim_tensor *x, const void *scalars) {
    muon_scalars k;
    memcpy(&k, scalars, sizeof k);
    if (x->scratch) muon_matrix(x, &k);
    else {
        mt_adam_scalars a = mt_adam_entry(&k.adam, x->e);
        mt_adam_kernel(x->p, x->g, x->s[0], x->s[1], x->n, &a, a.l2, a.keep);
    }
}

static mt_status muon_validate(const mt_optim_config *c, mt_err *err) {
    if (!(c->muon_momentum >= 0 && c->muon_momentum < 1))
        return mt_errorf(err, MT_EINVAL, "--muon-momentum is %g; it must be in [0, 1)",
                         c->muon_momentum);
    if (c->ns_steps < 1)
        return mt_errorf(err, MT_EINVAL,
                         "--ns-steps is %d; Newton-Schulz needs at least 1 iteration (5: the "
                         "reference)",
                         c->ns_steps);
    struct {
        const char *flag;
        double v;
    } rates[] = {{"--muon-lr", c->muon_lr}, {"--adam-lr", c->adam_lr}, {"--muon-wd", c->muon_wd}};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (!(rates[i].v == -1 || (rates[i].v >= 0 && isfinite(rates[i].v))))
            return mt_errorf(err, MT_EINVAL, "%s is %g; it must be -1 (the default) or >= 0",
                             rates[i].flag, rates[i].v);
    if ((c->muon_lr >= 0 || c->adam_lr >= 0) && !(c->sched.lr > 0))
        return mt_errorf(err, MT_EINVAL,
                         "--muon-lr and --adam-lr follow the schedule's shape, lr_at(step) / "
                         "--lr, and --lr is %g: give --lr > 0",
                         c->sched.lr);
    if (!(c->ns_eps > 0 && isfinite(c->ns_eps)) || !(c->muon_rms >= 0 && isfinite(c->muon_rms)))
        return mt_errorf(err, MT_EINVAL,
                         "--ns-eps is %g and --muon-rms %g; --ns-eps must be > 0 (a zero "
                         "momentum divides by it) and --muon-rms >= 0",
                         c->ns_eps, c->muon_rms);
    if (!isfinite(c->ns_a) || !isfinite(c->ns_b) || !isfinite(c->ns_c))
        return mt_errorf(err, MT_EINVAL, "--ns-coef-a, --ns-coef-b, --ns-coef-c must be finite");
    return MT_OK;
}

const mt_optim_type mt_optim_muon = {
    .name = "muon",
    .slot_names = {"m", "v"},
    .slots = muon_slots,
    .scalars = muon_scalars_at,
    .step = muon_step,
    .whole = muon_whole,
    .scratch = muon_scratch,
    .needs_whole = true,
    .validate = muon_validate,
};
