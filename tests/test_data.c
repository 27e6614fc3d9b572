/* Tokenizers (byte, char, bpe), the text and token-file datasets, the split and the batch
   sampler. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/mt_test_data_XXXXXX";

static char *tmp_path(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n, "cannot write %s", path);
    if (f) fclose(f);
}

static size_t read_bytes(const char *path, unsigned char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap, f) : 0;
    if (f) fclose(f);
    return n;
}

/* Decodes ids back to text (caller frees). */
static char *decode_all(const mt_tokenizer *t, const uint16_t *ids, size_t n, size_t *len) {
    char *s = malloc(MT_TOK_MAX_BYTES * n + 1);
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        int k;
        const char *b = mt_tok_decode(t, ids[i], &k);
        CHECK(k >= 1 && k <= MT_TOK_MAX_BYTES, "token %u decodes to %d bytes", ids[i], k);
        memcpy(s + *len, b, (size_t)k);
        *len += (size_t)k;
    }
    s[*len] = 0;
    return s;
}

static void test_byte(void) {
    mt_tokenizer t;
    mt_tok_init_byte(&t);
    CHECK(t.n_vocab == 256, "byte vocab %d", t.n_vocab);
    unsigned char text[300];
    for (int i = 0; i < 300; i++) text[i] = (unsigned char)(i * 7 + 3);
    uint16_t ids[300];
    size_t n, len;
    CHECK(mt_tok_encode(&t, (const char *)text, 300, ids, &n, NULL) == MT_OK && n == 300,
          "byte encode");
    char *back = decode_all(&t, ids, n, &len);
    CHECK(len == 300 && memcmp(back, text, 300) == 0, "byte round trip");
    free(back);
    char *json = mt_tok_to_json(&t);
    mt_tokenizer u;
    CHECK(mt_tok_from_json(json, &u, NULL) == MT_OK && u.kind == MT_TOK_BYTE && u.n_vocab == 256,
          "byte json round trip: %s", json);
    free(json);
}

static void test_char(void) {
    const char *text = "hello w\xc3\xb6rld \xe2\x98\x83 \xf0\x9f\x98\x80!\nhello";
    mt_tokenizer t;
    mt_err e;
    CHECK(mt_tok_build_char(&t, text, strlen(text), &e) == MT_OK, "build: %s", e.msg);
    /* distinct: h e l o space w ö r d ☃ 😀 ! \n */
    CHECK(t.n_vocab == 13, "char vocab %d", t.n_vocab);
    for (int i = 1; i < t.n_vocab; i++) CHECK(t.chars[i] > t.chars[i - 1], "chars ascending");
    uint16_t ids[64];
    size_t n, len;
    CHECK(mt_tok_encode(&t, text, strlen(text), ids, &n, &e) == MT_OK, "encode: %s", e.msg);
    CHECK(n == 22, "22 characters, got %zu", n);
    char *back = decode_all(&t, ids, n, &len);
    CHECK(len == strlen(text) && strcmp(back, text) == 0, "char round trip: '%s'", back);
    free(back);

    /* an unknown character names itself and its position */
    CHECK(mt_tok_encode(&t, "hellz", 5, ids, &n, &e) == MT_EINVAL, "unknown char accepted");
    CHECK(strstr(e.msg, "'z'") && strstr(e.msg, "U+007A") && strstr(e.msg, "byte 4"), "message: %s",
          e.msg);
    /* invalid UTF-8: stray continuation, truncated sequence, overlong, surrogate */
    const char *bad[] = {"a\x80", "a\xe2\x98", "\xc0\xaf", "\xed\xa0\x80"};
    for (int i = 0; i < 4; i++) {
        mt_tokenizer u;
        CHECK(mt_tok_build_char(&u, bad[i], strlen(bad[i]), &e) == MT_EFORMAT &&
                  strstr(e.msg, "invalid UTF-8"),
              "bad utf-8 %d accepted", i);
    }

    char *json = mt_tok_to_json(&t);
    mt_tokenizer u;
    CHECK(mt_tok_from_json(json, &u, &e) == MT_OK && u.kind == MT_TOK_CHAR &&
              u.n_vocab == t.n_vocab && memcmp(u.chars, t.chars, 13 * sizeof *t.chars) == 0,
          "char json round trip: %s", json);
    free(json);
    mt_tok_free(&u);
    const char *bad_json[] = {"{}",
                              "{\"type\":\"bpe\"}",
                              "{\"type\":\"char\",\"chars\":[]}",
                              "{\"type\":\"char\",\"chars\":[65,65]}",
                              "{\"type\":\"char\",\"chars\":[-1]}",
                              "not json"};
    for (int i = 0; i < 6; i++)
        CHECK(mt_tok_from_json(bad_json[i], &u, &e) == MT_EFORMAT, "accepted %s", bad_json[i]);
    mt_tok_free(&t);
}

/* Splits all for windows of n_ctx + 1 into tr and va (freeing what they held). */
static mt_status split(mt_tokens *all, int n_ctx, mt_tokens *tr, mt_tokens *va, mt_err *e) {
    mt_tokens_free(tr);
    mt_tokens_free(va);
    return mt_tokens_split(all, n_ctx, tr, va, e);
}

/* ids: "<i>" per id, JSON round trip, no encoding, the vocabulary's bounds */
static void test_ids(void) {
    mt_tokenizer t, u;
    mt_err e;
    CHECK(mt_tok_init_ids(&t, 50257, &e) == MT_OK && t.kind == MT_TOK_IDS, "ids: %s", e.msg);
    int len;
    const char *b = mt_tok_decode(&t, 50256, &len);
    CHECK(len == 7 && memcmp(b, "<50256>", 7) == 0, "decode 50256: %.*s", len, b);
    b = mt_tok_decode(&t, 0, &len);
    CHECK(len == 3 && memcmp(b, "<0>", 3) == 0, "decode 0");
    char *json = mt_tok_to_json(&t);
    CHECK(strcmp(json, "{\"type\":\"ids\",\"n_vocab\":50257}") == 0, "json %s", json);
    CHECK(mt_tok_from_json(json, &u, &e) == MT_OK && u.kind == MT_TOK_IDS && u.n_vocab == 50257,
          "from json: %s", e.msg);
    free(json);
    uint16_t ids[4];
    size_t n;
    CHECK(mt_tok_encode(&u, "hi", 2, ids, &n, &e) == MT_EINVAL && strstr(e.msg, "cannot encode"),
          "ids encode text: %s", e.msg);
    mt_tok_free(&u);
    CHECK(mt_tok_from_json("{\"type\":\"ids\",\"n_vocab\":70000}", &u, &e) == MT_EFORMAT,
          "70000 ids accepted");
    CHECK(mt_tok_init_ids(&u, 0, &e) == MT_EFORMAT, "0 ids accepted");
    mt_tok_free(&t);
}

static void test_split(void) {
    uint16_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint16_t)i;
    mt_tokens all, tr = {0}, va = {0};
    mt_err e;
    CHECK(mt_tokens_wrap(&all, tok, 100, 256, 10, &e) == MT_OK, "wrap");
    CHECK(split(&all, 8, &tr, &va, &e) == MT_OK, "split: %s", e.msg);
    CHECK(tr.n == 90 && va.n == 10 && va.n_span == 1 && tr.n_span == 1 &&
              va.span[0].ids == (const unsigned char *)(tok + 90) &&
              tr.span[0].ids == (const unsigned char *)tok,
          "split 90/10");
    all.n_val = 0;
    CHECK(split(&all, 8, &tr, &va, &e) == MT_OK && va.n == 0 && tr.n == 100, "no validation");
    all.n_val = 10;
    CHECK(split(&all, 10, &tr, &va, &e) == MT_EINVAL &&
              strstr(e.msg, "validation split has 10 tokens"),
          "val too short: %s", e.msg);
    all.n_val = 50;
    CHECK(split(&all, 60, &tr, &va, &e) == MT_EINVAL && strstr(e.msg, "training split"),
          "train too short: %s", e.msg);
    mt_tokens_free(&tr);
    mt_tokens_free(&va);
    mt_tokens_free(&all);
}

/* mt_data_load cuts a text in bytes, the same for every tokenizer: the validation part is the
   last floor(len * val_fraction) bytes (char: from the next character start on). */
static void test_text_split(void) {
    /* 20 bytes, "\xc3\xa9" (2 bytes) straddling the cut of char at 0.25: 15 | 5 */
    const char *text = "abcdefghijklmn\xc3\xa9opqr";
    write_bytes(tmp_path("s.txt"), text, strlen(text));
    mt_tokenizer t;
    mt_tokens d;
    mt_err e;
    mt_text_cfg c = {MT_TOK_BYTE, 0, 0.25, 0};
    CHECK(mt_data_load(tmp_path("s.txt"), &c, &t, &d, &e) == MT_OK && d.n == 20 && d.n_val == 5,
          "byte: %zu tokens, %zu val", d.n, d.n_val);
    mt_tokens_free(&d);
    mt_tok_free(&t);
    c.kind = MT_TOK_CHAR;
    CHECK(mt_data_load(tmp_path("s.txt"), &c, &t, &d, &e) == MT_OK && d.n == 19 && d.n_val == 4,
          "char: %zu tokens, %zu val (from the next character)", d.n, d.n_val);
    mt_tokens_free(&d);
    mt_tok_free(&t);
    c.val_fraction = 1.0;
    CHECK(mt_data_load(tmp_path("s.txt"), &c, &t, &d, &e) == MT_EINVAL &&
              strstr(e.msg, "--val-fraction 1") && strstr(e.msg, "[0, 1)"),
          "fraction 1 accepted: %s", e.msg);
}

static void test_tokfile(void) {
    mt_tokenizer t;
    mt_err e;
    const char *text = "First Citizen:\nBefore we proceed any further, hear me speak.\n";
    write_bytes(tmp_path("a.txt"), text, strlen(text));
    mt_tokens d;
    mt_text_cfg c = {MT_TOK_CHAR, 0, 0.0, 0};
    CHECK(mt_data_load(tmp_path("a.txt"), &c, &t, &d, &e) == MT_OK, "load: %s", e.msg);
    CHECK(d.n == strlen(text) && d.n_vocab == t.n_vocab, "text dataset: %zu tokens", d.n);
    FILE *f = fopen(tmp_path("a.bin"), "wb");
    CHECK(f && mt_tokfile_write(f, "a.bin", &t, &d, &e) == MT_OK && fclose(f) == 0, "write: %s",
          e.msg);
    mt_tokenizer t2;
    mt_tokens d2;
    c = (mt_text_cfg){MT_TOK_BYTE, 0, 0.1, 0}; /* a token file brings its tokenizer */
    CHECK(mt_data_load(tmp_path("a.bin"), &c, &t2, &d2, &e) == MT_OK, "read: %s", e.msg);
    CHECK(d2.n_val == d.n / 10, "a token file's validation part: %zu tokens of %zu", d2.n_val,
          d2.n);
    CHECK(t2.kind == MT_TOK_CHAR && t2.n_vocab == t.n_vocab && d2.n == d.n &&
              d2.n_vocab == d.n_vocab && d2.n_span == 1 &&
              memcmp(d2.span[0].ids, d.span[0].ids, d.n * 2) == 0,
          "token file round trip");
    mt_tokens_free(&d2);
    mt_tok_free(&t2);

    /* rejections, each from a corrupted copy */
    unsigned char buf[4096], bad[4096];
    size_t n = read_bytes(tmp_path("a.bin"), buf, sizeof buf);
    size_t jlen = buf[24] | (size_t)buf[25] << 8, tok0 = 28 + jlen;
    struct {
        const char *what, *expect;
        size_t len; /* bytes of the copy kept */
        size_t at;  /* byte changed (when len == n) */
        unsigned char v;
    } cases[] = {
        {"truncated header", "truncated", 20, 0, 0},
        {"truncated tokens", "truncated", n - 3, 0, 0},
        {"trailing bytes", "trailing bytes", n + 2, 0, 0},
        {"magic", "not an mt token file", n, 0, 'X'},
        {"version", "version 2", n, 8, 2},
        {"count beyond the file", "truncated", n, 16, (unsigned char)(d.n + 1)},
        {"vocab 0", "vocabulary size 0", n, 12, 0},
        {"token >= vocab", "token 1 is", n, tok0 + 3, 0x7f},
        {"vocab disagrees with the tokenizer", "its tokenizer has", n, 12,
         (unsigned char)(t.n_vocab + 1)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(bad, buf, n);
        memset(bad + n, 0, 8);
        if (cases[i].len == n) bad[cases[i].at] = cases[i].v;
        write_bytes(tmp_path("bad.bin"), bad, cases[i].len);
        mt_status s = mt_tokfile_read(tmp_path("bad.bin"), &t2, &d2, &e);
        CHECK(s == MT_EFORMAT && strstr(e.msg, cases[i].expect) && strstr(e.msg, "bad.bin"),
              "%s: status %d, message: %s", cases[i].what, s, e.msg);
        CHECK(d2.span == NULL && d2.store == NULL && t2.chars == NULL, "%s: nothing kept",
              cases[i].what);
    }
    CHECK(mt_tokfile_read(tmp_path("missing.bin"), &t2, &d2, &e) == MT_EIO, "missing file");
    /* a directory opens and its size reads as LONG_MAX: it was 'out of memory for
       9223372036854775807 bytes' (an ASan abort) as text, 'truncated' as a token file; now a
       directory is a set of shards, and one without any is refused */
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "dir.bin" : "dir";
        mkdir(tmp_path(name), 0700);
        mt_text_cfg byte = {MT_TOK_BYTE, 0, 0.1, 0};
        mt_status s = mt_data_load(tmp_path(name), &byte, &t2, &d2, &e);
        CHECK(s == MT_EINVAL && strstr(e.msg, "is a directory without token shards: expected"),
              "%s: status %d, message: %s", name, s, e.msg);
        rmdir(tmp_path(name));
    }
    mt_tokens_free(&d);
    mt_tok_free(&t);
}

static void test_sampler(void) {
    uint16_t tok[500];
    for (int i = 0; i < 500; i++) tok[i] = (uint16_t)i;
    mt_tokens all, d, none;
    mt_err e;
    enum { B = 4, T = 16 };
    CHECK(mt_tokens_wrap(&all, tok, 500, 500, 0, &e) == MT_OK &&
              mt_tokens_split(&all, T, &d, &none, &e) == MT_OK,
          "split: %s", e.msg);
    int x[B * T], y[B * T], x2[B * T], y2[B * T];
    mt_sampler a, b;
    mt_sampler_init(&a, 42);
    mt_sampler_init(&b, 42);
    mt_rng r = a.rng; /* one span: the start of window b is the b-th draw mod n - T */
    int lo = 500, hi = 0;
    for (int step = 0; step < 200; step++) {
        mt_sampler_next(&a, &d, B, T, x, y);
        mt_sampler_next(&b, &d, B, T, x2, y2);
        CHECK(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0, "same seed differs");
        for (int i = 0; i < B * T; i++) {
            CHECK(y[i] == x[i] + 1, "y is x shifted by one");
            CHECK(i % T == 0 || x[i] == x[i - 1] + 1, "windows are consecutive tokens");
        }
        for (int row = 0; row < B; row++) {
            lo = x[row * T] < lo ? x[row * T] : lo;
            hi = x[row * T] > hi ? x[row * T] : hi;
            CHECK((uint64_t)x[row * T] == mt_rng_u64(&r) % (500 - T), "one span: start u mod n-T");
        }
    }
    CHECK(lo == 0 || lo < 10, "starts reach the beginning: %d", lo);
    CHECK(hi <= 500 - T - 1 && hi > 500 - T - 20, "starts reach the end: %d", hi);

    /* saving the state (a copy) and restoring it replays the same batches */
    mt_sampler saved = a;
    mt_sampler_next(&a, &d, B, T, x, y);
    mt_sampler_next(&a, &d, B, T, x, y);
    mt_sampler restored = saved;
    mt_sampler_next(&restored, &d, B, T, x2, y2);
    mt_sampler_next(&restored, &d, B, T, x2, y2);
    CHECK(memcmp(x, x2, sizeof x) == 0, "restored state replays");
    mt_sampler_init(&b, 43);
    mt_sampler_next(&b, &d, B, T, x2, y2);
    CHECK(memcmp(x, x2, sizeof x) != 0, "another seed gives other windows");
    mt_tokens_free(&d);
    mt_tokens_free(&none);
    mt_tokens_free(&all);
}

/* Windows across spans (shards): each inside one span, every span with a window drawn in
   proportion to its windows, a span shorter than a window never; the split cuts inside a span. */
static void test_sampler_spans(void) {
    enum { B = 8, T = 8, S = 4 };
    static uint16_t ids[S][200];
    const size_t len[S] = {200, 5, 100, 60}; /* span 1 holds no window of T + 1 */
    mt_token_span sp[S];
    size_t n = 0;
    for (int k = 0; k < S; k++) {
        for (size_t i = 0; i < len[k]; i++) ids[k][i] = (uint16_t)(1000 * k + i);
        sp[k] = (mt_token_span){.ids = (const unsigned char *)ids[k], .n = len[k], .path = "x"};
        n += len[k];
    }
    /* the last 30 ids (half of span 3) are the validation part */
    mt_tokens all = {.span = sp, .n_span = S, .width = 2, .n = n, .n_vocab = 4000, .n_val = 30};
    mt_tokens tr, va;
    mt_err e;
    CHECK(mt_tokens_split(&all, T, &tr, &va, &e) == MT_OK, "split: %s", e.msg);
    CHECK(tr.n == n - 30 && va.n == 30 && va.n_span == 1 && va.span[0].ids == sp[3].ids + 60 &&
              tr.win[tr.n_span] == (200 - T) + 0 + (100 - T) + (30 - T),
          "views: train %zu, val %zu, %zu training windows", tr.n, va.n, tr.win[tr.n_span]);
    int x[B * T], y[B * T], count[S] = {0};
    mt_sampler s;
    mt_sampler_init(&s, 7);
    for (int step = 0; step < 500; step++) {
        mt_sampler_next(&s, &tr, B, T, x, y);
        for (int row = 0; row < B; row++) {
            int k = x[row * T] / 1000, i0 = x[row * T] % 1000;
            count[k]++;
            CHECK(y[row * T + T - 1] == x[row * T] + T, "a window stays in its span");
            CHECK(k != 3 || i0 + T < 30, "span 3's windows stay in its training half: %d", i0);
        }
    }
    double all_w = (double)tr.win[tr.n_span];
    CHECK(count[1] == 0, "the short span is never drawn");
    for (int k = 0; k < S; k++) {
        double expect = 4000.0 *
                        (k == 0   ? 200 - T
                         : k == 2 ? 100 - T
                         : k == 3 ? 30 - T
                                  : 0) /
                        all_w;
        CHECK(fabs(count[k] - expect) <= 4 * sqrt(expect) + 1, "span %d drawn %d times, ~%.0f", k,
              count[k], expect);
    }
    mt_tokens_free(&tr);
    mt_tokens_free(&va);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_byte();
    test_char();
    test_ids();
    test_split();
    test_text_split();
    test_tokfile();
    test_sampler();
    test_sampler_spans();
    const char *files[] = {"a.txt", "a.bin", "bad.bin", "s.txt"};
    for (int i = 0; i < 4; i++) unlink(tmp_path(files[i]));
    rmdir(dir);
    return check_finish("test_data");
}
