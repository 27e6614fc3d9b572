/* Shape ops: reshape (shares data), permute and transpose (copies), concat, slice and split along
   the last dim. N rows (every dim but the last), C the last dim. */
#include <stdio.h>
#include <string.h>

#include "tensor.h"

/* ---- reshape: the same data under a new shape ---------------------------------------------- */

static void reshape_forward(mt_node *n) { (void)n; /* out->data is in[0]->data */ }

/* dx += dy (same element order) */
static void reshape_backward(mt_node *n) {
    const float *dy = n->out->grad;
    float *dx = n->in[0]->grad;
    size_t N = n->out->n;
    if (!dx) return;
    MT_PARALLEL_FOR_SIMD(N >= MT_PAR_MIN, for (size_t i = 0; i < N; i++) dx[i] += dy[i];);
}

static const mt_op OP_RESHAPE = {.name = "reshape",
                                 .forward = reshape_forward,
                                 .backward = reshape_backward};

mt_tensor *mt_reshape(mt_ctx *c, mt_tensor *x, int ndim, const int shape[]) {
    char sx[64];
    MT_ASSERT(ndim >= 1 && ndim <= MT_MAX_DIMS, "reshape: %d dims, 1 to %d supported", ndim,
              MT_MAX_DIMS);
    for (int d = 0; d < ndim; d++)
        MT_ASSERT(shape[d] >= 1, "reshape of %s: dim %d has size %d", mt_shape_str(x, sx, 64), d,
                  shape[d]);
    MT_ASSERT(mt_shape_numel(ndim, shape) == x->n,
              "reshape: %s has %zu elements, the new shape %zu", mt_shape_str(x, sx, 64), x->n,
              mt_shape_numel(ndim, shape));
    mt_tensor *out = mt_arena_alloc(c, sizeof *out);
    *out = mt_tensor_view(x->data, NULL, ndim, shape);
    mt_node_run(c, mt_node_new(c, &OP_RESHAPE, out, 1, (mt_tensor *[]){x}));
    return out;
}

/* ---- permute: y[o0, o1, o2, o3] = x[o0 s0 + o1 s1 + o2 s2 + o3 s3] ---------------------------
 * Shapes are padded to 4 dims with leading 1s; i[0..3] is y's shape, i[4..7] the stride in x of
 * each of y's dims. Backward walks the same index map: dx[...] += dy[o] (a bijection, no races).
 * y's last dim and dim q, the one contiguous in x (x's last dim), are walked in TILE x TILE tiles
 * so that both sides move through whole cache lines (tiles of 16 measured faster than 8, 32 and
 * 64 on a transpose of the last two dims); with the other two dims u, v they make one loop over
 * tiles, split across threads. */

#define TILE 16

static void permute_kernel(float *y, float *x, const int *sh, const int *st, bool backward) {
    int q = 2;
    for (int d = 0; d < 3; d++)
        if (st[d] == 1 && sh[d] > 1) q = d;
    int u = q == 0 ? 1 : 0, v = q == 2 ? 1 : 2;
    size_t ys[4] = {(size_t)sh[1] * sh[2] * sh[3], (size_t)sh[2] * sh[3], (size_t)sh[3], 1};
    size_t total = ys[0] * sh[0];
    int nq = (sh[q] + TILE - 1) / TILE, ne = (sh[3] + TILE - 1) / TILE;
    long tiles = (long)sh[u] * sh[v] * nq * ne; /* (a, b, tq, te), te fastest */
    MT_PARALLEL_FOR(total >= MT_PAR_MIN, for (long t = 0; t < tiles; t++) {
        int te = (int)(t % ne), tq = (int)(t / ne % nq);
        long ab = t / ne / nq, a = ab / sh[v], b = ab % sh[v];
        float *yo = y + a * ys[u] + b * ys[v];
        float *xo = x + (size_t)a * st[u] + (size_t)b * st[v];
        int q1 = (tq + 1) * TILE < sh[q] ? (tq + 1) * TILE : sh[q];
        int e1 = (te + 1) * TILE < sh[3] ? (te + 1) * TILE : sh[3];
        for (int i = tq * TILE; i < q1; i++) {
            float *yi = yo + i * ys[q], *xi = xo + (size_t)i * st[q];
            if (backward)
                for (int e = te * TILE; e < e1; e++) xi[(size_t)e * st[3]] += yi[e];
            else
                for (int e = te * TILE; e < e1; e++) yi[e] = xi[(size_t)e * st[3]];
        }
    });
}

static void permute_forward(mt_node *n) {
    permute_kernel(n->out->data, n->in[0]->data, n->i, n->i + 4, false);
}

/* dx[perm^-1 index] += dy */
static void permute_backward(mt_node *n) {
    if (n->in[0]->grad) permute_kernel(n->out->grad, n->in[0]->grad, n->i, n->i + 4, true);
}

static const mt_op OP_PERMUTE = {.name = "permute",
                                 .forward = permute_forward,
                                 .backward = permute_backward};

mt_tensor *mt_permute(mt_ctx *c, mt_tensor *x, const int perm[]) {
    char sx[64];
    int D = x->ndim, pad = MT_MAX_DIMS - D, shape[MT_MAX_DIMS], xstride[MT_MAX_DIMS];
    bool seen[MT_MAX_DIMS] = {false};
    for (int d = 0; d < D; d++) {
        MT_ASSERT(perm[d] >= 0 && perm[d] < D && !seen[perm[d]],
                  "permute of %s: perm[%d] = %d, perm must list each of 0..%d once",
                  mt_shape_str(x, sx, 64), d, perm[d], D - 1);
        seen[perm[d]] = true;
        shape[d] = x->shape[perm[d]];
    }
    xstride[D - 1] = 1;
    for (int d = D - 2; d >= 0; d--) xstride[d] = xstride[d + 1] * x->shape[d + 1];
    mt_tensor *out = mt_tensor_new(c, D, shape);
    mt_node *n = mt_node_new(c, &OP_PERMUTE, out, 1, (mt_tensor *[]){x});
    for (int d = 0; d < MT_MAX_DIMS; d++) {
        n->i[d] = d < pad ? 1 : shape[d - pad];
        n->i[4 + d] = d < pad ? 0 : xstride[perm[d - pad]];
    }
    mt_node_run(c, n);
    return out;
}

mt_tensor *mt_transpose(mt_ctx *c, mt_tensor *x, int d0, int d1) {
    char sx[64];
    MT_ASSERT(d0 >= 0 && d0 < x->ndim && d1 >= 0 && d1 < x->ndim,
              "transpose of %s: dims %d and %d, each must be in [0, %d)", mt_shape_str(x, sx, 64),
              d0, d1, x->ndim);
    int perm[MT_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) perm[d] = d == d0 ? d1 : d == d1 ? d0 : d;
    return mt_permute(c, x, perm);
}

/* ---- concat along the last dim: y[r, off_k + j] = x_k[r, j];  i[k] = C_k ---------------------
 * Row copies here, in slice and in embedding are plain vectorised loops: for rows of a few KB they
 * measured faster than glibc's memcpy. */

_Static_assert(MT_NODE_MAX_IN <= 8, "concat keeps one width per input in mt_node.i");

static void concat_forward(mt_node *n) {
    long N = mt_rows(n->out);
    int C = mt_cols(n->out);
    float *y = n->out->data;
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (long r = 0; r < N; r++)
        for (int k = 0, off = 0; k < n->n_in; off += n->i[k], k++) {
            const float *xk = n->in[k]->data + r * n->i[k];
            float *yr = y + r * C + off;
            _Pragma("omp simd")
            for (int j = 0; j < n->i[k]; j++) yr[j] = xk[j];
        });
}

/* dx_k[r, j] += dy[r, off_k + j] */
static void concat_backward(mt_node *n) {
    long N = mt_rows(n->out);
    int C = mt_cols(n->out);
    const float *dy = n->out->grad;
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (long r = 0; r < N; r++)
        for (int k = 0, off = 0; k < n->n_in; off += n->i[k], k++) {
            float *dx = n->in[k]->grad;
            int Ck = n->i[k];
            if (!dx) continue;
            _Pragma("omp simd")
            for (int j = 0; j < Ck; j++) dx[r * Ck + j] += dy[r * C + off + j];
        });
}

static const mt_op OP_CONCAT = {.name = "concat",
                                .forward = concat_forward,
                                .backward = concat_backward};

mt_tensor *mt_concat(mt_ctx *c, int n, mt_tensor *const xs[]) {
    char s0[64], sk[64];
    MT_ASSERT(n >= 1 && n <= MT_NODE_MAX_IN, "concat: %d inputs, 1 to %d supported", n,
              MT_NODE_MAX_IN);
    int shape[MT_MAX_DIMS], D = xs[0]->ndim;
    memcpy(shape, xs[0]->shape, sizeof shape);
    shape[D - 1] = 0;
    for (int k = 0; k < n; k++) {
        bool ok = xs[k]->ndim == D;
        for (int d = 0; ok && d < D - 1; d++) ok = xs[k]->shape[d] == xs[0]->shape[d];
        MT_ASSERT(ok, "concat: input %d %s and input 0 %s differ in a dim other than the last", k,
                  mt_shape_str(xs[k], sk, 64), mt_shape_str(xs[0], s0, 64));
        shape[D - 1] += mt_cols(xs[k]);
    }
    mt_tensor *out = mt_tensor_new(c, D, shape);
    mt_node *node = mt_node_new(c, &OP_CONCAT, out, n, xs);
    for (int k = 0; k < n; k++) node->i[k] = mt_cols(xs[k]);
    mt_node_run(c, node);
    return out;
}

/* ---- slice of the last dim: y[r, j] = x[r, start + j], j < len;  i[0] = start --------------- */

static void slice_forward(mt_node *n) {
    long N = mt_rows(n->out);
    int C = mt_cols(n->in[0]), L = mt_cols(n->out), s = n->i[0];
    const float *x = n->in[0]->data;
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (long r = 0; r < N; r++)
        _Pragma("omp simd")
        for (int j = 0; j < L; j++) n->out->data[r * L + j] = x[r * C + s + j];);
}

/* dx[r, start + j] += dy[r, j] */
static void slice_backward(mt_node *n) {
    long N = mt_rows(n->out);
    int C = mt_cols(n->in[0]), L = mt_cols(n->out), s = n->i[0];
    const float *dy = n->out->grad;
    float *dx = n->in[0]->grad;
    if (!dx) return;
    MT_PARALLEL_FOR(n->out->n >= MT_PAR_MIN, for (long r = 0; r < N; r++)
        _Pragma("omp simd")
        for (int j = 0; j < L; j++) dx[r * C + s + j] += dy[r * L + j];);
}

static const mt_op OP_SLICE = {.name = "slice",
                               .forward = slice_forward,
                               .backward = slice_backward};

mt_tensor *mt_slice(mt_ctx *c, mt_tensor *x, int start, int len) {
    char sx[64];
    MT_ASSERT(start >= 0 && len >= 1 && start + len <= mt_cols(x),
              "slice of %s: columns [%d, %d) are not inside [0, %d)", mt_shape_str(x, sx, 64),
              start, start + len, mt_cols(x));
    int shape[MT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = len;
    mt_tensor *out = mt_tensor_new(c, x->ndim, shape);
    mt_node *n = mt_node_new(c, &OP_SLICE, out, 1, (mt_tensor *[]){x});
    n->i[0] = start;
    mt_node_run(c, n);
    return out;
}

/* ---- split of the last dim into consecutive slices ------------------------------------------ */

void mt_split(mt_ctx *c, mt_tensor *x, int n, const int sizes[], mt_tensor *out[]) {
    char sx[64];
    int total = 0;
    for (int k = 0; k < n; k++) total += sizes[k];
    MT_ASSERT(n >= 1 && total == mt_cols(x),
              "split of %s into %d parts: sizes add up to %d, not %d", mt_shape_str(x, sx, 64), n,
              total, mt_cols(x));
    for (int k = 0, off = 0; k < n; off += sizes[k], k++) out[k] = mt_slice(c, x, off, sizes[k]);
}
