/* Token datasets: texts, the writers of token files and llm.c shards, the train/validation split
   and the batch sampler (shards.c reads token files and shards). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../io/io.h"
#include "data.h"

#define TOKFILE_HEADER 28

static void put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Ids [lo, hi) of d as uint16 to f (the host is little-endian, as mt's safetensors assume). */
static bool write_ids(FILE *f, const mt_tokens *d, size_t lo, size_t hi) {
    uint16_t buf[4096];
    size_t at = 0; /* the first id of span k */
    for (int k = 0; k < d->n_span && lo < hi; at += d->span[k++].n) {
        const mt_token_span *sp = &d->span[k];
        for (size_t i = lo - at; lo < hi && i < sp->n;) {
            size_t m = 0;
            for (; m < 4096 && lo < hi && i < sp->n; m++, lo++, i++)
                buf[m] = (uint16_t)mt_span_id(sp, d->width, i);
            if (fwrite(buf, sizeof *buf, m, f) != m) return false;
        }
    }
    return true;
}

mt_status mt_tokfile_write(FILE *f, const char *name, const mt_tokenizer *tok, const mt_tokens *d,
                           mt_err *err) {
    char *json = mt_tok_to_json(tok);
    size_t jlen = strlen(json);
    unsigned char h[TOKFILE_HEADER];
    memcpy(h, MT_TOKFILE_MAGIC, 8);
    put_le(h + 8, MT_TOKFILE_VERSION, 4);
    put_le(h + 12, (uint64_t)tok->n_vocab, 4);
    put_le(h + 16, d->n, 8);
    put_le(h + 24, jlen, 4);
    bool ok = fwrite(h, 1, sizeof h, f) == sizeof h && fwrite(json, 1, jlen, f) == jlen &&
              write_ids(f, d, 0, d->n);
    free(json);
    return ok ? MT_OK : mt_errorf(err, MT_EIO, "%s: cannot write: %s", name, strerror(errno));
}

mt_status mt_llmc_write(FILE *f, const char *name, const mt_tokens *d, size_t lo, size_t hi,
                        mt_err *err) {
    MT_ASSERT(lo <= hi && hi <= d->n && hi - lo <= INT32_MAX, "llm.c shard of [%zu, %zu)", lo, hi);
    unsigned char h[MT_LLMC_HEADER] = {0};
    put_le(h, MT_LLMC_MAGIC, 4);
    put_le(h + 4, 1, 4); /* version 1: uint16 ids */
    put_le(h + 8, hi - lo, 4);
    bool ok = fwrite(h, 1, sizeof h, f) == sizeof h && write_ids(f, d, lo, hi);
    return ok ? MT_OK : mt_errorf(err, MT_EIO, "%s: cannot write: %s", name, strerror(errno));
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

bool mt_data_is_tokens(const char *path) { return ends_with(path, ".bin") || mt_data_is_set(path); }

/* The tokenizer given whole (c->tokenizer_json, of --tokenizer-file), which must be of c->kind. */
static mt_status given_tokenizer(const mt_text_cfg *c, mt_tokenizer *tok, mt_err *err) {
    mt_err e;
    if (mt_tok_from_json(c->tokenizer_json, tok, &e) != MT_OK)
        return mt_errorf(err, MT_EFORMAT, "--tokenizer-file %s: %s", c->tokenizer_file, e.msg);
    if (tok->kind == c->kind) return MT_OK;
    mt_errorf(err, MT_EINVAL, "--tokenizer-file %s holds a %s tokenizer: --tokenizer %s",
              c->tokenizer_file, mt_enum_name(&MT_TOKENIZERS, tok->kind),
              mt_enum_name(&MT_TOKENIZERS, tok->kind));
    mt_tok_free(tok);
    return MT_EINVAL;
}

mt_status mt_tok_for_text(const mt_text_cfg *c, const char *text, size_t len, size_t learn,
                          const char *path, mt_tokenizer *tok, mt_err *err) {
    if (c->tokenizer_json) return given_tokenizer(c, tok, err);
    mt_err e;
    mt_status s = MT_OK;
    if (c->kind == MT_TOK_BYTE) mt_tok_init_byte(tok);
    else if (c->kind == MT_TOK_CHAR) s = mt_tok_build_char(tok, text, len, &e);
    else if (c->kind == MT_TOK_SP) s = mt_sp_read_llama2c(c->tokenizer_file, tok, &e);
    else if (c->kind == MT_TOK_GPT2) s = mt_gpt2_read(c->tokenizer_file, tok, &e);
    else s = mt_tok_build_bpe(tok, text, learn, c->vocab_size, &e); /* the training part only */
    if (s == MT_OK) return MT_OK;
    bool names = c->kind == MT_TOK_SP || c->kind == MT_TOK_GPT2; /* names its file */
    return mt_errorf(err, s, "%s%s%s", names ? "" : path, names ? "" : ": ", e.msg);
}

/* A part of the text, one document, as ids (room for len + 3): mt_tok_encode's; an sp
   tokenizer's as mt_sp_encode_doc gives them. */
static mt_status encode_doc(const mt_tokenizer *tok, const char *text, size_t len, uint16_t *ids,
                            size_t *n, mt_err *err) {
    if (tok->kind != MT_TOK_SP) return mt_tok_encode(tok, text, len, ids, n, err);
    mt_sp_encode_doc(tok, text, len, ids, n);
    return MT_OK;
}

mt_status mt_data_load(const char *path, const mt_text_cfg *c, mt_tokenizer *tok, mt_tokens *d,
                       mt_err *err) {
    memset(d, 0, sizeof *d);
    if (!(c->val_fraction >= 0 && c->val_fraction < 1))
        return mt_errorf(err, MT_EINVAL, "--val-fraction %g: expected a fraction in [0, 1)",
                         c->val_fraction);
    if (mt_data_is_tokens(path)) return mt_shards_load(path, c, tok, d, err);
    if (c->kind == MT_TOK_IDS)
        return mt_errorf(err, MT_EINVAL,
                         "--tokenizer ids: %s is a text; ids are token shards' (a text needs "
                         "byte, char, bpe, sp or gpt2)",
                         path);
    if ((c->kind == MT_TOK_SP || c->kind == MT_TOK_GPT2) &&
        !(c->tokenizer_file && c->tokenizer_file[0]))
        return mt_errorf(err, MT_EINVAL, "--tokenizer %s needs --tokenizer-file (%s)",
                         mt_enum_name(&MT_TOKENIZERS, c->kind),
                         c->kind == MT_TOK_SP
                             ? "llama2.c's tokenizer.bin or a Llama's tokenizer.json"
                             : "a directory of GPT-2's encoder.json and vocab.bpe");
    char *text;
    size_t len = 0;
    mt_status s = mt_file_read("--data", path, &text, &len, err);
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
    if ((s = mt_tok_for_text(c, text, len, cut, path, tok, err)) != MT_OK) {
        free(text);
        return s;
    }
    /* each part: a dummy prefix, BOS and EOS at most */
    uint16_t *ids = malloc((len + 6) * sizeof *ids);
    size_t n_val = 0;
    if (!ids) s = mt_errorf(err, MT_ENOMEM, "%s: out of memory for %zu tokens", path, len);
    else if ((s = encode_doc(tok, text, cut, ids, &n_train, &e)) != MT_OK ||
             (s = encode_doc(tok, text + cut, len - cut, ids + n_train, &n_val, &e)) != MT_OK)
        s = mt_errorf(err, s, "%s: %s", path, e.msg);
    free(text);
    if (s == MT_OK) s = mt_tokens_wrap(d, ids, n_train + n_val, tok->n_vocab, n_val, err);
    if (s == MT_OK && !(d->store = calloc(1, sizeof *d->store)))
        s = mt_errorf(err, MT_ENOMEM, "out of memory");
    if (s == MT_OK) d->store->buf = ids;
    else free(ids);
    if (s != MT_OK) {
        mt_tokens_free(d);
        mt_tok_free(tok);
    }
    return s;
}

mt_status mt_tokens_wrap(mt_tokens *d, const uint16_t *ids, size_t n, int n_vocab, size_t n_val,
                         mt_err *err) {
    *d = (mt_tokens){.n_span = 1, .width = 2, .n = n, .n_vocab = n_vocab, .n_val = n_val};
    if (!(d->span = malloc(sizeof *d->span))) return mt_errorf(err, MT_ENOMEM, "out of memory");
    d->span[0] = (mt_token_span){.ids = (const unsigned char *)ids, .n = n, .path = "(memory)"};
    return MT_OK;
}

/* v: the ids [lo, hi) of all, a view (its own span array) ready for windows of T + 1. */
static mt_status view(const mt_tokens *all, size_t lo, size_t hi, int T, mt_tokens *v,
                      mt_err *err) {
    *v = (mt_tokens){.width = all->width, .n = hi - lo, .n_vocab = all->n_vocab, .T = T};
    if (!(v->span = malloc(((size_t)all->n_span + 1) * sizeof *v->span)) ||
        !(v->win = malloc(((size_t)all->n_span + 1) * sizeof *v->win)))
        return mt_errorf(err, MT_ENOMEM, "out of memory");
    v->win[0] = 0;
    size_t at = 0; /* the first id of span k */
    for (int k = 0; k < all->n_span && at < hi; at += all->span[k++].n) {
        mt_token_span sp = all->span[k]; /* its ids [a, b) are in [lo, hi) */
        size_t a = lo > at ? lo - at : 0, b = hi < at + sp.n ? hi - at : sp.n;
        if (a >= b) continue;
        sp.ids += a * (size_t)all->width, sp.offset += a * (size_t)all->width, sp.n = b - a;
        v->span[v->n_span] = sp;
        v->win[v->n_span + 1] = v->win[v->n_span] + (sp.n > (size_t)T ? sp.n - (size_t)T : 0);
        v->n_span++;
    }
    return MT_OK;
}

/* The longest span of d. */
static size_t longest(const mt_tokens *d) {
    size_t m = 0;
    for (int k = 0; k < d->n_span; k++) m = d->span[k].n > m ? d->span[k].n : m;
    return m;
}

mt_status mt_tokens_split(const mt_tokens *all, int n_ctx, mt_tokens *train, mt_tokens *val,
                          mt_err *err) {
    MT_ASSERT(all->n_val <= all->n, "split: %zu validation tokens of %zu", all->n_val, all->n);
    size_t n_val = all->n_val, n_train = all->n - n_val, need = (size_t)n_ctx + 1;
    memset(val, 0, sizeof *val);
    mt_status s = view(all, 0, n_train, n_ctx, train, err);
    if (s == MT_OK) s = view(all, n_train, all->n, n_ctx, val, err);
    if (s != MT_OK) return s;
    if (longest(train) < need)
        return mt_errorf(err, MT_EINVAL,
                         "the training split has %zu tokens%s; one window of n_ctx + 1 = %zu "
                         "needs more data or a smaller --n-ctx",
                         n_train, train->n_span > 1 ? " in shards shorter than a window" : "",
                         need);
    if (n_val > 0 && longest(val) < need && all->val_files)
        return mt_errorf(err, MT_EINVAL,
                         "the validation split, the files named *val*, has no file of a window of "
                         "n_ctx + 1 = %zu tokens (%zu tokens in all): a smaller --n-ctx or longer "
                         "val files",
                         need, n_val);
    if (n_val > 0 && longest(val) < need)
        return mt_errorf(err, MT_EINVAL,
                         "the validation split has %zu tokens (the last --val-fraction of %zu); a "
                         "window of n_ctx + 1 = %zu needs a larger --val-fraction (or 0: no "
                         "validation)",
                         n_val, all->n, need);
    return MT_OK;
}

void mt_sampler_init(mt_sampler *s, uint64_t seed) { mt_rng_seed(&s->rng, seed); }

/* The span holding window u of d (win[k] <= u < win[k + 1]). */
static int span_of(const mt_tokens *d, uint64_t u) {
    int lo = 0, hi = d->n_span - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->win[mid] <= u) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Unmaps the pages of ids [i, i + n) of a mapped span from this process (MADV_DONTNEED: a later
   read maps them again from the page cache). A fault maps a large folio of the page cache whole,
   so the aligned 2 MiB blocks around the ids go, within the span's pages. */
static void release(const mt_token_span *sp, int width, size_t i, size_t n) {
    if (!sp->mapped) return;
    const uintptr_t block = 2u << 20, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t base = (uintptr_t)(sp->ids - sp->offset), /* the mapping: page-aligned */
        end = ((uintptr_t)(sp->ids + sp->n * (size_t)width) + page - 1) & ~(page - 1),
              lo = (uintptr_t)(sp->ids + i * (size_t)width) & ~(block - 1),
              hi = ((uintptr_t)(sp->ids + (i + n) * (size_t)width) + block - 1) & ~(block - 1);
    lo = lo < base ? base : lo;
    hi = hi > end ? end : hi;
    madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* An id of a mapped file beyond the vocabulary: scanned at load (scan_ids), so the file was
   written over while training read it; the run ends naming it (the last checkpoint stays). */
static _Noreturn void changed_under(const mt_token_span *sp, int width, size_t i, int n_vocab) {
    fprintf(stderr,
            "%s: %s: the id at file offset %zu is %u, outside the vocabulary of %d: the file "
            "changed while training read it; the last checkpoint stays\n",
            program_invocation_short_name, sp->path, sp->offset + i * (size_t)width,
            mt_span_id(sp, width, i), n_vocab);
    exit(1);
}

void mt_sampler_next(mt_sampler *s, const mt_tokens *d, int B, int T, int *x, int *y) {
    MT_ASSERT(d->win && d->T == T && d->win[d->n_span] > 0,
              "sampler: a split for windows of %d tokens, not %d", d->T + 1, T + 1);
    uint64_t starts = d->win[d->n_span]; /* one span: windows [i, i + T], i in [0, n - T - 1] */
    for (int b = 0; b < B; b++) {
        /* modulo bias: starts / 2^64, negligible below 2^40 tokens */
        uint64_t u = mt_rng_u64(&s->rng) % starts;
        int k = span_of(d, u);
        const mt_token_span *sp = &d->span[k];
        size_t at = u - d->win[k];
        uint32_t id = mt_span_id(sp, d->width, at), vocab = (uint32_t)d->n_vocab;
        size_t row = (size_t)b * T; /* a step's rows x T may pass 2^31 */
        for (int t = 0; t < T; t++) {
            uint32_t next = mt_span_id(sp, d->width, at + t + 1);
            if (id >= vocab || next >= vocab)
                changed_under(sp, d->width, at + t + (id < vocab), d->n_vocab);
            x[row + t] = (int)id;
            y[row + t] = (int)next;
            id = next;
        }
        release(sp, d->width, at, (size_t)T + 1);
    }
}
