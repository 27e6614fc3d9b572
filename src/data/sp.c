/* The sp tokenizer: llama2.c's tokenizer.bin (Llama 2's SentencePiece vocabulary, exported with
 * '▁' written as ' '), encoded as llama2.c's run.c encodes it.
 *
 * The file (little-endian): max_token_length i32, then per piece: score f32, length i32 (1 to
 * max_token_length), its bytes. The number of pieces is not in the file: it is what the file
 * holds. Ids 0 <unk>, 1 <s> (BOS), 2 </s> (EOS), 3 + b the byte fallback "<0xXX>" of byte b.
 *
 * Encoding (run.c's rule): a non-empty text starts with the piece " " (the dummy prefix); then
 * each UTF-8 character (a byte and the continuation bytes after it, 4 bytes at most) is its piece,
 * or, when no piece is that character, one byte-fallback id per byte. Then, while any adjacent pair
 * concatenates to a piece, the pair whose piece has the highest score (the leftmost of equal
 * scores) is merged. Here the tokens are a linked list and the candidate pairs a binary heap
 * ordered by (score desc, position asc), stale entries dropped when popped: n the text's bytes,
 * at most n + 1 tokens and n merges, each merge pushing 2 pairs, so O(n log n) time and O(n)
 * memory (run.c rescans every pair after each merge: O(n^2)). Pieces are found by a hash of their
 * bytes. BOS and EOS are the caller's (mt_sp_encode's flags).
 *
 * Decoding: a byte-fallback piece is its byte, any other piece its text; after BOS a piece's
 * leading space is dropped (mt_tok_decode_after). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/io.h"
#include "data.h"

struct mt_sp {
    int max_len;   /* the file's max_token_length */
    char *text;    /* the pieces' text: piece i is text[off[i] .. off[i + 1]) */
    uint32_t *off; /* (n + 1) */
    float *score;  /* (n) */
    int32_t *slot; /* hash of the pieces' text -> id, -1 empty; mask + 1 slots */
    uint32_t mask;
    int space; /* the id of " ", the dummy prefix */
};

static uint32_t fnv1a(const char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

/* The id of the piece p[0..n), or -1. */
static int sp_find(const mt_sp *sp, const char *p, size_t n) {
    for (uint32_t h = fnv1a(p, n) & sp->mask;; h = (h + 1) & sp->mask) {
        int id = sp->slot[h];
        if (id < 0) return -1;
        if (sp->off[id + 1] - sp->off[id] == n && memcmp(sp->text + sp->off[id], p, n) == 0)
            return id;
    }
}

void mt_sp_free(mt_sp *sp) {
    if (!sp) return;
    free(sp->text);
    free(sp->off);
    free(sp->score);
    free(sp->slot);
    free(sp);
}

/* The byte b when piece text p[0..n) is "<0xXX>", else -1. */
static int fallback_byte(const char *p, size_t n) {
    unsigned b;
    char tail;
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    char hex[3] = {p[3], p[4], 0};
    return sscanf(hex, "%2X%c", &b, &tail) == 1 ? (int)b : -1;
}

/* Frees what sp_build made of t and returns s (the message, which may name a piece, is written
   before). */
static mt_status refuse(mt_tokenizer *t, mt_status s) {
    free(t->bytes);
    free(t->off);
    mt_sp_free(t->sp);
    memset(t, 0, sizeof *t);
    return s;
}

/* Checks the pieces (sp->text, off, score of n pieces, taken over) and builds t: the hash, the
   decoded bytes. what names the source in errors. */
static mt_status sp_build(mt_tokenizer *t, mt_sp *sp, int n, const char *what, mt_err *err) {
    memset(t, 0, sizeof *t);
    t->kind = MT_TOK_SP;
    t->n_vocab = n;
    t->sp = sp;
    if (n < 259 || n > 65536) {
        return refuse(t, mt_errorf(err, MT_EFORMAT,
                                   "%s: %d pieces; expected 259 (<unk>, <s>, </s> and the 256 "
                                   "byte-fallback "
                                   "pieces) to 65536 (16-bit ids)",
                                   what, n));
    }
    uint32_t slots = 1;
    while (slots < 2u * (uint32_t)n) slots <<= 1;
    sp->mask = slots - 1;
    sp->slot = malloc(slots * sizeof *sp->slot);
    t->off = malloc(((size_t)n + 1) * sizeof *t->off);
    t->bytes = malloc(sp->off[n] + 1);
    MT_ASSERT(sp->slot && t->off && t->bytes, "sp tokenizer: out of memory");
    memset(sp->slot, -1, slots * sizeof *sp->slot);
    t->off[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *p = sp->text + sp->off[i];
        size_t len = sp->off[i + 1] - sp->off[i];
        int b = fallback_byte(p, len);
        if (i >= 3 && i < 259 && b != i - 3) {
            return refuse(t, mt_errorf(err, MT_EFORMAT,
                                       "%s: piece %d is '%.*s'; expected <0x%02X> (ids 3..258 are "
                                       "the byte "
                                       "fallback)",
                                       what, i, (int)len, p, i - 3));
        }
        if (len < 1 || len > MT_TOK_MAX_BYTES || memchr(p, 0, len)) {
            return refuse(t, mt_errorf(err, MT_EFORMAT,
                                       "%s: piece %d has %zu bytes%s; expected 1 to %d and no NUL",
                                       what, i, len, memchr(p, 0, len) ? " with a NUL" : "",
                                       MT_TOK_MAX_BYTES));
        }
        if (!isfinite(sp->score[i])) {
            return refuse(t, mt_errorf(err, MT_EFORMAT,
                                       "%s: piece %d's score is %g; expected a finite number", what,
                                       i, (double)sp->score[i]));
        }
        uint32_t h = fnv1a(p, len) & sp->mask;
        while (sp->slot[h] >= 0) h = (h + 1) & sp->mask;
        if (sp_find(sp, p, len) < 0) sp->slot[h] = i; /* a repeated piece: the first id */
        if (b >= 0) t->bytes[t->off[i]] = (char)b;
        else memcpy(t->bytes + t->off[i], p, len);
        t->off[i + 1] = t->off[i] + (b >= 0 ? 1 : (uint32_t)len);
    }
    if ((sp->space = sp_find(sp, " ", 1)) < 0) {
        return refuse(t, mt_errorf(err, MT_EFORMAT, "%s: no piece \" \" (the dummy prefix)", what));
    }
    return MT_OK;
}

static mt_sp *sp_alloc(int n, size_t text_bytes) {
    mt_sp *sp = calloc(1, sizeof *sp);
    MT_ASSERT(sp, "sp tokenizer: out of memory");
    sp->text = malloc(text_bytes + 1);
    sp->off = malloc(((size_t)n + 1) * sizeof *sp->off);
    sp->score = malloc(((size_t)n + 1) * sizeof *sp->score);
    MT_ASSERT(sp->text && sp->off && sp->score, "sp tokenizer: out of memory");
    sp->off[0] = 0;
    return sp;
}

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

mt_status mt_sp_read_llama2c(const char *path, mt_tokenizer *t, mt_err *err) {
    memset(t, 0, sizeof *t);
    FILE *fp;
    mt_status s = mt_file_open("--tokenizer-file", path, "rb", &fp, err);
    if (s != MT_OK) return s;
    long end = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    size_t size = end > 0 ? (size_t)end : 0;
    unsigned char *f = malloc(size + 1);
    MT_ASSERT(f, "%s: out of memory for %zu bytes", path, size);
    bool read = end >= 0 && fseek(fp, 0, SEEK_SET) == 0 && fread(f, 1, size, fp) == size;
    fclose(fp);
    if (!read) {
        free(f);
        return mt_errorf(err, MT_EIO, "%s: cannot read it", path);
    }
    if (size && f[0] == '{') { /* not a length: Hugging Face's tokenizer.json? */
        free(f);
        return mt_errorf(err, MT_EINVAL,
                         "%s: a JSON file, not llama2.c's tokenizer.bin; mt reads Hugging Face's "
                         "tokenizer.json of GPT-2's byte-level BPE (--tokenizer gpt2), not yet a "
                         "Llama's (BPE by merge ranks with byte fallback): give its GGUF "
                         "(--tokenizer-file model.gguf) or llama2.c's tokenizer.bin",
                         path);
    }
    int32_t max_len = size >= 4 ? le32(f) : 0;
    if (size < 4 || max_len < 1 || max_len > MT_TOK_MAX_BYTES) {
        free(f);
        return mt_errorf(err, MT_EFORMAT,
                         "%s: not a llama2.c tokenizer.bin: max_token_length %d; expected 1 to %d",
                         path, max_len, MT_TOK_MAX_BYTES);
    }
    /* count the pieces, checking each header, then copy them */
    int n = 0;
    size_t at = 4, text_bytes = 0;
    while (at < size) {
        int32_t len = at + 8 <= size ? le32(f + at + 4) : -1;
        if (at + 8 <= size && (len < 1 || len > max_len)) {
            free(f);
            return mt_errorf(err, MT_EFORMAT,
                             "%s: piece %d at byte %zu has length %d; expected 1 to "
                             "max_token_length %d",
                             path, n, at, len, max_len);
        }
        if (at + 8 > size || (size_t)len > size - at - 8) {
            free(f);
            return mt_errorf(err, MT_EFORMAT,
                             "%s: truncated at byte %zu, in piece %d: expected its score (f32), "
                             "length (i32) and that many bytes",
                             path, at, n);
        }
        if (++n > 65536) break;
        text_bytes += (size_t)len;
        at += 8 + (size_t)len;
    }
    mt_sp *sp = sp_alloc(n, text_bytes);
    sp->max_len = max_len;
    at = 4;
    for (int i = 0; i < n; i++) {
        int32_t len = le32(f + at + 4);
        memcpy(&sp->score[i], f + at, 4);
        memcpy(sp->text + sp->off[i], f + at + 8, (size_t)len);
        sp->off[i + 1] = sp->off[i] + (uint32_t)len;
        at += 8 + (size_t)len;
    }
    free(f);
    return sp_build(t, sp, n, path, err);
}

/* ---- encoding ------------------------------------------------------------------------------- */

typedef struct {
    float score;
    int left, right; /* token positions */
    uint16_t lid, rid, id;
} sp_pair;

static bool pair_before(const sp_pair *a, const sp_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(sp_pair *h, size_t *n, sp_pair p) {
    size_t i = (*n)++;
    while (i > 0 && pair_before(&p, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = p;
}

static sp_pair heap_pop(sp_pair *h, size_t *n) {
    sp_pair top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && pair_before(&h[c + 1], &h[c])) c++;
        if (!pair_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* run.c merges only pairs scoring above its starting best, -1e10 */
#define SP_NO_SCORE -1e10f

/* Pushes the pair of the tokens at l and r (r < 0: none) when it makes a piece. */
static void push_pair(const mt_sp *sp, const uint16_t *id, int l, int r, sp_pair *h, size_t *nh) {
    if (l < 0 || r < 0) return;
    char buf[2 * MT_TOK_MAX_BYTES];
    size_t nl = sp->off[id[l] + 1] - sp->off[id[l]], nr = sp->off[id[r] + 1] - sp->off[id[r]];
    memcpy(buf, sp->text + sp->off[id[l]], nl);
    memcpy(buf + nl, sp->text + sp->off[id[r]], nr);
    int m = sp_find(sp, buf, nl + nr);
    if (m >= 0 && sp->score[m] > SP_NO_SCORE)
        heap_push(h, nh,
                  (sp_pair){.score = sp->score[m],
                            .left = l,
                            .right = r,
                            .lid = id[l],
                            .rid = id[r],
                            .id = (uint16_t)m});
}

void mt_sp_encode(const mt_tokenizer *t, const char *text, size_t len, bool bos, bool eos,
                  uint16_t *ids, size_t *n) {
    const mt_sp *sp = t->sp;
    *n = 0;
    if (bos) ids[(*n)++] = MT_SP_BOS;
    size_t cap = len + 1;
    uint16_t *id = malloc(cap * sizeof *id);
    int *next = malloc(cap * sizeof *next), *prev = malloc(cap * sizeof *prev);
    sp_pair *heap = malloc(3 * cap * sizeof *heap);
    MT_ASSERT(id && next && prev && heap, "sp encode: out of memory for %zu bytes", len);
    int k = 0; /* tokens before merging */
    if (len > 0) id[k++] = (uint16_t)sp->space;
    for (size_t i = 0; i < len;) {
        size_t j = i + 1;
        while (j < len && j - i < 4 && ((unsigned char)text[j] & 0xc0) == 0x80) j++;
        int c = sp_find(sp, text + i, j - i);
        if (c >= 0) id[k++] = (uint16_t)c;
        else
            for (size_t b = i; b < j; b++) id[k++] = (uint16_t)((unsigned char)text[b] + 3);
        i = j;
    }
    size_t nh = 0;
    for (int i = 0; i < k; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < k ? i + 1 : -1;
    }
    for (int i = 0; i + 1 < k; i++) push_pair(sp, id, i, i + 1, heap, &nh);
    /* a popped pair is current when its right token still follows its left and neither changed:
       a token's id changes only by growing, so it never returns to an old one */
    while (nh) {
        sp_pair p = heap_pop(heap, &nh);
        if (next[p.left] != p.right || id[p.left] != p.lid || id[p.right] != p.rid) continue;
        id[p.left] = p.id;
        next[p.left] = next[p.right];
        if (next[p.right] >= 0) prev[next[p.right]] = p.left;
        next[p.right] = -2; /* gone: no pair starts or ends here again */
        push_pair(sp, id, prev[p.left], p.left, heap, &nh);
        push_pair(sp, id, p.left, next[p.left], heap, &nh);
    }
    for (int i = k ? 0 : -1; i >= 0; i = next[i]) ids[(*n)++] = id[i];
    if (eos) ids[(*n)++] = MT_SP_EOS;
    free(id);
    free(next);
    free(prev);
    free(heap);
}

const char *mt_sp_piece(const mt_tokenizer *t, int id, int *len, float *score) {
    const mt_sp *sp = t->sp;
    *len = (int)(sp->off[id + 1] - sp->off[id]);
    *score = sp->score[id];
    return sp->text + sp->off[id];
}

int mt_sp_max_len(const mt_tokenizer *t) { return t->sp->max_len; }

/* ---- JSON: {"type":"sp","max_len":27,"pieces":["<unk>",...],"scores":[0,...]} ---------------- */

void mt_sp_to_json(const mt_tokenizer *t, cJSON *o) {
    const mt_sp *sp = t->sp;
    cJSON_AddNumberToObject(o, "max_len", sp->max_len);
    cJSON *pieces = cJSON_AddArrayToObject(o, "pieces"),
          *scores = cJSON_AddArrayToObject(o, "scores");
    char buf[MT_TOK_MAX_BYTES + 1];
    for (int i = 0; i < t->n_vocab; i++) {
        size_t len = sp->off[i + 1] - sp->off[i];
        memcpy(buf, sp->text + sp->off[i], len);
        buf[len] = 0;
        cJSON_AddItemToArray(pieces, cJSON_CreateString(buf));
        cJSON_AddItemToArray(scores, cJSON_CreateNumber(sp->score[i]));
    }
}

mt_status mt_sp_from_json(const cJSON *o, mt_tokenizer *t, mt_err *err) {
    memset(t, 0, sizeof *t);
    const cJSON *pieces = cJSON_GetObjectItemCaseSensitive(o, "pieces"),
                *scores = cJSON_GetObjectItemCaseSensitive(o, "scores"),
                *max_len = cJSON_GetObjectItemCaseSensitive(o, "max_len");
    int n = cJSON_GetArraySize(pieces);
    if (!cJSON_IsArray(pieces) || !cJSON_IsArray(scores) || cJSON_GetArraySize(scores) != n ||
        !cJSON_IsNumber(max_len) || n > 65536)
        return mt_errorf(err, MT_EFORMAT,
                         "tokenizer: sp needs 'max_len', 'pieces' (strings) and as many 'scores'");
    size_t text_bytes = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, pieces) {
        if (!cJSON_IsString(p) || strlen(p->valuestring) > MT_TOK_MAX_BYTES)
            return mt_errorf(err, MT_EFORMAT, "tokenizer: sp pieces are strings of 1 to %d bytes",
                             MT_TOK_MAX_BYTES);
        text_bytes += strlen(p->valuestring);
    }
    mt_sp *sp = sp_alloc(n, text_bytes);
    sp->max_len = max_len->valueint;
    int i = 0;
    const cJSON *sc = scores->child;
    cJSON_ArrayForEach(p, pieces) {
        size_t len = strlen(p->valuestring);
        memcpy(sp->text + sp->off[i], p->valuestring, len);
        sp->off[i + 1] = sp->off[i] + (uint32_t)len;
        sp->score[i++] = cJSON_IsNumber(sc) ? (float)sc->valuedouble : SP_NO_SCORE;
        sc = sc->next;
    }
    return sp_build(t, sp, n, "tokenizer", err);
}
