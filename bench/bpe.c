/* The bpe tokenizer's speed: learning a vocabulary from a text's training part (the first 90%, as
   ./train --tokenizer bpe does) and encoding the whole text, on 1 thread and on `threads`, for
   the text and for 10 copies of it end to end (where the threads' parts pay for themselves).
   Prints a Markdown section naming the CPU: seconds to learn (best and median of reps), MB/s
   encoded (MB = 10^6 bytes; best and median).
   usage: bpe [text (data/tinyshakespeare.txt)] [vocab (4096)] [reps (5)] [threads (2)] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "mt.h"

static void cpu_name(char *buf, size_t len) {
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            const char *v = strchr(line, ':');
            snprintf(buf, len, "%s", v ? v + 2 : line);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "data/tinyshakespeare.txt";
    int vocab = argc > 2 ? atoi(argv[2]) : 4096, reps = argc > 3 ? atoi(argv[3]) : 5,
        threads = argc > 4 ? atoi(argv[4]) : 2;
    if (reps < 1 || threads < 1) {
        fprintf(stderr, "usage: bpe [text] [vocab] [reps >= 1] [threads >= 1]\n");
        return 2;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bpe: cannot open %s\n", path);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    size_t len1 = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(10 * len1 + 1);
    uint16_t *ids = malloc(10 * len1 * sizeof *ids);
    if (!text || !ids || fread(text, 1, len1, f) != len1) {
        fprintf(stderr, "bpe: cannot read %s\n", path);
        return 1;
    }
    fclose(f);
    for (int c = 1; c < 10; c++) memcpy(text + c * len1, text, len1);
    double *t = malloc((size_t)reps * sizeof *t);
    char cpu[512], load[64] = "?";
    cpu_name(cpu, sizeof cpu);
    FILE *la = fopen("/proc/loadavg", "r");
    if (la && fgets(load, sizeof load, la)) load[strcspn(load, " ")] = 0; /* the 1-minute one */
    if (la) fclose(la);
    printf("`bench/bpe %s %d %d %d` on %s, %d CPUs (load average %s at the start): the "
           "vocabulary learnt from the first 90%% of the text, the whole text encoded; best / "
           "median of %d; the 2-thread rows move with the other work on the machine.\n\n",
           path, vocab, reps, threads, cpu, omp_get_num_procs(), load, reps);
    printf("| text | threads | learn %d tokens, s | encode, MB/s | bytes per token |\n", vocab);
    printf("|---|---:|---:|---:|---:|\n");
    int counts[2] = {1, threads};
    for (int k = 0; k < (threads > 1 ? 4 : 2); k++) {
        int copies = k < (threads > 1 ? 2 : 1) ? 1 : 10, c = k % (threads > 1 ? 2 : 1);
        size_t len = copies * len1, cut = len - len / 10;
        omp_set_num_threads(counts[c]);
        mt_tokenizer tok;
        mt_err e;
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now(CLOCK_MONOTONIC);
            if (mt_tok_build_bpe(&tok, text, cut, vocab, &e) != MT_OK) {
                fprintf(stderr, "bpe: %s\n", e.msg);
                return 2;
            }
            t[r] = bench_now(CLOCK_MONOTONIC) - t0;
            if (r + 1 < reps) mt_tok_free(&tok);
        }
        double learn_med = bench_median(t, reps), learn_best = t[0];
        size_t n = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now(CLOCK_MONOTONIC);
            mt_tok_encode(&tok, text, len, ids, &n, NULL);
            t[r] = len / 1e6 / (bench_now(CLOCK_MONOTONIC) - t0);
        }
        double enc_med = bench_median(t, reps), enc_best = t[reps - 1];
        printf("| %s%s (%.1f MB) | %d | %.3f / %.3f | %.0f / %.0f | %.2f |\n",
               copies > 1 ? "10 x " : "", path, len / 1e6, counts[c], learn_best, learn_med,
               enc_best, enc_med, (double)len / (double)n);
        mt_tok_free(&tok);
    }
    free(t);
    free(text);
    free(ids);
    return 0;
}
