/* The GEMM layer's backends side by side: mt_gemm on OpenBLAS (mt's row split), a plain
   cblas_sgemm (OpenBLAS's own threading), mt_gemm on oneDNN in fp32 and mt_gemm_bf16 (oneDNN, bf16
   inputs converted beforehand, fp32 out). Products: square and transformer-shaped ones, then the
   linear layers' products of the bench configs (forward y = x W^T, backward dx = dy W and
   dW = dy^T x for x (N, K), W (O, K)). The ways alternate call by call; each cell is the median
   GFLOP/s of the repetitions.
   Two modes: pool (one product on the pool's threads, as with --replicas 1) and replicas (every
   thread runs its own product on its own buffers, single-threaded, as the replicas of a training
   step do; N is the config's rows divided by the threads, and GFLOP/s are summed over them).
   usage: gemm [reps] [threads] [pool|replicas] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mt.h"

enum { WAYS = 4 };
static const char *WAY_NAMES[WAYS] = {"OpenBLAS (mt_gemm)", "OpenBLAS (own threads)", "oneDNN fp32",
                                      "oneDNN bf16"};

typedef struct {
    float *A, *B, *C;
    mt_bf16 *Ab, *Bb;
} operands;

static void run(int way, bool ta, bool tb, int M, int N, int K, const operands *o) {
    switch (way) {
    case 0:
    case 2: /* the backend set by measure */
        mt_gemm(ta, tb, M, N, K, o->A, o->B, 0.0f, o->C, NULL);
        break;
    case 1:
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, 1.0f, o->A, ta ? M : K, o->B, tb ? K : N, 0.0f, o->C, N);
        break;
    default: mt_gemm_bf16(ta, tb, M, N, K, o->Ab, o->Bb, 0.0f, o->C, NULL);
    }
}

/* One product every way, alternating; median GFLOP/s of each into gf (0 where a way is off). */
static void measure(bool ta, bool tb, int M, int N, int K, operands *ops, int reps, bool replicas,
                    const bool on[WAYS], double *t, double gf[WAYS]) {
    int nt = mt_threads();
    for (int i = -3; i < reps; i++)
        for (int w = 0; w < WAYS; w++) {
            if (!on[w]) continue;
            if (w == 0 || w == 2) mt_gemm_set_backend(w ? MT_GEMM_ONEDNN : MT_GEMM_OPENBLAS, NULL);
            double t0 = mt_clock();
            if (replicas) {
#pragma omp parallel num_threads(nt)
                run(w, ta, tb, M, N, K, &ops[omp_get_thread_num()]);
            } else {
                run(w, ta, tb, M, N, K, &ops[0]);
            }
            if (i >= 0) t[w * reps + i] = mt_clock() - t0;
        }
    for (int w = 0; w < WAYS; w++)
        gf[w] = on[w]
                    ? 2.0 * M * N * K * (replicas ? nt : 1) / bench_median(t + w * reps, reps) / 1e9
                    : 0;
}

static void cell(double g) {
    if (g > 0) printf(" %.0f |", g);
    else printf(" - |");
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 30, threads = argc > 2 ? atoi(argv[2]) : 2;
    bool replicas = argc > 3 && !strcmp(argv[3], "replicas");
    if (reps < 1 || reps > 100000 || (argc > 3 && !replicas && strcmp(argv[3], "pool"))) {
        fprintf(stderr, "usage: gemm [reps 1..100000] [threads] [pool|replicas]\n");
        return 2;
    }
    mt_set_threads(threads);
    int nt = mt_threads();
    mt_err err = {0};
    bool on[WAYS] = {true, !replicas, mt_gemm_has_onednn(), mt_bf16_check(&err) == MT_OK};
    static const struct {
        const char *what;
        bool ta, tb;
        int M, N, K; /* pool mode; replicas divide the row count N of a layer by the threads */
        int layer_rows;
    } shapes[] = {
        {"square", 0, 0, 2048, 2048, 2048, 0},
        {"2048 x 128 x 512", 0, 0, 2048, 128, 512, 0},
        {"2048 x 512 x 128", 0, 0, 2048, 512, 128, 0},
        {"2048 x 384 x 1536", 0, 0, 2048, 384, 1536, 0},
        {"512 x 64 x 256", 0, 0, 512, 64, 256, 0},
    };
    static const struct {
        const char *what;
        int N, K, O;
    } layers[] = {
        {"deep100 attention projection", 512, 64, 64},
        {"deep100 fc1", 512, 64, 256},
        {"deep100 fc2", 512, 256, 64},
        {"tiny attention projection", 2048, 128, 128},
        {"tiny fc1", 2048, 128, 512},
        {"tiny fc2", 2048, 512, 128},
        {"small attention projection", 2048, 384, 384},
        {"small fc1", 2048, 384, 1536},
        {"small fc2", 2048, 1536, 384},
    };
    size_t most = (size_t)2048 * 2048;
    operands ops[64];
    if (nt > 64) nt = 64, mt_set_threads(64);
    double *t = malloc((size_t)WAYS * reps * sizeof *t);
    mt_rng r;
    mt_rng_seed(&r, 1);
    for (int i = 0; i < nt; i++) {
        operands *o = &ops[i];
        o->A = malloc(most * sizeof(float)), o->B = malloc(most * sizeof(float));
        o->C = malloc(most * sizeof(float));
        o->Ab = malloc(most * sizeof(mt_bf16)), o->Bb = malloc(most * sizeof(mt_bf16));
        if (!o->A || !o->B || !o->C || !o->Ab || !o->Bb || !t) {
            fprintf(stderr, "gemm: out of memory\n");
            return 1;
        }
        for (size_t j = 0; j < most; j++)
            o->A[j] = mt_rng_uniform(&r) - 0.5f, o->B[j] = mt_rng_uniform(&r) - 0.5f;
        mt_bf16_from_floats(o->Ab, o->A, most);
        mt_bf16_from_floats(o->Bb, o->B, most);
    }
    printf("GFLOP/s, median of %d calls, %d threads, %s (%s); OpenBLAS core %s; oneDNN %s\n\n",
           reps, nt, replicas ? "replicas: a product per thread, summed" : "pool: one product",
           replicas ? "rows of the layers divided by the threads" : "all rows",
           openblas_get_corename(), mt_gemm_has_onednn() ? "built in" : "absent");
    if (!on[3]) printf("bf16 off: %s\n\n", err.msg);
    printf("| product | M x N x K |");
    for (int w = 0; w < WAYS; w++) printf(" %s |", WAY_NAMES[w]);
    printf(" bf16 / best fp32 | oneDNN bf16 kernel |\n|---|---|---:|---:|---:|---:|---:|---|\n");
    int ns = (int)(sizeof shapes / sizeof *shapes), nl = (int)(sizeof layers / sizeof *layers);
    for (int s = 0; s < ns + 3 * nl; s++) {
        const char *what, *dir = "";
        bool ta = false, tb = false;
        int M, N, K;
        if (s < ns) {
            what = shapes[s].what, M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
        } else {
            int l = (s - ns) / 3, d = (s - ns) % 3;
            int rows = layers[l].N / (replicas ? nt : 1), Kl = layers[l].K, O = layers[l].O;
            what = layers[l].what;
            if (d == 0) dir = ", forward x W^T", M = rows, N = O, K = Kl, tb = true;
            if (d == 1) dir = ", backward dy W", M = rows, N = Kl, K = O;
            if (d == 2) dir = ", backward dy^T x", M = O, N = Kl, K = rows, ta = true;
        }
        double gf[WAYS];
        measure(ta, tb, M, N, K, ops, reps, replicas, on, t, gf);
        printf("| %s%s | %d x %d x %d |", what, dir, M, N, K);
        for (int w = 0; w < WAYS; w++) cell(gf[w]);
        double best = gf[0] > gf[1] ? gf[0] : gf[1];
        best = best > gf[2] ? best : gf[2];
        if (on[3]) printf(" %.2f | %s |\n", gf[3] / best, mt_gemm_impl(ta, tb, M, N, K, true));
        else printf(" - | - |\n");
        fflush(stdout);
    }
    for (int i = 0; i < nt; i++)
        free(ops[i].A), free(ops[i].B), free(ops[i].C), free(ops[i].Ab), free(ops[i].Bb);
    free(t);
    return 0;
}
