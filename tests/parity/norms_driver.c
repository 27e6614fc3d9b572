/* Parity driver for the norms (tests/parity/test_norms.py). Inputs x0 = x, then the weight and
   bias when the norm has them (x1 = g for ScaleNorm); options: eps, form (0 LLaMA, 1 paper), p. */
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

static const parity_op OPS[] = {
    {"layernorm", b_layernorm},
    {"rmsnorm", b_rmsnorm},
    {"prmsnorm", b_prmsnorm},
    {"scalenorm", b_scalenorm},
};

int main(int argc, char **argv) {
    return parity_driver_main(argc, argv, OPS, (int)(sizeof OPS / sizeof OPS[0]));
}
