/* Linear layer y = x W^T + b (torch.nn.Linear): one sgemm, W read through the transpose flag.
   N rows of x, K inputs, O outputs. */
#include <cblas.h>
#include <string.h>

#include "nn.h"

/* i[0] N, i[1] K, i[2] O. y (N, O) = b (each row) + x (N, K) W^T, W (O, K). */
static void linear_forward(mt_node *n) {
    int N = n->i[0], K = n->i[1], O = n->i[2];
    const float *b = n->in[2] ? n->in[2]->data : NULL;
    float *y = n->out->data;
    if (b) {
#pragma omp parallel for if ((size_t)N * O >= MT_PAR_MIN)
        for (int r = 0; r < N; r++) memcpy(y + (size_t)r * O, b, (size_t)O * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, O, K, 1.0f, n->in[0]->data, K,
                n->in[1]->data, K, b ? 1.0f : 0.0f, y, O);
}

/* dx (N, K) += dy W;  dW (O, K) += dy^T x;  db_o += sum_r dy_ro, rows summed in order within
   each column block, whatever the thread count (deterministic). */
static void linear_backward(mt_node *n) {
    int N = n->i[0], K = n->i[1], O = n->i[2];
    const float *dy = n->out->grad;
    float *dx = n->in[0]->grad, *dw = n->in[1]->grad, *db = n->in[2] ? n->in[2]->grad : NULL;
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, K, O, 1.0f, dy, O,
                    n->in[1]->data, K, 1.0f, dx, K);
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, K, N, 1.0f, dy, O,
                    n->in[0]->data, K, 1.0f, dw, K);
    if (db) {
        enum { BLK = 64 };
#pragma omp parallel for if ((size_t)N * O >= MT_PAR_MIN)
        for (int j0 = 0; j0 < O; j0 += BLK) {
            int j1 = j0 + BLK < O ? j0 + BLK : O;
            for (int r = 0; r < N; r++)
#pragma omp simd
                for (int j = j0; j < j1; j++) db[j] += dy[(size_t)r * O + j];
        }
    }
}

static const mt_op OP_LINEAR = {"linear", linear_forward, linear_backward};

mt_tensor *mt_linear(mt_ctx *c, mt_tensor *x, mt_tensor *w, mt_tensor *b) {
    char sx[64], sw[64];
    int K = mt_cols(x);
    MT_ASSERT(w->ndim == 2 && w->shape[1] == K, "linear: input %s, weight %s: weight must be (O, %d)",
              mt_shape_str(x, sx, 64), mt_shape_str(w, sw, 64), K);
    int O = w->shape[0];
    MT_ASSERT(!b || (b->ndim == 1 && b->shape[0] == O), "linear: bias %s for %d outputs",
              mt_shape_str(b, sx, 64), O);
    int shape[MT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = O;
    mt_tensor *out = mt_tensor_new(c, x->ndim, shape);
    mt_node *n = mt_node_new(c, &OP_LINEAR, out, 3, (mt_tensor *[]){x, w, b});
    n->i[0] = mt_rows(x);
    n->i[1] = K;
    n->i[2] = O;
    mt_node_run(c, n);
    return out;
}
