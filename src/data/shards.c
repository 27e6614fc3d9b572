/* Token shards (data.h): mt token files, llm.c shards and raw uint16 ids (nanoGPT's train.bin),
 * one file, a directory's *.bin files or a glob pattern's matches. Each file's header and size are
 * checked, every id is checked against the vocabulary by reading the file in chunks (the page
 * cache, not this process's memory), then the file is mapped read-only: the sampler's windows
 * touch a few pages, so memory does not grow with the corpus. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/io.h"
#include "data.h"

typedef enum { FMT_MT, FMT_LLMC, FMT_RAW } shard_format;
static const char *const FORMAT_NAME[] = {"an mt token file", "an llm.c shard",
                                          "raw uint16 ids (nanoGPT)"};

typedef struct {
    const char *path;
    int fd;
    shard_format fmt;
    int width;             /* bytes per id */
    uint64_t size, offset; /* the file's bytes; the offset of its first id */
    uint64_t count;        /* ids */
    char *json;            /* mt: its tokenizer (malloc'd) */
    bool val;              /* its name says val: the validation part of a set */
} shard;

#define META_MAX (64u << 20) /* meta.json: a tokenizer's JSON is far smaller */

static uint64_t le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* n bytes at offset of fd into buf; false on a short read */
static bool read_at(int fd, void *buf, size_t n, uint64_t offset) {
    for (size_t got = 0; got < n;) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(offset + got));
        if (k <= 0) return false;
        got += (size_t)k;
    }
    return true;
}

/* ---- the files ------------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool mt_data_is_set(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0) return S_ISDIR(sb.st_mode);
    return strpbrk(path, "*?[") != NULL;
}

/* Appends a malloc'd copy of path to files (n, capacity cap); false when out of memory. */
static bool push(char ***files, int *n, int *cap, const char *path) {
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 16;
        char **f = realloc(*files, (size_t)c * sizeof *f);
        if (!f) return false;
        *files = f, *cap = c;
    }
    return ((*files)[*n] = strdup(path)) && ++*n;
}

/* A directory's regular *.bin files (no dot files), sorted. */
static mt_status dir_files(const char *dir, char ***files, int *n, mt_err *err) {
    DIR *d = opendir(dir);
    if (!d) return mt_errorf(err, MT_EINVAL, "--data %s: %s", dir, strerror(errno));
    int cap = 0;
    struct dirent *e;
    char p[4096];
    struct stat sb;
    while ((e = readdir(d))) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".bin") || stat(p, &sb) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        if (!push(files, n, &cap, p)) {
            closedir(d);
            return mt_errorf(err, MT_ENOMEM, "--data %s: out of memory", dir);
        }
    }
    closedir(d);
    if (*n == 0)
        return mt_errorf(err, MT_EINVAL,
                         "--data %s is a directory without token shards: expected *.bin files "
                         "(mt token files, llm.c shards or nanoGPT's train.bin and val.bin)",
                         dir);
    qsort(*files, (size_t)*n, sizeof **files, cmp_str);
    return MT_OK;
}

/* The files path names: itself, a directory's *.bin or a pattern's matches (sorted). */
static mt_status list_files(const char *path, char ***files, int *n, mt_err *err) {
    *files = NULL, *n = 0;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return dir_files(path, files, n, err);
    int cap = 0;
    if (!mt_data_is_set(path))
        return push(files, n, &cap, path) ? MT_OK : mt_errorf(err, MT_ENOMEM, "out of memory");
    glob_t g;
    int r = glob(path, GLOB_ERR, NULL, &g);
    if (r == GLOB_NOMATCH || (r == 0 && g.gl_pathc == 0)) {
        if (r == 0) globfree(&g);
        return mt_errorf(err, MT_EINVAL,
                         "--data '%s': the pattern matches no file: expected token shards "
                         "(quote the pattern so that the shell leaves it to ./train)",
                         path);
    }
    if (r != 0) return mt_errorf(err, MT_EINVAL, "--data '%s': cannot read the pattern", path);
    mt_status s = MT_OK;
    for (size_t i = 0; i < g.gl_pathc && s == MT_OK; i++) {
        if (stat(g.gl_pathv[i], &sb) != 0 || !S_ISREG(sb.st_mode))
            s = mt_errorf(err, MT_EINVAL, "--data '%s' matches %s, which is not a regular file",
                          path, g.gl_pathv[i]);
        else if (!push(files, n, &cap, g.gl_pathv[i]))
            s = mt_errorf(err, MT_ENOMEM, "out of memory");
    }
    globfree(&g);
    return s;
}

/* The file name holds "val" between non-letters (val.bin, fineweb_val_000000.bin). */
static bool val_name(const char *path) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (const char *p = strstr(base, "val"); p; p = strstr(p + 1, "val")) {
        bool before = p == base || !((p[-1] | 32) >= 'a' && (p[-1] | 32) <= 'z');
        bool after = !((p[3] | 32) >= 'a' && (p[3] | 32) <= 'z');
        if (before && after) return true;
    }
    return false;
}

/* ---- one file's header ----------------------------------------------------------------------- */

/* The size check of a header announcing count ids of width bytes after offset. */
static mt_status check_size(const shard *sh, const char *what, mt_err *err) {
    uint64_t room = sh->size - sh->offset, need = sh->count * (uint64_t)sh->width;
    if (sh->count <= room / (uint64_t)sh->width && need == room) return MT_OK;
    return mt_errorf(err, MT_EFORMAT,
                     "%s: %s announces %llu ids of %d bytes (%llu bytes) but the file holds %llu "
                     "bytes after its %llu-byte header: %s",
                     sh->path, what, (unsigned long long)sh->count, sh->width,
                     (unsigned long long)need, (unsigned long long)room,
                     (unsigned long long)sh->offset,
                     sh->count > room / (uint64_t)sh->width || need > room ? "truncated"
                                                                           : "trailing bytes");
}

/* An mt token file's header (h: its first bytes, got of them) and tokenizer JSON. */
static mt_status mt_header(shard *sh, const unsigned char *h, size_t got, mt_err *err) {
    if (got < 28)
        return mt_errorf(err, MT_EFORMAT, "%s: truncated: %llu bytes, a token file header has 28",
                         sh->path, (unsigned long long)sh->size);
    uint64_t version = le(h + 8, 4), vocab = le(h + 12, 4), jlen = le(h + 24, 4);
    if (version != MT_TOKFILE_VERSION)
        return mt_errorf(err, MT_EFORMAT, "%s: token file version %llu; this mt reads version %u",
                         sh->path, (unsigned long long)version, MT_TOKFILE_VERSION);
    if (vocab < 1 || vocab > 65536)
        return mt_errorf(err, MT_EFORMAT, "%s: vocabulary size %llu outside 1..65536", sh->path,
                         (unsigned long long)vocab);
    sh->width = 2, sh->count = le(h + 16, 8), sh->offset = 28 + jlen;
    if (jlen > sh->size - 28)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: the header announces a %llu-byte tokenizer but the file holds %llu "
                         "bytes after the header: truncated",
                         sh->path, (unsigned long long)jlen, (unsigned long long)(sh->size - 28));
    mt_status s = check_size(sh, "the header", err);
    if (s != MT_OK) return s;
    if (!(sh->json = malloc(jlen + 1)) || !read_at(sh->fd, sh->json, jlen, 28))
        return mt_errorf(err, MT_EIO, "%s: cannot read the tokenizer", sh->path);
    sh->json[jlen] = 0;
    mt_tokenizer tok;
    mt_err e;
    if (mt_tok_from_json(sh->json, &tok, &e) != MT_OK)
        return mt_errorf(err, MT_EFORMAT, "%s: %s", sh->path, e.msg);
    int n = tok.n_vocab;
    mt_tok_free(&tok);
    if ((uint64_t)n != vocab)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: the header says %llu tokens in the vocabulary, its tokenizer has %d",
                         sh->path, (unsigned long long)vocab, n);
    return MT_OK;
}

static mt_status llmc_header(shard *sh, const unsigned char *h, size_t got, mt_err *err) {
    if (got < MT_LLMC_HEADER)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: truncated: %llu bytes, an llm.c shard's header has %d", sh->path,
                         (unsigned long long)sh->size, MT_LLMC_HEADER);
    uint64_t version = le(h + 4, 4);
    if (version != 1 && version != 2)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: llm.c shard version %llu: expected 1 (uint16 ids) or 2 (uint32 ids)",
                         sh->path, (unsigned long long)version);
    sh->width = version == 1 ? 2 : 4, sh->count = le(h + 8, 4), sh->offset = MT_LLMC_HEADER;
    return check_size(sh, "the header", err);
}

/* A file that is not an llm.c shard by its magic, but whose first 12 bytes read as one's header
   (magic, version, count) with the magic a little off: within 16 of 20240520 (20240522: llm.c's
   evaluation files), or 2 bits off with a version of 1 or 2. */
static bool damaged_llmc(const unsigned char *h, size_t got) {
    if (got < 12) return false;
    int64_t magic = (int64_t)le(h, 4), version = (int64_t)le(h + 4, 4);
    int bits = __builtin_popcountll((uint64_t)magic ^ MT_LLMC_MAGIC);
    return llabs(magic - MT_LLMC_MAGIC) <= 16 || (bits <= 2 && (version == 1 || version == 2));
}

/* Opens and checks one file: its format is detected (the first shard's, first NULL) or must be
   the first's, as must its width. raw: raw ids are allowed (their vocabulary is known). */
static mt_status open_shard(shard *sh, const shard *first, bool raw, mt_err *err) {
    struct stat sb;
    mt_status s = mt_fd_open("--data", sh->path, O_RDONLY, &sh->fd, err);
    if (s == MT_OK && fstat(sh->fd, &sb) != 0)
        s = mt_errorf(err, MT_EIO, "%s: cannot stat: %s", sh->path, strerror(errno));
    if (s != MT_OK) return s;
    sh->size = (uint64_t)sb.st_size;
    sh->val = val_name(sh->path);
    unsigned char h[MT_LLMC_HEADER];
    size_t got = sh->size < sizeof h ? (size_t)sh->size : sizeof h;
    if (!read_at(sh->fd, h, got, 0)) return mt_errorf(err, MT_EIO, "%s: cannot read", sh->path);
    sh->fmt = got >= 8 && memcmp(h, MT_TOKFILE_MAGIC, 8) == 0 ? FMT_MT
              : got >= 4 && le(h, 4) == MT_LLMC_MAGIC         ? FMT_LLMC
                                                              : FMT_RAW;
    if (sh->size == 0)
        return mt_errorf(err, MT_EFORMAT, "%s is empty: expected %s", sh->path,
                         first ? FORMAT_NAME[first->fmt] : "token ids (docs/data.md)");
    if (sh->fmt == FMT_RAW && damaged_llmc(h, got))
        return mt_errorf(err, MT_EFORMAT,
                         "%s: starts with %llu (version %llu, %llu ids), close to an llm.c "
                         "shard's magic 20240520: this looks like a damaged llm.c header, not "
                         "raw ids; write the shard again",
                         sh->path, (unsigned long long)le(h, 4), (unsigned long long)le(h + 4, 4),
                         (unsigned long long)le(h + 8, 4));
    if (first && sh->fmt != first->fmt)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: starts with 0x%08llx, so it is %s, but %s is %s (magic %s): the "
                         "files of a set share one format",
                         sh->path, (unsigned long long)(got >= 4 ? le(h, 4) : 0),
                         FORMAT_NAME[sh->fmt], first->path, FORMAT_NAME[first->fmt],
                         first->fmt == FMT_MT     ? "\"MTTOKENS\""
                         : first->fmt == FMT_LLMC ? "20240520"
                                                  : "none");
    if (sh->fmt == FMT_RAW && !raw)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: not an mt token file (magic \"MTTOKENS\") nor an llm.c shard "
                         "(magic 20240520); raw uint16 ids (nanoGPT's train.bin) need their "
                         "vocabulary size: --data-vocab N or a meta.json {\"vocab_size\": N} "
                         "beside them; a text makes a token file with ./train --data TEXT "
                         "--prepare FILE.bin",
                         sh->path);
    if (sh->fmt == FMT_MT) s = mt_header(sh, h, got, err);
    else if (sh->fmt == FMT_LLMC) s = llmc_header(sh, h, got, err);
    else if (sh->size % 2)
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: %llu bytes, an odd count: raw uint16 ids come in pairs of bytes",
                      sh->path, (unsigned long long)sh->size);
    else sh->width = 2, sh->count = sh->size / 2;
    if (s == MT_OK && first && sh->width != first->width)
        s = mt_errorf(err, MT_EFORMAT,
                      "%s holds %d-byte ids but %s holds %d-byte ids: the shards of a set share "
                      "one token width (llm.c: version 1 for uint16, 2 for uint32)",
                      sh->path, sh->width, first->path, first->width);
    if (s == MT_OK && first && sh->fmt == FMT_MT && strcmp(sh->json, first->json) != 0)
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: its tokenizer differs from %s's: the token files of a set share one "
                      "tokenizer",
                      sh->path, first->path);
    return s;
}

/* ---- the vocabulary -------------------------------------------------------------------------- */

/* meta (len bytes): meta.json in the directory of path; true when it is readable. */
static bool meta_path(const char *path, char *meta, size_t len) {
    char *copy = strdup(path);
    if (!copy) return false;
    snprintf(meta, len, "%s/meta.json", dirname(copy));
    free(copy);
    return access(meta, R_OK) == 0;
}

/* The tokenizer of meta.json: mt's tokenizer JSON (what --prepare --format llmc writes) or
   {"vocab_size": N} (nanoGPT's meta.pkl's key), an ids tokenizer of N ids. */
static mt_status read_meta(const char *meta, mt_tokenizer *tok, mt_err *err) {
    FILE *f;
    mt_status s = mt_file_open("the set's vocabulary", meta, "rb", &f, err);
    if (s != MT_OK) return s;
    char *buf = malloc(META_MAX + 1);
    size_t n = buf ? fread(buf, 1, META_MAX + 1, f) : 0;
    fclose(f);
    if (!buf) return mt_errorf(err, MT_ENOMEM, "%s: out of memory", meta);
    buf[n < META_MAX ? n : META_MAX] = 0;
    cJSON *o = n <= META_MAX ? cJSON_Parse(buf) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "vocab_size");
    mt_err e;
    if (cJSON_GetObjectItemCaseSensitive(o, "type")) {
        if ((s = mt_tok_from_json(buf, tok, &e)) != MT_OK)
            s = mt_errorf(err, MT_EFORMAT, "%s: %s", meta, e.msg);
    } else if (cJSON_IsNumber(v) && v->valuedouble == (int)v->valuedouble) {
        if ((s = mt_tok_init_ids(tok, (int)v->valuedouble, &e)) != MT_OK)
            s = mt_errorf(err, MT_EFORMAT, "%s: vocab_size %g: expected 1 to 65536", meta,
                          v->valuedouble);
    } else {
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: expected mt's tokenizer JSON ({\"type\": \"bpe\", ...}) or "
                      "{\"vocab_size\": N}",
                      meta);
    }
    cJSON_Delete(o);
    free(buf);
    return s;
}

/* path's file name is one ./train --prepare --format llmc writes: train_NNNNNN.bin or
   val_NNNNNN.bin */
static bool prepared_name(const char *path) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t k = !strncmp(base, "train_", 6) ? 6 : !strncmp(base, "val_", 4) ? 4 : 0;
    if (!k || strlen(base) != k + 10 || strcmp(base + k + 6, ".bin") != 0) return false;
    for (size_t i = k; i < k + 6; i++)
        if (base[i] < '0' || base[i] > '9') return false;
    return true;
}

/* The tokenizer of the set (first: its first file) into tok, and where its vocabulary comes from
   (source, for messages). */
static mt_status set_tokenizer(const shard *first, const mt_text_cfg *c, mt_tokenizer *meta_tok,
                               bool has_meta, const char *meta, mt_tokenizer *tok, char *source,
                               size_t len, mt_err *err) {
    if (first->fmt == FMT_MT) {
        if (c->data_vocab)
            return mt_errorf(err, MT_EINVAL,
                             "--data-vocab %d: %s is an mt token file, which brings its tokenizer "
                             "(and vocabulary): leave --data-vocab at 0",
                             c->data_vocab, first->path);
        snprintf(source, len, "its tokenizer");
        return mt_tok_from_json(first->json, tok, err);
    }
    if (c->data_vocab) {
        snprintf(source, len, "--data-vocab");
        return mt_tok_init_ids(tok, c->data_vocab, err);
    }
    if (!has_meta && prepared_name(first->path))
        return mt_errorf(err, MT_EINVAL,
                         "%s is %s without a meta.json beside it, named as ./train --prepare "
                         "--format llmc names its shards: that writes meta.json last, so this "
                         "looks like an unfinished prepare (run it again into a new directory); "
                         "shards from elsewhere need --data-vocab N",
                         first->path, FORMAT_NAME[first->fmt]);
    if (!has_meta)
        return mt_errorf(err, MT_EINVAL,
                         "%s is %s, which carries no vocabulary size: give --data-vocab N "
                         "(GPT-2's ids: 50257) or a meta.json beside it (docs/data.md)",
                         first->path, FORMAT_NAME[first->fmt]);
    snprintf(source, len, "%s", meta);
    *tok = *meta_tok;
    memset(meta_tok, 0, sizeof *meta_tok);
    return MT_OK;
}

/* Every id of sh below vocab, read in chunks through buf (cap bytes, a multiple of 4). */
static mt_status scan_ids(const shard *sh, int vocab, const char *source, unsigned char *buf,
                          size_t cap, mt_err *err) {
    uint64_t bytes = sh->count * (uint64_t)sh->width;
    for (uint64_t at = 0; at < bytes; at += cap) {
        size_t n = bytes - at < cap ? (size_t)(bytes - at) : cap;
        if (!read_at(sh->fd, buf, n, sh->offset + at))
            return mt_errorf(err, MT_EIO, "%s: cannot read: %s", sh->path, strerror(errno));
        mt_token_span span = {.ids = buf, .n = n / (size_t)sh->width};
        uint32_t max = 0;
        for (size_t i = 0; i < span.n; i++) {
            uint32_t id = mt_span_id(&span, sh->width, i);
            max = id > max ? id : max;
        }
        if (max < (uint32_t)vocab) continue;
        size_t i = 0;
        while (mt_span_id(&span, sh->width, i) < (uint32_t)vocab) i++;
        uint64_t index = at / (uint64_t)sh->width + i;
        return mt_errorf(err, MT_EFORMAT,
                         "%s: token %llu is %u (file offset %llu), outside the vocabulary of %d "
                         "(from %s)",
                         sh->path, (unsigned long long)index, mt_span_id(&span, sh->width, i),
                         (unsigned long long)(sh->offset + index * (uint64_t)sh->width), vocab,
                         source);
    }
    return MT_OK;
}

/* ---- a mapped file that changes under the run ------------------------------------------------
 * A shard truncated while mapped makes a read past its new end SIGBUS: the handler names the file
 * of the faulting address (write and _exit only: async-signal-safe) and ends the run with exit 1
 * (the last checkpoint stays). A fault outside the stores registered here is the default's. */
#define MAX_MAPPED_STORES 16
static mt_token_store *volatile mapped[MAX_MAPPED_STORES];

static void put(const char *s) {
    for (size_t n = strlen(s); n;) {
        ssize_t k = write(2, s, n);
        if (k <= 0) return;
        s += k, n -= (size_t)k;
    }
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    const char *at = si->si_addr;
    for (int k = 0; k < MAX_MAPPED_STORES; k++)
        for (int i = 0; mapped[k] && i < mapped[k]->n_files; i++) {
            const char *m = mapped[k]->map[i];
            if (!m || at < m || at >= m + mapped[k]->map_len[i]) continue;
            put(program_invocation_short_name);
            put(": ");
            put(mapped[k]->path[i]);
            put(": the file became shorter while training read it (truncated, or replaced in "
                "place): a read past its end; the last checkpoint stays\n");
            _exit(1);
        }
    signal(sig, SIG_DFL); /* not a shard: the fault repeats with the default action */
}

static void watch_store(mt_token_store *st, bool on) {
    static bool installed;
    if (on && !installed) {
        struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO};
        sigemptyset(&sa.sa_mask);
        installed = sigaction(SIGBUS, &sa, NULL) == 0;
    }
    for (int k = 0; k < MAX_MAPPED_STORES; k++)
        if (mapped[k] == (on ? NULL : st)) {
            mapped[k] = on ? st : NULL;
            return;
        }
}

static void store_free(mt_token_store *st) {
    if (st) watch_store(st, false);
    for (int i = 0; st && i < st->n_files; i++) {
        if (st->map[i]) munmap(st->map[i], st->map_len[i]);
        free(st->path[i]);
    }
    if (st) free(st->path), free(st->map), free(st->map_len), free(st->buf);
    free(st);
}

void mt_tokens_free(mt_tokens *d) {
    store_free(d->store);
    free(d->span);
    free(d->win);
    memset(d, 0, sizeof *d);
}

/* scan_ids over the n shards, through a buffer of at most 1 MiB. */
static mt_status scan_all(const shard *sh, int n, int vocab, const char *source, mt_err *err) {
    uint64_t most = 4;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = (sh[i].count * (uint64_t)sh[i].width + 3) & ~(uint64_t)3;
        most = bytes > most ? bytes : most;
    }
    size_t cap = most < (1u << 20) ? (size_t)most : 1u << 20;
    unsigned char *buf = malloc(cap);
    if (!buf) return mt_errorf(err, MT_ENOMEM, "out of memory");
    mt_status s = MT_OK;
    for (int i = 0; i < n && s == MT_OK; i++) s = scan_ids(&sh[i], vocab, source, buf, cap, err);
    free(buf);
    return s;
}

/* ---- the set --------------------------------------------------------------------------------- */

/* Maps the n checked shards into d's store and spans (the paths are taken over): the training
   files first, then the val files when the set has both, whose ids are then the validation
   part; else the last floor(n * val_fraction) ids are. */
static mt_status map_shards(shard *sh, int n, const mt_tokenizer *tok, double val_fraction,
                            mt_tokens *d, mt_err *err) {
    mt_token_store *st = d->store = calloc(1, sizeof *st);
    if (!st || !(d->span = calloc((size_t)n, sizeof *d->span)) ||
        !(st->path = calloc((size_t)n, sizeof *st->path)) ||
        !(st->map = calloc((size_t)n, sizeof *st->map)) ||
        !(st->map_len = calloc((size_t)n, sizeof *st->map_len)))
        return mt_errorf(err, MT_ENOMEM, "out of memory for %d shards", n);
    int n_val_files = 0;
    for (int i = 0; i < n; i++) n_val_files += sh[i].val;
    bool by_name = n_val_files > 0 && n_val_files < n;
    for (int pass = 0; pass < 1 + by_name; pass++)
        for (int i = 0; i < n; i++) {
            if (by_name && sh[i].val != pass) continue;
            int k = st->n_files++;
            st->path[k] = (char *)sh[i].path, sh[i].path = NULL;
            if (sh[i].size) {
                void *m = mmap(NULL, sh[i].size, PROT_READ, MAP_SHARED, sh[i].fd, 0);
                if (m == MAP_FAILED)
                    return mt_errorf(err, MT_EIO, "%s: cannot map: %s", st->path[k],
                                     strerror(errno));
                madvise(m, sh[i].size, MADV_RANDOM); /* windows: no read-ahead */
                st->map[k] = m, st->map_len[k] = sh[i].size;
            }
            d->span[k] = (mt_token_span){.ids = (const unsigned char *)st->map[k] + sh[i].offset,
                                         .n = sh[i].count,
                                         .path = st->path[k],
                                         .offset = sh[i].offset,
                                         .mapped = st->map[k] != NULL};
            d->n += sh[i].count;
            if (pass) d->n_val += sh[i].count;
        }
    watch_store(st, true);
    d->n_span = n;
    d->width = sh[0].width;
    d->n_vocab = tok->n_vocab;
    d->val_files = by_name;
    if (!by_name) d->n_val = (size_t)((double)d->n * val_fraction);
    return MT_OK;
}

/* Opens, checks and maps the n files (taken over); only_mt: mt token files only. */
static mt_status load_files(char **files, int n, bool only_mt, const mt_text_cfg *c,
                            mt_tokenizer *tok, mt_tokens *d, mt_err *err) {
    shard *sh = calloc((size_t)n, sizeof *sh);
    mt_tokenizer meta_tok = {0};
    char meta[4200], source[4200];
    bool has_meta = false;
    mt_status s = sh ? MT_OK : mt_errorf(err, MT_ENOMEM, "out of memory");
    for (int i = 0; sh && i < n; i++) sh[i] = (shard){.path = files[i], .fd = -1};
    /* meta.json is read only for files without a tokenizer, and when --data-vocab is not given */
    has_meta = !only_mt && meta_path(files[0], meta, sizeof meta);
    bool raw = !only_mt && (c->data_vocab > 0 || has_meta);
    for (int i = 0; i < n && s == MT_OK; i++) s = open_shard(&sh[i], i ? &sh[0] : NULL, raw, err);
    if (s == MT_OK && only_mt && sh[0].fmt != FMT_MT)
        s = mt_errorf(err, MT_EFORMAT, "%s: not an mt token file (it does not start with \"%s\")",
                      sh[0].path, MT_TOKFILE_MAGIC);
    if (s == MT_OK && sh[0].fmt != FMT_MT && !c->data_vocab && has_meta)
        s = read_meta(meta, &meta_tok, err);
    if (s == MT_OK)
        s = set_tokenizer(&sh[0], c, &meta_tok, has_meta, meta, tok, source, sizeof source, err);
    if (s == MT_OK) s = scan_all(sh, n, tok->n_vocab, source, err);
    if (s == MT_OK) s = map_shards(sh, n, tok, c->val_fraction, d, err);
    for (int i = 0; sh && i < n; i++) {
        if (sh[i].fd >= 0) close(sh[i].fd);
        free(sh[i].json);
        free((char *)sh[i].path); /* NULL: the store has it */
    }
    free(sh);
    mt_tok_free(&meta_tok);
    if (s != MT_OK) {
        mt_tokens_free(d);
        mt_tok_free(tok);
    }
    return s;
}

mt_status mt_shards_load(const char *path, const mt_text_cfg *c, mt_tokenizer *tok, mt_tokens *d,
                         mt_err *err) {
    memset(d, 0, sizeof *d);
    memset(tok, 0, sizeof *tok);
    char **files;
    int n;
    mt_status s = list_files(path, &files, &n, err);
    if (s == MT_OK) s = load_files(files, n, false, c, tok, d, err);
    else
        for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    return s;
}

mt_status mt_tokfile_read(const char *path, mt_tokenizer *tok, mt_tokens *d, mt_err *err) {
    memset(d, 0, sizeof *d);
    memset(tok, 0, sizeof *tok);
    char *copy = strdup(path);
    if (!copy) return mt_errorf(err, MT_ENOMEM, "out of memory");
    mt_text_cfg c = {.kind = MT_TOK_BYTE};
    return load_files(&copy, 1, true, &c, tok, d, err);
}
