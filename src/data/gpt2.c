/* GPT-2's byte-level BPE (OpenAI's encoder.py and its files encoder.json, vocab.bpe): the file
 * reader and the byte order; the merges and the encoding are bpe.c's, the pre-tokenizer
 * gpt2_pretoken.c's.
 *
 * The files write each byte b as the character bytes_to_unicode gives it: b itself for the 188
 * printable ones ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF), U+0100 + n for the n-th of the
 * other 68 (ascending: U+0100 is 0x00, U+0120 'Ġ' is ' '). encoder.json maps each token's string
 * to its id; vocab.bpe ("#version: 0.2", then a line "left right" per merge) lists the merges by
 * rank. In GPT-2's files ids 0..255 are the bytes in bytes_to_unicode's order (the printable
 * first), id 256 + k is the string of merge k, and <|endoftext|> (50256) follows: the reader
 * checks all three, so a token's id and bytes are bpe.c's with that byte order.
 *
 * The pre-tokenizer is gpt2_pretoken.c's. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/io.h"
#include "data.h"

static bool printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b != 0xad); }

void mt_gpt2_byte_order(uint8_t id_byte[256]) {
    int k = 0;
    for (int b = 0; b < 256; b++)
        if (printable(b)) id_byte[k++] = (uint8_t)b;
    for (int b = 0; b < 256; b++)
        if (!printable(b)) id_byte[k++] = (uint8_t)b;
}

/* ---- the files ------------------------------------------------------------------------------- */

typedef struct {
    const char *str;
    int id;
} entry;

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const entry *)a)->str, ((const entry *)b)->str);
}

/* The id of token string str in the sorted table (n entries), or -1. */
static int find(const entry *table, int n, const char *str) {
    const entry key = {str, 0}, *e = bsearch(&key, table, (size_t)n, sizeof key, cmp_entry);
    return e ? e->id : -1;
}

mt_status mt_gpt2_add_special(mt_tokenizer *t, const char *const *text, int n, mt_err *err) {
    t->kind = MT_TOK_GPT2;
    if (t->n_vocab + n > MT_BPE_MAX_VOCAB) {
        int v = t->n_vocab;
        mt_bpe_clear(t);
        return mt_errorf(err, MT_EFORMAT,
                         "gpt2: %d tokens and %d special ones; ids are 16-bit (%d at most)", v, n,
                         MT_BPE_MAX_VOCAB);
    }
    size_t bytes = t->off[t->n_vocab];
    for (int k = 0; k < n; k++) {
        size_t len = strlen(text[k]);
        if (len < 1 || len > MT_TOK_MAX_BYTES) {
            int id = t->n_vocab + k;
            mt_bpe_clear(t);
            return mt_errorf(err, MT_EFORMAT, "gpt2: special token %d has %zu bytes; 1 to %d", id,
                             len, MT_TOK_MAX_BYTES);
        }
        bytes += len;
    }
    uint32_t *off = realloc(t->off, ((size_t)t->n_vocab + (size_t)n + 1) * sizeof *off);
    char *b = off ? realloc(t->bytes, bytes) : NULL;
    MT_ASSERT(off && b, "gpt2: out of memory");
    t->off = off;
    t->bytes = b;
    for (int k = 0; k < n; k++, t->n_vocab++) {
        size_t len = strlen(text[k]);
        memcpy(b + off[t->n_vocab], text[k], len);
        off[t->n_vocab + 1] = off[t->n_vocab] + (uint32_t)len;
    }
    return MT_OK;
}

/* encoder.json's id -> string (str[n], pointing into o); MT_EFORMAT for an id out of range or
   repeated. */
static mt_status read_encoder(const char *path, const cJSON *o, const char **str, mt_err *err) {
    int n_vocab = cJSON_GetArraySize(o); /* a walk of the list: once */
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        int id = d >= 0 && d < n_vocab && d == (int)d ? (int)d : -1;
        if (id < 0 || str[id])
            return mt_errorf(err, MT_EFORMAT,
                             "%s: \"%s\" has id %s; expected each of 0..%d once (GPT-2's "
                             "encoder.json: token -> id)",
                             path, v->string, id < 0 ? "not an integer in range" : "repeated",
                             n_vocab - 1);
        str[id] = v->string;
    }
    return MT_OK;
}

/* The table of str[n] sorted by string, each string once, ids 0..255 the bytes in GPT-2's order. */
static mt_status check_vocab(const char *path, const char *const *str, entry *table, int n,
                             mt_err *err) {
    for (int id = 0; id < n; id++) table[id] = (entry){str[id], id};
    qsort(table, (size_t)n, sizeof *table, cmp_entry);
    for (int k = 1; k < n; k++)
        if (strcmp(table[k - 1].str, table[k].str) == 0)
            return mt_errorf(err, MT_EFORMAT, "%s: ids %d and %d are both \"%s\"", path,
                             table[k - 1].id, table[k].id, table[k].str);
    uint8_t id_byte[256];
    mt_gpt2_byte_order(id_byte);
    for (int id = 0; id < 256; id++) {
        int b = id_byte[id], cp = printable(b) ? b : 256 + id - 188;
        char want[3] = {(char)(cp < 0x80 ? cp : 0xc0 | cp >> 6), (char)(0x80 | (cp & 0x3f)), 0};
        if (cp < 0x80) want[1] = 0;
        if (strcmp(str[id], want) != 0)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: id %d is \"%s\"; GPT-2's ids 0..255 are the bytes in "
                             "bytes_to_unicode's order: expected \"%s\" (byte 0x%02x)",
                             path, id, str[id], want, b);
    }
    return MT_OK;
}

/* Merge k, "left right" at p (cut in place; at names it, vocab the tokens' list in messages), as
   the ids of its two tokens, checked to be GPT-2's: id 256 + k is their joined string, both before
   it. */
static mt_status read_merge(const char *at, const char *vocab, char *p, const char *const *str,
                            const entry *table, int n, int k, uint16_t merge[2], mt_err *err) {
    char both[2 * MT_TOK_MAX_BYTES * 2 + 1];
    char *sp = strchr(p, ' ');
    if (!sp || sp == p || !sp[1] || strchr(sp + 1, ' '))
        return mt_errorf(err, MT_EFORMAT, "%s: \"%s\"; expected two tokens and one space between",
                         at, p);
    *sp = 0;
    const char *r = sp + 1;
    int a = find(table, n, p), b = find(table, n, r), id = 256 + k;
    if (a < 0 || b < 0)
        return mt_errorf(err, MT_EFORMAT, "%s: \"%s\" is not a token of %s", at, a < 0 ? p : r,
                         vocab);
    if (id >= n)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: merge %d, but %s has %d ids (256 bytes and a merge each)", at, k,
                         vocab, n);
    if (strlen(p) + strlen(r) >= sizeof both || a >= id || b >= id ||
        strcmp(str[id], strcat(strcpy(both, p), r)) != 0)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: merge %d joins \"%s\" (id %d) and \"%s\" (id %d), but %s's "
                         "id %d is \"%s\"; GPT-2's id 256 + k is merge k's string, made of "
                         "tokens before it",
                         at, k, p, a, r, b, vocab, id, str[id]);
    merge[0] = (uint16_t)a;
    merge[1] = (uint16_t)b;
    return MT_OK;
}

/* vocab.bpe's merges (text, modified: its lines cut) into merges[k] (room for n - 256); *n_merges
   of them. */
static mt_status read_merges(const char *path, char *text, const char *const *str,
                             const entry *table, int n, uint16_t (*merges)[2], int *n_merges,
                             mt_err *err) {
    int k = 0, line = 0;
    mt_status s = MT_OK;
    for (char *p = text, *eol; *p && s == MT_OK; p = eol) {
        line++;
        eol = p + strcspn(p, "\n");
        if (*eol) *eol++ = 0;
        if ((line == 1 && strncmp(p, "#version", 8) == 0) || !*p) continue;
        char at[4200];
        snprintf(at, sizeof at, "%s line %d", path, line);
        if ((s = read_merge(at, "encoder.json", p, str, table, n, k, merges[k], err)) == MT_OK) k++;
    }
    *n_merges = k;
    return s;
}

/* The tokenizer of merges (taken over) and str's ids past them as special tokens. */
static mt_status build(const char *path, const char *const *str, int n, uint16_t (*merges)[2],
                       int n_merges, mt_tokenizer *t, mt_err *err) {
    uint8_t id_byte[256];
    mt_gpt2_byte_order(id_byte);
    mt_err e;
    mt_status s = mt_bpe_from_merges(t, id_byte, merges, n_merges, &e);
    if (s != MT_OK) return mt_errorf(err, s, "%s: %s", path, e.msg);
    return mt_gpt2_add_special(t, str + 256 + n_merges, n - 256 - n_merges, err);
}

mt_status mt_gpt2_from_vocab(const char *where, const char *vocab, const char *const *str, int n,
                             char **merges, int n_merges, mt_tokenizer *t, mt_err *err) {
    memset(t, 0, sizeof *t);
    if (n < 257 || n > MT_BPE_MAX_VOCAB || n_merges < 0 || n_merges > n - 256)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: %d tokens and %d merges; expected 257 to %d tokens, 256 bytes and "
                         "a merge each, then special tokens",
                         where, n, n_merges, MT_BPE_MAX_VOCAB);
    entry *table = malloc((size_t)n * sizeof *table);
    uint16_t(*m)[2] = malloc(((size_t)n_merges + 1) * sizeof *m);
    MT_ASSERT(table && m, "gpt2: out of memory");
    mt_status s = check_vocab(where, str, table, n, err);
    for (int k = 0; s == MT_OK && k < n_merges; k++) {
        char at[4200];
        snprintf(at, sizeof at, "%s merge %d", where, k);
        s = read_merge(at, vocab, merges[k], str, table, n, k, m[k], err);
    }
    free(table);
    if (s == MT_OK) return build(where, str, n, m, n_merges, t, err);
    free(m);
    return s;
}

/* MT_EFORMAT when path (not encoder.json) is a file, not a directory: llm.c's gpt2_tokenizer.bin
   is named as such (it holds the tokens' bytes but no merges: it cannot encode). */
static mt_status not_a_file(const char *path, mt_err *err) {
    struct stat st;
    if (stat(path, &st) != 0 || S_ISDIR(st.st_mode)) return MT_OK;
    FILE *f = fopen(path, "rb");
    int32_t magic = 0;
    bool llmc = f && fread(&magic, 4, 1, f) == 1 && magic == 20240328;
    if (f) fclose(f);
    return mt_errorf(err, MT_EFORMAT,
                     "--tokenizer-file %s: %s; --tokenizer gpt2 takes the directory of GPT-2's "
                     "encoder.json and vocab.bpe (or encoder.json's path)",
                     path,
                     llmc ? "llm.c's gpt2_tokenizer.bin (magic 20240328) holds each token's bytes "
                            "but not GPT-2's merges, so it cannot encode text"
                          : "a file, not a directory");
}

/* ---- Hugging Face's tokenizer.json ----------------------------------------------------------- */

/* What tokenizer.json's o is, when it is not GPT-2's BPE (model BPE, pre_tokenizer ByteLevel, no
   normalizer), into why; NULL when it is. */
static const char *not_gpt2(const cJSON *o, char *why, size_t len) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model"),
                *pre = cJSON_GetObjectItemCaseSensitive(o, "pre_tokenizer"),
                *norm = cJSON_GetObjectItemCaseSensitive(o, "normalizer");
    const char *mt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "type")),
               *pt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pre, "type")),
               *nt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(norm, "type"));
    if (mt && strcmp(mt, "BPE") == 0 && pt && strcmp(pt, "ByteLevel") == 0 &&
        (!norm || cJSON_IsNull(norm)))
        return NULL;
    snprintf(why, len, "model.type %s, pre_tokenizer %s, normalizer %s", mt ? mt : "absent",
             pt ? pt : "absent",
             nt                            ? nt
             : norm && !cJSON_IsNull(norm) ? "?"
                                           : "none");
    return why;
}

/* model.merges[k], "a b" or ["a", "b"] (newer files), as a string "a b" of its own; NULL:
   neither. */
static char *merge_text(const cJSON *m) {
    const char *l = cJSON_GetStringValue(cJSON_GetArrayItem(m, 0)),
               *r = cJSON_GetStringValue(cJSON_GetArrayItem(m, 1));
    if (cJSON_IsString(m)) return strdup(m->valuestring);
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2 || !l || !r) return NULL;
    char *s = malloc(strlen(l) + strlen(r) + 2);
    if (s) sprintf(s, "%s %s", l, r);
    return s;
}

/* added_tokens: each one's id in the vocabulary (str[n]) with its content. */
static mt_status check_added(const char *path, const cJSON *a, const char *const *str, int n,
                             mt_err *err) {
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(v, "id");
        const char *c = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "content"));
        double d = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (!c || !(d >= 0 && d < n && d == (int)d) || strcmp(str[(int)d], c) != 0)
            return mt_errorf(err, MT_EFORMAT,
                             "%s: added token '%s' of id %g: expected an id of model.vocab (0..%d) "
                             "of that token",
                             path, c ? c : "?", d, n - 1);
    }
    return MT_OK;
}

/* Hugging Face's tokenizer.json of GPT-2's BPE (model.vocab token -> id, model.merges by rank,
   added_tokens among the vocabulary's) into t, checked as GPT-2's files are. */
static mt_status read_hf(const char *path, mt_tokenizer *t, mt_err *err) {
    char *text = NULL, why[200];
    mt_status s = mt_file_read("--tokenizer-file", path, &text, &(size_t){0}, err);
    if (s != MT_OK) return s;
    cJSON *o = cJSON_Parse(text);
    free(text);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model"),
                *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab"),
                *ms = cJSON_GetObjectItemCaseSensitive(m, "merges");
    int n = cJSON_GetArraySize(vocab), n_merges = cJSON_GetArraySize(ms);
    if (!cJSON_IsObject(o))
        s = mt_errorf(err, MT_EFORMAT, "%s: not JSON; expected Hugging Face's tokenizer.json",
                      path);
    else if (not_gpt2(o, why, sizeof why))
        s = mt_errorf(err, MT_EINVAL,
                      "%s: %s; --tokenizer gpt2 reads GPT-2's byte-level BPE (model.type BPE, "
                      "pre_tokenizer ByteLevel, no normalizer); a Llama's (byte_fallback true): "
                      "--tokenizer sp",
                      path, why);
    else if (!cJSON_IsObject(vocab) || !cJSON_IsArray(ms) || n < 257 || n > MT_BPE_MAX_VOCAB)
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: expected model.vocab, an object of 257 to %d token -> id, and "
                      "model.merges, an array",
                      path, MT_BPE_MAX_VOCAB);
    const char **str = s == MT_OK ? calloc((size_t)n, sizeof *str) : NULL;
    char **merges = s == MT_OK ? calloc((size_t)n_merges + 1, sizeof *merges) : NULL;
    MT_ASSERT(s != MT_OK || (str && merges), "gpt2: out of memory");
    if (s == MT_OK) s = read_encoder(path, vocab, str, err);
    for (int k = 0; s == MT_OK && k < n_merges; k++)
        if (!(merges[k] = merge_text(cJSON_GetArrayItem(ms, k))))
            s = mt_errorf(err, MT_EFORMAT,
                          "%s: model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]", path, k);
    if (s == MT_OK)
        s = check_added(path, cJSON_GetObjectItemCaseSensitive(o, "added_tokens"), str, n, err);
    if (s == MT_OK) s = mt_gpt2_from_vocab(path, "model.vocab", str, n, merges, n_merges, t, err);
    for (int k = 0; merges && k < n_merges; k++) free(merges[k]);
    free(merges);
    free(str);
    cJSON_Delete(o);
    return s;
}

/* Whether path is Hugging Face's tokenizer.json: named so, or a directory holding one and no
   encoder.json; into hf_path. */
static bool is_hf(const char *path, char *hf_path, size_t len) {
    size_t n = strlen(path);
    char enc[4096];
    snprintf(enc, sizeof enc, "%s/encoder.json", path);
    snprintf(hf_path, len, "%s/tokenizer.json", path);
    if (n >= 14 && strcmp(path + n - 14, "tokenizer.json") == 0) {
        snprintf(hf_path, len, "%s", path);
        return true;
    }
    return access(enc, F_OK) != 0 && access(hf_path, F_OK) == 0;
}

mt_status mt_gpt2_read(const char *path, mt_tokenizer *t, mt_err *err) {
    memset(t, 0, sizeof *t);
    char hf_path[4096];
    if (is_hf(path, hf_path, sizeof hf_path)) return read_hf(hf_path, t, err);
    size_t plen = strlen(path);
    bool json = plen >= 5 && strcmp(path + plen - 5, ".json") == 0;
    if (!json && not_a_file(path, err) != MT_OK) return MT_EFORMAT;
    const char *slash = strrchr(path, '/');
    int dir = json ? (slash ? (int)(slash - path) : 0) : (int)plen;
    char enc_path[4096], bpe_path[4096];
    snprintf(enc_path, sizeof enc_path, json ? "%s" : "%s/encoder.json", path);
    snprintf(bpe_path, sizeof bpe_path, "%.*s%svocab.bpe", dir, path, dir || slash ? "/" : "");
    char *enc = NULL, *bpe = NULL;
    cJSON *o = NULL;
    const char **str = NULL;
    entry *table = NULL;
    uint16_t(*merges)[2] = NULL;
    int n = 0, n_merges = 0;
    mt_status s = MT_OK;
    for (int k = 0; k < 2 && s == MT_OK; k++) /* a missing file: a wrong flag, not an I/O error */
        if (access(k ? bpe_path : enc_path, F_OK) != 0)
            s = mt_errorf(err, MT_EINVAL,
                          "--tokenizer-file %s: %s is missing; --tokenizer gpt2 takes the "
                          "directory of GPT-2's encoder.json and vocab.bpe (or encoder.json's "
                          "path)",
                          path, k ? bpe_path : enc_path);
    if (s == MT_OK) s = mt_file_read("--tokenizer-file", enc_path, &enc, &(size_t){0}, err);
    if (s == MT_OK) s = mt_file_read("--tokenizer-file", bpe_path, &bpe, &(size_t){0}, err);
    if (s == MT_OK && (!(o = cJSON_Parse(enc)) || !cJSON_IsObject(o) ||
                       (n = cJSON_GetArraySize(o)) < 257 || n > MT_BPE_MAX_VOCAB))
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: %s; expected GPT-2's encoder.json, an object of 257 to %d token -> id",
                      enc_path, !o ? "not JSON" : "not an object of that size", MT_BPE_MAX_VOCAB);
    if (s == MT_OK) {
        str = calloc((size_t)n, sizeof *str);
        table = malloc((size_t)n * sizeof *table);
        merges = malloc((size_t)(n - 256) * sizeof *merges);
        MT_ASSERT(str && table && merges, "gpt2: out of memory");
        s = read_encoder(enc_path, o, str, err);
    }
    if (s == MT_OK) s = check_vocab(enc_path, str, table, n, err);
    if (s == MT_OK) s = read_merges(bpe_path, bpe, str, table, n, merges, &n_merges, err);
    if (s == MT_OK) {
        s = build(bpe_path, str, n, merges, n_merges, t, err);
        merges = NULL; /* taken over */
    }
    free(merges);
    free(table);
    free(str);
    cJSON_Delete(o);
    free(enc);
    free(bpe);
    return s;
}
