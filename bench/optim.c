/* mt side of bench/optim.py: milliseconds per optimizer step and per clip on a Transformer-shaped
 * parameter table. Usage: optim LAYERS WIDTH REPEATS THREADS (0: all cores). Prints "name min
 * median" lines in ms: SGD with momentum, Adam, AdamW, the gradient norm, Lion, Muon (its
 * Newton-Schulz on the 2-D matrices, AdamW on the rest) and, where bf16 runs, Muon with the
 * parameters' bf16 copy (its products in bf16). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mt.h"

/* The table of a GPT block stack: per layer two norms, qkv, proj, fc1 (4x wide), fc2 and biases. */
static void make_table(mt_params *P, int L, int C) {
    mt_params_init_table(P);
    mt_params_add(P, "wte", 2, (int[]){256, C}, MT_ROLE_EMBEDDING, MT_INIT_NORMAL, 0.02f);
    for (int l = 0; l < L; l++) {
        struct {
            const char *name;
            int ndim, rows, cols;
            mt_param_role role;
        } e[] =
            {{"ln1.weight", 1, C, 0, MT_ROLE_NORM},       {"ln1.bias", 1, C, 0, MT_ROLE_NORM},
             {"qkv.weight", 2, 3 * C, C, MT_ROLE_MATRIX}, {"qkv.bias", 1, 3 * C, 0, MT_ROLE_BIAS},
             {"proj.weight", 2, C, C, MT_ROLE_MATRIX},    {"proj.bias", 1, C, 0, MT_ROLE_BIAS},
             {"ln2.weight", 1, C, 0, MT_ROLE_NORM},       {"ln2.bias", 1, C, 0, MT_ROLE_NORM},
             {"fc1.weight", 2, 4 * C, C, MT_ROLE_MATRIX}, {"fc1.bias", 1, 4 * C, 0, MT_ROLE_BIAS},
             {"fc2.weight", 2, C, 4 * C, MT_ROLE_MATRIX}, {"fc2.bias", 1, C, 0, MT_ROLE_BIAS}};
        for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "h.%d.%s", l, e[i].name);
            mt_params_add(P, name, e[i].ndim, (int[]){e[i].rows, e[i].cols}, e[i].role,
                          MT_INIT_NORMAL, 0.02f);
        }
    }
    MT_ASSERT(mt_params_alloc(P, NULL) == MT_OK, "alloc");
    mt_rng r;
    mt_rng_seed(&r, 1);
    mt_params_initialize(P, &r);
    for (size_t i = 0; i < P->total; i++) P->grad[i] = 1e-3f * mt_rng_normal(&r);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s LAYERS WIDTH REPEATS THREADS\n", argv[0]);
        return 2;
    }
    int L = atoi(argv[1]), C = atoi(argv[2]), R = atoi(argv[3]);
    mt_set_threads(atoi(argv[4]));
    mt_params P;
    make_table(&P, L, C);
    printf("params %zu entries %d threads %d\n", mt_params_count_trainable(&P), P.n, mt_threads());
    double *t = malloc((size_t)R * sizeof(double));
    const struct {
        const char *name;
        mt_optim_kind kind; /* clip: any */
        bool bf16;
    } cases[] = {{"sgd_momentum", MT_OPTIM_SGD, false}, {"adam", MT_OPTIM_ADAM, false},
                 {"adamw", MT_OPTIM_ADAMW, false},      {"clip", MT_OPTIM_ADAMW, false},
                 {"lion", MT_OPTIM_LION, false},        {"muon", MT_OPTIM_MUON, false},
                 {"muon_bf16", MT_OPTIM_MUON, true}}; /* last: it leaves P's bf16 copy on */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (cases[k].bf16 && (mt_bf16_check(NULL) != MT_OK || mt_params_enable_bf16(&P, NULL)))
            continue;
        mt_optim o;
        mt_optim_config c = mt_optim_defaults();
        c.kind = cases[k].kind;
        if (c.kind == MT_OPTIM_SGD) c.momentum = 0.9;
        MT_ASSERT(mt_optim_init(&o, &c, &P, NULL) == MT_OK, "init");
        bool clip = strcmp(cases[k].name, "clip") == 0;
        for (int r = -2; r < R; r++) { /* two warm-up repeats */
            double t0 = omp_get_wtime();
            if (clip) mt_optim_clip(&P, 1e9); /* the norm pass; the scaling is one more pass */
            else mt_optim_step(&o, &P, 1e-4);
            if (r >= 0) t[r] = 1e3 * (omp_get_wtime() - t0);
        }
        qsort(t, (size_t)R, sizeof *t, bench_cmp);
        printf("%s %.3f %.3f\n", cases[k].name, t[0], t[R / 2]);
        mt_optim_free(&o);
    }
    free(t);
    mt_params_free(&P);
    return 0;
}
