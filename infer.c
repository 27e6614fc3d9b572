/* ./infer: runs a checkpoint's use (src/tasks/inference.h: its task's, by the model's kind of
 * input): samples text from a prompt (streamed, with a KV cache) or scores a text file,
 * classifies images, gives words' phones (or scores them on a dictionary); or describes a
 * checkpoint. An option of another use than the checkpoint's is refused. Exit status: 0 done,
 * 1 runtime failure (I/O, out of memory, an unreadable image), 2 usage (a flag, a missing or
 * malformed checkpoint or input file). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mt.h"

typedef struct {
    char checkpoint[MT_FIELD_STR_MAX], info[MT_FIELD_STR_MAX];
    int threads, precision;
    bool help;
} infer_options;

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(infer_options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(checkpoint, STR, "checkpoint", "model.safetensors written by ./train"),
    F(threads, INT, "threads", "threads; 0: OMP_NUM_THREADS or all cores", .range = "0..1024"),
    F(precision, ENUM, "precision",
      "number format of the linear layers' matrix products (bf16: docs/performance.md)",
      .of = &MT_PRECISIONS),
    F(info, STR, "info", "print a checkpoint's config and parameter count"),
    F(help, BOOL, "help", "this list", .flags = MT_FIELD_CLI),
};
#undef F
static const mt_fields OPTIONS = MT_FIELDS_OF(FIELDS);

static _Noreturn void die(int code, const char *msg) {
    fprintf(stderr, "infer: %s\n", msg);
    exit(code);
}

static void check(mt_status s, const mt_err *e) {
    if (s != MT_OK) die(mt_exit_code(s), e->msg);
}

/* The usage lines, then every option at its default. */
static void print_help(void) {
    infer_options o = {0};
    mt_infer_options defaults;
    mt_infer_options_init(&defaults, (mt_fieldset){&OPTIONS, &o});
    char *help = mt_infer_options_help(&defaults);
    printf("usage: ./infer --checkpoint out/model.safetensors [--prompt TEXT] [--tokens N] ...\n"
           "       ./infer --checkpoint F --score TEXTFILE\n"
           "       ./infer --checkpoint VIT --classify IMAGE[,IMAGE|DIR...]\n"
           "       ./infer --checkpoint ENCDEC --source \"WORD ...\" [--beam K]\n"
           "       ./infer --checkpoint ENCDEC --score-file DICT [--split test] [--beam K]\n"
           "       ./infer --info F\n\n%s",
           help);
    free(help);
    mt_infer_options_free(&defaults);
}

/* Weights of a scale whose squares overflow float (2^64: norms, dot products) are refused: finite,
   they still make non-finite logits (a run that diverged saves them before the step it stops). */
static mt_status check_scale(const mt_params *P, const char *path, mt_err *err) {
    const float limit = 0x1p64f;
    for (int i = 0; i < P->n; i++)
        for (size_t j = 0; j < P->p[i].n; j++) {
            float w = P->data[P->p[i].offset + j];
            if (fabsf(w) >= limit)
                return mt_errorf(err, MT_EFORMAT,
                                 "%s: tensor '%s' holds %g at index %zu: weights of 2^64 (%g) "
                                 "or more overflow float arithmetic (a run that diverged?)",
                                 path, P->p[i].name, (double)w, j, (double)limit);
        }
    return MT_OK;
}

/* The checkpoint's use with the options given for it. */
static int run(const infer_options *o, const mt_infer_options *uses, const mt_settings *given) {
    mt_err e;
    mt_model *model;
    int set;
    check(mt_ckpt_load(o->checkpoint, &model, NULL, NULL, &e), &e);
    check(check_scale(model->P, o->checkpoint, &e), &e);
    check(mt_infer_options_pick(uses, given, model->type, o->checkpoint, &set, &e), &e);
    if (o->precision == MT_BF16 && mt_bf16_check(&e) != MT_OK) die(2, e.msg);
    if (o->precision == MT_BF16 && mt_params_enable_bf16(model->P, &e) != MT_OK) die(1, e.msg);
    mt_infer_io io = {.out = stdout,
                      .log = stderr,
                      .program = "infer",
                      .checkpoint = o->checkpoint,
                      .precision = o->precision};
    check(uses->use[set]->run(model, uses->set[set].obj, &io, &e), &e);
    mt_model_free(model);
    return io.failed;
}

int main(int argc, char **argv) {
    mt_err e;
    infer_options o = {0};
    mt_infer_options uses;
    mt_settings given = {0};
    mt_infer_options_init(&uses, (mt_fieldset){&OPTIONS, &o});
    if (mt_fieldset_parse_args(uses.set, uses.n, argc, argv, &given, &e) != MT_OK) die(2, e.msg);
    if (o.help) return print_help(), 0;
    int set, rc = 0;
    if (o.info[0]) {
        check(mt_infer_options_pick(&uses, &given, NULL, o.info, &set, &e), &e);
        if (mt_file_check("--info", o.info, &e) != MT_OK) die(2, e.msg);
        check(mt_checkpoint_describe(o.info, stdout, &e), &e);
    } else {
        if (!o.checkpoint[0])
            die(2, "--checkpoint FILE is required (./infer --help lists the flags)");
        if (mt_file_check("--checkpoint", o.checkpoint, &e) != MT_OK) die(2, e.msg);
        const char *omp = getenv("OMP_NUM_THREADS");
        mt_set_threads(o.threads > 0 ? o.threads : omp ? atoi(omp) : 0);
        if (mt_gemm_backend_from_env(&e) != MT_OK) die(2, e.msg);
        rc = run(&o, &uses, &given);
    }
    mt_settings_free(&given);
    mt_infer_options_free(&uses);
    return rc;
}
