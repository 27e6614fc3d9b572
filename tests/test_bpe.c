/* The bpe tokenizer: the pre-tokenizer's rule, training (vocabulary bounds, early stop, the same
   merges on any thread count), encoding (round trips on random bytes and random UTF-8, one thread
   against several), JSON and its rejections, and learning from the training part only. The
   merges themselves are checked against a naive Python BPE in tests/parity/test_bpe.py. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    CHECK(f, "cannot open %s", path);
    if (!f) exit(1);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(*len + 1);
    CHECK(fread(s, 1, *len, f) == *len, "cannot read %s", path);
    fclose(f);
    return s;
}

/* encode then decode gives text back; every id is in the vocabulary. Returns the token count. */
static size_t round_trip(const mt_tokenizer *t, const char *text, size_t len, const char *what) {
    uint16_t *ids = malloc((len ? len : 1) * sizeof *ids);
    char *back = malloc(len + MT_TOK_MAX_BYTES);
    size_t n = 0, k = 0;
    mt_err e;
    CHECK(mt_tok_encode(t, text, len, ids, &n, &e) == MT_OK, "%s: encode: %s", what, e.msg);
    CHECK(n <= len, "%s: %zu tokens for %zu bytes", what, n, len);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        ok = ids[i] < t->n_vocab;
        int m;
        const char *b = ok ? mt_tok_decode(t, ids[i], &m) : NULL;
        ok = ok && m >= 1 && m <= MT_TOK_MAX_BYTES && k + (size_t)m <= len;
        if (ok) memcpy(back + k, b, (size_t)m);
        k += ok ? (size_t)m : 0;
    }
    CHECK(ok && k == len && memcmp(back, text, len) == 0, "%s: decode(encode(x)) != x (%zu bytes)",
          what, len);
    free(ids);
    free(back);
    return n;
}

static void test_pretoken(void) {
    struct {
        const char *text, *want; /* want: the pre-tokens joined by '|' */
    } cases[] = {
        {"Hello,  world!\n\n", "Hello|,| | world|!|\n\n"},
        {"ROMEO:\nI said 42 times.", "ROMEO|:|\n|I| said| 42| times|."},
        {"\n x \t y  \n", "\n| x| \t| y|  \n"},
        {" ...  --x", " ...| | --|x"},
        {"caf\xc3\xa9 na\xc3\xafve \xe2\x98\x83!", "caf\xc3\xa9| na\xc3\xafve| \xe2\x98\x83|!"},
        {"a1b2", "a|1|b|2"},
        {"   ", "   "},
        {" ", " "},
        {"x\x01\x7f y", "x|\x01\x7f| y"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const unsigned char *s = (const unsigned char *)cases[c].text;
        size_t len = strlen(cases[c].text);
        char got[256] = {0};
        for (size_t i = 0, e; i < len; i = e) {
            e = mt_bpe_pretoken(s, i, len);
            if (i) strcat(got, "|");
            strncat(got, (const char *)s + i, e - i);
        }
        CHECK(strcmp(got, cases[c].want) == 0, "pre-tokens of case %zu: '%s', want '%s'", c, got,
              cases[c].want);
    }
    /* runs longer than 64 bytes are cut into 64-byte pieces; a space run keeps its last ' ' for
       the word after it */
    char s[300];
    memset(s, 'a', 150);
    memset(s + 150, ' ', 100);
    s[250] = 'b';
    size_t want[] = {64, 64, 22, 64, 35, 2}, n = 0;
    for (size_t i = 0, e; i < 251; i = e, n++) {
        e = mt_bpe_pretoken((const unsigned char *)s, i, 251);
        CHECK(n < 6 && e - i == want[n], "long runs: piece %zu is %zu bytes", n, e - i);
    }
    CHECK(n == 6, "long runs: %zu pieces", n);
}

static void test_train_small(void) {
    mt_tokenizer t;
    mt_err e;
    for (int v = 0; v < 2; v++) {
        int bad = v ? 65537 : 256;
        CHECK(mt_tok_build_bpe(&t, "abc", 3, bad, &e) == MT_EINVAL &&
                  strstr(e.msg, "--vocab-size") && strstr(e.msg, "257 to 65536"),
              "vocab %d accepted: %s", bad, e.msg);
    }
    /* "abcabc": (a,b) and (b,c) tie at 2, (a,b) has the smaller left id; then (X,c) twice, then
       the best pair occurs once: stop at 258 */
    CHECK(mt_tok_build_bpe(&t, "abcabc", 6, 1000, &e) == MT_OK, "train: %s", e.msg);
    CHECK(t.n_vocab == 258 && t.merges[0][0] == 'a' && t.merges[0][1] == 'b' &&
              t.merges[1][0] == 256 && t.merges[1][1] == 'c',
          "abcabc: vocab %d", t.n_vocab);
    uint16_t ids[8];
    size_t n;
    CHECK(mt_tok_encode(&t, "abcabc", 6, ids, &n, &e) == MT_OK && n == 2 && ids[0] == 257 &&
              ids[1] == 257,
          "abcabc encodes to two tokens 257");
    CHECK(mt_tok_encode(&t, "aaa", 3, ids, &n, &e) == MT_OK && n == 3, "aaa: no merge applies");
    mt_tok_free(&t);
    /* "aaaa" in a word: (a,a) merges left to right */
    CHECK(mt_tok_build_bpe(&t, "aaaaa aaaaa", 11, 257, &e) == MT_OK && t.n_vocab == 257, "aaaaa");
    CHECK(mt_tok_encode(&t, "aaaaa", 5, ids, &n, &e) == MT_OK && n == 3 && ids[0] == 256 &&
              ids[1] == 256 && ids[2] == 'a',
          "aaaaa: AAa, got %zu tokens", n);
    mt_tok_free(&t);
    /* an empty text learns nothing and still encodes anything */
    CHECK(mt_tok_build_bpe(&t, "", 0, 300, &e) == MT_OK && t.n_vocab == 256, "empty text");
    round_trip(&t, "\xff\x00xyz", 5, "empty-text tokenizer");
    mt_tok_free(&t);
}

static void fill_random_utf8(mt_rng *r, char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint32_t kind = mt_rng_u64(r) % 4, cp;
        if (kind == 0) cp = 0x20 + (uint32_t)(mt_rng_u64(r) % 0x5f);
        else if (kind == 1) cp = 0x80 + (uint32_t)(mt_rng_u64(r) % 0x780);
        else if (kind == 2) {
            cp = 0x800 + (uint32_t)(mt_rng_u64(r) % 0xf800);
            if (cp >= 0xd800 && cp < 0xe000) cp -= 0x800;
        } else cp = 0x10000 + (uint32_t)(mt_rng_u64(r) % 0x100000);
        unsigned char b[4];
        int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (n == 1) b[0] = (unsigned char)cp;
        else {
            for (int k = n - 1; k > 0; k--, cp >>= 6) b[k] = (unsigned char)(0x80 | (cp & 0x3f));
            b[0] = (unsigned char)((0xf00 >> n) | cp);
        }
        if (i + (size_t)n > len) break;
        memcpy(s + i, b, (size_t)n);
        i += (size_t)n;
    }
    for (; i < len; i++) s[i] = ' ';
}

/* Tiny Shakespeare's training part to 4096 tokens: compression, thread counts, fuzzed round
   trips, JSON. */
static void test_shakespeare(void) {
    size_t len;
    char *text = read_all("data/tinyshakespeare.txt", &len);
    size_t cut = len - len / 10;
    mt_tokenizer t, t1;
    mt_err e;
    int threads = omp_get_max_threads();
    double t0 = mt_clock();
    CHECK(mt_tok_build_bpe(&t, text, cut, 4096, &e) == MT_OK && t.n_vocab == 4096, "train: %s",
          e.msg);
    double train_s = mt_clock() - t0;
    omp_set_num_threads(1); /* one part instead of one per thread: the same merges */
    CHECK(mt_tok_build_bpe(&t1, text, cut, 4096, &e) == MT_OK, "train 1 thread: %s", e.msg);
    CHECK(t1.n_vocab == t.n_vocab && memcmp(t1.merges, t.merges, 3840 * sizeof *t.merges) == 0,
          "1 and %d threads learn other merges", threads);
    mt_tok_free(&t1);
    for (int k = 0; k < 3840; k++)
        CHECK(t.merges[k][0] < 256 + k && t.merges[k][1] < 256 + k, "merge %d", k);

    /* the whole text, on 1 thread and on several (parts cut at pre-token edges): same ids */
    uint16_t *ids = malloc(len * sizeof *ids), *ids1 = malloc(len * sizeof *ids1);
    size_t n, n1;
    t0 = mt_clock();
    CHECK(mt_tok_encode(&t, text, len, ids1, &n1, &e) == MT_OK, "encode");
    double enc_s = mt_clock() - t0;
    omp_set_num_threads(threads > 1 ? threads : 2);
    CHECK(mt_tok_encode(&t, text, len, ids, &n, &e) == MT_OK, "encode");
    CHECK(n == n1 && memcmp(ids, ids1, n * sizeof *ids) == 0, "threads change the encoding");
    CHECK((double)len / (double)n > 3.0, "%.2f bytes per token", (double)len / (double)n);
    printf("  tiny Shakespeare: learnt 4096 tokens in %.2f s, encoded %zu bytes into %zu tokens "
           "(%.2f bytes per token) in %.3f s on 1 thread\n",
           train_s, len, n, (double)len / (double)n, enc_s);
    CHECK(round_trip(&t, text, len, "tiny Shakespeare") == n, "count");
    free(ids);
    free(ids1);

    /* JSON both ways: the same merges, the same encoding */
    char *json = mt_tok_to_json(&t);
    mt_tokenizer u;
    CHECK(mt_tok_from_json(json, &u, &e) == MT_OK && u.kind == MT_TOK_BPE && u.n_vocab == 4096 &&
              memcmp(u.merges, t.merges, 3840 * sizeof *t.merges) == 0,
          "json round trip: %s", e.msg);
    free(json);

    /* fuzz: random bytes, random UTF-8, text with random bytes spliced in */
    mt_rng r;
    mt_rng_seed(&r, 5);
    char *buf = malloc(5000);
    for (int it = 0; it < 600; it++) {
        size_t m = mt_rng_u64(&r) % 5000;
        int kind = it % 3;
        if (kind == 0)
            for (size_t i = 0; i < m; i++) buf[i] = (char)(mt_rng_u64(&r) & 0xff);
        else if (kind == 1) fill_random_utf8(&r, buf, m);
        else {
            memcpy(buf, text + mt_rng_u64(&r) % (len - m), m);
            for (size_t i = 0; i < m / 50; i++) buf[mt_rng_u64(&r) % m] = (char)mt_rng_u64(&r);
        }
        const char *what[] = {"random bytes", "random UTF-8", "spliced text"};
        round_trip(it % 2 ? &t : &u, buf, m, what[kind]);
    }
    /* and a tokenizer learnt from random bytes */
    for (size_t i = 0; i < 5000; i++) buf[i] = (char)(mt_rng_u64(&r) % 7 + 0xfa);
    mt_tok_free(&u);
    CHECK(mt_tok_build_bpe(&u, buf, 5000, 1000, &e) == MT_OK && u.n_vocab > 300, "random text");
    for (int it = 0; it < 100; it++) {
        size_t m = mt_rng_u64(&r) % 3000;
        for (size_t i = 0; i < m; i++)
            buf[i] = (char)(it % 2 ? mt_rng_u64(&r) % 7 + 0xfa : mt_rng_u64(&r));
        round_trip(&u, buf, m, "random bytes, random vocabulary");
    }
    free(buf);
    mt_tok_free(&u);
    mt_tok_free(&t);
    free(text);
}

static void test_json_rejections(void) {
    const struct {
        const char *json, *expect;
    } bad[] = {
        {"{\"type\":\"bpe\"}", "'merges'"},
        {"{\"type\":\"bpe\",\"merges\":[[97]]}", "merges[0]"},
        {"{\"type\":\"bpe\",\"merges\":[[97,98,99]]}", "merges[0]"},
        {"{\"type\":\"bpe\",\"merges\":[[97,98],[256,256],[258,97]]}", "merges[2]"},
        {"{\"type\":\"bpe\",\"merges\":[[97,98.5]]}", "merges[0]"},
        {"{\"type\":\"bpe\",\"merges\":[[-1,98]]}", "merges[0]"},
        {"{\"type\":\"bpe\",\"merges\":[[97,98],[99,100],[97,98]]}", "merge 2 repeats merge 0"},
        /* 2, 4, ..., 64 bytes, then 128: longer than any pre-token */
        {"{\"type\":\"bpe\",\"merges\":[[97,97],[256,256],[257,257],[258,258],[259,259],[260,260],"
         "[261,261]]}",
         "merge 6 makes a token of 128 bytes"},
    };
    mt_tokenizer t;
    mt_err e;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mt_status s = mt_tok_from_json(bad[i].json, &t, &e);
        CHECK(s == MT_EFORMAT && strstr(e.msg, bad[i].expect), "%s: status %d, message: %s",
              bad[i].json, s, s ? e.msg : "");
        CHECK(t.merges == NULL && t.bytes == NULL, "%s: nothing kept", bad[i].json);
    }
    CHECK(mt_tok_from_json("{\"type\":\"bpe\",\"merges\":[]}", &t, &e) == MT_OK && t.n_vocab == 256,
          "no merges: %s", e.msg);
    mt_tok_free(&t);
}

/* mt_data_load learns the merges from the training part only, and encodes the parts apart. */
static void test_load(void) {
    char dir[] = "/tmp/mt_test_bpe_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/t.txt", dir);
    char text[2000];
    size_t len = 0;
    for (int i = 0; i < 90; i++)
        len += (size_t)sprintf(text + len, "%s", i % 2 ? " the cat" : " sat on it");
    size_t cut = len;
    while (len < cut + cut / 9) len += (size_t)sprintf(text + len, " zebu yak");
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(text, 1, len, f) == len, "write");
    fclose(f);
    double vf = (double)(len - cut) / (double)len + 1e-9;
    mt_text_cfg c = {MT_TOK_BPE, 300, vf, 0};
    mt_tokenizer t;
    mt_tokens d;
    mt_err e;
    CHECK(mt_data_load(path, &c, &t, &d, &e) == MT_OK, "load: %s", e.msg);
    CHECK(len - (size_t)((double)len * vf) == cut, "the cut");
    bool held_out = false;
    for (int k = 0; k < t.n_vocab - 256; k++) {
        int m;
        const char *b = mt_tok_decode(&t, 256 + k, &m);
        held_out |= memchr(b, 'z', (size_t)m) || memchr(b, 'y', (size_t)m);
    }
    CHECK(!held_out, "a merge holds a byte seen only in the validation part");
    uint16_t ids[2000];
    size_t n;
    CHECK(mt_tok_encode(&t, text + cut, len - cut, ids, &n, &e) == MT_OK && n == d.n_val &&
              d.n_span == 1 && memcmp(ids, d.span[0].ids + 2 * (d.n - n), n * sizeof *ids) == 0,
          "the validation part: %zu tokens, encoded apart %zu", d.n_val, n);
    mt_tokens_free(&d);
    mt_tok_free(&t);
    c.vocab_size = 100;
    CHECK(mt_data_load(path, &c, &t, &d, &e) == MT_EINVAL && strstr(e.msg, "--vocab-size 100") &&
              strstr(e.msg, "t.txt"),
          "vocab 100: %s", e.msg);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    test_pretoken();
    test_train_small();
    test_json_rejections();
    test_load();
    test_shakespeare();
    return check_finish("test_bpe");
}
