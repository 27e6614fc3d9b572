/* Pronunciation dictionaries (src/data/g2p.c): both line formats, stress on the vowel, words
   merged, lines skipped, the vocabulary's JSON, the split by word, Levenshtein, WER and PER. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define CMUDICT "/usr/share/festival/dicts/cmu/cmudict-0.4.out"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

/* the phones of pronunciation r as "hh ax0 l ow1" */
static const char *pron_str(const mt_g2p_dict *d, int r, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = d->phone_start[r]; i < d->phone_start[r + 1]; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? " " : "",
                               d->vocab.phones[d->phones[i]]);
    return buf;
}

static int word_index(const mt_g2p_dict *d, const char *w) {
    for (int i = 0; i < d->n_words; i++)
        if (!strcmp(d->words[i], w)) return i;
    return -1;
}

static int ids_of(const mt_g2p_vocab *v, const char *phones, int *ids) {
    char buf[256];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", phones);
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) ids[n++] = mt_g2p_phone_id(v, t);
    return n;
}

static void test_parse(void) {
    char path[] = "/tmp/mt_test_g2p_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    write_file(path, "MNCL\n"
                     "(\"hello\" nil (((hh ax) 0) ((l ow) 1)))\n"
                     "(\"Hello\" n (((hh ax) 0) ((l ow) 1)))\n" /* same word, same phones */
                     "(\"abstract\" n (((ae b) 1) ((s t r ae k t) 0)))\n"
                     "(\"abstract\" v (((ae b) 0) ((s t r ae k t) 1)))\n"
                     "(\"blouin\" nil (((b l) 0) ((w iy n) 1)))\n"   /* a syllable with no vowel */
                     "(\"broken\" nil (((b r ow) 1) ((k ax n) 0))\n" /* a parenthesis short */
                     "\n"
                     "zulu z uw1 l uw0\n"
                     "zulu(2) z uw1 l uw2\n"
                     "bad line 3\n");
    mt_g2p_dict d;
    mt_err e;
    CHECK(mt_g2p_load(path, NULL, &d, &e) == MT_OK, "load: %s", e.msg);
    CHECK(d.n_words == 4, "words %d, want 4 (hello, abstract, blouin, zulu)", d.n_words);
    CHECK(d.n_skipped == 3 && !strcmp(d.skipped, "1, 7, 11"), "skipped %d: %s", d.n_skipped,
          d.skipped);
    char buf[256];
    int w = word_index(&d, "hello");
    CHECK(w >= 0 && d.pron_start[w + 1] - d.pron_start[w] == 1, "hello: one pronunciation");
    if (w >= 0)
        CHECK(!strcmp(pron_str(&d, d.pron_start[w], buf, sizeof buf), "hh ax0 l ow1"), "hello: %s",
              buf);
    w = word_index(&d, "abstract");
    CHECK(w >= 0 && d.pron_start[w + 1] - d.pron_start[w] == 2, "abstract: two pronunciations");
    if (w >= 0)
        CHECK(!strcmp(pron_str(&d, d.pron_start[w] + 1, buf, sizeof buf), "ae0 b s t r ae1 k t"),
              "abstract v: %s", buf);
    w = word_index(&d, "blouin");
    if (w >= 0)
        CHECK(!strcmp(pron_str(&d, d.pron_start[w], buf, sizeof buf), "b l w iy1 n"), "blouin: %s",
              buf);
    w = word_index(&d, "zulu");
    CHECK(w >= 0 && d.pron_start[w + 1] - d.pron_start[w] == 2, "zulu: two pronunciations");
    CHECK(d.vocab.n_letters == 14 && !memcmp(d.vocab.letters, "abcehilnorstuz", 14), "letters %.*s",
          d.vocab.n_letters, d.vocab.letters);
    const mt_g2p_vocab *v = &d.vocab;
    int ax0 = mt_g2p_phone_id(v, "ax0"), ow1 = mt_g2p_phone_id(v, "ow1");
    CHECK(ax0 >= MT_G2P_TOK_SPECIAL + v->n_letters && ow1 > ax0, "phone ids %d %d", ax0, ow1);
    CHECK(mt_g2p_phone_id(v, "ax") < 0, "ax without a digit is no phone here");
    CHECK(v->base[mt_g2p_phone_id(v, "uw1") - MT_G2P_TOK_SPECIAL - v->n_letters] ==
              v->base[mt_g2p_phone_id(v, "uw2") - MT_G2P_TOK_SPECIAL - v->n_letters],
          "uw1 and uw2 share a base");
    /* the vocabulary through JSON */
    char *json = mt_g2p_vocab_to_json(v);
    mt_g2p_vocab v2;
    CHECK(mt_g2p_vocab_from_json(json, &v2, &e) == MT_OK, "%s", e.msg);
    CHECK(v2.n_letters == v->n_letters && v2.n_phones == v->n_phones &&
              !memcmp(v2.phones, v->phones, sizeof v->phones) &&
              !memcmp(v2.base, v->base, sizeof v->base),
          "vocabulary JSON round trip");
    free(json);
    CHECK(mt_g2p_vocab_from_json("{\"letters\":\"ba\",\"phones\":[\"x\"]}", &v2, &e) == MT_EFORMAT,
          "unsorted letters refused");
    /* the same file read with a model's vocabulary, and one with a letter outside it */
    mt_g2p_dict d2;
    CHECK(mt_g2p_load(path, &d.vocab, &d2, &e) == MT_OK, "%s", e.msg);
    mt_g2p_free(&d2);
    write_file(path, "quux k w ah1 k s\n");
    CHECK(mt_g2p_load(path, &d.vocab, &d2, &e) == MT_EFORMAT && strstr(e.msg, "'q'"),
          "a letter outside the vocabulary: %s", e.msg);
    write_file(path, ";; a comment\n(\"x\" nil)\n");
    CHECK(mt_g2p_load(path, NULL, &d2, &e) == MT_EFORMAT && strstr(e.msg, "no dictionary entry"),
          "no entry: %s", e.msg);
    unlink(path);
    CHECK(mt_g2p_load(path, NULL, &d2, &e) == MT_EINVAL && strstr(e.msg, "festlex-cmu"),
          "a missing file names the package: %s", e.msg);

    /* scoring: abstract has two references; wrong stress counts only with stress */
    mt_g2p_tally t[2] = {{0}};
    int p[32], n;
    w = word_index(&d, "abstract");
    n = ids_of(v, "ae0 b s t r ae1 k t", p); /* the second reference exactly */
    mt_g2p_tally_add(&d, w, p, n, t);
    n = ids_of(v, "ae1 b s t r ae1 k t", p); /* 1 edit from either with stress, none without */
    mt_g2p_tally_add(&d, w, p, n, t);
    w = word_index(&d, "hello");
    n = ids_of(v, "hh ax0 l", p); /* a deletion */
    mt_g2p_tally_add(&d, w, p, n, t);
    CHECK(t[0].words == 3 && t[0].wrong == 2 && t[0].edits == 2 && t[0].ref_len == 8 + 8 + 4,
          "with stress: %g words %g wrong %g edits %g ref", t[0].words, t[0].wrong, t[0].edits,
          t[0].ref_len);
    CHECK(t[1].wrong == 1 && t[1].edits == 1 && t[1].ref_len == 20,
          "without stress: %g wrong %g "
          "edits %g ref",
          t[1].wrong, t[1].edits, t[1].ref_len);
    CHECK(mt_g2p_wer(&t[0]) > 0.666 && mt_g2p_wer(&t[0]) < 0.667 && mt_g2p_per(&t[0]) == 0.1,
          "WER %g PER %g", mt_g2p_wer(&t[0]), mt_g2p_per(&t[0]));
    mt_g2p_free(&d);
}

static void test_levenshtein(void) {
    int a[] = {1, 2, 3, 4}, b[] = {1, 3, 4, 5}, c[] = {9};
    CHECK(mt_levenshtein(a, 4, a, 4) == 0, "equal");
    CHECK(mt_levenshtein(a, 4, b, 4) == 2, "a delete and an insert: %d",
          mt_levenshtein(a, 4, b, 4));
    CHECK(mt_levenshtein(a, 0, b, 4) == 4 && mt_levenshtein(a, 4, b, 0) == 4, "empty");
    CHECK(mt_levenshtein(c, 1, a, 4) == 4, "one substitution and 3 inserts");
}

/* festival's CMUdict 0.4, when installed: 105,902 lines, the first ("MNCL") skipped. */
static void test_cmudict(void) {
    if (access(CMUDICT, R_OK) != 0) {
        printf("(no %s: festlex-cmu not installed, its checks skipped)\n", CMUDICT);
        return;
    }
    mt_g2p_dict d;
    mt_err e;
    CHECK(mt_g2p_load(CMUDICT, NULL, &d, &e) == MT_OK, "%s", e.msg);
    CHECK(d.n_lines == 105902 && d.n_skipped == 1 && !strcmp(d.skipped, "1"),
          "lines %d skipped %d (%s)", d.n_lines, d.n_skipped, d.skipped);
    CHECK(d.vocab.n_letters == 26, "letters %d: %.*s", d.vocab.n_letters, d.vocab.n_letters,
          d.vocab.letters);
    CHECK(d.vocab.n_phones == 55, "phones %d", d.vocab.n_phones);
    int *idx = malloc((size_t)d.n_words * sizeof *idx), n[3];
    mt_g2p_split(&d, idx, n);
    CHECK(n[0] + n[1] + n[2] == d.n_words && n[1] == n[2] && abs(n[1] - d.n_words / 20) <= 1,
          "split %d %d %d of %d", n[0], n[1], n[2], d.n_words);
    char *seen = calloc((size_t)d.n_words, 1);
    for (int i = 0; i < d.n_words; i++) seen[idx[i]]++;
    int once = 0;
    for (int i = 0; i < d.n_words; i++) once += seen[i] == 1;
    CHECK(once == d.n_words, "every word in exactly one part: %d of %d", once, d.n_words);
    int *idx2 = malloc((size_t)d.n_words * sizeof *idx2), n2[3];
    mt_g2p_split(&d, idx2, n2);
    CHECK(!memcmp(idx, idx2, (size_t)d.n_words * sizeof *idx), "the split is fixed");
    int w = word_index(&d, "abstract");
    CHECK(w >= 0 && d.pron_start[w + 1] - d.pron_start[w] == 2, "abstract: 2 pronunciations");
    free(seen), free(idx), free(idx2);
    mt_g2p_free(&d);
}

int main(void) {
    test_parse();
    test_levenshtein();
    test_cmudict();
    return check_finish("test_g2p");
}
