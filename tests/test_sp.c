/* The sp tokenizer (src/data/sp.c) against llama2.c's run.c on Llama 2's real tokenizer.bin: the
   same ids, id for id, for tiny Shakespeare lines, Unicode, emoji (byte fallback), spaces at the
   edges, the empty text, with and without BOS/EOS; decode gives the text back; the checkpoint's
   JSON gives the same tokenizer; a truncated or malformed file is refused naming it. run.c is
   compiled here by a driver that includes it (its main renamed). Skips without ../shared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/data/data.h"
#include "check.h"

#define LLAMA2C "../shared/third_party/llama2c"
#define TOKBIN LLAMA2C "/tokenizer.bin"

/* reads cases (each: u32 length, bytes) from argv[2]; prints per case "bos eos: ids" lines */
static const char DRIVER[] = "#include \"run.c\"\n"
                             "#undef main\n"
                             "int main(int argc, char **argv) {\n"
                             "    Tokenizer t;\n"
                             "    build_tokenizer(&t, argv[1], 32000);\n"
                             "    FILE *f = fopen(argv[2], \"rb\");\n"
                             "    unsigned n;\n"
                             "    while (fread(&n, 4, 1, f) == 1) {\n"
                             "        char *s = calloc(n + 1, 1);\n"
                             "        if (n && fread(s, 1, n, f) != n) return 1;\n"
                             "        int *ids = malloc((n + 3) * sizeof *ids), k;\n"
                             "        for (int b = 0; b < 4; b++) {\n"
                             "            encode(&t, s, b & 1, b >> 1, ids, &k);\n"
                             "            for (int i = 0; i < k; i++) printf(\"%%d \", ids[i]);\n"
                             "            printf(\"\\n\");\n"
                             "        }\n"
                             "        free(ids);\n"
                             "        free(s);\n"
                             "    }\n"
                             "    return 0;\n"
                             "}\n";

static const char *CASES[] = {
    "",
    "a",
    " ",
    "  leading and trailing  ",
    "Hello world",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "naïve café, Größe, 東京, Ελληνικά",
    "emoji 😀🦙 and 🧑‍🚀!",
    "\t\ttabs\r\n",
    "\x01\x7f control",
    "\xff\xfe stray \x80 bytes \xe2\x82",
};

static char dir[] = "/tmp/test_sp_XXXXXX";

/* Writes the cases and a stretch of tiny Shakespeare to dir/cases; their texts into texts. */
static int write_cases(char **texts, size_t *lens) {
    int n = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++, n++) {
        texts[n] = strdup(CASES[i]);
        lens[n] = strlen(CASES[i]);
    }
    FILE *sh = fopen("data/tinyshakespeare.txt", "rb");
    static char buf[1 << 11];
    size_t got = sh ? fread(buf, 1, sizeof buf - 1, sh) : 0;
    if (sh) fclose(sh);
    buf[got] = 0;
    /* 40 lines one by one, then one long text of 2 KiB (the merge loop on a long input) */
    char *line = buf;
    for (int k = 0; k < 40 && line && *line; k++, n++) {
        char *end = strchr(line, '\n');
        lens[n] = end ? (size_t)(end - line) : strlen(line);
        texts[n] = strndup(line, lens[n]);
        line = end ? end + 1 : NULL;
    }
    texts[n] = strdup(buf);
    lens[n++] = got;
    char path[64];
    snprintf(path, sizeof path, "%s/cases", dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < n; i++) {
        unsigned len = (unsigned)lens[i];
        fwrite(&len, 4, 1, f);
        fwrite(texts[i], 1, lens[i], f);
    }
    fclose(f);
    return n;
}

static void check_decode(const mt_tokenizer *t, const uint16_t *ids, size_t n, const char *text,
                         size_t len) {
    char *out = malloc(len + 1);
    size_t at = 0;
    bool fits = true;
    for (size_t i = 1; i < n && fits; i++) { /* ids[0] is BOS */
        int m;
        const char *b = mt_tok_decode_after(t, i == 1 ? MT_SP_BOS : ids[i - 1], ids[i], &m);
        fits = at + (size_t)m <= len;
        if (fits) memcpy(out + at, b, (size_t)m);
        at += (size_t)m;
    }
    CHECK(fits && at == len && memcmp(out, text, len) == 0, "decode of '%.40s' is not the text",
          text);
    free(out);
}

static void test_against_run_c(const mt_tokenizer *t, const mt_tokenizer *back) {
    char *texts[64];
    size_t lens[64];
    int n = write_cases(texts, lens);
    char cmd[1024], path[64];
    snprintf(path, sizeof path, "%s/driver.c", dir);
    FILE *f = fopen(path, "w");
    char cwd[512];
    if (!getcwd(cwd, sizeof cwd)) CHECK(false, "getcwd");
    fprintf(f, DRIVER);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "cc -O2 -w -Dmain=run_main -I%s/" LLAMA2C " -o %s/driver %s/driver.c -lm && "
             "%s/driver " TOKBIN " %s/cases > %s/ids",
             cwd, dir, dir, dir, dir, dir);
    if (system(cmd) != 0) {
        CHECK(false, "run.c's driver: %s", cmd);
        return;
    }
    snprintf(path, sizeof path, "%s/ids", dir);
    FILE *ids_f = fopen(path, "r");
    static char line[1 << 20];
    uint16_t *ids = malloc((1 << 17) * sizeof *ids);
    for (int c = 0; c < n; c++) {
        for (int b = 0; b < 4; b++) {
            if (!fgets(line, sizeof line, ids_f)) {
                CHECK(false, "run.c's driver printed too few lines");
                break;
            }
            size_t k;
            mt_sp_encode(b & 1 ? back : t, texts[c], lens[c], b & 1, b >> 1, ids, &k);
            size_t i = 0;
            bool same = true;
            for (char *p = line, *e; same; p = e) {
                long v = strtol(p, &e, 10);
                if (e == p) break;
                same = i < k && ids[i++] == v;
            }
            CHECK(same && i == k,
                  "case %d ('%.30s', bos %d eos %d): mt's %zu ids differ from run.c's", c, texts[c],
                  b & 1, b >> 1, k);
            if (b == 1 && c < n - 1) check_decode(t, ids, k, texts[c], lens[c]);
        }
        free(texts[c]);
    }
    fclose(ids_f);
    free(ids);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

static void test_refusals(void) {
    FILE *f = fopen(TOKBIN, "rb");
    static unsigned char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char path[64];
    snprintf(path, sizeof path, "%s/bad.bin", dir);
    mt_tokenizer t;
    mt_err e;
    write_bytes(path, buf, n - 3);
    CHECK(mt_sp_read_llama2c(path, &t, &e) == MT_EFORMAT && strstr(e.msg, "truncated") &&
              strstr(e.msg, path) && strstr(e.msg, "piece 31999"),
          "truncated: %s", e.msg);
    write_bytes(path, buf, 4 + 100);
    CHECK(mt_sp_read_llama2c(path, &t, &e) == MT_EFORMAT && strstr(e.msg, "truncated"),
          "a few pieces: %s", e.msg);
    unsigned char bad[16] = {200, 0, 0, 0};
    write_bytes(path, bad, sizeof bad);
    CHECK(mt_sp_read_llama2c(path, &t, &e) == MT_EFORMAT && strstr(e.msg, "max_token_length 200"),
          "max_token_length: %s", e.msg);
    memcpy(buf + 4 + 4, "\x7f\0\0\0", 4); /* piece 0's length */
    write_bytes(path, buf, n);
    CHECK(mt_sp_read_llama2c(path, &t, &e) == MT_EFORMAT && strstr(e.msg, "piece 0") &&
              strstr(e.msg, "length 127"),
          "piece length: %s", e.msg);
    unlink(path);
}

int main(void) {
    if (access(TOKBIN, R_OK) != 0 || access(LLAMA2C "/run.c", R_OK) != 0) {
        printf("test_sp: skipped (no " TOKBIN " or run.c: ../shared is absent)\n");
        return 0;
    }
    if (!mkdtemp(dir)) {
        CHECK(false, "mkdtemp");
        return check_finish("test_sp");
    }
    mt_tokenizer t, back;
    mt_err e;
    CHECK(mt_sp_read_llama2c(TOKBIN, &t, &e) == MT_OK && t.n_vocab == 32000, "read: %s", e.msg);
    char *json = mt_tok_to_json(&t);
    CHECK(mt_tok_from_json(json, &back, &e) == MT_OK && back.n_vocab == 32000, "json: %s", e.msg);
    char *again = mt_tok_to_json(&back);
    CHECK(strcmp(json, again) == 0, "the JSON of the JSON's tokenizer differs");
    free(json);
    free(again);
    test_against_run_c(&t, &back);
    test_refusals();
    mt_tok_free(&t);
    mt_tok_free(&back);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "rm");
    return check_finish("test_sp");
}
