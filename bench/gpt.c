/* ./train's training step, timed: mt_trainer_step on a GPT that mt_trainer_init builds as ./train
   does (a batch drawn; forward + cross-entropy and backward, the batch split across --replicas
   threads; the gradient norm; AdamW, torch's defaults and no clipping, on the replicas' summed
   gradients, which it zeroes, and the weights' bf16 copy refreshed in the same pass). The data
   are uniform random bytes (a seeded file in a temporary directory, removed at the end), so
   every batch is uniform random tokens. Prints one JSON line: median ms per step over --steps
   steps after --untimed ones, tokens/s, trainable parameters, peak RSS (getrusage) and the
   arena's peak. bench/gpt/torch_gpt.py is the reference.
   Flags are ./train's: the GPT's own table (--n-layer, --n-embd, --n-head, --n-ctx, --norm,
   --arch, ...: every model flag ./train takes) and --batch, --steps, --threads, --replicas,
   --arena-mb, --precision, --profile, --seed; and the bench's own: --name (the config's name in
   the report) and --untimed (steps before the timed ones); --help lists them. --arch llama: the
   model ./train --arch llama builds (RoPE, SwiGLU, RMSNorm, no biases).
   The JSON names the precision, the fp32 GEMM backend forced by MT_GEMM (auto when unset), the
   CPU model and OpenBLAS's core. --profile also prints the time per op of the timed steps
   (mt_profile) to stderr. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"
#include "mt.h"

/* The bench's own options; the model's are ./train's GPT table, bound to gc. */
typedef struct {
    char name[MT_FIELD_STR_MAX];
    int batch, steps, untimed, threads, replicas, arena_mb, precision, seed;
    bool profile, help;
} bench_options;
static bench_options o =
    {.name = "tiny", .batch = 16, .steps = 10, .untimed = 3, .threads = 2, .seed = 1};
static mt_gpt_config gc; /* main: the GPT's defaults, n_embd 128, n_ctx 128 */

#define F(member, TYPE, key, help, ...)                                                            \
    MT_FIELD(bench_options, member, TYPE, key, help, __VA_ARGS__)
static const mt_field FIELDS[] = {
    F(name, STR, "name", "the config's name in the JSON line"),
    F(batch, INT, "batch", "rows per step", .range = "1.."),
    F(steps, INT, "steps", "timed steps", .range = "1.."),
    F(untimed, INT, "untimed", "steps before the timed ones", .range = "0.."),
    F(threads, INT, "threads", "threads; 0: OMP_NUM_THREADS or all cores", .range = "0..1024"),
    F(replicas, INT, "replicas",
      "threads that each run a slice of every batch; 0: every thread; "
      "1: every op split across the threads",
      .range = "0..1024"),
    F(arena_mb, INT, "arena_mb", "step arena in MiB; 0: estimated", .range = "0.."),
    F(precision, ENUM, "precision", "the linear layers' products", .of = &MT_PRECISIONS),
    F(seed, INT, "seed", "seed of the weights and the data", .range = "0.."),
    F(profile, BOOL, "profile", "time per op of the timed steps, to stderr"),
    F(help, BOOL, "help", "this list", .flags = MT_FIELD_CLI),
};
#undef F
static const mt_fields OPTIONS = MT_FIELDS_OF(FIELDS);
enum { DATA_WINDOWS = 20 };

static double rss_mib(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* DATA_WINDOWS batches of uniform random bytes (seeded), a tenth of them the validation split,
   as a token file dir/data.bin (text may not hold a NUL byte); its path into path. */
static mt_status write_data(const char *dir, char *path, size_t len, mt_err *err) {
    snprintf(path, len, "%s/data.bin", dir);
    mt_tokenizer tok;
    mt_tok_init_byte(&tok);
    size_t n = (size_t)DATA_WINDOWS * o.batch * (gc.n_ctx + 1);
    uint16_t *ids = malloc(n * sizeof *ids);
    if (!ids) return mt_errorf(err, MT_ENOMEM, "out of memory");
    mt_rng rng;
    mt_rng_seed(&rng, (uint64_t)o.seed);
    for (size_t i = 0; i < n; i++) ids[i] = (uint16_t)mt_rng_below(&rng, 256);
    mt_tokens d;
    FILE *f = NULL;
    mt_status s = mt_tokens_wrap(&d, ids, n, 256, n / 10, err);
    if (s == MT_OK && !(f = fopen(path, "wb")))
        s = mt_errorf(err, MT_EIO, "%s: cannot create", path);
    if (s == MT_OK) s = mt_tokfile_write(f, path, &tok, &d, err);
    if (f && fclose(f) != 0 && s == MT_OK) s = mt_errorf(err, MT_EIO, "%s: cannot write", path);
    mt_tokens_free(&d);
    free(ids);
    mt_tok_free(&tok);
    return s;
}

/* The trainer on a GPT of the flags' size, ./train's way, its out directory dir/out. */
static mt_status trainer_init(mt_trainer *tr, const char *dir, const char *data, char *out,
                              size_t len, mt_err *err) {
    mt_optim_config oc = mt_optim_defaults(); /* AdamW, torch's defaults, no clipping */
    snprintf(out, len, "%s/out", dir);
    mt_train_cfg tc = {
        .model = &mt_gpt_type,
        .model_cfg = &gc,
        .data = {.tokenizer = MT_TOK_BYTE, .val_fraction = 0.1f, .eval_batches = 1},
        .seed = o.seed,
        .steps = o.untimed + o.steps,
        .batch = o.batch,
        .arena_mb = o.arena_mb,
        .options = "",
        .replicas = o.replicas,
        .precision = o.precision,
    };
    snprintf(tc.data.path, sizeof tc.data.path, "%s", data);
    snprintf(tc.out, sizeof tc.out, "%s", out);
    return mt_trainer_init(tr, &tc, &oc, err);
}

/* The JSON line of the timed steps ms[0..steps). */
static void report(const mt_trainer *tr, const double *ms, float loss_first, float loss_last) {
    double *sorted = malloc((size_t)o.steps * sizeof *sorted);
    if (!sorted) return;
    memcpy(sorted, ms, (size_t)o.steps * sizeof *ms);
    double med = bench_median(sorted, o.steps);
    printf("{\"prog\": \"mt\", \"config\": \"%s\", \"arch\": \"%s\", \"threads\": %d, "
           "\"replicas\": %d, \"precision\": \"%s\", \"gemm_fp32\": \"%s\", \"cpu\": \"%s\", "
           "\"blas_core\": \"%s\", \"params\": %zu, \"layers\": %d, \"embd\": %d, \"batch\": %d, "
           "\"ctx\": %d, \"steps\": %d, \"ms_step\": %.3f, \"tok_s\": %.1f, \"ms_steps\": [",
           o.name, mt_enum_name(&MT_GPT_ARCHS, mt_gpt_of(tr->model)->cfg.arch), mt_threads(),
           tr->replicas.n, mt_enum_name(&MT_PRECISIONS, o.precision),
           mt_enum_name(&MT_GEMM_BACKENDS, mt_gemm_backend_forced()), bench_cpu(),
           openblas_get_corename(), mt_params_count_trainable(tr->P), gc.stack.n_layer,
           gc.stack.n_embd, o.batch, gc.n_ctx, o.steps, med, o.batch * gc.n_ctx / (med / 1e3));
    for (int s = 0; s < o.steps; s++) printf("%s%.3f", s ? ", " : "", ms[s]);
    printf("], \"rss_mib\": %.1f, \"arena_peak_mib\": %.1f, \"loss_first\": %.4f, "
           "\"loss_last\": %.4f}\n",
           rss_mib(), tr->ctx.arena.peak / 1048576.0, loss_first, loss_last);
    free(sorted);
}

/* --untimed steps, then --steps timed ones into ms; the report. 1 when a step is not finite. */
static int run(mt_trainer *tr, double *ms) {
    float loss_first = 0, loss_last = 0;
    mt_profile prof = {0};
    for (int s = 0; s < o.untimed + o.steps; s++) {
        mt_step_stats st;
        tr->ctx.profile = o.profile && s >= o.untimed ? &prof : NULL;
        double t0 = mt_clock();
        mt_trainer_step(tr, &st);
        double dt = mt_clock() - t0;
        if (!st.finite) {
            fprintf(stderr, "gpt: step %d: the loss is %g\n", s + 1, st.loss);
            return 1;
        }
        if (s == 0) loss_first = (float)st.loss;
        loss_last = (float)st.loss;
        if (s >= o.untimed) ms[s - o.untimed] = dt * 1e3, prof.steps++, prof.step_s += dt;
    }
    tr->ctx.profile = NULL;
    report(tr, ms, loss_first, loss_last);
    if (o.profile) mt_profile_print(&prof, stderr);
    return 0;
}

int main(int argc, char **argv) {
    mt_err err = {0};
    gc = mt_gpt_config_default();
    gc.stack.n_embd = 128, gc.n_ctx = 128;
    mt_fieldset sets[] = {{&OPTIONS, &o}, {mt_gpt_type.fields, &gc}};
    if (mt_fieldset_parse_args(sets, 2, argc, argv, NULL, &err) != MT_OK) {
        fprintf(stderr, "gpt: %s\n", err.msg);
        return 2;
    }
    if (o.help) {
        o.help = false; /* the list shows the defaults */
        gc = mt_gpt_config_default();
        gc.stack.n_embd = 128, gc.n_ctx = 128;
        char *help = mt_fieldset_help(sets, 2, NULL, 0);
        printf("usage: gpt [flags] (./train's names)\n%s", help ? help : "");
        free(help);
        return 0;
    }
    const char *omp = getenv("OMP_NUM_THREADS");
    mt_set_threads(o.threads > 0 ? o.threads : omp ? atoi(omp) : 0);
    char dir[] = "/tmp/mt_bench_gpt_XXXXXX", data[64] = "", out[64] = "";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "gpt: cannot create a directory in /tmp\n");
        return 1;
    }
    mt_trainer tr;
    double *ms = malloc((size_t)o.steps * sizeof *ms);
    mt_status s = ms ? write_data(dir, data, sizeof data, &err)
                     : mt_errorf(&err, MT_ENOMEM, "out of memory");
    if (s == MT_OK) s = trainer_init(&tr, dir, data, out, sizeof out, &err);
    int rc = s == MT_OK ? run(&tr, ms) : mt_exit_code(s);
    if (s == MT_OK) mt_trainer_free(&tr);
    else fprintf(stderr, "gpt: %s\n", err.msg);
    free(ms);
    remove(data), rmdir(out), rmdir(dir);
    return rc;
}
