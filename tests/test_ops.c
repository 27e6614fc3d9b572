/* The primitive ops after matmul and add (those are in test_tensor.c): every op against a naive
   loop in double and by finite differences, on a table of cases; dropout's mask; cross-entropy's
   ignore index and stability; bit-identical reruns. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tensor/vmath.h"

/* ---- options of the ops under test ---------------------------------------------------------- */
typedef struct {
    int ndim, shape[MT_MAX_DIMS];
} shape_arg;
typedef struct {
    int perm[MT_MAX_DIMS];
} perm_arg;
typedef struct {
    const int *ids; /* embedding ids or cross-entropy targets */
    int n, ignore;
    float smoothing; /* cross-entropy's label smoothing */
    float z_loss;    /* cross-entropy's z-loss */
    float softcap;   /* cross-entropy's soft cap of the logits */
} ids_arg;
typedef struct {
    int start, len;
} slice_arg;
typedef struct {
    int n, sizes[4];
} split_arg;

/* ---- builders ---------------------------------------------------------------------------------
 */
static mt_tensor *b_mul(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_mul(c, x[0], x[1]);
}
static mt_tensor *b_scale(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_scale(c, x[0], *(const float *)a);
}
static mt_tensor *b_scale_by(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_scale_by(c, x[0], x[1]);
}
static mt_tensor *b_scale_channels(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_scale_channels(c, x[0], x[1], *(const float *)a);
}
static mt_tensor *b_sigmoid_gate(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_sigmoid_gate(c, x[0], x[1]);
}
static mt_tensor *b_ngpt_residual(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_ngpt_residual(c, x[0], x[1], x[2], *(const float *)a);
}
/* hyper-connections' ops (hyper.c), arg the streams N */
static mt_tensor *b_hc_expand(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_hc_expand(c, x[0], *(const int *)a);
}
static mt_tensor *b_hc_reduce(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_hc_reduce(c, x[0], *(const int *)a);
}
static mt_tensor *b_hc_width(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_hc_width(c, x[0], x[1], *(const int *)a);
}
static mt_tensor *b_hc_depth(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_hc_depth(c, x[0], x[1], x[2], x[3], *(const int *)a);
}
static mt_tensor *b_hc_dynamic(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_hc_dynamic(c, x[0], x[1], x[2], x[3], *(const int *)a, true);
}
/* mHC's linear form (N = 1 row a token) */
static mt_tensor *b_hc_linear(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_hc_dynamic(c, x[0], x[1], x[2], x[3], *(const int *)a, false);
}
/* mHC's maps, arg {N, K} */
static mt_tensor *b_mhc_maps(mt_ctx *c, mt_tensor **x, const void *a) {
    const int *nk = a;
    return mt_mhc_maps(c, x[0], nk[0], nk[1]);
}
static mt_tensor *b_sum(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_sum(c, x[0]);
}
static mt_tensor *b_mean(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_mean(c, x[0]);
}
static mt_tensor *b_gelu(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_gelu(c, x[0]);
}
static mt_tensor *b_gelu_erf(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_gelu_erf(c, x[0]);
}
static mt_tensor *b_relu(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_relu(c, x[0]);
}
static mt_tensor *b_relu2(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_relu2(c, x[0]);
}
static mt_tensor *b_silu(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_silu(c, x[0]);
}
static mt_tensor *b_softmax(mt_ctx *c, mt_tensor **x, const void *a) {
    (void)a;
    return mt_softmax(c, x[0]);
}
static mt_tensor *b_dropout(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_dropout(c, x[0], *(const float *)a);
}

static mt_tensor *b_reshape(mt_ctx *c, mt_tensor **x, const void *a) {
    const shape_arg *s = a;
    /* a reshape's output shares x's data: scale it so the gradient flows through a real op too */
    return mt_scale(c, mt_reshape(c, x[0], s->ndim, s->shape), 1.0f);
}
static mt_tensor *b_permute(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_permute(c, x[0], ((const perm_arg *)a)->perm);
}
static mt_tensor *b_transpose(mt_ctx *c, mt_tensor **x, const void *a) {
    const int *d = a;
    return mt_transpose(c, x[0], d[0], d[1]);
}
static mt_tensor *b_cross_entropy(mt_ctx *c, mt_tensor **x, const void *a) {
    const ids_arg *t = a;
    return mt_cross_entropy(c, x[0], t->ids, t->ignore,
                            (mt_ce_opts){.label_smoothing = t->smoothing,
                                         .z_loss = t->z_loss,
                                         .softcap = t->softcap});
}
static mt_tensor *b_softcap(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_softcap(c, x[0], *(const float *)a);
}
static mt_tensor *b_embedding(mt_ctx *c, mt_tensor **x, const void *a) {
    const ids_arg *t = a;
    return mt_embedding(c, x[0], t->ids, t->n);
}
static mt_tensor *b_concat(mt_ctx *c, mt_tensor **x, const void *a) {
    return mt_concat(c, *(const int *)a, x);
}
static mt_tensor *b_slice(mt_ctx *c, mt_tensor **x, const void *a) {
    const slice_arg *s = a;
    return mt_slice(c, x[0], s->start, s->len);
}
/* split, then the parts concatenated last part first: a rotation of the columns */
static mt_tensor *b_split(mt_ctx *c, mt_tensor **x, const void *a) {
    const split_arg *s = a;
    mt_tensor *parts[4], *rot[4];
    mt_split(c, x[0], s->n, s->sizes, parts);
    rot[0] = parts[s->n - 1];
    for (int k = 1; k < s->n; k++) rot[k] = parts[k - 1];
    return mt_concat(c, s->n, rot);
}

/* ---- naive references, in double --------------------------------------------------------------
 */
typedef void (*ref_fn)(mt_tensor **x, const void *arg, double *y);

static void r_mul(mt_tensor **x, const void *a, double *y) {
    (void)a;
    for (size_t i = 0; i < x[0]->n; i++) y[i] = (double)x[0]->data[i] * x[1]->data[i];
}
static void r_scale(mt_tensor **x, const void *a, double *y) {
    for (size_t i = 0; i < x[0]->n; i++) y[i] = (double)*(const float *)a * x[0]->data[i];
}
static void r_scale_by(mt_tensor **x, const void *a, double *y) {
    (void)a;
    for (size_t i = 0; i < x[0]->n; i++) y[i] = (double)x[1]->data[0] * x[0]->data[i];
}
/* y = k s_j x_j, s over the last dim */
static void r_scale_channels(mt_tensor **x, const void *a, double *y) {
    int W = mt_cols(x[0]);
    for (size_t i = 0; i < x[0]->n; i++)
        y[i] = (double)*(const float *)a * x[1]->data[i % W] * x[0]->data[i];
}
/* y_j sigmoid(z_g), g = j / (C / W), per row */
static void r_sigmoid_gate(mt_tensor **x, const void *a, double *y) {
    (void)a;
    int C = mt_cols(x[0]), W = mt_cols(x[1]);
    for (size_t i = 0; i < x[0]->n; i++) {
        double z = x[1]->data[i / C * W + i % C / (C / W)];
        y[i] = x[0]->data[i] / (1 + exp(-z));
    }
}
/* nGPT's update of each row (h, y): Norm(h + a (Norm(y) - h)), a_j = k |alpha_j|, written out */
static void r_ngpt_residual(mt_tensor **x, const void *a, double *y) {
    int C = mt_cols(x[0]);
    for (size_t r = 0; r < x[0]->n / (size_t)C; r++) {
        const float *h = x[0]->data + r * C, *v = x[1]->data + r * C;
        double ny = 0, nz = 0;
        for (int j = 0; j < C; j++) ny += (double)v[j] * v[j];
        for (int j = 0; j < C; j++) {
            double aj = *(const float *)a * fabs((double)x[2]->data[j]);
            y[r * C + j] = h[j] + aj * (v[j] / sqrt(ny) - h[j]);
            nz += y[r * C + j] * y[r * C + j];
        }
        for (int j = 0; j < C; j++) y[r * C + j] /= sqrt(nz);
    }
}
/* H_i = x of each row */
static void r_hc_expand(mt_tensor **x, const void *a, double *y) {
    int N = *(const int *)a, C = mt_cols(x[0]);
    for (size_t r = 0; r < x[0]->n / (size_t)C; r++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < C; j++) y[(r * N + i) * C + j] = x[0]->data[r * C + j];
}
/* sum_i H_i of each row */
static void r_hc_reduce(mt_tensor **x, const void *a, double *y) {
    int N = *(const int *)a, C = mt_cols(x[0]) / N;
    for (size_t r = 0; r < x[0]->n / ((size_t)N * C); r++)
        for (int j = 0; j < C; j++) {
            y[r * C + j] = 0;
            for (int i = 0; i < N; i++) y[r * C + j] += x[0]->data[(r * N + i) * C + j];
        }
}
/* coefficient k of row r: a shared tensor of per values, or per values a row */
static double coef(const mt_tensor *t, size_t r, int per, int k) {
    return t->data[(t->n == (size_t)per ? 0 : r * per) + k];
}
/* h = sum_i a[i][0] H_i */
static void r_hc_width(mt_tensor **x, const void *a, double *y) {
    int N = *(const int *)a, C = mt_cols(x[0]) / N;
    for (size_t r = 0; r < x[0]->n / ((size_t)N * C); r++)
        for (int j = 0; j < C; j++) {
            y[r * C + j] = 0;
            for (int i = 0; i < N; i++)
                y[r * C + j] += coef(x[1], r, N * (N + 1), i * (N + 1)) *
                                x[0]->data[(r * N + i) * C + j];
        }
}
/* H'_t = sum_i a[i][1+t] H_i + b[t] y */
static void r_hc_depth(mt_tensor **x, const void *a, double *y) {
    int N = *(const int *)a, C = mt_cols(x[2]);
    for (size_t r = 0; r < x[2]->n / (size_t)C; r++)
        for (int t = 0; t < N; t++)
            for (int j = 0; j < C; j++) {
                double v = coef(x[3], r, N, t) * x[2]->data[r * C + j];
                for (int i = 0; i < N; i++)
                    v += coef(x[1], r, N * (N + 1), i * (N + 1) + 1 + t) *
                         x[0]->data[(r * N + i) * C + j];
                y[(r * N + t) * C + j] = v;
            }
}
/* S + s tanh(Hn W) */
static void r_hc_dynamic(mt_tensor **x, const void *a, double *y) {
    int N = *(const int *)a, C = mt_cols(x[0]), K = (int)(x[1]->n / (size_t)C);
    for (size_t q = 0; q < x[0]->n / (size_t)C; q++)
        for (int k = 0; k < K; k++) {
            double z = 0;
            for (int j = 0; j < C; j++) z += (double)x[0]->data[q * C + j] * x[1]->data[j * K + k];
            y[q * K + k] = x[3]->data[(q % N) * K + k] + x[2]->data[0] * tanh(z);
        }
}
/* S + s Hn W */
static void r_hc_linear(mt_tensor **x, const void *a, double *y) {
    int N = *(const int *)a, C = mt_cols(x[0]), K = (int)(x[1]->n / (size_t)C);
    for (size_t q = 0; q < x[0]->n / (size_t)C; q++)
        for (int k = 0; k < K; k++) {
            double z = 0;
            for (int j = 0; j < C; j++) z += (double)x[0]->data[q * C + j] * x[1]->data[j * K + k];
            y[q * K + k] = x[3]->data[(q % N) * K + k] + x[2]->data[0] * z;
        }
}
/* sigmoid(pre), SinkhornKnopp_K(res)^T beside it, 2 sigmoid(post); in double */
static void r_mhc_maps(mt_tensor **x, const void *a, double *y) {
    const int *nk = a;
    int N = nk[0], K = nk[1], W = 2 * N + N * N, per = N * (N + 1);
    for (size_t r = 0; r < x[0]->n / (size_t)W; r++) {
        const float *z = x[0]->data + r * W;
        double M[16 * 16], *o = y + r * (per + N);
        for (int e = 0; e < N * N; e++) M[e] = exp(z[2 * N + e]);
        for (int t = 0; t < 2 * K; t++)
            for (int u = 0; u < N; u++) { /* t even: column u, odd: row u */
                double sum = 0;
                for (int v = 0; v < N; v++) sum += M[t % 2 ? u * N + v : v * N + u];
                for (int v = 0; v < N; v++) M[t % 2 ? u * N + v : v * N + u] /= sum;
            }
        for (int i = 0; i < N; i++) {
            o[i * (N + 1)] = 1 / (1 + exp(-z[i]));
            o[per + i] = 2 / (1 + exp(-z[N + i]));
            for (int j = 0; j < N; j++) o[i * (N + 1) + 1 + j] = M[j * N + i];
        }
    }
}
static void r_sum(mt_tensor **x, const void *a, double *y) {
    (void)a;
    y[0] = 0;
    for (size_t i = 0; i < x[0]->n; i++) y[0] += x[0]->data[i];
}
static void r_mean(mt_tensor **x, const void *a, double *y) {
    r_sum(x, a, y);
    y[0] /= (double)x[0]->n;
}
static void r_copy(mt_tensor **x, const void *a, double *y) {
    (void)a;
    for (size_t i = 0; i < x[0]->n; i++) y[i] = x[0]->data[i];
}
/* y[o] = x[i] where o is the permuted multi-index of i */
static void permute_ref(const mt_tensor *x, const int *perm, double *y) {
    int D = x->ndim, oshape[MT_MAX_DIMS], idx[MT_MAX_DIMS];
    for (int d = 0; d < D; d++) oshape[d] = x->shape[perm[d]];
    for (size_t i = 0; i < x->n; i++) {
        size_t rem = i, o = 0;
        for (int d = D - 1; d >= 0; d--) {
            idx[d] = (int)(rem % (size_t)x->shape[d]);
            rem /= (size_t)x->shape[d];
        }
        for (int d = 0; d < D; d++) o = o * (size_t)oshape[d] + (size_t)idx[perm[d]];
        y[o] = x->data[i];
    }
}
static void r_permute(mt_tensor **x, const void *a, double *y) {
    permute_ref(x[0], ((const perm_arg *)a)->perm, y);
}
static void r_transpose(mt_tensor **x, const void *a, double *y) {
    const int *d = a;
    int perm[MT_MAX_DIMS];
    for (int k = 0; k < x[0]->ndim; k++) perm[k] = k == d[0] ? d[1] : k == d[1] ? d[0] : k;
    permute_ref(x[0], perm, y);
}
static void r_gelu(mt_tensor **x, const void *a, double *y) {
    (void)a;
    for (size_t i = 0; i < x[0]->n; i++) {
        double v = x[0]->data[i];
        y[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    }
}
static void r_gelu_erf(mt_tensor **x, const void *a, double *y) {
    (void)a;
    for (size_t i = 0; i < x[0]->n; i++)
        y[i] = 0.5 * x[0]->data[i] * (1 + erf(x[0]->data[i] / sqrt(2)));
}
static void r_relu(mt_tensor **x, const void *a, double *y) {
    (void)a;
    for (size_t i = 0; i < x[0]->n; i++) y[i] = x[0]->data[i] > 0 ? x[0]->data[i] : 0;
}
static void r_relu2(mt_tensor **x, const void *a, double *y) {
    (void)a;
    for (size_t i = 0; i < x[0]->n; i++) {
        double v = x[0]->data[i] > 0 ? x[0]->data[i] : 0;
        y[i] = v * v;
    }
}
static void r_silu(mt_tensor **x, const void *a, double *y) {
    (void)a;
    for (size_t i = 0; i < x[0]->n; i++) y[i] = x[0]->data[i] / (1 + exp(-(double)x[0]->data[i]));
}
static void r_softmax(mt_tensor **x, const void *a, double *y) {
    (void)a;
    int C = mt_cols(x[0]);
    for (int r = 0; r < mt_rows(x[0]); r++) {
        const float *xr = x[0]->data + (size_t)r * C;
        double mx = max_of(xr, C), s = 0;
        for (int j = 0; j < C; j++) s += exp(xr[j] - mx);
        for (int j = 0; j < C; j++) y[(size_t)r * C + j] = exp(xr[j] - mx) / s;
    }
}
static void r_softcap(mt_tensor **x, const void *a, double *y) {
    double cap = *(const float *)a;
    for (size_t i = 0; i < x[0]->n; i++) y[i] = cap * tanh(x[0]->data[i] / cap);
}
static void r_cross_entropy(mt_tensor **x, const void *a, double *y) {
    const ids_arg *t = a;
    int C = mt_cols(x[0]), m = 0;
    double *v = malloc((size_t)C * sizeof *v), cap = t->softcap;
    y[0] = 0;
    for (int r = 0; r < mt_rows(x[0]); r++) {
        if (t->ids[r] == t->ignore) continue;
        const float *xr = x[0]->data + (size_t)r * C;
        for (int j = 0; j < C; j++) v[j] = cap > 0 ? cap * tanh(xr[j] / cap) : xr[j];
        double mx = v[0], s = 0;
        for (int j = 1; j < C; j++) mx = fmax(mx, v[j]);
        for (int j = 0; j < C; j++) s += exp(v[j] - mx);
        double lse = mx + log(s), mean_x = 0;
        for (int j = 0; j < C; j++) mean_x += v[j] / (double)C;
        /* (1 - eps) (lse - x_t) + eps mean_j (lse - x_j) + z lse^2, x capped or not */
        y[0] += (1 - t->smoothing) * (lse - v[t->ids[r]]) + t->smoothing * (lse - mean_x) +
                t->z_loss * lse * lse;
        m++;
    }
    free(v);
    y[0] /= m;
}
static void r_embedding(mt_tensor **x, const void *a, double *y) {
    const ids_arg *t = a;
    int C = x[0]->shape[1];
    for (int i = 0; i < t->n; i++)
        for (int j = 0; j < C; j++) y[(size_t)i * C + j] = x[0]->data[(size_t)t->ids[i] * C + j];
}
/* the mask as documented in ops_elementwise.c: key from a context RNG seeded with 42 (as the test
   runs the op), element i dropped when the top 24 bits of splitmix64(key + (i + 1) gamma), over
   2^24, are below p */
static void r_dropout(mt_tensor **x, const void *a, double *y) {
    float p = *(const float *)a;
    mt_rng r;
    mt_rng_seed(&r, 42);
    uint64_t key = mt_rng_u64(&r);
    for (size_t i = 0; i < x[0]->n; i++) {
        uint64_t z = key + (i + 1) * 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        double u = (double)(z >> 40) / 16777216.0;
        y[i] = u < p ? 0.0 : x[0]->data[i] * (double)(1.0f / (1.0f - p));
    }
}
static void r_concat(mt_tensor **x, const void *a, double *y) {
    int n = *(const int *)a, C = 0;
    for (int k = 0; k < n; k++) C += mt_cols(x[k]);
    for (int r = 0; r < mt_rows(x[0]); r++)
        for (int k = 0, off = 0; k < n; off += mt_cols(x[k]), k++)
            for (int j = 0; j < mt_cols(x[k]); j++)
                y[(size_t)r * C + off + j] = x[k]->data[(size_t)r * mt_cols(x[k]) + j];
}
static void r_slice(mt_tensor **x, const void *a, double *y) {
    const slice_arg *s = a;
    int C = mt_cols(x[0]);
    for (int r = 0; r < mt_rows(x[0]); r++)
        for (int j = 0; j < s->len; j++)
            y[(size_t)r * s->len + j] = x[0]->data[(size_t)r * C + s->start + j];
}
static void r_split(mt_tensor **x, const void *a, double *y) {
    const split_arg *s = a;
    int C = mt_cols(x[0]), last = s->sizes[s->n - 1];
    for (int r = 0; r < mt_rows(x[0]); r++)
        for (int j = 0; j < C; j++)
            y[(size_t)r * C + (j + last) % C] = x[0]->data[(size_t)r * C + j];
}

/* ---- the table --------------------------------------------------------------------------------
 */
typedef struct {
    int ndim, shape[MT_MAX_DIMS];
} shp;

typedef struct {
    const char *name;
    gc_build build;
    ref_fn ref;
    const void *arg;
    int n_in;
    shp in[4];
    float lo, hi;   /* inputs uniform in [lo, hi) */
    bool kink;      /* keep inputs 0.05 away from 0 (ReLU) */
    double ref_tol; /* max relative error against the reference (0: exact) */
} op_case;

static const float S_NEG = -1.75f, P_DROP = 0.3f, P_DROP_HI = 0.9f, K_NGPT = 0.6f;
static const int ONE = 1, TWO = 2, THREE = 3, FOUR = 4;
static const int MHC_A[2] = {1, 20}, MHC_B[2] = {3, 20}, MHC_C[2] = {4, 2}, MHC_D[2] = {2, 5};
static const shape_arg RS_A = {2, {6, 4}}, RS_B = {2, {1, 17}}, RS_C = {2, {30, 7}};
static const perm_arg P_A = {{0, 2, 1, 3}}, P_B = {{3, 1, 0, 2}}, P_C = {{1, 0}}, P_D = {{2, 0, 1}};
static const int T_A[2] = {1, 2}, T_B[2] = {0, 2}, T_C[2] = {0, 1};
static const int IDS_A[9] = {3, 0, 6, 3, 3, 1, 6, 2, 5};
static const int IDS_B[3] = {0, 0, 0};
static int IDS_BIG[600], IDS_MID[40], TGT_A[3] = {4, -100, 16}, TGT_B[10], TGT_C[1] = {0},
                                      TGT_BIG[300];
static ids_arg E_A = {IDS_A, 9, 0, 0, 0, 0}, E_B = {IDS_B, 3, 0, 0, 0, 0},
               E_C = {IDS_MID, 40, 0, 0, 0, 0}, E_BIG = {IDS_BIG, 600, 0, 0, 0, 0};
static ids_arg CE_A = {TGT_A, 3, -100, 0, 0, 0}, CE_B = {TGT_B, 10, -1, 0, 0, 0},
               CE_C = {TGT_C, 1, -100, 0, 0, 0}, CE_BIG = {TGT_BIG, 300, -100, 0, 0, 0},
               CE_LS_A = {TGT_A, 3, -100, 0.1f, 0, 0}, CE_LS_B = {TGT_B, 10, -1, 0.3f, 0, 0},
               CE_LS_C = {TGT_C, 1, -100, 0.5f, 0, 0}, CE_LS_BIG = {TGT_BIG, 300, -100, 0.1f, 0, 0},
               CE_Z_A = {TGT_A, 3, -100, 0, 0.1f, 0}, CE_Z_B = {TGT_B, 10, -1, 0.3f, 0.5f, 0},
               CE_Z_BIG = {TGT_BIG, 300, -100, 0.1f, 1e-4f, 0},
               CE_CAP_A = {TGT_A, 3, -100, 0, 0, 2.0f},
               CE_CAP_B = {TGT_B, 10, -1, 0.3f, 0.5f, 1.5f},
               CE_CAP_BIG = {TGT_BIG, 300, -100, 0.1f, 0, 4.0f};
static const float CAP_LO = 0.5f, CAP_HI = 3.0f;
static const slice_arg SL_A = {2, 5}, SL_B = {0, 33}, SL_C = {0, 1}, SL_D = {31, 2};
static const split_arg SP_A = {3, {5, 1, 11}}, SP_B = {2, {16, 17}}, SP_C = {4, {1, 1, 1, 1}};

#define S1(...)                                                                                    \
    {                                                                                              \
        { __VA_ARGS__ }                                                                            \
    }
#define SHP(nd, ...)                                                                               \
    {                                                                                              \
        nd, { __VA_ARGS__ }                                                                        \
    }

// clang-format off
static const op_case CASES[] = {
    /* name, build, ref, arg, n_in, shapes, lo, hi, kink, ref_tol */
    {"mul", b_mul, r_mul, NULL, 2, {SHP(1, 1), SHP(1, 1)}, -2, 2, false, 1e-7},
    {"mul", b_mul, r_mul, NULL, 2, {SHP(2, 3, 17), SHP(2, 3, 17)}, -2, 2, false, 1e-7},
    {"mul", b_mul, r_mul, NULL, 2, {SHP(3, 4, 5, 33), SHP(3, 4, 5, 33)}, -2, 2, false, 1e-7},
    {"mul", b_mul, r_mul, NULL, 2, {SHP(2, 300, 65), SHP(2, 300, 65)}, -2, 2, false, 1e-7},
    {"scale", b_scale, r_scale, &S_NEG, 1, {SHP(1, 1)}, -2, 2, false, 1e-7},
    {"scale", b_scale, r_scale, &S_NEG, 1, {SHP(3, 2, 3, 17)}, -2, 2, false, 1e-7},
    {"scale", b_scale, r_scale, &S_NEG, 1, {SHP(2, 300, 65)}, -2, 2, false, 1e-7},
    {"scale_by", b_scale_by, r_scale_by, NULL, 2, {SHP(1, 1), SHP(1, 1)}, -2, 2, false, 1e-7},
    {"scale_by", b_scale_by, r_scale_by, NULL, 2, {SHP(3, 2, 3, 17), SHP(1, 1)}, -2, 2, false,
     1e-7},
    {"scale_by", b_scale_by, r_scale_by, NULL, 2, {SHP(2, 300, 65), SHP(1, 1)}, -2, 2, false, 1e-7},
    {"scale_channels", b_scale_channels, r_scale_channels, &S_NEG, 2, {SHP(1, 1), SHP(1, 1)},
     -2, 2, false, 1e-7},
    {"scale_channels", b_scale_channels, r_scale_channels, &S_NEG, 2,
     {SHP(3, 2, 3, 17), SHP(1, 17)}, -2, 2, false, 1e-7},
    {"scale_channels", b_scale_channels, r_scale_channels, &S_NEG, 2, {SHP(2, 300, 65), SHP(1, 65)},
     -2, 2, false, 1e-7},
    {"sigmoid_gate", b_sigmoid_gate, r_sigmoid_gate, NULL, 2, {SHP(1, 1), SHP(1, 1)}, -3, 3,
     false, 1e-6},
    {"sigmoid_gate", b_sigmoid_gate, r_sigmoid_gate, NULL, 2, {SHP(3, 2, 3, 17), SHP(3, 2, 3, 17)},
     -3, 3, false, 1e-6},
    {"sigmoid_gate", b_sigmoid_gate, r_sigmoid_gate, NULL, 2, {SHP(3, 2, 5, 12), SHP(3, 2, 5, 3)},
     -3, 3, false, 1e-6},
    {"sigmoid_gate", b_sigmoid_gate, r_sigmoid_gate, NULL, 2, {SHP(2, 300, 64), SHP(2, 300, 4)},
     -3, 3, false, 1e-6},
    {"ngpt_residual", b_ngpt_residual, r_ngpt_residual, &K_NGPT, 3,
     {SHP(2, 1, 5), SHP(2, 1, 5), SHP(1, 5)}, -1, 1, true, 1e-6},
    {"ngpt_residual", b_ngpt_residual, r_ngpt_residual, &K_NGPT, 3,
     {SHP(3, 2, 3, 17), SHP(3, 2, 3, 17), SHP(1, 17)}, -1, 1, true, 1e-6},
    {"ngpt_residual", b_ngpt_residual, r_ngpt_residual, &K_NGPT, 3,
     {SHP(2, 300, 65), SHP(2, 300, 65), SHP(1, 65)}, -1, 1, true, 1e-6},
    {"hc_expand", b_hc_expand, r_hc_expand, &ONE, 1, {SHP(1, 1)}, -1, 1, false, 0},
    {"hc_expand", b_hc_expand, r_hc_expand, &THREE, 1, {SHP(3, 2, 3, 5)}, -1, 1, false, 0},
    {"hc_expand", b_hc_expand, r_hc_expand, &TWO, 1, {SHP(2, 300, 65)}, -1, 1, false, 0},
    {"hc_reduce", b_hc_reduce, r_hc_reduce, &THREE, 1, {SHP(3, 2, 3, 15)}, -1, 1, false, 1e-6},
    {"hc_reduce", b_hc_reduce, r_hc_reduce, &TWO, 1, {SHP(2, 300, 130)}, -1, 1, false, 1e-6},
    {"hc_width", b_hc_width, r_hc_width, &ONE, 2, {SHP(2, 1, 1), SHP(2, 1, 2)}, -1, 1, false, 1e-6},
    {"hc_width", b_hc_width, r_hc_width, &TWO, 2, {SHP(3, 2, 3, 10), SHP(2, 2, 3)}, -1, 1, false,
     1e-6},
    {"hc_width", b_hc_width, r_hc_width, &TWO, 2, {SHP(3, 2, 3, 10), SHP(2, 6, 6)}, -1, 1, false,
     1e-6},
    {"hc_width", b_hc_width, r_hc_width, &TWO, 2, {SHP(3, 2, 300, 130), SHP(2, 2, 3)}, -1, 1,
     false, 1e-6},
    {"hc_depth", b_hc_depth, r_hc_depth, &FOUR, 4,
     {SHP(3, 2, 3, 8), SHP(2, 4, 5), SHP(3, 2, 3, 2), SHP(1, 4)}, -1, 1, false, 1e-6},
    {"hc_depth", b_hc_depth, r_hc_depth, &THREE, 4,
     {SHP(3, 2, 3, 21), SHP(2, 6, 12), SHP(3, 2, 3, 7), SHP(2, 6, 3)}, -1, 1, false, 1e-6},
    {"hc_depth", b_hc_depth, r_hc_depth, &TWO, 4,
     {SHP(3, 2, 300, 130), SHP(2, 600, 6), SHP(3, 2, 300, 65), SHP(2, 600, 2)}, -1, 1, false,
     1e-6},
    {"hc_dynamic", b_hc_dynamic, r_hc_dynamic, &THREE, 4,
     {SHP(2, 12, 5), SHP(2, 5, 4), SHP(1, 1), SHP(2, 3, 4)}, -1, 1, false, 1e-6},
    {"hc_dynamic", b_hc_dynamic, r_hc_dynamic, &THREE, 4,
     {SHP(2, 12, 5), SHP(1, 5), SHP(1, 1), SHP(1, 3)}, -1, 1, false, 1e-6},
    {"hc_dynamic", b_hc_dynamic, r_hc_dynamic, &TWO, 4,
     {SHP(2, 1200, 65), SHP(2, 65, 3), SHP(1, 1), SHP(2, 2, 3)}, -1, 1, false, 1e-6},
    {"hc_linear", b_hc_linear, r_hc_linear, &ONE, 4,
     {SHP(2, 6, 12), SHP(2, 12, 8), SHP(1, 1), SHP(1, 8)}, -1, 1, false, 1e-6},
    {"hc_linear", b_hc_linear, r_hc_linear, &ONE, 4,
     {SHP(2, 600, 130), SHP(2, 130, 8), SHP(1, 1), SHP(1, 8)}, -1, 1, false, 1e-6},
    {"mhc_maps", b_mhc_maps, r_mhc_maps, MHC_A, 1, {SHP(2, 3, 3)}, -2, 2, false, 1e-6},
    {"mhc_maps", b_mhc_maps, r_mhc_maps, MHC_B, 1, {SHP(3, 2, 3, 15)}, -2, 2, false, 1e-5},
    {"mhc_maps", b_mhc_maps, r_mhc_maps, MHC_C, 1, {SHP(1, 24)}, -2, 2, false, 1e-5},
    {"mhc_maps", b_mhc_maps, r_mhc_maps, MHC_D, 1, {SHP(2, 400, 8)}, -2, 2, false, 1e-5},
    {"sum", b_sum, r_sum, NULL, 1, {SHP(1, 1)}, -1, 2, false, 1e-6},
    {"sum", b_sum, r_sum, NULL, 1, {SHP(2, 5, 33)}, -1, 2, false, 1e-6},
    {"sum", b_sum, r_sum, NULL, 1, {SHP(1, 5001)}, -1, 2, false, 1e-6},
    {"sum", b_sum, r_sum, NULL, 1, {SHP(3, 7, 100, 31)}, -1, 2, false, 1e-6},
    {"mean", b_mean, r_mean, NULL, 1, {SHP(1, 1)}, -1, 2, false, 1e-6},
    {"mean", b_mean, r_mean, NULL, 1, {SHP(3, 2, 5, 33)}, -1, 2, false, 1e-6},
    {"mean", b_mean, r_mean, NULL, 1, {SHP(2, 500, 45)}, -1, 2, false, 1e-6},
    {"reshape", b_reshape, r_copy, &RS_A, 1, {SHP(3, 2, 3, 4)}, -1, 1, false, 0},
    {"reshape", b_reshape, r_copy, &RS_B, 1, {SHP(1, 17)}, -1, 1, false, 0},
    {"reshape", b_reshape, r_copy, &RS_C, 1, {SHP(4, 2, 3, 5, 7)}, -1, 1, false, 0},
    {"permute", b_permute, r_permute, &P_A, 1, {SHP(4, 2, 3, 4, 5)}, -1, 1, false, 0},
    {"permute", b_permute, r_permute, &P_B, 1, {SHP(4, 2, 3, 1, 17)}, -1, 1, false, 0},
    {"permute", b_permute, r_permute, &P_C, 1, {SHP(2, 5, 17)}, -1, 1, false, 0},
    {"permute", b_permute, r_permute, &P_D, 1, {SHP(3, 3, 1, 17)}, -1, 1, false, 0},
    {"permute", b_permute, r_permute, &P_A, 1, {SHP(4, 4, 33, 6, 25)}, -1, 1, false, 0},
    {"transpose", b_transpose, r_transpose, T_A, 1, {SHP(3, 2, 3, 17)}, -1, 1, false, 0},
    {"transpose", b_transpose, r_transpose, T_B, 1, {SHP(3, 2, 3, 17)}, -1, 1, false, 0},
    {"transpose", b_transpose, r_transpose, T_C, 1, {SHP(2, 1, 1)}, -1, 1, false, 0},
    {"transpose", b_transpose, r_transpose, T_A, 1, {SHP(3, 8, 65, 33)}, -1, 1, false, 0},
    {"gelu", b_gelu, r_gelu, NULL, 1, {SHP(1, 1)}, -4, 4, false, 1e-6},
    {"gelu", b_gelu, r_gelu, NULL, 1, {SHP(3, 2, 5, 33)}, -4, 4, false, 1e-6},
    {"gelu", b_gelu, r_gelu, NULL, 1, {SHP(2, 200, 97)}, -6, 6, false, 1e-6},
    {"gelu_erf", b_gelu_erf, r_gelu_erf, NULL, 1, {SHP(1, 1)}, -4, 4, false, 1e-6},
    {"gelu_erf", b_gelu_erf, r_gelu_erf, NULL, 1, {SHP(3, 2, 5, 33)}, -4, 4, false, 1e-6},
    {"gelu_erf", b_gelu_erf, r_gelu_erf, NULL, 1, {SHP(2, 200, 97)}, -6, 6, false, 1e-6},
    {"relu", b_relu, r_relu, NULL, 1, {SHP(1, 1)}, -2, 2, true, 0},
    {"relu", b_relu, r_relu, NULL, 1, {SHP(3, 2, 5, 33)}, -2, 2, true, 0},
    {"relu", b_relu, r_relu, NULL, 1, {SHP(2, 200, 97)}, -2, 2, true, 0},
    {"relu2", b_relu2, r_relu2, NULL, 1, {SHP(1, 1)}, -2, 2, true, 1e-6},
    {"relu2", b_relu2, r_relu2, NULL, 1, {SHP(3, 2, 5, 33)}, -2, 2, true, 1e-6},
    {"relu2", b_relu2, r_relu2, NULL, 1, {SHP(2, 200, 97)}, -2, 2, true, 1e-6},
    {"silu", b_silu, r_silu, NULL, 1, {SHP(1, 1)}, -4, 4, false, 1e-6},
    {"silu", b_silu, r_silu, NULL, 1, {SHP(3, 2, 5, 33)}, -6, 6, false, 1e-6},
    {"silu", b_silu, r_silu, NULL, 1, {SHP(2, 200, 97)}, -6, 6, false, 1e-6},
    {"softmax", b_softmax, r_softmax, NULL, 1, {SHP(2, 1, 1)}, -3, 3, false, 1e-6},
    {"softmax", b_softmax, r_softmax, NULL, 1, {SHP(2, 4, 1)}, -3, 3, false, 1e-6},
    {"softmax", b_softmax, r_softmax, NULL, 1, {SHP(2, 3, 17)}, -3, 3, false, 1e-6},
    {"softmax", b_softmax, r_softmax, NULL, 1, {SHP(3, 2, 5, 33)}, -3, 3, false, 1e-6},
    {"softmax", b_softmax, r_softmax, NULL, 1, {SHP(3, 4, 64, 65)}, -8, 8, false, 1e-6},
    {"cross_entropy", b_cross_entropy, r_cross_entropy, &CE_A, 1, {SHP(2, 3, 17)},
     -3, 3, false, 1e-6},
    {"cross_entropy", b_cross_entropy, r_cross_entropy, &CE_B, 1, {SHP(3, 2, 5, 33)},
     -3, 3, false, 1e-6},
    {"cross_entropy", b_cross_entropy, r_cross_entropy, &CE_C, 1, {SHP(2, 1, 1)},
     -3, 3, false, 1e-6},
    {"cross_entropy", b_cross_entropy, r_cross_entropy, &CE_BIG, 1, {SHP(3, 3, 100, 97)},
     -8, 8, false, 1e-6},
    {"cross_entropy smoothed", b_cross_entropy, r_cross_entropy, &CE_LS_A, 1, {SHP(2, 3, 17)},
     -3, 3, false, 1e-6},
    {"cross_entropy smoothed", b_cross_entropy, r_cross_entropy, &CE_LS_B, 1, {SHP(3, 2, 5, 33)},
     -3, 3, false, 1e-6},
    {"cross_entropy smoothed", b_cross_entropy, r_cross_entropy, &CE_LS_C, 1, {SHP(2, 1, 1)},
     -3, 3, false, 1e-6},
    {"cross_entropy smoothed", b_cross_entropy, r_cross_entropy, &CE_LS_BIG, 1, {SHP(2, 9, 1000)},
     -8, 8, false, 1e-6},
    {"cross_entropy z-loss", b_cross_entropy, r_cross_entropy, &CE_Z_A, 1, {SHP(2, 3, 17)},
     -3, 3, false, 1e-6},
    {"cross_entropy z-loss smoothed", b_cross_entropy, r_cross_entropy, &CE_Z_B, 1,
     {SHP(3, 2, 5, 33)}, -3, 3, false, 1e-6},
    {"cross_entropy z-loss smoothed", b_cross_entropy, r_cross_entropy, &CE_Z_BIG, 1,
     {SHP(3, 3, 100, 97)}, -8, 8, false, 1e-6},
    {"cross_entropy softcap", b_cross_entropy, r_cross_entropy, &CE_CAP_A, 1, {SHP(2, 3, 17)},
     -3, 3, false, 1e-6},
    {"cross_entropy softcap z-loss smoothed", b_cross_entropy, r_cross_entropy, &CE_CAP_B, 1,
     {SHP(3, 2, 5, 33)}, -3, 3, false, 1e-6},
    {"cross_entropy softcap smoothed", b_cross_entropy, r_cross_entropy, &CE_CAP_BIG, 1,
     {SHP(3, 3, 100, 97)}, -8, 8, false, 1e-6},
    {"softcap", b_softcap, r_softcap, &CAP_HI, 1, {SHP(1, 1)}, -6, 6, false, 1e-6},
    {"softcap", b_softcap, r_softcap, &CAP_LO, 1, {SHP(3, 2, 5, 33)}, -3, 3, false, 1e-6},
    {"softcap", b_softcap, r_softcap, &CAP_HI, 1, {SHP(2, 200, 97)}, -6, 6, false, 1e-6},
    {"embedding", b_embedding, r_embedding, &E_A, 1, {SHP(2, 7, 5)}, -1, 1, false, 0},
    {"embedding", b_embedding, r_embedding, &E_B, 1, {SHP(2, 1, 1)}, -1, 1, false, 0},
    {"embedding", b_embedding, r_embedding, &E_C, 1, {SHP(2, 33, 17)}, -1, 1, false, 0},
    {"embedding", b_embedding, r_embedding, &E_BIG, 1, {SHP(2, 257, 65)}, -1, 1, false, 0},
    {"dropout", b_dropout, r_dropout, &P_DROP, 1, {SHP(1, 1)}, -1, 1, false, 1e-7},
    {"dropout", b_dropout, r_dropout, &P_DROP, 1, {SHP(3, 2, 5, 33)}, -1, 1, false, 1e-7},
    {"dropout", b_dropout, r_dropout, &P_DROP_HI, 1, {SHP(2, 17, 3)}, -1, 1, false, 1e-7},
    {"dropout", b_dropout, r_dropout, &P_DROP, 1, {SHP(2, 300, 65)}, -1, 1, false, 1e-7},
    {"concat", b_concat, r_concat, &THREE, 3, {SHP(2, 2, 3), SHP(2, 2, 17), SHP(2, 2, 1)},
     -1, 1, false, 0},
    {"concat", b_concat, r_concat, &TWO, 2, {SHP(3, 3, 4, 5), SHP(3, 3, 4, 16)}, -1, 1, false, 0},
    {"concat", b_concat, r_concat, &TWO, 2, {SHP(1, 1), SHP(1, 1)}, -1, 1, false, 0},
    {"concat", b_concat, r_concat, &TWO, 2, {SHP(2, 700, 33), SHP(2, 700, 31)}, -1, 1, false, 0},
    {"slice", b_slice, r_slice, &SL_A, 1, {SHP(2, 3, 17)}, -1, 1, false, 0},
    {"slice", b_slice, r_slice, &SL_B, 1, {SHP(3, 2, 3, 33)}, -1, 1, false, 0},
    {"slice", b_slice, r_slice, &SL_C, 1, {SHP(1, 1)}, -1, 1, false, 0},
    {"slice", b_slice, r_slice, &SL_D, 1, {SHP(2, 9000, 33)}, -1, 1, false, 0},
    {"split", b_split, r_split, &SP_A, 1, {SHP(2, 3, 17)}, -1, 1, false, 0},
    {"split", b_split, r_split, &SP_B, 1, {SHP(3, 2, 5, 33)}, -1, 1, false, 0},
    {"split", b_split, r_split, &SP_C, 1, {SHP(2, 1, 4)}, -1, 1, false, 0},
    {"split", b_split, r_split, &SP_B, 1, {SHP(2, 1000, 33)}, -1, 1, false, 0},
};
// clang-format on

static void fill_ids(mt_rng *r) {
    for (int i = 0; i < 600; i++) IDS_BIG[i] = (int)mt_rng_below(r, 257);
    for (int i = 0; i < 40; i++) IDS_MID[i] = (int)mt_rng_below(r, 33);
    for (int i = 0; i < 10; i++) TGT_B[i] = i % 4 == 3 ? -1 : (int)mt_rng_below(r, 33);
    for (int i = 0; i < 300; i++) TGT_BIG[i] = i % 7 == 0 ? -100 : (int)mt_rng_below(r, 97);
}

/* For inputs too large for an element-by-element gradcheck: the directional derivative of
   L = sum(y * w) along a random v, sum(grad * v), against (L(x + eps v) - L(x - eps v)) / 2 eps.
   The float outputs resolve that difference to about |y_i| FLT_EPSILON each: the check allows
   twice ||w * y|| FLT_EPSILON / 2 eps on top of tol (for a scalar such as a mean loss of 12 it
   is 7e-5, which a directional derivative of 2e-3 can fall under). */
static double loss_of(mt_ctx *c, gc_build build, const void *arg, mt_tensor **in, const float *w) {
    mt_ctx_reset(c);
    mt_rng_seed(&c->rng, 42);
    mt_tensor *y = build(c, in, arg);
    double s = 0;
    for (size_t i = 0; i < y->n; i++) s += (double)y->data[i] * w[i];
    return s;
}

static void dircheck(const char *name, gc_build build, const void *arg, int n_in, mt_tensor **in,
                     double eps, double tol) {
    mt_ctx c;
    mt_ctx_init(&c, (size_t)256 << 20, 1, NULL);
    mt_rng r;
    mt_rng_seed(&r, 11);
    for (int k = 0; k < n_in; k++)
        if (in[k]->grad) memset(in[k]->grad, 0, in[k]->n * sizeof(float));
    mt_rng_seed(&c.rng, 42);
    mt_tensor *y = build(&c, in, arg);
    float *w = malloc(y->n * sizeof(float));
    double wy2 = 0;
    for (size_t i = 0; i < y->n; i++) {
        w[i] = 2 * mt_rng_uniform(&r) - 1;
        wy2 += (double)w[i] * y->data[i] * w[i] * y->data[i];
    }
    double resolution = 2 * sqrt(wy2) * FLT_EPSILON / (2 * eps);
    mt_backward_from(&c, y, w);
    c.grad_enabled = false;
    for (int k = 0; k < n_in; k++) {
        if (!in[k]->grad) continue;
        size_t n = in[k]->n;
        float *x0 = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
        memcpy(x0, in[k]->data, n * sizeof(float));
        double ana = 0;
        for (size_t i = 0; i < n; i++) {
            v[i] = 2 * mt_rng_uniform(&r) - 1;
            ana += (double)in[k]->grad[i] * v[i];
        }
        for (size_t i = 0; i < n; i++) in[k]->data[i] = x0[i] + (float)eps * v[i];
        double lp = loss_of(&c, build, arg, in, w);
        for (size_t i = 0; i < n; i++) in[k]->data[i] = x0[i] - (float)eps * v[i];
        double lm = loss_of(&c, build, arg, in, w);
        memcpy(in[k]->data, x0, n * sizeof(float));
        double num = (lp - lm) / (2 * eps);
        CHECK(fabs(num - ana) <= tol * (fabs(num) + fabs(ana) + 1e-3) + resolution,
              "dircheck %s: input %d: analytic %.8g numeric %.8g (float resolution %.2g)", name, k,
              ana, num, resolution);
        free(x0);
        free(v);
    }
    free(w);
    mt_ctx_free(&c);
}

static void test_table(void) {
    mt_rng r;
    mt_rng_seed(&r, 21);
    fill_ids(&r);
    mt_ctx c;
    mt_ctx_init(&c, (size_t)64 << 20, 1, NULL);
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        const op_case *t = &CASES[k];
        mt_tensor *in[4];
        size_t n_total = 0;
        for (int i = 0; i < t->n_in; i++) {
            in[i] = test_tensor(&r, t->in[i].ndim, t->in[i].shape, t->lo, t->hi, true);
            for (size_t j = 0; t->kink && j < in[i]->n; j++)
                if (fabsf(in[i]->data[j]) < 0.05f)
                    in[i]->data[j] = in[i]->data[j] < 0 ? -0.1f : 0.1f;
            n_total += in[i]->n;
        }
        char name[64];
        snprintf(name, sizeof name, "%s[%zu]", t->name, k);
        mt_ctx_reset(&c);
        mt_rng_seed(&c.rng, 42);
        mt_tensor *y = t->build(&c, in, t->arg);
        double *ref = malloc(y->n * sizeof(double));
        float *reff = malloc(y->n * sizeof(float));
        t->ref(in, t->arg, ref);
        for (size_t i = 0; i < y->n; i++) reff[i] = (float)ref[i];
        double e = max_rel_err(y->data, reff, y->n);
        CHECK(e <= t->ref_tol, "%s vs naive loop: relative error %g > %g", name, e, t->ref_tol);
        if (n_total <= 4000) gradcheck(name, t->build, t->arg, t->n_in, in, 1e-2, 1e-3);
        else dircheck(name, t->build, t->arg, t->n_in, in, 1e-2, 1e-3);
        free(ref);
        free(reff);
        for (int i = 0; i < t->n_in; i++) test_tensor_free(in[i]);
    }
    mt_ctx_free(&c);
}

/* Dropout: the identity in eval mode and for p = 0; in training the fraction dropped is p, kept
   values are scaled by 1/(1-p), consecutive masks are independent; backward uses the forward's
   mask even after the RNG moved on; p = 1 drops everything. */
static void test_dropout(void) {
    mt_ctx c;
    mt_ctx_init(&c, (size_t)16 << 20, 5, NULL);
    mt_rng r;
    mt_rng_seed(&r, 2);
    int n = 200000;
    mt_tensor *x = test_tensor(&r, 1, &n, 1, 1, true); /* all ones: y is the mask */
    c.training = false;
    CHECK(mt_dropout(&c, x, 0.5f) == x, "dropout in eval mode is the identity");
    c.training = true;
    CHECK(mt_dropout(&c, x, 0.0f) == x, "dropout with p = 0 is the identity");
    const float p = 0.3f;
    mt_tensor *y = mt_dropout(&c, x, p);
    int zeros = 0, bad = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        zeros += y->data[i] == 0;
        bad += y->data[i] != 0 && y->data[i] != 1.0f / (1.0f - p);
        sum += y->data[i];
    }
    /* binomial: sd of the dropped fraction is sqrt(p (1-p) / n) = 0.001 */
    CHECK(fabs((double)zeros / n - p) < 0.005, "dropout dropped %g, expected %g", (double)zeros / n,
          p);
    CHECK(bad == 0, "dropout: %d kept values are not 1/(1-p)", bad);
    CHECK(fabs(sum / n - 1) < 0.01, "dropout keeps the mean: %g", sum / n);
    /* the RNG moves on: the next mask is independent, both dropped about p^2 of the time */
    mt_tensor *y2 = mt_dropout(&c, x, p);
    int both = 0;
    for (int i = 0; i < n; i++) both += y->data[i] == 0 && y2->data[i] == 0;
    CHECK(fabs((double)both / n - p * p) < 0.005, "two masks both dropped %g, expected %g",
          (double)both / n, p * p);
    float *dy = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) dy[i] = mt_rng_uniform(&r);
    mt_backward_from(&c, y, dy);
    for (int i = 0; i < n; i++) bad += x->grad[i] != dy[i] * y->data[i];
    CHECK(bad == 0, "dropout backward: %d elements not dy * (the forward's mask)", bad);
    y = mt_dropout(&c, x, 1.0f);
    for (int i = 0; i < n; i++) bad += y->data[i] != 0;
    CHECK(bad == 0, "dropout with p = 1 keeps %d elements", bad);
    free(dy);
    test_tensor_free(x);
    mt_ctx_free(&c);
}

/* Cross-entropy, plain, label-smoothed and with z-loss: ignored rows change neither the loss
   nor get a gradient; huge logits stay finite (log-sum-exp with the max taken out); all rows
   ignored gives NaN as torch does. */
static void test_cross_entropy(void) {
    const float smoothing[] = {0, 0.2f, 0.2f}, zs[] = {0, 0, 0.5f};
    for (int k = 0; k < 3; k++) {
        float eps = smoothing[k], z = zs[k];
        mt_ce_opts o = {.label_smoothing = eps, .z_loss = z};
        mt_ctx c;
        mt_ctx_init(&c, (size_t)16 << 20, 5, NULL);
        mt_rng r;
        mt_rng_seed(&r, 3);
        int V = 19;
        mt_tensor *x = test_tensor(&r, 2, (int[]){4, V}, -3, 3, true);
        int t_all[4] = {1, 7, 18, 0}, t_ign[4] = {1, -100, 18, -100},
            t_none[4] = {-100, -100, -100, -100};
        mt_tensor *kept = mt_tensor_from(&c, x->data, 2, (int[]){4, V});
        double loss2 = 0;
        mt_tensor *all = mt_cross_entropy(&c, kept, t_all, -100, o);
        for (int rr = 0; rr < 4; rr += 2) { /* the mean of rows 0 and 2 alone */
            double mx = max_of(x->data + rr * V, V), s = 0, mean_x = 0;
            for (int j = 0; j < V; j++) s += exp(x->data[rr * V + j] - mx);
            for (int j = 0; j < V; j++) mean_x += x->data[rr * V + j] / (double)V;
            double lse = mx + log(s);
            loss2 += (lse - (1 - eps) * x->data[rr * V + t_all[rr]] - eps * mean_x) / 2;
            loss2 += z * lse * lse / 2;
        }
        mt_tensor *ign = mt_cross_entropy(&c, x, t_ign, -100, o);
        CHECK(fabs(ign->data[0] - loss2) < 1e-6 * fabs(loss2), "eps %g, ignore_index: %g vs %g",
              eps, ign->data[0], loss2);
        CHECK(all->data[0] != ign->data[0], "eps %g: ignoring rows changes the loss", eps);
        mt_backward(&c, ign);
        for (int j = 0; j < V; j++)
            CHECK(x->grad[V + j] == 0 && x->grad[3 * V + j] == 0,
                  "eps %g: ignored rows get no gradient", eps);
        for (int j = 0; j < V; j++) x->data[j] = 1e4f * (float)(j % 3) - 5e3f; /* row 0: +-5000 */
        mt_tensor *big = mt_cross_entropy(&c, x, t_ign, -100, o);
        CHECK(isfinite(big->data[0]), "eps %g: cross-entropy of logits of 5000: %g", eps,
              big->data[0]);
        CHECK(isnan(mt_cross_entropy(&c, x, t_none, -100, o)->data[0]),
              "eps %g: all ignored: NaN as torch", eps);
        test_tensor_free(x);
        mt_ctx_free(&c);
    }
}

/* The logits' gradient over the logits (grad_in_place): with c->free_activations a head's
   logits feeding the cross-entropy take no gradient block of their own, and the parameters'
   gradients and the loss keep every bit of the run without it; rows ignored get 0, not their
   logits. z-loss keeps the separate block (its term reads the logits after the row is written).
   Compared bit for bit with free_activations off, for each of eps 0, 0.2 and z-loss. */
static void ce_head_run(mt_params *P, const int *ids, const int *tgt, mt_ce_opts o, bool in_place,
                        float *grads, float *loss, size_t *peak) {
    mt_ctx c;
    mt_ctx_init(&c, (size_t)64 << 20, 5, NULL);
    c.free_activations = in_place;
    mt_params_zero_grad(P);
    int N = 256;
    mt_tensor *h = mt_embedding(&c, &P->t[0], ids, N);           /* (N, C) */
    mt_tensor *logits = mt_matmul(&c, h, &P->t[1], false, true); /* (N, V) */
    mt_tensor *l = mt_cross_entropy(&c, logits, tgt, -100, o);
    size_t before = c.arena.used;
    mt_backward(&c, l);
    *peak = c.arena.peak - before; /* what the backward took */
    *loss = l->data[0];
    memcpy(grads, P->grad, P->total * sizeof(float));
    mt_ctx_free(&c);
}

static void test_cross_entropy_in_place(void) {
    int V = 997, C = 32, N = 256;
    mt_params P;
    mt_params_init_table(&P);
    mt_params_add(&P, "wte", 2, (int[]){50, C}, MT_ROLE_EMBEDDING, MT_INIT_NORMAL, 0.5f);
    mt_params_add(&P, "head", 2, (int[]){V, C}, MT_ROLE_MATRIX, MT_INIT_NORMAL, 0.3f);
    mt_params_alloc(&P, NULL);
    mt_rng r;
    mt_rng_seed(&r, 8);
    mt_params_initialize(&P, &r);
    int ids[256], tgt[256];
    for (int i = 0; i < N; i++)
        ids[i] = (int)mt_rng_below(&r, 50), tgt[i] = i % 7 ? (int)mt_rng_below(&r, V) : -100;
    float *a = malloc(P.total * sizeof(float)), *b = malloc(P.total * sizeof(float));
    const mt_ce_opts opts[] = {MT_CE_PLAIN,
                               {.label_smoothing = 0.2f},
                               {.z_loss = 1e-3f},
                               {.softcap = 2.0f, .label_smoothing = 0.1f},
                               {.softcap = 2.0f, .z_loss = 1e-3f}};
    size_t logits = (size_t)N * V * sizeof(float);
    for (int k = 0; k < 5; k++) {
        float la, lb;
        size_t pa, pb;
        ce_head_run(&P, ids, tgt, opts[k], false, a, &la, &pa);
        ce_head_run(&P, ids, tgt, opts[k], true, b, &lb, &pb);
        CHECK(la == lb && !memcmp(a, b, P.total * sizeof(float)),
              "case %d: in place, other bits (loss %.9g vs %.9g)", k, la, lb);
        bool z = opts[k].z_loss > 0;
        CHECK(z ? pb + 4096 > pa : pb + logits <= pa + 4096,
              "case %d: the backward took %zu bytes in place against %zu (logits %zu)", k, pb, pa,
              logits);
    }
    free(a), free(b);
    mt_params_free(&P);
}

/* A reshape shares its input's data; split parts that are used twice accumulate. */
static void test_reshape_shares(void) {
    mt_ctx c;
    mt_ctx_init(&c, 1 << 20, 5, NULL);
    mt_rng r;
    mt_rng_seed(&r, 4);
    mt_tensor *x = test_tensor(&r, 3, (int[]){2, 3, 4}, -1, 1, true);
    mt_tensor *y = mt_reshape(&c, x, 2, (int[]){4, 6});
    CHECK(y->data == x->data && y->shape[0] == 4 && y->shape[1] == 6 && y->requires_grad,
          "reshape shares data");
    mt_backward_from(&c, mt_add(&c, y, y), (float[24]){[0] = 1, [23] = 2});
    CHECK(x->grad[0] == 2 && x->grad[23] == 4 && x->grad[5] == 0, "reshape backward accumulates");
    test_tensor_free(x);
    mt_ctx_free(&c);
}

/* The same small computation twice, same seed and threads: bit-identical outputs and grads.
   Sizes are above MT_PAR_MIN so every parallel path runs. */
static void run_model(mt_params *P, const int *ids, const int *tgt, float *out, uint64_t seed) {
    mt_ctx c;
    mt_ctx_init(&c, (size_t)64 << 20, seed, NULL);
    mt_params_zero_grad(P);
    int N = 512, C = 64, V = 97;
    mt_tensor *h = mt_embedding(&c, &P->t[0], ids, N); /* (N, C) */
    h = mt_dropout(&c, mt_gelu(&c, h), 0.1f);
    mt_tensor *q = mt_reshape(&c, h, 3, (int[]){8, 64, C});            /* (B, T, C) */
    mt_tensor *kt = mt_transpose(&c, q, 1, 2);                         /* (B, C, T) */
    mt_tensor *a = mt_softmax(&c, mt_matmul(&c, q, kt, false, false)); /* (B, T, T) */
    mt_tensor *z = mt_matmul(&c, a, q, false, false);                  /* (B, T, C) */
    mt_tensor *parts[2];
    mt_split(&c, z, 2, (int[]){30, 34}, parts);
    z = mt_concat(&c, 2, (mt_tensor *[]){mt_silu(&c, parts[1]), parts[0]});
    mt_tensor *logits = mt_matmul(&c, z, &P->t[1], false, true); /* (B, T, V) */
    mt_tensor *loss = mt_add(&c, mt_cross_entropy(&c, logits, tgt, -100, MT_CE_PLAIN),
                             mt_scale(&c, mt_mean(&c, mt_mul(&c, z, z)), 0.01f));
    mt_backward(&c, loss);
    memcpy(out, loss->data, sizeof(float));
    memcpy(out + 1, logits->data, (size_t)N * V * sizeof(float));
    memcpy(out + 1 + N * V, P->grad, P->total * sizeof(float));
    mt_ctx_free(&c);
}

static void test_determinism(void) {
    mt_params P;
    mt_params_init_table(&P);
    mt_params_add(&P, "wte", 2, (int[]){97, 64}, MT_ROLE_EMBEDDING, MT_INIT_NORMAL, 0.5f);
    mt_params_add(&P, "head", 2, (int[]){97, 64}, MT_ROLE_MATRIX, MT_INIT_NORMAL, 0.2f);
    mt_params_alloc(&P, NULL);
    mt_rng r;
    mt_rng_seed(&r, 6);
    mt_params_initialize(&P, &r);
    int ids[512], tgt[512];
    for (int i = 0; i < 512; i++) {
        ids[i] = (int)mt_rng_below(&r, 16); /* few ids: many rows scatter into the same row */
        tgt[i] = i % 5 == 0 ? -100 : (int)mt_rng_below(&r, 97);
    }
    size_t n = 1 + 512 * 97 + P.total;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    run_model(&P, ids, tgt, a, 77);
    run_model(&P, ids, tgt, b, 77);
    CHECK(memcmp(a, b, n * sizeof(float)) == 0, "two runs with the same seed differ");
    CHECK(isfinite(a[0]), "loss %g", a[0]);
    run_model(&P, ids, tgt, b, 78);
    CHECK(memcmp(a, b, n * sizeof(float)) != 0, "another dropout seed changes nothing");
    free(a);
    free(b);
    mt_params_free(&P);
}

/* The vectorisable exp, sigmoid, erfc and tanh of vmath.h against double precision, on a dense
   grid and at the edges: exp's, sigmoid's and tanh's relative errors, erfc's relative error for
   x < 3 and the absolute error of erf = 1 - erfc. */
static void test_vmath(void) {
    double e_exp = 0, e_sig = 0, e_erfc = 0, e_erf = 0, e_tanh = 0, e_dtanh = 0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.3f + (88.7f + 87.3f) * (float)i / 2000000.0f;
        e_exp = worst_err(e_exp, fabs(mt_vexpf(x) - exp((double)x)) / exp((double)x));
        float z = -80.0f + 160.0f * (float)i / 2000000.0f;
        double sig = 1 / (1 + exp(-(double)z));
        e_sig = worst_err(e_sig, fabs(mt_vsigmoidf(z) - sig) / sig);
        float t = -10.0f + 20.0f * (float)i / 2000000.0f;
        e_erf = worst_err(e_erf, fabs(1.0f - mt_verfcf(t) - erf((double)t)));
        if (t < 3)
            e_erfc = worst_err(e_erfc, fabs(mt_verfcf(t) - erfc((double)t)) / erfc((double)t));
        float u = -12.0f + 24.0f * (float)i / 2000000.0f; /* 0.25 and 9 and the grid's 0 within */
        double th = tanh((double)u), sech2 = 1 / (cosh((double)u) * cosh((double)u));
        float d, y = mt_vtanhf_d(u, &d);
        if (u != 0) e_tanh = worst_err(e_tanh, fabs(y - th) / fabs(th));
        e_dtanh = worst_err(e_dtanh, fabs(d - sech2) / sech2);
    }
    for (float u = 1e-30f; u < 1; u *= 1.01f) /* the small arguments, where 1 - e would cancel */
        e_tanh = worst_err(e_tanh, fabs(mt_vtanhf(u) - tanh((double)u)) / tanh((double)u));
    CHECK(e_tanh < 4e-7 && e_dtanh < 1e-6, "vmath: tanh relative error %g, its derivative's %g",
          e_tanh, e_dtanh);
    CHECK(mt_vtanhf(INFINITY) == 1 && mt_vtanhf(-1000) == -1 && mt_vtanhf(0) == 0 &&
              isnan(mt_vtanhf(NAN)),
          "vmath: tanh at the edges");
    CHECK(e_exp < 3e-7 && e_sig < 4e-7 && e_erfc < 2e-6 && e_erf < 4e-7,
          "vmath: exp relative error %g, sigmoid relative %g, erfc relative %g, erf absolute %g",
          e_exp, e_sig, e_erfc, e_erf);
    CHECK(mt_vexpf(-INFINITY) == 0 && mt_vexpf(-100) == 0 && mt_vexpf(0) == 1 &&
              mt_vexpf(89) == INFINITY && mt_vexpf(INFINITY) == INFINITY && isnan(mt_vexpf(NAN)),
          "vmath: exp at the edges");
    CHECK(mt_vsigmoidf(INFINITY) == 1 && mt_vsigmoidf(100) == 1 && mt_vsigmoidf(0) == 0.5f &&
              mt_vsigmoidf(-INFINITY) < 2e-35 && mt_vsigmoidf(-1000) >= 0 &&
              mt_verfcf(INFINITY) == 0 && mt_verfcf(-30) == 2 && isnan(mt_verfcf(NAN)),
          "vmath: sigmoid and erfc at the edges");
}

/* mHC's Sinkhorn-Knopp (mt_mhc_maps): after its 20 iterations (the paper's) the residual mix is
   doubly stochastic to 1e-5, every entry positive, for N from 1 to 16 and logits in [-3, 3]. */
static void test_sinkhorn(void) {
    mt_ctx c;
    mt_ctx_init(&c, (size_t)16 << 20, 1, NULL);
    mt_rng r;
    mt_rng_seed(&r, 5);
    int Ns[] = {1, 2, 4, 7, 16};
    for (int k = 0; k < 5; k++) {
        int N = Ns[k], R = 5, per = N * (N + 1);
        mt_tensor *z = test_tensor(&r, 2, (int[]){R, 2 * N + N * N}, -3, 3, false);
        mt_tensor *m = mt_mhc_maps(&c, z, N, 20);
        double worst = 0;
        bool positive = true;
        for (int row = 0; row < R; row++) {
            const float *a = m->data + (size_t)row * (per + N);
            for (int u = 0; u < N; u++) { /* output u's weights (row), input u's (column) */
                double out = 0, in = 0;
                for (int v = 0; v < N; v++) {
                    out += a[v * (N + 1) + 1 + u], in += a[u * (N + 1) + 1 + v];
                    positive = positive && a[v * (N + 1) + 1 + u] > 0;
                }
                worst = fmax(worst, fmax(fabs(out - 1), fabs(in - 1)));
            }
        }
        CHECK(worst <= 1e-5 && positive,
              "sinkhorn N = %d: a row or column sums to 1 +- %.3g (1e-5 allowed)%s", N, worst,
              positive ? "" : ", an entry not positive");
        test_tensor_free(z);
        mt_ctx_reset(&c);
    }
    mt_ctx_free(&c);
}

int main(void) {
    mt_set_threads(0);
    test_sinkhorn();
    test_vmath();
    test_table();
    test_dropout();
    test_cross_entropy();
    test_cross_entropy_in_place();
    test_reshape_shares();
    test_determinism();
    return check_finish("test_ops");
}
