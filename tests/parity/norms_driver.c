/* Parity driver for the norms (tests/parity/test_norms.py). Inputs x0 = x, then the weight and
   bias when the norm has them (x1 = g for ScaleNorm; DyT and Derf: below); options: eps, form
   (0 LLaMA, 1 paper), p, G, cl (channels-last), training. */
#include "../check.h"

static mt_tensor *arg(mt_tensor **x, int n, int i) { return i < n ? x[i] : NULL; }

static mt_rms_form form(const mt_safetensors *in) {
    return parity_opt(in, "form") != 0 ? MT_RMS_PAPER : MT_RMS_LLAMA;
}

static mt_tensor *b_layernorm(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    return mt_layernorm(c, x[0], arg(x, n, 1), arg(x, n, 2), parity_opt(in, "eps"));
}

static mt_tensor *b_rmsnorm(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    return mt_rmsnorm(c, x[0], arg(x, n, 1), arg(x, n, 2), parity_opt(in, "eps"), form(in));
}

static mt_tensor *b_prmsnorm(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    return mt_prmsnorm(c, x[0], arg(x, n, 1), arg(x, n, 2), parity_opt(in, "p"),
                       parity_opt(in, "eps"), form(in));
}

static mt_tensor *b_scalenorm(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    return mt_scalenorm(c, x[0], x[1], parity_opt(in, "eps"));
}

/* x0 = x, x1 = alpha, then (Derf) x2 = s, then w and b when given */
static mt_tensor *b_dyt(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)in;
    return mt_dyt(c, x[0], x[1], arg(x, n, 2), arg(x, n, 3));
}

static mt_tensor *b_derf(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)in;
    return mt_derf(c, x[0], x[1], x[2], arg(x, n, 3), arg(x, n, 4));
}

/* x0 = x, x1 = w, x2 = b, x3 = running_mean, x4 = running_var; options training, cl */
static mt_tensor *b_batchnorm(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    c->training = parity_opt(in, "training") != 0;
    return mt_batchnorm(c, x[0], arg(x, n, 1), arg(x, n, 2), arg(x, n, 3), arg(x, n, 4), 0.1f,
                        parity_opt(in, "eps"), parity_opt(in, "cl") != 0);
}

/* Running statistics after training steps: x0 (steps N, C, ...) the batches stacked along dim 0,
   x1 running_mean, x2 running_var; y = (2, C): the statistics after the steps. */
static mt_tensor *b_batchnorm_steps(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    int C = x[1]->shape[0], steps = (int)parity_opt(in, "steps");
    mt_tensor *xs = x[0];
    int shape[MT_MAX_DIMS];
    for (int d = 0; d < xs->ndim; d++) shape[d] = xs->shape[d];
    shape[0] /= steps;
    for (int k = 0; k < steps; k++) {
        mt_tensor *xk = mt_tensor_from(c, xs->data + k * (xs->n / steps), xs->ndim, shape);
        mt_batchnorm(c, xk, NULL, NULL, x[1], x[2], 0.1f, parity_opt(in, "eps"),
                     parity_opt(in, "cl") != 0);
    }
    mt_tensor *y = mt_tensor_new(c, 2, (int[]){2, C});
    for (int i = 0; i < C; i++) y->data[i] = x[1]->data[i], y->data[C + i] = x[2]->data[i];
    return y;
}

static mt_tensor *b_instancenorm(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    return mt_instancenorm(c, x[0], arg(x, n, 1), arg(x, n, 2), parity_opt(in, "eps"),
                           parity_opt(in, "cl") != 0);
}

static mt_tensor *b_groupnorm(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    return mt_groupnorm(c, x[0], (int)parity_opt(in, "G"), arg(x, n, 1), arg(x, n, 2),
                        parity_opt(in, "eps"), parity_opt(in, "cl") != 0);
}

static const parity_op OPS[] = {
    {"batchnorm", b_batchnorm},
    {"batchnorm_steps", b_batchnorm_steps},
    {"instancenorm", b_instancenorm},
    {"groupnorm", b_groupnorm},
    {"layernorm", b_layernorm},
    {"rmsnorm", b_rmsnorm},
    {"prmsnorm", b_prmsnorm},
    {"scalenorm", b_scalenorm},
    {"dyt", b_dyt},
    {"derf", b_derf},
};

int main(int argc, char **argv) {
    return parity_driver_main(argc, argv, OPS, (int)(sizeof OPS / sizeof OPS[0]));
}
