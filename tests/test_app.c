/* src/app, the programs' work: ./train --prepare (mt_prepare: a token file read back, llm.c shards,
 * a directory that already holds shards refused and left as it was) and its report line. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_app_XXXXXX";

static char *tmp_path(const char *name) {
    static char path[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* --prepare of the flags in line ("--a 1 --b ..."): its status, the report line in report. */
static mt_status prepare(const char *line, mt_prepared *p, char *report, size_t len, mt_err *e) {
    char buf[1024], *argv[64] = {"train"};
    int argc = 1;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 64; t = strtok(NULL, " ")) argv[argc++] = t;
    mt_run_options r;
    mt_status s = mt_run_options_read(&r, argc, argv, e);
    if (s != MT_OK) return s;
    if ((s = mt_prepare(&r, p, e)) == MT_OK) {
        FILE *f = fmemopen(report, len, "w");
        mt_report_prepared(f, &r, p);
        fclose(f);
    }
    mt_run_options_free(&r);
    return s;
}

static void test_prepare(void) {
    const char *text = "To be, or not to be, that is the question: whether 'tis nobler.\n";
    FILE *f = fopen(tmp_path("a.txt"), "wb");
    CHECK(f && fputs(text, f) != EOF, "cannot write the text");
    if (f) fclose(f);
    char line[512], report[512];
    mt_prepared p;
    mt_err e;
    snprintf(line, sizeof line, "--data %s --prepare %s", tmp_path("a.txt"), tmp_path("a.bin"));
    CHECK(prepare(line, &p, report, sizeof report, &e) == MT_OK, "--prepare: %s", e.msg);
    CHECK(p.n == strlen(text) && p.n_vocab == 256 && p.n_files == 0, "prepared %zu of %d", p.n,
          p.n_vocab);
    char want[512];
    snprintf(want, sizeof want, "wrote %s: %zu tokens, byte tokenizer, vocabulary 256\n",
             tmp_path("a.bin"), strlen(text));
    CHECK(strcmp(report, want) == 0, "report: %s", report);
    mt_tokenizer tok;
    mt_tokens d;
    CHECK(mt_tokfile_read(tmp_path("a.bin"), &tok, &d, &e) == MT_OK && d.n == p.n, "read back: %s",
          e.msg);
    mt_tokens_free(&d);
    mt_tok_free(&tok);

    /* llm.c shards of 20 tokens: the train part's, the val part's, meta.json */
    snprintf(line, sizeof line, "--data %s --prepare %s --format llmc --shard-tokens 20",
             tmp_path("a.txt"), tmp_path("sh"));
    CHECK(prepare(line, &p, report, sizeof report, &e) == MT_OK, "llmc: %s", e.msg);
    size_t n_val = p.n_val, n_train = p.n - n_val;
    int want_files = (int)((n_train + 19) / 20 + (n_val + 19) / 20);
    CHECK(p.n_files == want_files && n_val > 0, "llmc: %d shards, expected %d", p.n_files,
          want_files);
    CHECK(access(tmp_path("sh/train_000000.bin"), F_OK) == 0 &&
              access(tmp_path("sh/val_000000.bin"), F_OK) == 0 &&
              access(tmp_path("sh/meta.json"), F_OK) == 0,
          "llmc: the files");
    CHECK(strstr(report, "llm.c shards of at most 20 tokens") != NULL, "llmc report: %s", report);
    /* again into the same directory: refused before anything is read */
    CHECK(prepare(line, &p, report, sizeof report, &e) == MT_EINVAL &&
              strstr(e.msg, "already holds") != NULL,
          "a directory with shards: %s", e.msg);
    for (int k = 0; k < want_files; k++) { /* the names of both parts */
        char name[64];
        snprintf(name, sizeof name, "sh/train_%06d.bin", k);
        unlink(tmp_path(name));
        snprintf(name, sizeof name, "sh/val_%06d.bin", k);
        unlink(tmp_path(name));
    }
    unlink(tmp_path("sh/meta.json"));
    rmdir(tmp_path("sh"));
    unlink(tmp_path("a.bin"));
    unlink(tmp_path("a.txt"));
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_prepare();
    rmdir(dir);
    return check_finish("test_app");
}
