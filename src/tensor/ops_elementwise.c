/* Elementwise ops: add, mul, scale, the activations, the soft cap and dropout. Loops are
   OpenMP-parallel above MT_PAR_MIN elements and vectorise. */
#include <stdio.h>
#include <string.h>

#include "activation.h"
#include "tensor.h"
#include "vmath.h"

/* ---- add: y = a + b, b the same shape as a or one row (C,) broadcast over a's rows ---------- */

static void add_forward(mt_node *n) {
    const float *a = n->in[0]->data, *b = n->in[1]->data;
    float *y = n->out->data;
    size_t N = n->out->n, C = (size_t)n->i[0]; /* C = 0: same shape */
    if (!C) {
        MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++) y[i] = a[i] + b[i];);
    } else {
        long R = (long)(N / C);
        MT_PARALLEL_FOR(N >= MT_PAR_MIN, for (long r = 0; r < R; r++) {
            _Pragma("omp simd") for (size_t j = 0; j < C; j++) y[r * C + j] = a[r * C + j] + b[j];
        });
    }
}

/* da += dy (nothing when da is dy: the tape handed dy on to a);  db += dy, or for a broadcast
   row db_j += sum_r dy_rj (rows summed in order). */
static void add_backward(mt_node *n) {
    const float *dy = n->out->grad;
    float *da = n->in[0]->grad, *db = n->in[1]->grad;
    size_t N = n->out->n, C = (size_t)n->i[0];
    if (da && da != dy)
        MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++) da[i] += dy[i];);
    if (db && !C) {
        MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++) db[i] += dy[i];);
    } else if (db) {
        for (size_t r = 0; r < N / C; r++)
#pragma omp simd
            for (size_t j = 0; j < C; j++) db[j] += dy[r * C + j];
    }
}

static const mt_op OP_ADD = {.name = "add", .forward = add_forward, .backward = add_backward};

mt_tensor *mt_add(mt_ctx *c, mt_tensor *a, mt_tensor *b) {
    char sa[64], sb[64];
    bool row = !mt_same_shape(a, b);
    MT_ASSERT(!row || (b->ndim == 1 && b->shape[0] == mt_cols(a)),
              "add: %s and %s: b must have a's shape or be one row of %d", mt_shape_str(a, sa, 64),
              mt_shape_str(b, sb, 64), mt_cols(a));
    mt_tensor *out = mt_tensor_like(c, a);
    mt_node *n = mt_node_new(c, &OP_ADD, out, 2, (mt_tensor *[]){a, b});
    n->i[0] = row ? mt_cols(a) : 0;
    n->grad_through = true;
    mt_node_run(c, n);
    return out;
}

/* ---- mul: y = a * b, same shape ------------------------------------------------------------ */

static void mul_forward(mt_node *n) {
    const float *a = n->in[0]->data, *b = n->in[1]->data;
    float *y = n->out->data;
    size_t N = n->out->n;
    MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++) y[i] = a[i] * b[i];);
}

/* da += dy * b;  db += dy * a (two loops: a and b may be the same tensor). */
static void mul_backward(mt_node *n) {
    const float *a = n->in[0]->data, *b = n->in[1]->data, *dy = n->out->grad;
    float *da = n->in[0]->grad, *db = n->in[1]->grad;
    size_t N = n->out->n;
    if (da) {
        MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN,
                             for (size_t i = 0; i < N; i++) da[i] += dy[i] * b[i];);
    }
    if (db) {
        MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN,
                             for (size_t i = 0; i < N; i++) db[i] += dy[i] * a[i];);
    }
}

static const mt_op OP_MUL = {.name = "mul", .forward = mul_forward, .backward = mul_backward};

mt_tensor *mt_mul(mt_ctx *c, mt_tensor *a, mt_tensor *b) {
    char sa[64], sb[64];
    MT_ASSERT(mt_same_shape(a, b), "mul: %s and %s must have the same shape",
              mt_shape_str(a, sa, 64), mt_shape_str(b, sb, 64));
    mt_tensor *out = mt_tensor_like(c, a);
    mt_node *n = mt_node_new(c, &OP_MUL, out, 2, (mt_tensor *[]){a, b});
    mt_node_run(c, n);
    return out;
}

/* ---- scale: y = s * x, s = f[0], or the scalar tensor in[1] (1) when given ------------------- */

static float scale_of(const mt_node *n) { return n->in[1] ? n->in[1]->data[0] : n->f[0]; }

static void scale_forward(mt_node *n) {
    const float *x = n->in[0]->data, s = scale_of(n);
    float *y = n->out->data;
    size_t N = n->out->n;
    MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++) y[i] = s * x[i];);
}

/* dx += s * dy; a learned s: ds += sum dy x (in order, in double) */
static void scale_backward(mt_node *n) {
    const float *dy = n->out->grad, *x = n->in[0]->data, s = scale_of(n);
    float *dx = n->in[0]->grad, *ds = n->in[1] ? n->in[1]->grad : NULL;
    size_t N = n->out->n;
    if (ds) {
        double sum = 0;
        for (size_t i = 0; i < N; i++) sum += (double)dy[i] * x[i];
        ds[0] += (float)sum;
    }
    if (!dx) return;
    MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++) dx[i] += s * dy[i];);
}

static const mt_op OP_SCALE = {.name = "scale",
                               .forward = scale_forward,
                               .backward = scale_backward};

static mt_tensor *scale(mt_ctx *c, mt_tensor *x, mt_tensor *s, float sf) {
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, &OP_SCALE, out, s ? 2 : 1, (mt_tensor *[]){x, s});
    n->f[0] = sf;
    mt_node_run(c, n);
    return out;
}

mt_tensor *mt_scale(mt_ctx *c, mt_tensor *x, float s) { return scale(c, x, NULL, s); }

mt_tensor *mt_scale_by(mt_ctx *c, mt_tensor *x, mt_tensor *s) {
    char buf[64];
    MT_ASSERT(s->n == 1, "scale_by: s %s, expected one element", mt_shape_str(s, buf, 64));
    return scale(c, x, s, 0.0f);
}

/* ---- activations: y = F(x), dx += dy * F'(x) --------------------------------------------------
 * Each activation is one function name_fd(x, &d) that returns F(x) and stores F'(x), sharing the
 * work of the two (one sigmoid, one erfc); name_f and name_df, the value or the derivative alone,
 * are it inlined with the other part left dead. These are the only formulas in mt: the standalone
 * ops here and the fused FFN (nn/linear.c) both run them through mt_act_forward,
 * mt_act_forward_grad and mt_act_backward (activation.h). */

/* GELU, tanh form (Hendrycks and Gimpel 2016; GPT-2; torch's approximate='tanh'):
   y = x/2 (1 + tanh(u)),  u = k (x + 0.044715 x^3),  k = sqrt(2/pi); as 1 + tanh(u) = 2 s,
   s = sigmoid(2u):  y = x s,  y' = s + x s (1 - s) 2u',  2u' = 2k (1 + 3 * 0.044715 x^2). */
static inline float gelu_fd(float x, float *d) {
    float s = mt_vsigmoidf(1.5957691216f * (x + 0.044715f * x * x * x));
    *d = s + x * s * (1.0f - s) * 1.5957691216f * (1.0f + 0.134145f * x * x);
    return x * s;
}

/* GELU, exact: y = x Phi(x),  Phi(x) = erfc(-x / sqrt 2) / 2;  y' = Phi(x) + x phi(x),
   phi(x) = exp(-x^2/2) / sqrt(2 pi) */
static inline float gelu_erf_fd(float x, float *d) {
    float phi = 0.5f * mt_verfcf(-0.7071067812f * x);
    *d = phi + x * 0.3989422804f * mt_vexpf_below88(-0.5f * x * x);
    return x * phi;
}

/* ReLU: y = max(x, 0);  y' = [x > 0] (0 at 0, as torch) */
static inline float relu_fd(float x, float *d) {
    *d = x > 0.0f ? 1.0f : 0.0f;
    return x > 0.0f ? x : 0.0f;
}

/* Squared ReLU (Primer, So et al. 2021, arXiv 2109.08668; modded-nanogpt's
   F.relu(x).square()): y = relu(x)^2;  y' = 2 relu(x) */
static inline float relu2_fd(float x, float *d) {
    float r = x > 0.0f ? x : 0.0f;
    *d = 2.0f * r;
    return r * r;
}

/* SiLU (swish): y = x s,  s = sigmoid(x);  y' = s (1 + x (1 - s)) */
static inline float silu_fd(float x, float *d) {
    float s = mt_vsigmoidf(x);
    *d = s * (1.0f + x * (1.0f - s));
    return x * s;
}

#define ACT_PARTS(NAME)                                                                            \
    static inline float NAME##_f(float x) {                                                        \
        float d;                                                                                   \
        return NAME##_fd(x, &d);                                                                   \
    }                                                                                              \
    static inline float NAME##_df(float x) {                                                       \
        float d;                                                                                   \
        NAME##_fd(x, &d);                                                                          \
        return d;                                                                                  \
    }
ACT_PARTS(gelu)
ACT_PARTS(gelu_erf)
ACT_PARTS(relu)
ACT_PARTS(relu2)
ACT_PARTS(silu)

/* One vectorised loop per kind: the switch stays outside the loops. */
// clang-format off
#define ACT_LOOP(EXPR) MT_PARALLEL_FOR_SIMD(n >= MT_PAR_MIN, for (size_t i = 0; i < n; i++) EXPR;);
#define ACT_SWITCH(EXPR_OF)                                                                       \
    switch (act) {                                                                                \
    case MT_ACT_GELU: ACT_LOOP(EXPR_OF(gelu)) return;                                             \
    case MT_ACT_GELU_ERF: ACT_LOOP(EXPR_OF(gelu_erf)) return;                                     \
    case MT_ACT_RELU: ACT_LOOP(EXPR_OF(relu)) return;                                             \
    case MT_ACT_RELU2: ACT_LOOP(EXPR_OF(relu2)) return;                                           \
    case MT_ACT_SILU: ACT_LOOP(EXPR_OF(silu)) return;                                             \
    case MT_ACT_SWIGLU: break; /* two inputs: mt_swiglu_forward */                                \
    }                                                                                             \
    MT_ASSERT(0, "activation: %d is not a unary activation", (int)act);
#define ACT_Y(NAME) y[i] = NAME##_f(x[i])
#define ACT_YD(NAME) y[i] = NAME##_fd(x[i], &d[i])
#define ACT_DX_SET(NAME) dx[i] = dy[i] * NAME##_df(x[i])
#define ACT_DX_ADD(NAME) dx[i] += dy[i] * NAME##_df(x[i])
// clang-format on

void mt_act_forward(mt_act act, float *y, const float *x, size_t n) { ACT_SWITCH(ACT_Y) }

void mt_act_forward_grad(mt_act act, float *y, float *d, const float *x, size_t n) {
    ACT_SWITCH(ACT_YD)
}

/* Two sets of loops: a select on acc inside one stops the vectoriser. */
void mt_act_backward(mt_act act, float *dx, const float *dy, const float *x, size_t n, bool acc) {
    if (acc) {
        ACT_SWITCH(ACT_DX_ADD)
    } else {
        ACT_SWITCH(ACT_DX_SET)
    }
}

/* The ops: one node pair for the five, the kind in i[0]; an op record each, so the profile
   names them. */
static void act_forward(mt_node *n) {
    mt_act_forward((mt_act)n->i[0], n->out->data, n->in[0]->data, n->out->n);
}

static void act_backward(mt_node *n) {
    if (n->in[0]->grad)
        mt_act_backward((mt_act)n->i[0], n->in[0]->grad, n->out->grad, n->in[0]->data, n->out->n,
                        true);
}

static const mt_op OP_GELU = {.name = "gelu", .forward = act_forward, .backward = act_backward};
static const mt_op OP_GELU_ERF = {.name = "gelu_erf",
                                  .forward = act_forward,
                                  .backward = act_backward};
static const mt_op OP_RELU = {.name = "relu", .forward = act_forward, .backward = act_backward};
static const mt_op OP_RELU2 = {.name = "relu2", .forward = act_forward, .backward = act_backward};
static const mt_op OP_SILU = {.name = "silu", .forward = act_forward, .backward = act_backward};

static mt_tensor *activation(mt_ctx *c, const mt_op *op, mt_act act, mt_tensor *x) {
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, op, out, 1, (mt_tensor *[]){x});
    n->i[0] = (int)act;
    mt_node_run(c, n);
    return out;
}

mt_tensor *mt_gelu(mt_ctx *c, mt_tensor *x) { return activation(c, &OP_GELU, MT_ACT_GELU, x); }
mt_tensor *mt_gelu_erf(mt_ctx *c, mt_tensor *x) {
    return activation(c, &OP_GELU_ERF, MT_ACT_GELU_ERF, x);
}
mt_tensor *mt_relu(mt_ctx *c, mt_tensor *x) { return activation(c, &OP_RELU, MT_ACT_RELU, x); }
mt_tensor *mt_relu2(mt_ctx *c, mt_tensor *x) { return activation(c, &OP_RELU2, MT_ACT_RELU2, x); }
mt_tensor *mt_silu(mt_ctx *c, mt_tensor *x) { return activation(c, &OP_SILU, MT_ACT_SILU, x); }

/* ---- SwiGLU's gate: h = silu(a) g ------------------------------------------------------------ */

void mt_swiglu_forward(float *h, const float *a, const float *g, size_t n) {
    MT_PARALLEL_FOR_SIMD(n >= MT_PAR_MIN,
                         for (size_t i = 0; i < n; i++) h[i] = silu_f(a[i]) * g[i];);
}

void mt_swiglu_forward_grad(float *h, float *a, float *g, size_t n) {
    MT_PARALLEL_FOR_SIMD(n >= MT_PAR_MIN, for (size_t i = 0; i < n; i++) {
        float ds, sa = silu_fd(a[i], &ds), gi = g[i];
        h[i] = sa * gi, a[i] = gi * ds, g[i] = sa;
    });
}

/* One loop per case, so that no select on acc or NULL sits inside one (the vectoriser). dh[i] is
   read before da[i] is written: da may be dh. */
// clang-format off
#define SWIGLU_LOOP(DA, DG)                                                                       \
    MT_PARALLEL_FOR_SIMD(n >= MT_PAR_MIN, for (size_t i = 0; i < n; i++) {                        \
        float ds, sa = silu_fd(a[i], &ds), d = dh[i];                                             \
        DA; DG; (void)sa, (void)ds;                                                               \
    });
// clang-format on
void mt_swiglu_backward(float *da, float *dg, const float *dh, const float *a, const float *g,
                        size_t n, bool acc) {
    MT_ASSERT(acc || (da && dg), "swiglu backward: set needs both gradients");
    if (!acc) SWIGLU_LOOP(da[i] = d * g[i] * ds, dg[i] = d * sa)
    else if (da && dg) SWIGLU_LOOP(da[i] += d * g[i] * ds, dg[i] += d * sa)
    else if (da) SWIGLU_LOOP(da[i] += d * g[i] * ds, (void)0)
    else if (dg) SWIGLU_LOOP((void)0, dg[i] += d * sa)
}

static void swiglu_forward(mt_node *n) {
    mt_swiglu_forward(n->out->data, n->in[0]->data, n->in[1]->data, n->out->n);
}

static void swiglu_backward(mt_node *n) {
    mt_swiglu_backward(n->in[0]->grad, n->in[1]->grad, n->out->grad, n->in[0]->data, n->in[1]->data,
                       n->out->n, true);
}

static const mt_op OP_SWIGLU = {.name = "swiglu",
                                .forward = swiglu_forward,
                                .backward = swiglu_backward};

mt_tensor *mt_swiglu(mt_ctx *c, mt_tensor *a, mt_tensor *b) {
    char sa[64], sb[64];
    MT_ASSERT(mt_same_shape(a, b), "swiglu: a %s and b %s must have one shape",
              mt_shape_str(a, sa, 64), mt_shape_str(b, sb, 64));
    mt_tensor *out = mt_tensor_like(c, a);
    mt_node *n = mt_node_new(c, &OP_SWIGLU, out, 2, (mt_tensor *[]){a, b});
    mt_node_run(c, n);
    return out;
}

/* ---- soft cap: y = cap tanh(x / cap), f[0] = cap;  dx += dy (1 - tanh(x / cap)^2) ---------- */

static void softcap_forward(mt_node *n) {
    const float *x = n->in[0]->data, cap = n->f[0];
    float *y = n->out->data;
    size_t N = n->out->n;
    MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN,
                         for (size_t i = 0; i < N; i++) y[i] = mt_softcapf(x[i], cap););
}

/* the derivative from x (mt_softcap_fd's), not from 1 - (y / cap)^2, which cancels at |y| ~ cap */
static void softcap_backward(mt_node *n) {
    const float *x = n->in[0]->data, *dy = n->out->grad, cap = n->f[0];
    float *dx = n->in[0]->grad;
    size_t N = n->out->n;
    if (!dx) return;
    MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++) {
        float d;
        mt_softcap_fd(x[i], cap, &d);
        dx[i] += dy[i] * d;
    });
}

static const mt_op OP_SOFTCAP = {.name = "softcap",
                                 .forward = softcap_forward,
                                 .backward = softcap_backward};

mt_tensor *mt_softcap(mt_ctx *c, mt_tensor *x, float cap) {
    MT_ASSERT(cap > 0 && isfinite(cap), "softcap: cap %g, expected a finite number > 0", cap);
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, &OP_SOFTCAP, out, 1, (mt_tensor *[]){x});
    n->f[0] = cap;
    mt_node_run(c, n);
    return out;
}

/* ---- dropout: y = x * m, m_i = 1/(1-p) with probability 1-p, else 0 (inverted dropout) --------
 * m_i is a function of (key, i): dropped when u_i < p, u_i = the top 24 bits of
 * splitmix64(key + (i + 1) gamma) / 2^24 (a SplitMix64 stream, Steele et al. 2014). key is drawn
 * from c->rng once per call, so the seed fixes every mask whatever the thread count, the loop runs
 * in parallel, and backward regenerates the forward's mask instead of keeping it in the arena.
 * f[0] = p, f[1] = 1/(1-p), p = key. */

static inline float dropout_mask(uint64_t key, size_t i, float p, float keep) {
    uint64_t z = key + (i + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)(int32_t)(z >> 40) * (1.0f / 16777216.0f) < p ? 0.0f : keep;
}

/* forward: y = x * m;  backward (acc): dx += dy * m, the same m (two loops: a select on acc
   inside one stops the vectoriser) */
static void dropout_kernel(float *y, const float *x, size_t N, uint64_t key, float p, float keep,
                           bool acc) {
    if (acc) {
        MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++)
                                                  y[i] += x[i] * dropout_mask(key, i, p, keep););
    } else {
        MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++)
                                                  y[i] = x[i] * dropout_mask(key, i, p, keep););
    }
}

static void dropout_forward(mt_node *n) {
    dropout_kernel(n->out->data, n->in[0]->data, n->out->n, *(uint64_t *)n->p, n->f[0], n->f[1],
                   false);
}

static void dropout_backward(mt_node *n) {
    if (n->in[0]->grad)
        dropout_kernel(n->in[0]->grad, n->out->grad, n->out->n, *(uint64_t *)n->p, n->f[0], n->f[1],
                       true);
}

static const mt_op OP_DROPOUT = {.name = "dropout",
                                 .forward = dropout_forward,
                                 .backward = dropout_backward};

mt_tensor *mt_dropout(mt_ctx *c, mt_tensor *x, float p) {
    MT_ASSERT(p >= 0.0f && p <= 1.0f, "dropout: probability %g is outside [0, 1]", p);
    if (!c->training || p == 0.0f) return x;
    mt_tensor *out = mt_tensor_like(c, x);
    mt_node *n = mt_node_new(c, &OP_DROPOUT, out, 1, (mt_tensor *[]){x});
    uint64_t *key = n->p = mt_arena_alloc(c, sizeof(uint64_t));
    *key = mt_rng_u64(&c->rng);
    n->f[0] = p;
    n->f[1] = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    mt_node_run(c, n);
    return out;
}
