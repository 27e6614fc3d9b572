/* Test helpers: CHECK, random inputs, error measures and the finite-difference gradient check. */
#ifndef MT_TEST_CHECK_H
#define MT_TEST_CHECK_H

#include <math.h>
#include <stdio.h>

#include "../src/mt.h"

extern int check_failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Prints the verdict line and returns the exit code (0 when nothing failed). */
int check_finish(const char *test_name);

/* A persistent leaf tensor for tests: data uniform in [lo, hi), grad allocated when
   requires_grad. Free with test_tensor_free. */
mt_tensor *test_tensor(mt_rng *r, int ndim, const int shape[], float lo, float hi,
                       bool requires_grad);
void test_tensor_free(mt_tensor *t);

/* Removes dir and everything under it (a test's mkdtemp directory); 0 on success. */
int test_remove_dir(const char *dir);

/* A made-up pronunciation dictionary of n words (1 to 9 letters and two more making it distinct,
   2 to 5 phones of 7) in festival's form, written to dir/dict.out: its path (a static buffer), or
   NULL when it cannot be written. */
const char *test_write_dict(const char *dir, int n);

/* max_i |a_i - b_i| / max(max_i |b_i|, tiny): the error relative to the reference's scale
   (infinite where a difference is NaN). */
double max_rel_err(const float *a, const float *b, size_t n);
/* The largest of x[0..n) (n >= 1), a reference's max: in float, which is exact (GCC 12 for
   aarch64 fails, an ICE, on an fmax reduction of floats widened to double). */
static inline double max_of(const float *x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}
/* The worse of a running worst error and a new one, infinite where the new one is NaN (fmax
   would pass over it, and a NaN result would pass every check that follows). */
static inline double worst_err(double worst, double err) {
    return err != err ? INFINITY : err > worst ? err : worst;
}

/* Builds the op under test from the inputs; arg carries options. */
typedef mt_tensor *(*gc_build)(mt_ctx *c, mt_tensor **in, const void *arg);

/* Compares the tape's gradient of L = sum(y * w), y = build(in), w fixed random, with central
   differences (step eps, loss summed in double) for every element of every input that requires
   grad: |numeric - analytic| <= tol * (scale + |numeric|), scale = max(1e-2, max |analytic|).
   It also checks that backward accumulates (input grads start at 0.5, not 0).
   Returns the number of mismatching elements (each also counted as a CHECK failure). */
int gradcheck(const char *name, gc_build build, const void *arg, int n_in, mt_tensor *in[],
              double eps, double tol);

#endif

/* ---- PyTorch parity drivers (tests/parity/NAME_driver.c) ----------------------------------------
 * A driver reads IN.safetensors: inputs x0, x1, ... (float32; integer inputs such as token ids
 * are passed as floats), the upstream gradient dy, and string metadata: "op", "grad" (one
 * character per input, '1' when it requires grad) and op options. It writes OUT.safetensors with
 * y and dx<i> for each input that requires grad. */
typedef mt_tensor *(*parity_build)(mt_ctx *c, mt_tensor **x, int n_x, const mt_safetensors *in);
typedef struct {
    const char *name;
    parity_build build;
} parity_op;

int parity_driver_main(int argc, char **argv, const parity_op *ops, int n_ops);
/* Every driver's start: the usage check, all threads, argv[1] read into in. Returns 0, or the
   exit code after saying why (2 usage, 1 an unreadable file). */
int parity_open(int argc, char **argv, mt_safetensors *in);
/* The model a parity file describes: type's config from its metadata "config", built, every
   parameter copied from the file's tensor of its name (the contract checkpoints rely on); the
   file holds n_inputs tensors besides. NULL, after a message naming what is wrong, otherwise. */
mt_model *parity_model(const mt_safetensors *in, const mt_model_type *type, int n_inputs);
/* The model of type that the config JSON describes (NULL: none given), built; NULL with err
   filled otherwise. */
mt_model *parity_config_model(const mt_model_type *type, const char *json, const mt_lora_cfg *lora,
                              mt_err *err);
/* Option key of the input file as a number; fatal when absent. */
double parity_opt(const mt_safetensors *in, const char *key);
/* QK-Clip's probe on c when the input file asks for it (metadata "qk_clip": tau): qk set up on
   P's attentions of n_head heads, c's maxima buffer (qk->heads, reset) returned for the caller
   to free; NULL when not asked. Fatal on a bad setup. */
float *parity_qk_probe(const mt_safetensors *in, mt_ctx *c, const mt_params *P, int n_head,
                       mt_qk_clip *qk);
