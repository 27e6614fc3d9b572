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
 * (Adam's second moment; of a hidden matrix, NorMuon's v of its R rows in its first R floats, or
 * zero). The products go through mt_gemm, or mt_gemm_bf16 on inputs rounded to bf16 when the model
 * runs bf16 (the reference runs the whole iteration in bf16; here the sums and the elementwise
 * terms stay fp32).
 *
 * Options (docs/optimizers.md has the formulas and sources):
 *   --muon-ortho polar  Polar Express (arXiv 2505.16932): X = u / (1.01 |u|_F + eps), then
 *     iteration i takes its own (a_i, b_i, c_i) of POLAR (nanochat's polar_express_coeffs)
 *   --normuon  NorMuon (arXiv 2510.05491), after the iteration, per row r of X (R of them):
 *     q_r = mean_j X_rj^2;  v_r = b2 v_r + (1 - b2) q_r (state "v", its first R floats);
 *     d_r = 1 / sqrt(max(v_r, 1e-10));  X_rj *= d_r |X|_F / max(|d X|_F, 1e-10),
 *     |X|_F^2 = K sum_r q_r,  |d X|_F^2 = K sum_r q_r d_r^2 (the norm kept, nanochat's)
 *   --cautious-wd  (arXiv 2510.12402) the decay only where X p >= 0:
 *     p = (X p >= 0 ? 1 - lr wd : 1) p - lr s X (nanochat's mask) */
#include <math.h>
#include <string.h>

#include "../tensor/gemm.h"
#include "adam_internal.h"

typedef struct {
    mt_adam_scalars adam; /* the other tensors: AdamW at their rate */
    float lr, keep;       /* the hidden matrices: rate, 1 - lr wd (of those that decay) */
    float beta, omb;      /* momentum, 1 - momentum */
    float a, b, c, eps, rms;
    float safety;   /* X = u / ((1 + safety) |u|_F + eps): 0 (ns5), 0.01 (polar) */
    float b2, omb2; /* NorMuon's beta2, 1 - beta2 */
    int ns_steps;
    bool nesterov, match_adamw, polar, normuon, cautious;
} muon_scalars;
_Static_assert(sizeof(muon_scalars) <= MT_OPTIM_SCALARS, "muon_scalars");

/* Polar Express's (a, b, c) for each of 5 iterations (num_iters 5, safety factor 2e-2, cushion
   2): karpathy/nanochat nanochat/optim.py's polar_express_coeffs (from modded-nanogpt). */
enum { POLAR_STEPS = 5 };
static const float POLAR[POLAR_STEPS][3] = {
    {8.156554524902461f, -22.48329292557795f, 15.878769915207462f},
    {4.042929935166739f, -2.808917465908714f, 0.5000178451051316f},
    {3.8916678022926607f, -2.772484153217685f, 0.5060648178503393f},
    {3.285753657755655f, -2.3681294933425376f, 0.46449024233003106f},
    {2.3465413258596377f, -1.7097828382687081f, 0.42323551169305323f},
};

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
        .safety = c->muon_ortho == MT_MUON_ORTHO_POLAR ? 0.01f : 0.0f,
        .b2 = (float)c->normuon_beta2,
        .omb2 = (float)(1 - c->normuon_beta2),
        .ns_steps = c->ns_steps,
        .nesterov = c->muon_nesterov,
        .match_adamw = c->muon_scale == MT_MUON_SCALE_MATCH_ADAMW,
        .polar = c->muon_ortho == MT_MUON_ORTHO_POLAR,
        .normuon = c->normuon,
        .cautious = c->cautious_wd,
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
static void ns_iteration(ns_bufs *w, const float abc[3]) {
    int R = w->R, K = w->K, S = w->S;
    size_t n = (size_t)R * (size_t)K, SS = (size_t)S * (size_t)S;
    bool wide = R <= K;
    if (w->bf16) mt_bf16_from_floats(w->Xh, w->X, n);
    if (wide) product(w->bf16, false, true, R, R, K, w->X, w->Xh, w->X, w->Xh, 0, w->A);
    else product(w->bf16, true, false, K, K, R, w->X, w->Xh, w->X, w->Xh, 0, w->A);
    if (w->bf16) mt_bf16_from_floats(w->Ah, w->A, SS);
    product(w->bf16, false, false, S, S, S, w->A, w->Ah, w->A, w->Ah, 0, w->B);
    const float a = abc[0], b = abc[1], c = abc[2];
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
   norm times 1 + safety (summed in double, in a fixed order). */
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
    const float inv = (float)(1 / ((1 + (double)k->safety) * sqrt(ss) + k->eps));
#pragma omp simd
    for (size_t i = 0; i < x->n; i++) X[i] *= inv;
}

/* NorMuon: v (R) = b2 v + (1 - b2) q, q_r = the mean square of X's row r; X's rows scaled by
   d_r = 1 / sqrt(max(v_r, 1e-10)), then X by |X|_F / |d X|_F (sums in double, in row order). */
static void normuon_rows(float *restrict X, float *restrict v, int R, int K,
                         const muon_scalars *k) {
    double before = 0, after = 0;
    for (int r = 0; r < R; r++) {
        const float *x = X + (size_t)r * (size_t)K;
        double ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int j = 0; j < K; j++) ss += (double)x[j] * x[j];
        float q = (float)(ss / K);
        v[r] = k->b2 * v[r] + k->omb2 * q;
        double d2 = 1 / fmax(v[r], 1e-10);
        before += ss, after += ss * d2;
    }
    const double keep_norm = sqrt(before) / fmax(sqrt(after), 1e-10);
    for (int r = 0; r < R; r++) {
        float *x = X + (size_t)r * (size_t)K;
        const float d = (float)(keep_norm / sqrt(fmax(v[r], 1e-10)));
#pragma omp simd
        for (int j = 0; j < K; j++) x[j] *= d;
    }
}

static void muon_matrix(const mt_optim_tensor *x, const muon_scalars *k) {
    ns_bufs w = ns_carve(x);
    momentum_into(x, k, w.X);
    const float ns[3] = {k->a, k->b, k->c};
    for (int i = 0; i < k->ns_steps; i++) ns_iteration(&w, k->polar ? POLAR[i] : ns);
    if (k->normuon) normuon_rows(w.X, x->s[1], w.R, w.K, k);
    double R = w.R, K = w.K;
    float s = k->match_adamw ? (float)(k->rms * sqrt(R > K ? R : K))
                             : (float)sqrt(R > K ? R / K : 1);
    const float step = k->lr * s, keep = x->e->decay ? k->keep : 1.0f;
    const bool cautious = k->cautious;
    float *restrict p = x->p;
    const float *restrict X = w.X;
#pragma omp simd
    for (size_t i = 0; i < x->n; i++) {
        float kp = cautious && X[i] * p[i] < 0 ? 1.0f : keep;
        p[i] = p[i] * kp - step * X[i];
    }
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
    if (c->muon_ortho == MT_MUON_ORTHO_POLAR && c->ns_steps > POLAR_STEPS)
        return mt_errorf(err, MT_EINVAL,
                         "--ns-steps is %d; --muon-ortho polar has %d coefficient triples: give "
                         "--ns-steps 1..%d (or --muon-ortho ns5)",
                         c->ns_steps, POLAR_STEPS, POLAR_STEPS);
    if (!(c->normuon_beta2 >= 0 && c->normuon_beta2 < 1))
        return mt_errorf(err, MT_EINVAL, "--normuon-beta2 is %g; it must be in [0, 1)",
                         c->normuon_beta2);
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
