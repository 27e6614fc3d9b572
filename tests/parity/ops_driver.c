/* Parity driver for the primitive ops (tests/parity/test_ops.py). */
#include "../check.h"

static mt_tensor *b_matmul(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n;
    return mt_matmul(c, x[0], x[1], parity_opt(in, "ta") != 0, parity_opt(in, "tb") != 0);
}

static mt_tensor *b_add(mt_ctx *c, mt_tensor **x, int n, const mt_safetensors *in) {
    (void)n, (void)in;
    return mt_add(c, x[0], x[1]);
}

static const parity_op OPS[] = {
    {"matmul", b_matmul},
    {"add", b_add},
};

int main(int argc, char **argv) {
    return parity_driver_main(argc, argv, OPS, (int)(sizeof OPS / sizeof OPS[0]));
}
