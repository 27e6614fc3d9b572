/* One full mt training step, timed: forward + cross-entropy and backward (mt_replicas_backward:
   the batch split across --replicas threads, as ./train does), AdamW on the replicas' summed
   gradients, which it zeroes (mt_optim_update: one pass; no clipping). The GPT and the
   optimizer are the library's (mt_gpt_loss, mt_optim_update);
   the batch is uniform random tokens from a seeded RNG, drawn outside the timed region. Prints
   one JSON line: median ms per step over --steps steps after --warmup, tokens/s, trainable
   parameters, peak RSS (getrusage) and the arena's peak. bench/gpt/torch_gpt.py is the reference.
   usage: gpt [--name s] [--layers L] [--embd C] [--heads NH] [--ctx T] [--batch B] [--norm ln|rms]
              [--arch gpt|llama] [--steps n] [--warmup n] [--threads n] [--replicas n]
              [--arena-mb n] [--profile 0|1] [--precision fp32|bf16]
   --arch llama: the model ./train --arch llama builds (the preset resolved by the GPT's
   validation: RoPE, SwiGLU, RMSNorm, no biases).
   --replicas: 0 (default) as many as the threads, 1 every op split across the threads instead.
   --precision bf16: the linear layers' products in bf16 (as ./train --precision bf16), the bf16
   copy of the weights refreshed after each update inside the timed step. The JSON names the
   precision, the fp32 GEMM backend forced by MT_GEMM (auto when unset), the CPU model and
   OpenBLAS's core.
   --profile 1 also prints the time per op of the timed steps (mt_profile) to stderr. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"
#include "mt.h"

static double rss_mib(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* /proc/cpuinfo's "model name" into buf ("?" when absent); quotes dropped for the JSON. */
static const char *cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon) continue;
        snprintf(buf, len, "%s", colon + 2);
        buf[strcspn(buf, "\n\"\\")] = 0;
        break;
    }
    if (f) fclose(f);
    return buf;
}

static int usage(const char *msg) {
    fprintf(stderr,
            "gpt: %s\nusage: gpt [--name s] [--layers L] [--embd C] [--heads NH] [--ctx T] "
            "[--batch B] [--norm ln|rms] [--arch gpt|llama] [--steps n >= 1] [--warmup n] "
            "[--threads n] [--replicas n] [--arena-mb n] [--profile 0|1] [--precision fp32|bf16]\n",
            msg);
    return 2;
}

int main(int argc, char **argv) {
    const char *name = "tiny", *norm = "ln", *arch = "gpt", *precision = "fp32";
    int L = 4, C = 128, NH = 4, T = 128, B = 16, steps = 10, warmup = 3, threads = 2;
    int arena_mb = 4096, profile = 0, replicas = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 == argc) return usage("every flag takes a value");
        const char *f = argv[i], *v = argv[++i];
        struct {
            const char *flag;
            int *p;
        } ints[] = {{"--layers", &L},   {"--embd", &C},      {"--heads", &NH},
                    {"--ctx", &T},      {"--batch", &B},     {"--steps", &steps},
                    {"--warmup", &warmup}, {"--threads", &threads}, {"--arena-mb", &arena_mb},
                    {"--profile", &profile}, {"--replicas", &replicas}};
        int k = 0, n_ints = sizeof ints / sizeof *ints;
        while (k < n_ints && strcmp(f, ints[k].flag)) k++;
        if (k < n_ints) *ints[k].p = atoi(v);
        else if (!strcmp(f, "--name")) name = v;
        else if (!strcmp(f, "--norm")) norm = v;
        else if (!strcmp(f, "--arch")) arch = v;
        else if (!strcmp(f, "--precision")) precision = v;
        else return usage(f);
    }
    if (steps < 1 || warmup < 0 || B < 1 || arena_mb < 1 || replicas < 0)
        return usage("a value is out of range");
    mt_set_threads(threads);
    mt_err err = {0};
    mt_gpt_config cfg = mt_gpt_config_default();
    cfg.stack.n_layer = L, cfg.stack.n_embd = C, cfg.stack.n_head = NH, cfg.n_ctx = T, cfg.n_vocab = 256;
    int kind, arch_kind, prec;
    mt_gpt m;
    mt_ctx ctx;
    mt_replicas R;
    mt_optim opt;
    mt_optim_config oc = mt_optim_defaults(); /* AdamW, torch's defaults */
    if (mt_enum_parse(&MT_NORMS, norm, &kind, &err) ||
        mt_enum_parse(&MT_GPT_ARCHS, arch, &arch_kind, &err) ||
        mt_enum_parse(&MT_PRECISIONS, precision, &prec, &err) ||
        (prec == MT_BF16 && mt_bf16_check(&err)) ||
        (cfg.stack.norm = mt_norm_default((mt_norm_kind)kind), 0) ||
        (cfg.arch = (mt_gpt_arch)arch_kind, 0) ||
        mt_gpt_build(&m, &cfg, &err) || mt_optim_init(&opt, &oc, &m.P, &err) ||
        mt_ctx_init(&ctx, (size_t)arena_mb << 20, 1, &err) ||
        (prec == MT_BF16 && mt_params_enable_bf16(&m.P, &err)) ||
        mt_replicas_init(&R, replicas ? replicas : mt_threads(), &m.P, (size_t)arena_mb << 20, 1,
                         &err)) {
        fprintf(stderr, "gpt: %s\n", err.msg);
        return 2;
    }
    ctx.precision = prec;
    ctx.free_activations = true; /* as ./train's step */
    for (int r = 0; r < R.n - 1; r++) R.ctx[r].precision = prec;
    mt_rng rng;
    mt_rng_seed(&rng, 1);
    mt_params_initialize(&m.P, &rng);
    mt_params_refresh_bf16(&m.P);
    int *data = malloc((size_t)B * (T + 1) * sizeof *data), *ids = malloc((size_t)B * T * sizeof *ids);
    int *targets = malloc((size_t)B * T * sizeof *targets);
    double *ms = malloc((size_t)steps * sizeof *ms);
    if (!data || !ids || !targets || !ms) return usage("out of memory for the batch");
    float loss_first = 0, loss_last = 0;
    mt_profile prof = {0};
    for (int s = 0; s < warmup + steps; s++) {
        for (int i = 0; i < B * (T + 1); i++) data[i] = (int)mt_rng_below(&rng, 256);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                ids[b * T + t] = data[b * (T + 1) + t], targets[b * T + t] = data[b * (T + 1) + t + 1];
        ctx.profile = profile && s >= warmup ? &prof : NULL;
        double t0 = mt_clock();
        mt_gpt_batch b = {&m, ids, targets, T};
        double loss = mt_replicas_backward(&R, &ctx, &m.P, 0, B, B, mt_gpt_rows_loss, &b);
        mt_grads G = mt_replicas_grads(&R);
        mt_optim_update(&opt, &m.P, &G, mt_optim_lr_at(&oc.sched, opt.t), 1.0f, false);
        mt_params_refresh_bf16(&m.P);
        double dt = mt_clock() - t0;
        if (s == 0) loss_first = (float)loss;
        loss_last = (float)loss;
        if (s >= warmup) ms[s - warmup] = dt * 1e3, prof.steps++, prof.step_s += dt;
    }
    double *sorted = malloc((size_t)steps * sizeof *sorted);
    memcpy(sorted, ms, (size_t)steps * sizeof *ms);
    qsort(sorted, (size_t)steps, sizeof *sorted, bench_cmp);
    double med = steps % 2 ? sorted[steps / 2] : 0.5 * (sorted[steps / 2 - 1] + sorted[steps / 2]);
    char cpu[128];
    printf("{\"prog\": \"mt\", \"config\": \"%s\", \"arch\": \"%s\", "
           "\"threads\": %d, \"replicas\": %d, \"precision\": \"%s\", "
           "\"gemm_fp32\": \"%s\", \"cpu\": \"%s\", \"blas_core\": \"%s\", \"params\": %zu, \"layers\": %d, "
           "\"embd\": %d, \"batch\": %d, \"ctx\": %d, \"steps\": %d, \"ms_step\": %.3f, \"tok_s\": %.1f, \"ms_steps\": [",
           name, mt_enum_name(&MT_GPT_ARCHS, m.cfg.arch), mt_threads(), R.n,
           mt_enum_name(&MT_PRECISIONS, prec),
           mt_enum_name(&MT_GEMM_BACKENDS, mt_gemm_backend_forced()), cpu_model(cpu, sizeof cpu),
           openblas_get_corename(),
           mt_params_count_trainable(&m.P), L, C, B, T, steps, med, B * T / (med / 1e3));
    for (int s = 0; s < steps; s++) printf("%s%.3f", s ? ", " : "", ms[s]);
    printf("], \"rss_mib\": %.1f, \"arena_peak_mib\": %.1f, \"loss_first\": %.4f, "
           "\"loss_last\": %.4f}\n",
           rss_mib(), ctx.arena.peak / 1048576.0, loss_first, loss_last);
    if (profile) mt_profile_print(&prof, stderr);
    free(data), free(ids), free(targets), free(ms), free(sorted);
    mt_optim_free(&opt);
    mt_ctx_free(&ctx);
    mt_replicas_free(&R);
    mt_gpt_free(&m);
    return 0;
}
