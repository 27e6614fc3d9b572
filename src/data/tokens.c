/* Token datasets: text and token files, the train/validation split, the batch sampler. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"

#define TOKFILE_HEADER 28

/* fopen succeeds on a directory, whose ftell then says LONG_MAX: MT_EINVAL for anything but a
   regular file (f is closed then). */
static mt_status check_regular(FILE *f, const char *path, mt_err *err) {
    struct stat sb;
    bool known = fstat(fileno(f), &sb) == 0;
    if (known && S_ISREG(sb.st_mode)) return MT_OK;
    fclose(f);
    return mt_errorf(err, MT_EINVAL, "%s is %s: expected a text file or a token file FILE.bin",
                     path, known && S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
}

/* Reads a whole file into a malloc'd buffer (NUL-terminated, *len without the NUL). */
static mt_status read_file(const char *path, char **buf, size_t *len, mt_err *err) {
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return mt_errorf(err, MT_EIO, "%s: cannot open: %s", path, strerror(errno));
    mt_status s = check_regular(f, path, err);
    if (s != MT_OK) return s;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        s = mt_errorf(err, MT_EIO, "%s: cannot determine its size", path);
    } else if (!(*buf = malloc((size_t)size + 1))) {
        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %ld bytes", path, size);
    } else if (fread(*buf, 1, (size_t)size, f) != (size_t)size) {
        s = mt_errorf(err, MT_EIO, "%s: cannot read: %s", path, strerror(errno));
    } else {
        (*buf)[size] = 0;
        *len = (size_t)size;
    }
    fclose(f);
    if (s != MT_OK) {
        free(*buf);
        *buf = NULL;
    }
    return s;
}

static void put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

mt_status mt_tokfile_write(const char *path, const mt_tokenizer *tok, const mt_tokens *d,
                           mt_err *err) {
    char *json = mt_tok_to_json(tok);
    size_t jlen = strlen(json);
    unsigned char h[TOKFILE_HEADER];
    memcpy(h, MT_TOKFILE_MAGIC, 8);
    put_le(h + 8, MT_TOKFILE_VERSION, 4);
    put_le(h + 12, (uint64_t)tok->n_vocab, 4);
    put_le(h + 16, d->n, 8);
    put_le(h + 24, jlen, 4);
    mt_status s = MT_OK;
    FILE *f = fopen(path, "wb");
    if (!f) {
        s = mt_errorf(err, MT_EIO, "%s: cannot create: %s", path, strerror(errno));
    } else {
        /* the tokens are written as the host holds them: mt assumes a little-endian host, as
           its safetensors files do */
        bool ok = fwrite(h, 1, sizeof h, f) == sizeof h && fwrite(json, 1, jlen, f) == jlen &&
                  fwrite(d->tok, sizeof *d->tok, d->n, f) == d->n;
        if (fclose(f) != 0 || !ok)
            s = mt_errorf(err, MT_EIO, "%s: cannot write: %s", path, strerror(errno));
    }
    free(json);
    return s;
}

mt_status mt_tokfile_read(const char *path, mt_tokenizer *tok, mt_tokens *d, mt_err *err) {
    memset(d, 0, sizeof *d);
    memset(tok, 0, sizeof *tok);
    FILE *f = fopen(path, "rb");
    if (!f) return mt_errorf(err, MT_EIO, "%s: cannot open: %s", path, strerror(errno));
    mt_status s = check_regular(f, path, err);
    if (s != MT_OK) return s;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    unsigned char h[TOKFILE_HEADER];
    char *json = NULL;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        s = mt_errorf(err, MT_EIO, "%s: cannot determine its size", path);
        goto out;
    }
    if (size < TOKFILE_HEADER || fread(h, 1, sizeof h, f) != sizeof h) {
        s = mt_errorf(err, MT_EFORMAT, "%s: truncated: %ld bytes, a token file header has %d", path,
                      size, TOKFILE_HEADER);
        goto out;
    }
    if (memcmp(h, MT_TOKFILE_MAGIC, 8) != 0) {
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: not an mt token file (it does not start with \"%s\"); make one with "
                      "./train --data TEXT --prepare FILE.bin",
                      path, MT_TOKFILE_MAGIC);
        goto out;
    }
    uint64_t version = get_le(h + 8, 4), vocab = get_le(h + 12, 4), count = get_le(h + 16, 8),
             jlen = get_le(h + 24, 4);
    if (version != MT_TOKFILE_VERSION) {
        s = mt_errorf(err, MT_EFORMAT, "%s: token file version %llu; this mt reads version %u",
                      path, (unsigned long long)version, MT_TOKFILE_VERSION);
        goto out;
    }
    if (vocab < 1 || vocab > 65536) {
        s = mt_errorf(err, MT_EFORMAT, "%s: vocabulary size %llu outside 1..65536", path,
                      (unsigned long long)vocab);
        goto out;
    }
    uint64_t room = (uint64_t)size - TOKFILE_HEADER;
    if (jlen > room || count > (room - jlen) / 2 || (room - jlen) != 2 * count) {
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: the header announces a %llu-byte tokenizer and %llu tokens (%llu bytes "
                      "in all) but the file holds %llu bytes after the header: %s",
                      path, (unsigned long long)jlen, (unsigned long long)count,
                      (unsigned long long)(jlen + 2 * count), (unsigned long long)room,
                      jlen + 2 * count > room ? "truncated" : "trailing bytes");
        goto out;
    }
    if (!(json = malloc(jlen + 1)) || fread(json, 1, jlen, f) != jlen) {
        s = mt_errorf(err, MT_EIO, "%s: cannot read the tokenizer", path);
        goto out;
    }
    json[jlen] = 0;
    mt_err terr;
    if (mt_tok_from_json(json, tok, &terr) != MT_OK) {
        s = mt_errorf(err, MT_EFORMAT, "%s: %s", path, terr.msg);
        goto out;
    }
    if ((uint64_t)tok->n_vocab != vocab) {
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: the header says %llu tokens in the vocabulary, its tokenizer has %d",
                      path, (unsigned long long)vocab, tok->n_vocab);
        goto out;
    }
    d->n = (size_t)count;
    d->n_vocab = (int)vocab;
    if (!(d->tok = malloc((d->n ? d->n : 1) * sizeof *d->tok))) {
        s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %zu tokens", path, d->n);
        goto out;
    }
    if (fread(d->tok, sizeof *d->tok, d->n, f) != d->n) {
        s = mt_errorf(err, MT_EIO, "%s: cannot read the tokens", path);
        goto out;
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->tok[i] >= vocab) {
            s = mt_errorf(err, MT_EFORMAT, "%s: token %zu is %u, outside the vocabulary of %llu",
                          path, i, d->tok[i], (unsigned long long)vocab);
            goto out;
        }
out:
    free(json);
    fclose(f);
    if (s != MT_OK) {
        mt_tokens_free(d);
        mt_tok_free(tok);
    }
    return s;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The text's validation part starts at the returned byte: len - floor(len * val_fraction), for
   char moved on to the next character start. */
static size_t text_cut(const char *text, size_t len, const mt_text_cfg *c) {
    size_t at = len - (size_t)((double)len * c->val_fraction);
    if (c->kind == MT_TOK_CHAR)
        while (at < len && ((unsigned char)text[at] & 0xc0) == 0x80) at++;
    return at;
}

mt_status mt_data_load(const char *path, const mt_text_cfg *c, mt_tokenizer *tok, mt_tokens *d,
                       mt_err *err) {
    memset(d, 0, sizeof *d);
    if (!(c->val_fraction >= 0 && c->val_fraction < 1))
        return mt_errorf(err, MT_EINVAL, "--val-fraction %g: expected a fraction in [0, 1)",
                         c->val_fraction);
    if (ends_with(path, ".bin")) {
        mt_status s = mt_tokfile_read(path, tok, d, err);
        if (s == MT_OK) d->n_val = (size_t)((double)d->n * c->val_fraction);
        return s;
    }
    char *text;
    size_t len = 0;
    mt_status s = read_file(path, &text, &len, err);
    if (s != MT_OK) return s;
    const char *nul = memchr(text, 0, len);
    if (len == 0 || nul) {
        s = len == 0 ? mt_errorf(err, MT_EINVAL,
                                 "%s is empty: expected a text file or a token "
                                 "file FILE.bin",
                                 path)
                     : mt_errorf(err, MT_EINVAL,
                                 "%s holds a NUL byte at offset %zu: it looks "
                                 "binary, not text%s; make a token file with ./train --data TEXT "
                                 "--prepare FILE.bin",
                                 path, (size_t)(nul - text),
                                 strncmp(text, MT_TOKFILE_MAGIC, 8) == 0
                                     ? " (it is an mt token file: name it FILE.bin)"
                                     : "");
        free(text);
        return s;
    }
    size_t cut = text_cut(text, len, c), n_train = 0;
    mt_err e;
    if (c->kind == MT_TOK_BYTE) mt_tok_init_byte(tok);
    else if (c->kind == MT_TOK_CHAR) s = mt_tok_build_char(tok, text, len, &e);
    else s = mt_tok_build_bpe(tok, text, cut, c->vocab_size, &e); /* the training part only */
    if (s != MT_OK) {
        free(text);
        return mt_errorf(err, s, "%s: %s", path, e.msg);
    }
    d->tok = malloc((len ? len : 1) * sizeof *d->tok);
    d->n_vocab = tok->n_vocab;
    if (!d->tok) s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %zu tokens", path, len);
    else if ((s = mt_tok_encode(tok, text, cut, d->tok, &n_train, &e)) != MT_OK ||
             (s = mt_tok_encode(tok, text + cut, len - cut, d->tok + n_train, &d->n_val, &e)) !=
                 MT_OK)
        s = mt_errorf(err, s, "%s: %s", path, e.msg);
    d->n = n_train + d->n_val;
    free(text);
    if (s != MT_OK) {
        mt_tokens_free(d);
        mt_tok_free(tok);
    }
    return s;
}

void mt_tokens_free(mt_tokens *d) {
    free(d->tok);
    memset(d, 0, sizeof *d);
}

mt_status mt_tokens_split(const mt_tokens *all, int n_ctx, mt_tokens *train, mt_tokens *val,
                          mt_err *err) {
    MT_ASSERT(all->n_val <= all->n, "split: %zu validation tokens of %zu", all->n_val, all->n);
    size_t n_val = all->n_val;
    *train = (mt_tokens){.tok = all->tok, .n = all->n - n_val, .n_vocab = all->n_vocab};
    *val = (mt_tokens){.tok = all->tok + train->n, .n = n_val, .n_vocab = all->n_vocab};
    size_t need = (size_t)n_ctx + 1;
    if (train->n < need)
        return mt_errorf(err, MT_EINVAL,
                         "the training split has %zu tokens; one window of n_ctx + 1 = %zu needs "
                         "more data or a smaller --n-ctx",
                         train->n, need);
    if (n_val > 0 && n_val < need)
        return mt_errorf(err, MT_EINVAL,
                         "the validation split has %zu tokens (the last --val-fraction of %zu); a "
                         "window of n_ctx + 1 = %zu needs a larger --val-fraction (or 0: no "
                         "validation)",
                         n_val, all->n, need);
    return MT_OK;
}

void mt_sampler_init(mt_sampler *s, uint64_t seed) { mt_rng_seed(&s->rng, seed); }

void mt_sampler_next(mt_sampler *s, const mt_tokens *d, int B, int T, int *x, int *y) {
    MT_ASSERT(d->n >= (size_t)T + 1, "sampler: %zu tokens, a window needs %d", d->n, T + 1);
    uint64_t starts = d->n - (size_t)T; /* windows [i, i + T] for i in [0, n - T - 1] */
    for (int b = 0; b < B; b++) {
        /* modulo bias: starts / 2^64, negligible below 2^40 tokens */
        const uint16_t *w = d->tok + mt_rng_u64(&s->rng) % starts;
        for (int t = 0; t < T; t++) {
            x[b * T + t] = w[t];
            y[b * T + t] = w[t + 1];
        }
    }
}
