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
 * Hugging Face's tokenizer.json of a Llama (LlamaTokenizerFast: BPE with byte fallback) is read
 * into the same pieces, with its merges: a pair merges when it is a merge of the list, and the
 * pair of the lowest rank goes first (the leftmost of one rank), as HF's BPE (word.rs merge_all)
 * does; only pair_merge, the priority of a pair, differs from run.c's rule. Its normalizer
 * Prepend("▁") + Replace(" ", "▁") (or a Metaspace pre-tokenizer of prepend_scheme first) is the
 * same dummy prefix and spaces. Added tokens are not matched in the text (as SentencePiece's
 * encode, unlike HF's, which cuts the text at them first).
 *
 * Decoding: a byte-fallback piece is its byte, any other piece its text; after BOS a piece's
 * leading space is dropped (mt_tok_decode_after). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    /* Hugging Face's tokenizer.json (ranked): its merges by rank, merge k making merge[k][2] of
       the ids merge[k][0] then merge[k][1]; pair_slot hashes (left, right) -> k, -1 empty,
       pair_mask + 1 slots. Not ranked: merge by score (run.c's). */
    bool ranked;
    int n_merges;
    uint16_t (*merge)[3];
    int32_t *pair_slot;
    uint32_t pair_mask;
    bool add_bos, add_eos; /* a text's ids start with BOS, end with EOS (tokenizer_config.json's;
                              tokenizer.bin: true, false, as run.c's generate) */
};

static const char SPACE[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */

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
    free(sp->merge);
    free(sp->pair_slot);
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
    sp->add_bos = true;
    return sp;
}

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static mt_status sp_read_hf(const char *path, mt_tokenizer *t, mt_err *err);

mt_status mt_sp_read_llama2c(const char *path, mt_tokenizer *t, mt_err *err) {
    memset(t, 0, sizeof *t);
    struct stat st;
    char hf[4200];
    snprintf(hf, sizeof hf, "%s/tokenizer.json", path);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(hf, F_OK) == 0)
        return sp_read_hf(hf, t, err); /* a Hugging Face directory */
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
    if (size && f[0] == '{') { /* not a length: Hugging Face's tokenizer.json */
        free(f);
        return sp_read_hf(path, t, err);
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
    float prio;      /* higher first: pair_merge's */
    int left, right; /* token positions */
    uint16_t lid, rid, id;
} sp_pair;

static bool pair_before(const sp_pair *a, const sp_pair *b) {
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
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
/* ranks are exact as floats below 2^24 (a vocabulary of 65536 pieces of 128 bytes has fewer
   splits) */
#define SP_MAX_MERGES (1 << 24)

static uint32_t pair_hash(int l, int r) { return ((uint32_t)l << 16 | (uint32_t)r) * 2654435761u; }

/* The merge k of the ids l then r, or -1 (ranked). */
static int pair_find(const mt_sp *sp, int l, int r) {
    for (uint32_t h = pair_hash(l, r) & sp->pair_mask;; h = (h + 1) & sp->pair_mask) {
        int k = sp->pair_slot[h];
        if (k < 0 || (sp->merge[k][0] == l && sp->merge[k][1] == r)) return k;
    }
}

/* Whether the adjacent tokens of ids l, r merge: into *m, pairs of higher *prio first (the
   leftmost of equal ones). Ranked (Hugging Face's BPE, its word.rs merge_all): the pair's own
   rank k, the lowest first, so prio = -k. Else (run.c's, SentencePiece's BPE): the score of the
   piece their joined text is. */
static bool pair_merge(const mt_sp *sp, int l, int r, float *prio, int *m) {
    if (sp->ranked) {
        int k = pair_find(sp, l, r);
        if (k < 0) return false;
        *prio = -(float)k;
        *m = sp->merge[k][2];
        return true;
    }
    char buf[2 * MT_TOK_MAX_BYTES];
    size_t nl = sp->off[l + 1] - sp->off[l], nr = sp->off[r + 1] - sp->off[r];
    memcpy(buf, sp->text + sp->off[l], nl);
    memcpy(buf + nl, sp->text + sp->off[r], nr);
    *m = sp_find(sp, buf, nl + nr);
    if (*m < 0 || !(sp->score[*m] > SP_NO_SCORE)) return false;
    *prio = sp->score[*m];
    return true;
}

/* Pushes the pair of the tokens at l and r (r < 0: none) when they merge. */
static void push_pair(const mt_sp *sp, const uint16_t *id, int l, int r, sp_pair *h, size_t *nh) {
    float prio;
    int m;
    if (l >= 0 && r >= 0 && pair_merge(sp, id[l], id[r], &prio, &m))
        heap_push(h, nh,
                  (sp_pair){.prio = prio,
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
        /* ranked: a text's own U+2581 is the vocabulary's, ' ' here (HF's Replace leaves it) */
        bool meta = sp->ranked && j - i == 3 && memcmp(text + i, SPACE, 3) == 0;
        int c = meta ? sp->space : sp_find(sp, text + i, j - i);
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

/* Makes t's sp ranked by the n merges m (taken over; m[k][0], m[k][1] the ids merge k joins,
   which the caller has checked), checked: their joined text a piece (m[k][2] its id), no pair
   twice. The scores become what an export's run.c merges by: a piece's is -(the lowest rank
   making it), SP_NO_SCORE when no merge makes it. what names the source in errors. */
static mt_status rank_merges(mt_tokenizer *t, uint16_t (*m)[3], int n, const char *what,
                             mt_err *err) {
    mt_sp *sp = t->sp;
    sp->ranked = true;
    sp->merge = m;
    sp->n_merges = n;
    uint32_t slots = 1;
    while (slots < 2u * (uint32_t)n) slots <<= 1;
    sp->pair_mask = slots - 1;
    MT_ASSERT(sp->pair_slot = malloc(slots * sizeof *sp->pair_slot), "sp: out of memory");
    memset(sp->pair_slot, -1, slots * sizeof *sp->pair_slot);
    for (int i = 0; i < t->n_vocab; i++) sp->score[i] = SP_NO_SCORE;
    for (int k = 0; k < n; k++) {
        int l = m[k][0], r = m[k][1], nl = (int)(sp->off[l + 1] - sp->off[l]),
            nr = (int)(sp->off[r + 1] - sp->off[r]), j = pair_find(sp, l, r);
        char buf[2 * MT_TOK_MAX_BYTES];
        memcpy(buf, sp->text + sp->off[l], (size_t)nl);
        memcpy(buf + nl, sp->text + sp->off[r], (size_t)nr);
        int id = sp_find(sp, buf, (size_t)(nl + nr));
        if (id < 0 || j >= 0)
            return refuse(t,
                          mt_errorf(err, MT_EFORMAT,
                                    "%s: merge %d of '%.*s' and '%.*s' %s; expected each merge "
                                    "once, of two pieces joined into a piece",
                                    what, k, nl, sp->text + sp->off[l], nr, sp->text + sp->off[r],
                                    j >= 0 ? "repeats an earlier one"
                                           : "makes no piece of the vocabulary"));
        m[k][2] = (uint16_t)id;
        uint32_t h = pair_hash(l, r) & sp->pair_mask;
        while (sp->pair_slot[h] >= 0) h = (h + 1) & sp->pair_mask;
        sp->pair_slot[h] = k;
        if (sp->score[id] == SP_NO_SCORE) sp->score[id] = -(float)k;
    }
    return MT_OK;
}

/* ---- JSON: {"type":"sp","max_len":27,"pieces":["<unk>",...],"scores":[0,...]}, ranked with
   "merges":[[l,r],...] (ids by rank), and "add_bos"/"add_eos" when not true/false ------------- */

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
    if (sp->ranked) {
        cJSON *a = cJSON_AddArrayToObject(o, "merges");
        for (int k = 0; k < sp->n_merges; k++) {
            const int pair[2] = {sp->merge[k][0], sp->merge[k][1]};
            cJSON_AddItemToArray(a, cJSON_CreateIntArray(pair, 2));
        }
    }
    if (!sp->add_bos) cJSON_AddBoolToObject(o, "add_bos", false);
    if (sp->add_eos) cJSON_AddBoolToObject(o, "add_eos", true);
}

/* A flag of o (key k) into *v, left as it is when absent; false: not a boolean. */
static bool read_flag(const cJSON *o, const char *k, bool *v) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, k);
    if (f) *v = cJSON_IsTrue(f);
    return !f || cJSON_IsBool(f);
}

/* The "merges" of mt's sp JSON ([[l, r], ...], ids of n pieces) into t. */
static mt_status merges_from_json(const cJSON *a, mt_tokenizer *t, mt_err *err) {
    int n = cJSON_GetArraySize(a), k = 0;
    if (!cJSON_IsArray(a) || n > SP_MAX_MERGES)
        return refuse(t, mt_errorf(err, MT_EFORMAT,
                                   "tokenizer: sp's merges: expected an array "
                                   "of at most 2^24 pairs of ids"));
    uint16_t(*m)[3] = malloc(((size_t)n + 1) * sizeof *m);
    MT_ASSERT(m, "sp: out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        double l = cJSON_IsNumber(cJSON_GetArrayItem(v, 0)) ? cJSON_GetArrayItem(v, 0)->valuedouble
                                                            : -1,
               r = cJSON_IsNumber(cJSON_GetArrayItem(v, 1)) ? cJSON_GetArrayItem(v, 1)->valuedouble
                                                            : -1;
        if (cJSON_GetArraySize(v) != 2 || !(l >= 0 && l < t->n_vocab && l == (int)l) ||
            !(r >= 0 && r < t->n_vocab && r == (int)r)) {
            free(m);
            return refuse(t, mt_errorf(err, MT_EFORMAT,
                                       "tokenizer: sp's merges[%d]: expected two ids below %d", k,
                                       t->n_vocab));
        }
        m[k][0] = (uint16_t)l;
        m[k++][1] = (uint16_t)r;
    }
    return rank_merges(t, m, n, "tokenizer", err);
}

mt_status mt_sp_from_json(const cJSON *o, mt_tokenizer *t, mt_err *err) {
    memset(t, 0, sizeof *t);
    const cJSON *pieces = cJSON_GetObjectItemCaseSensitive(o, "pieces"),
                *scores = cJSON_GetObjectItemCaseSensitive(o, "scores"),
                *max_len = cJSON_GetObjectItemCaseSensitive(o, "max_len"),
                *merges = cJSON_GetObjectItemCaseSensitive(o, "merges");
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
    if (!read_flag(o, "add_bos", &sp->add_bos) || !read_flag(o, "add_eos", &sp->add_eos)) {
        mt_sp_free(sp);
        return mt_errorf(err, MT_EFORMAT, "tokenizer: sp's add_bos and add_eos are booleans");
    }
    int i = 0;
    const cJSON *sc = scores->child;
    cJSON_ArrayForEach(p, pieces) {
        size_t len = strlen(p->valuestring);
        memcpy(sp->text + sp->off[i], p->valuestring, len);
        sp->off[i + 1] = sp->off[i] + (uint32_t)len;
        sp->score[i++] = cJSON_IsNumber(sc) ? (float)sc->valuedouble : SP_NO_SCORE;
        sc = sc->next;
    }
    mt_status s = sp_build(t, sp, n, "tokenizer", err);
    return s == MT_OK && merges ? merges_from_json(merges, t, err) : s;
}

void mt_sp_encode_doc(const mt_tokenizer *t, const char *text, size_t len, uint16_t *ids,
                      size_t *n) {
    const mt_sp *sp = t->sp;
    bool hf = sp->ranked && len > 0; /* ranked: read from a tokenizer.json */
    mt_sp_encode(t, text, len, hf && sp->add_bos, hf && sp->add_eos, ids, n);
}

bool mt_sp_add_bos(const mt_tokenizer *t) { return t->sp->add_bos; }
bool mt_sp_add_eos(const mt_tokenizer *t) { return t->sp->add_eos; }

/* ---- Hugging Face's tokenizer.json of a Llama (LlamaTokenizerFast) ---------------------------- */

#define HF_LLAMA                                                                                   \
    "--tokenizer sp reads a Llama's tokenizer.json: model.type BPE with byte_fallback true, "      \
    "model.vocab (<unk>, <s>, </s>, then <0x00>..<0xFF>) and model.merges (\"a b\" or [a, b]), "   \
    "the dummy prefix of a normalizer Sequence [Prepend \"\xe2\x96\x81\", Replace \" \" -> "       \
    "\"\xe2\x96\x81\"] or of a Metaspace pre_tokenizer (prepend_scheme first, split false)"

static const cJSON *get(const cJSON *o, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static bool is_str(const cJSON *o, const char *k, const char *v) {
    const char *s = cJSON_GetStringValue(get(o, k));
    return s && strcmp(s, v) == 0;
}

/* Whether o puts SentencePiece's dummy prefix and spaces as ' ' before the model, as Llama's
   SentencePiece (add_dummy_prefix, no other normalization) does: HF's LlamaConverter writes a
   normalizer Sequence [Prepend "▁", Replace " " -> "▁"] and no pre_tokenizer (legacy), or no
   normalizer and a Metaspace "▁" of prepend_scheme "first" that does not split (not legacy;
   "always" is the same on a text mt does not cut at added tokens). */
static bool dummy_prefix(const cJSON *o) {
    const cJSON *norm = get(o, "normalizer"), *pre = get(o, "pre_tokenizer");
    bool no_norm = !norm || cJSON_IsNull(norm), no_pre = !pre || cJSON_IsNull(pre);
    if (no_norm && !no_pre)
        return is_str(pre, "type", "Metaspace") && is_str(pre, "replacement", SPACE) &&
               cJSON_IsFalse(get(pre, "split")) &&
               (is_str(pre, "prepend_scheme", "first") || is_str(pre, "prepend_scheme", "always"));
    const cJSON *ns = get(norm, "normalizers"), *a = cJSON_GetArrayItem(ns, 0),
                *b = cJSON_GetArrayItem(ns, 1);
    return no_pre && is_str(norm, "type", "Sequence") && cJSON_GetArraySize(ns) == 2 &&
           is_str(a, "type", "Prepend") && is_str(a, "prepend", SPACE) &&
           is_str(b, "type", "Replace") && is_str(get(b, "pattern"), "String", " ") &&
           is_str(b, "content", SPACE);
}

/* s with each U+2581 as ' ' (as tokenizer.bin spells pieces) into out (room for strlen(s) + 1). */
static size_t unmeta(const char *s, char *out) {
    char *to = out;
    for (const char *p = s; *p;)
        if (strncmp(p, SPACE, 3) == 0) *to++ = ' ', p += 3;
        else *to++ = *p++;
    *to = 0;
    return (size_t)(to - out);
}

/* model.vocab (token -> id, n of them) as tokenizer.bin's pieces into *spp, scores 0. */
static mt_status hf_pieces(const char *path, const cJSON *vocab, int n, mt_sp **spp, mt_err *err) {
    const char **str = calloc((size_t)n, sizeof *str);
    MT_ASSERT(str, "sp: out of memory");
    size_t bytes = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, vocab) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d < n && d == (int)d) || str[(int)d]) {
            free(str);
            return mt_errorf(err, MT_EFORMAT,
                             "%s: model.vocab's '%s' has id %s; expected each of 0..%d once", path,
                             v->string,
                             d >= 0 && d < n && d == (int)d ? "repeated" : "not in range", n - 1);
        }
        str[(int)d] = v->string;
        bytes += strlen(v->string);
    }
    mt_sp *sp = *spp = sp_alloc(n, bytes);
    int max_len = 0;
    for (int i = 0; i < n; i++) {
        size_t len = unmeta(str[i], sp->text + sp->off[i]);
        sp->off[i + 1] = sp->off[i] + (uint32_t)len;
        sp->score[i] = 0;
        max_len = (int)len > max_len ? (int)len : max_len;
    }
    sp->max_len = max_len < 1 ? 1 : max_len;
    free(str);
    return MT_OK;
}

/* The id of token s (tokenizer.json's spelling) in t, or -1. */
static int hf_find(const mt_tokenizer *t, const char *s) {
    char buf[4 * MT_TOK_MAX_BYTES + 1];
    if (strlen(s) >= sizeof buf) return -1;
    size_t n = unmeta(s, buf);
    return sp_find(t->sp, buf, n);
}

/* model.merges ("a b" or ["a", "b"] each, by rank) into t, ranked. */
static mt_status hf_merges(const char *path, const cJSON *ms, mt_tokenizer *t, mt_err *err) {
    int n = cJSON_GetArraySize(ms), k = 0;
    if (!cJSON_IsArray(ms) || n > SP_MAX_MERGES)
        return refuse(t, mt_errorf(err, MT_EFORMAT,
                                   "%s: model.merges: expected an array of at most 2^24 merges; "
                                   "%s",
                                   path, HF_LLAMA));
    uint16_t(*m)[3] = malloc(((size_t)n + 1) * sizeof *m);
    MT_ASSERT(m, "sp: out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, ms) {
        char a[4 * MT_TOK_MAX_BYTES + 1] = "", *b = NULL;
        const char *l = cJSON_GetStringValue(cJSON_GetArrayItem(v, 0)),
                   *r = cJSON_GetStringValue(cJSON_GetArrayItem(v, 1));
        if (cJSON_IsString(v) && strlen(v->valuestring) < sizeof a &&
            (b = strchr(strcpy(a, v->valuestring), ' ')) && !strchr(b + 1, ' '))
            *b++ = 0, l = a, r = b;
        else if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2) l = r = NULL;
        int il = l ? hf_find(t, l) : -1, ir = r ? hf_find(t, r) : -1;
        if (il < 0 || ir < 0) {
            free(m);
            char what[4 * MT_TOK_MAX_BYTES + 40] = "is neither";
            if (l && r)
                snprintf(what, sizeof what, "'%s' is not a token of model.vocab", il < 0 ? l : r);
            return refuse(t, mt_errorf(err, MT_EFORMAT,
                                       "%s: model.merges[%d]: %s; expected \"a b\" or [\"a\", "
                                       "\"b\"] of two tokens of model.vocab",
                                       path, k, what));
        }
        m[k][0] = (uint16_t)il;
        m[k++][1] = (uint16_t)ir;
    }
    return rank_merges(t, m, n, path, err);
}

/* added_tokens: each one's id a token of model.vocab of its content. */
static mt_status hf_added(const char *path, const cJSON *a, mt_tokenizer *t, mt_err *err) {
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        const char *c = cJSON_GetStringValue(get(v, "content"));
        double d = cJSON_IsNumber(get(v, "id")) ? get(v, "id")->valuedouble : -1;
        if (!c || !(d >= 0 && d < t->n_vocab && d == (int)d) || hf_find(t, c) != (int)d)
            return refuse(t, mt_errorf(err, MT_EFORMAT,
                                       "%s: added token '%s' of id %g: expected an id of "
                                       "model.vocab of that token",
                                       path, c ? c : "?", d));
    }
    return MT_OK;
}

/* tokenizer_config.json's token k (a string or {"content": ...}) when present: piece id's. */
static mt_status hf_special(const char *path, const cJSON *cfg, const char *k, int id,
                            mt_tokenizer *t, mt_err *err) {
    const cJSON *v = get(cfg, k);
    const char *c = cJSON_IsString(v) ? v->valuestring : cJSON_GetStringValue(get(v, "content"));
    if (!v || cJSON_IsNull(v) || (c && hf_find(t, c) == id)) return MT_OK;
    return refuse(t, mt_errorf(err, MT_EINVAL,
                               "%s: %s '%s'; mt's sp tokenizer has <unk> 0, <s> 1 (BOS), </s> 2 "
                               "(EOS): expected the token of id %d",
                               path, k, c ? c : "?", id));
}

/* tokenizer_config.json beside path, when there is one: add_bos_token, add_eos_token (HF's
   LlamaTokenizer's defaults without it: true, false), bos_token and eos_token. */
static mt_status hf_config(const char *path, mt_tokenizer *t, mt_err *err) {
    char cpath[4200], *text = NULL;
    const char *slash = strrchr(path, '/');
    snprintf(cpath, sizeof cpath, "%.*s%stokenizer_config.json", slash ? (int)(slash - path) : 0,
             path, slash ? "/" : "");
    if (access(cpath, F_OK) != 0) return MT_OK;
    mt_status s = mt_file_read("--tokenizer-file", cpath, &text, &(size_t){0}, err);
    if (s != MT_OK) return refuse(t, s);
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(cfg) || !read_flag(cfg, "add_bos_token", &t->sp->add_bos) ||
        !read_flag(cfg, "add_eos_token", &t->sp->add_eos))
        s = refuse(t, mt_errorf(err, MT_EFORMAT,
                                "%s: expected a JSON object whose add_bos_token and "
                                "add_eos_token are booleans",
                                cpath));
    if (s == MT_OK) s = hf_special(cpath, cfg, "bos_token", MT_SP_BOS, t, err);
    if (s == MT_OK) s = hf_special(cpath, cfg, "eos_token", MT_SP_EOS, t, err);
    cJSON_Delete(cfg);
    return s;
}

/* What o is when not a Llama's tokenizer.json, into why; NULL when it is one. */
static const char *not_llama(const cJSON *o, char *why, size_t len) {
    const cJSON *m = get(o, "model");
    const char *mt = cJSON_GetStringValue(get(m, "type")),
               *nt = cJSON_GetStringValue(get(get(o, "normalizer"), "type")),
               *pt = cJSON_GetStringValue(get(get(o, "pre_tokenizer"), "type"));
    if (!mt || strcmp(mt, "BPE") != 0) snprintf(why, len, "model.type %s", mt ? mt : "absent");
    else if (!cJSON_IsTrue(get(m, "byte_fallback")))
        snprintf(why, len, "model.byte_fallback %s",
                 cJSON_IsFalse(get(m, "byte_fallback")) ? "false" : "absent");
    else if (!dummy_prefix(o))
        snprintf(why, len, "normalizer %s and pre_tokenizer %s (not Llama's dummy prefix)",
                 nt ? nt : "none", pt ? pt : "none");
    else return NULL;
    return why;
}

static mt_status sp_read_hf(const char *path, mt_tokenizer *t, mt_err *err) {
    char *text = NULL, why[300];
    mt_status s = mt_file_read("--tokenizer-file", path, &text, &(size_t){0}, err);
    if (s != MT_OK) return s;
    cJSON *o = cJSON_Parse(text);
    free(text);
    const cJSON *vocab = get(get(o, "model"), "vocab");
    int n = cJSON_GetArraySize(vocab);
    mt_sp *sp = NULL;
    if (!cJSON_IsObject(o))
        s = mt_errorf(err, MT_EFORMAT, "%s: not JSON; expected Hugging Face's tokenizer.json",
                      path);
    else if (not_llama(o, why, sizeof why))
        s = mt_errorf(err, MT_EINVAL, "%s: %s; %s", path, why, HF_LLAMA);
    else if (!cJSON_IsObject(vocab) || n < 259 || n > 65536)
        s = mt_errorf(err, MT_EFORMAT,
                      "%s: model.vocab %s; expected an object of 259 to 65536 token -> id", path,
                      vocab ? "of another size" : "absent");
    if (s == MT_OK) s = hf_pieces(path, vocab, n, &sp, err);
    if (s == MT_OK) s = sp_build(t, sp, n, path, err);
    if (s == MT_OK) s = hf_merges(path, get(get(o, "model"), "merges"), t, err);
    if (s == MT_OK) s = hf_added(path, get(o, "added_tokens"), t, err);
    if (s == MT_OK) s = hf_config(path, t, err);
    cJSON_Delete(o);
    return s;
}
