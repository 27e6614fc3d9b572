/* Byte-level BPE: the pre-tokenizer, training (learning the merges from a text), encoding.
 *
 * Tokens: ids 0..255 are the bytes; id 256 + k is merge k, the concatenation of the two tokens
 * merges[k] names. A text is first cut into pre-tokens, and no token crosses a pre-token's edge.
 *
 * The pre-tokenizer (GPT-2's idea without its regex or Unicode tables). Every byte has a class:
 * letter ([A-Za-z] and every byte >= 0x80, so any non-ASCII character, and invalid UTF-8, counts
 * as a letter), digit [0-9], space (' ' \t \n \v \f \r), other (the rest of ASCII). Scanning from
 * the left, a pre-token is
 *   1. a ' ' followed by a run of letters, or of digits, or of others: the space joins the word;
 *   2. else a run of spaces, but when it is followed by a non-space and ends in ' ', that last
 *      ' ' is left to start the next pre-token (by rule 1);
 *   3. else a run of one class (letters, digits or others);
 * and a pre-token longer than MT_BPE_WORD_MAX (64) bytes is cut into pieces of 64 bytes (the last
 * shorter), left to right. As a Python bytes regex, with each match then cut into 64-byte pieces:
 *   rb" ?[A-Za-z\x80-\xff]+| ?[0-9]+| ?[^\sA-Za-z0-9\x80-\xff]+|\s+(?= \S)|\s+"
 * "Hello,  world!\n\n" -> "Hello" "," " " " world" "!" "\n\n".
 *
 * Training (mt_tok_build_bpe): the distinct pre-tokens ("words") with their counts; every pair of
 * adjacent tokens in them counted (times the word's count). Each step merges the pair with the
 * highest count, ties broken by the smallest left id, then the smallest right id, into a new
 * token, replacing its occurrences in every word left to right (so "aaa" becomes "Aa"); it stops
 * at vocab_size tokens or when the best count is below 2. Incremental: each pair keeps the list
 * of words it occurs in, a merge rewrites only those words and adjusts the counts of the pairs
 * around each occurrence, and a binary heap indexed by pair holds the counts, so a step costs the
 * words it touches, not the text. tests/parity/test_bpe.py checks the merges against a naive
 * Python BPE.
 *
 * Encoding: each pre-token is encoded by applying, while any applies, the merge of lowest rank
 * among its adjacent pairs, at every occurrence left to right: the tokens training gave it. The
 * result of each distinct pre-token is cached for the call; long texts are cut at pre-token
 * edges and encoded on the OpenMP threads.
 *
 * GPT-2's BPE (gpt2.c reads its files) is this tokenizer with three differences: its ids 0..255
 * are the bytes in another order (byte_id), its pre-tokenizer is GPT-2's regex
 * (mt_gpt2_pretoken, pre-tokens of any length: a word longer than 64 bytes takes its rank array
 * from the heap; each pass of the loop in encode_word uses up one rank, so a word of n bytes
 * costs at most n * min(n, merges) lookups), and special tokens follow the merges. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

/* The class of each byte: L letter, D digit, S space, O other (rows of 64 bytes from 0). */
static const char CLASS[257] = "OOOOOOOOOSSSSSOOOOOOOOOOOOOOOOOOSOOOOOOOOOOOOOOODDDDDDDDDDOOOOOO"
                               "OLLLLLLLLLLLLLLLLLLLLLLLLLLOOOOOOLLLLLLLLLLLLLLLLLLLLLLLLLLOOOOO"
                               "LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL"
                               "LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL";

size_t mt_bpe_pretoken(const unsigned char *s, size_t i, size_t len) {
    size_t j = i + 1;
    if (s[i] == ' ' && j < len && CLASS[s[j]] != 'S') { /* rule 1 */
        char c = CLASS[s[j]];
        while (j < len && CLASS[s[j]] == c) j++;
    } else if (CLASS[s[i]] == 'S') { /* rule 2 */
        while (j < len && CLASS[s[j]] == 'S') j++;
        if (j < len && s[j - 1] == ' ') j--; /* j - 1 > i, or rule 1 would have applied */
    } else {                                 /* rule 3 */
        char c = CLASS[s[i]];
        while (j < len && CLASS[s[j]] == c) j++;
    }
    return j - i > MT_BPE_WORD_MAX ? i + MT_BPE_WORD_MAX : j;
}

/* A pre-token edge at or after from (an index where an ASCII space follows an ASCII non-space:
   whatever came before, a pre-token of bpe's or GPT-2's ends there), or len. */
static size_t edge_after(const unsigned char *s, size_t from, size_t len) {
    for (size_t p = from > 0 ? from : 1; p < len; p++)
        if (CLASS[s[p]] == 'S' && s[p - 1] < 0x80 && CLASS[s[p - 1]] != 'S') return p;
    return len;
}

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    if (i < n) {
        w = 0;
        memcpy(&w, p + i, n - i);
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    }
    h ^= h >> 29;
    return h | 1; /* never 0: 0 marks an empty slot */
}

static uint32_t hash_u32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    return x ^ (x >> 16);
}

#define PAIR(a, b) ((uint32_t)(a) << 16 | (uint32_t)(b))
#define NO_PAIR 0xffffffffu /* (65535, 65535): id 65535 is the last, no merge can join it twice */

static void *xrealloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    MT_ASSERT(q, "bpe: out of memory for %zu bytes", bytes);
    return q;
}

/* ---- the index: (left, right) -> merge k, open addressing ------------------------------------ */

struct mt_bpe_index {
    uint32_t mask;
    uint32_t *key; /* PAIR(left, right), NO_PAIR: empty */
    uint16_t *k;
};

void mt_bpe_index_free(mt_bpe_index *ix) {
    if (!ix) return;
    free(ix->key);
    free(ix->k);
    free(ix);
}

/* The merge of (a, b), or -1. */
static inline int index_get(const mt_bpe_index *ix, uint32_t a, uint32_t b) {
    uint32_t key = PAIR(a, b);
    for (uint32_t i = hash_u32(key) & ix->mask;; i = (i + 1) & ix->mask) {
        if (ix->key[i] == key) return ix->k[i];
        if (ix->key[i] == NO_PAIR) return -1;
    }
}

/* The failure path of mt_bpe_from_merges (and gpt2.c's): frees what it allocated and the merges
   t took over, leaving t empty (mt_tok_free's part for a bpe tokenizer; tokenizer.c calls into
   bpe.c, never back). */
void mt_bpe_clear(mt_tokenizer *t) {
    free(t->merges);
    free(t->bytes);
    free(t->off);
    mt_bpe_index_free(t->index);
    memset(t, 0, sizeof *t);
}

mt_status mt_bpe_from_merges(mt_tokenizer *t, const uint8_t *id_byte, uint16_t (*merges)[2], int n,
                             mt_err *err) {
    memset(t, 0, sizeof *t);
    t->kind = MT_TOK_BPE;
    t->n_vocab = 256 + n;
    t->n_merges = n;
    t->merges = merges;
    /* mt's tokens are at most a pre-token long; GPT-2's pre-tokens are not cut */
    uint32_t max_len = id_byte ? MT_TOK_MAX_BYTES : MT_BPE_WORD_MAX;
    for (int id = 0; id < 256; id++) t->byte_id[id_byte ? id_byte[id] : id] = (uint16_t)id;
    MT_ASSERT(n >= 0 && n <= MT_BPE_MAX_VOCAB - 256, "bpe: %d merges", n);
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)n + 2) cap *= 2;
    t->off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->off);
    t->index = calloc(1, sizeof *t->index);
    if (t->index) {
        t->index->mask = cap - 1;
        t->index->key = malloc(cap * sizeof *t->index->key);
        t->index->k = malloc(cap * sizeof *t->index->k);
    }
    if (!t->off || !t->index || !t->index->key || !t->index->k) {
        mt_bpe_clear(t);
        return mt_errorf(err, MT_ENOMEM, "out of memory for a bpe vocabulary of %d", 256 + n);
    }
    memset(t->index->key, 0xff, cap * sizeof *t->index->key);
    /* lengths first: a token longer than a pre-token cannot come from training */
    t->off[0] = 0;
    for (int id = 0; id < t->n_vocab; id++) {
        uint32_t len = 1;
        if (id >= 256) {
            int a = merges[id - 256][0], b = merges[id - 256][1];
            MT_ASSERT(a < id && b < id, "bpe: merge %d joins %d and %d", id - 256, a, b);
            len = (t->off[a + 1] - t->off[a]) + (t->off[b + 1] - t->off[b]);
            if (len > max_len) {
                mt_bpe_clear(t);
                return mt_errorf(err, MT_EFORMAT,
                                 "bpe merge %d makes a token of %u bytes; tokens have at most %u",
                                 id - 256, len, max_len);
            }
        }
        t->off[id + 1] = t->off[id] + len;
    }
    if (!(t->bytes = malloc(t->off[t->n_vocab]))) {
        mt_bpe_clear(t);
        return mt_errorf(err, MT_ENOMEM, "out of memory for a bpe vocabulary of %d", 256 + n);
    }
    for (int id = 0; id < t->n_vocab; id++) {
        char *to = t->bytes + t->off[id];
        if (id < 256) {
            *to = (char)(id_byte ? id_byte[id] : id);
            continue;
        }
        int a = merges[id - 256][0], b = merges[id - 256][1];
        uint32_t la = t->off[a + 1] - t->off[a];
        memcpy(to, t->bytes + t->off[a], la);
        memcpy(to + la, t->bytes + t->off[b], t->off[b + 1] - t->off[b]);
    }
    mt_bpe_index *ix = t->index;
    for (int k = 0; k < n; k++) {
        uint32_t key = PAIR(merges[k][0], merges[k][1]), i = hash_u32(key) & ix->mask;
        for (; ix->key[i] != NO_PAIR; i = (i + 1) & ix->mask)
            if (ix->key[i] == key) {
                int first = ix->k[i];
                mt_bpe_clear(t);
                return mt_errorf(err, MT_EFORMAT, "bpe merge %d repeats merge %d (%u, %u)", k,
                                 first, key >> 16, key & 0xffff);
            }
        ix->key[i] = key;
        ix->k[i] = (uint16_t)k;
    }
    return MT_OK;
}

/* ---- encoding -------------------------------------------------------------------------------- */

/* The tokens of one pre-token w (n bytes) into out; returns their count. */
static size_t encode_word(const mt_tokenizer *t, const unsigned char *w, size_t n, uint16_t *out) {
    const mt_bpe_index *ix = t->index;
    int stack[MT_BPE_WORD_MAX]; /* rank[i]: the merge of (out[i], out[i + 1]), or -1 */
    int *rank = n <= MT_BPE_WORD_MAX ? stack : xrealloc(NULL, n * sizeof *rank);
    for (size_t i = 0; i < n; i++) out[i] = t->byte_id[w[i]];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = index_get(ix, out[i], out[i + 1]);
    while (n > 1) {
        int best = -1;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] >= 0 && (best < 0 || rank[i] < best)) best = rank[i];
        if (best < 0) break;
        uint16_t id = (uint16_t)(256 + best);
        size_t j = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && rank[i] == best) { /* out[i], out[i + 1] is merge best's pair */
                out[j++] = id;
                i += 2;
            } else {
                out[j++] = out[i++];
            }
        }
        n = j;
        for (size_t i = 0; i + 1 < n; i++) rank[i] = index_get(ix, out[i], out[i + 1]);
    }
    if (rank != stack) free(rank);
    return n;
}

/* The tokens of every distinct pre-token of the text seen so far (their bytes are the text's). */
typedef struct {
    uint64_t hash; /* 0: empty */
    size_t at;     /* the pre-token: text[at .. at + len) */
    size_t ids;    /* its tokens: store[ids .. ids + n) */
    uint32_t len, n;
} cache_slot;

typedef struct {
    cache_slot *slot;
    size_t mask, used;
    uint16_t *store;
    size_t n_store, cap_store;
} cache;

#define CACHE_MAX (1u << 20) /* distinct pre-tokens kept; beyond, the cache starts afresh */

static void cache_init(cache *c, size_t slots) {
    memset(c, 0, sizeof *c);
    c->slot = xrealloc(NULL, slots * sizeof *c->slot);
    memset(c->slot, 0, slots * sizeof *c->slot);
    c->mask = slots - 1;
}

static void cache_grow(cache *c) {
    cache_slot *old = c->slot;
    size_t n = c->mask + 1;
    c->slot = xrealloc(NULL, 2 * n * sizeof *c->slot);
    memset(c->slot, 0, 2 * n * sizeof *c->slot);
    c->mask = 2 * n - 1;
    for (size_t i = 0; i < n; i++)
        if (old[i].hash) {
            size_t j = old[i].hash & c->mask;
            while (c->slot[j].hash) j = (j + 1) & c->mask;
            c->slot[j] = old[i];
        }
    free(old);
}

/* Encodes s[from, to) (from and to pre-token edges) into out; returns the count. */
static size_t encode_range(const mt_tokenizer *t, const unsigned char *s, size_t from, size_t to,
                           uint16_t *out) {
    cache c;
    cache_init(&c, 4096);
    size_t k = 0;
    bool gpt2 = t->kind == MT_TOK_GPT2;
    for (size_t i = from, e; i < to; i = e) {
        e = gpt2 ? mt_gpt2_pretoken(s, i, to) : mt_bpe_pretoken(s, i, to);
        size_t len = e - i;
        if (len == 1) {
            out[k++] = t->byte_id[s[i]];
            continue;
        }
        uint64_t h = hash_bytes(s + i, len);
        size_t j = h & c.mask;
        for (; c.slot[j].hash; j = (j + 1) & c.mask) {
            const cache_slot *sl = &c.slot[j];
            if (sl->hash == h && sl->len == len && memcmp(s + sl->at, s + i, len) == 0) break;
        }
        cache_slot *sl = &c.slot[j];
        if (sl->hash) {
            memcpy(out + k, c.store + sl->ids, sl->n * sizeof *out);
            k += sl->n;
            continue;
        }
        size_t n = encode_word(t, s + i, len, out + k);
        if (c.used >= CACHE_MAX) { /* start afresh: memory stays bounded on any corpus */
            memset(c.slot, 0, (c.mask + 1) * sizeof *c.slot);
            c.used = c.n_store = 0;
            for (j = h & c.mask; c.slot[j].hash; j = (j + 1) & c.mask) {}
            sl = &c.slot[j];
        }
        if (c.n_store + n > c.cap_store) {
            c.cap_store = 2 * c.cap_store + n + 4096;
            c.store = xrealloc(c.store, c.cap_store * sizeof *c.store);
        }
        memcpy(c.store + c.n_store, out + k, n * sizeof *out);
        *sl = (cache_slot){h, i, c.n_store, (uint32_t)len, (uint32_t)n};
        c.n_store += n;
        k += n;
        if (2 * ++c.used > c.mask + 1) cache_grow(&c);
    }
    free(c.slot);
    free(c.store);
    return k;
}

#define PAR_MIN_BYTES (1u << 18) /* texts shorter than this are read on one thread */
#define MAX_PARTS 64

/* Cuts s (len bytes) into parts (at most MAX_PARTS, about equal) at pre-token edges: part p is
   s[cut[p], cut[p + 1]); returns the number of parts. */
static int cut_parts(const unsigned char *s, size_t len, int parts, size_t cut[MAX_PARTS + 1]) {
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    int n = 0;
    cut[0] = 0;
    for (int p = 1; p < parts; p++) {
        size_t at = edge_after(s, len / (size_t)parts * (size_t)p, len);
        if (at > cut[n] && at < len) cut[++n] = at;
    }
    cut[++n] = len;
    return n;
}

void mt_bpe_encode(const mt_tokenizer *t, const unsigned char *s, size_t len, uint16_t *ids,
                   size_t *n) {
    int threads = len < PAR_MIN_BYTES || omp_in_parallel() ? 1 : omp_get_max_threads();
    size_t cut[MAX_PARTS + 1], count[MAX_PARTS];
    int parts = cut_parts(s, len, threads, cut);
    if (parts == 1) {
        *n = encode_range(t, s, 0, len, ids);
        return;
    }
    /* part p's tokens go to ids + cut[p] (never more tokens than bytes), then close up */
#pragma omp parallel for schedule(static, 1) num_threads(parts)
    for (int p = 0; p < parts; p++) count[p] = encode_range(t, s, cut[p], cut[p + 1], ids + cut[p]);
    size_t k = count[0];
    for (int p = 1; p < parts; p++) {
        memmove(ids + k, ids + cut[p], count[p] * sizeof *ids);
        k += count[p];
    }
    *n = k;
}

/* ---- training -------------------------------------------------------------------------------- */

typedef struct {
    int32_t *w; /* words the pair occurs in (or did: stale entries are skipped), maybe twice */
    int32_t n, cap;
} word_list;

typedef struct {
    /* words: the distinct pre-tokens, their current tokens sym[start[w] .. start[w] + len[w]) */
    int32_t n_words;
    uint16_t *sym;
    size_t *start;
    uint8_t *len;
    int64_t *count;
    uint32_t *stamp; /* the last merge that rewrote the word */
    /* pairs: id -> PAIR(left, right), count, heap position (-1: out), the words it occurs in */
    int32_t n_pairs, cap_pairs;
    uint32_t *key;
    int64_t *pcount;
    int32_t *hpos;
    word_list *words;
    /* PAIR(left, right) -> pair id, open addressing */
    uint32_t *map_key;
    int32_t *map_id;
    uint32_t map_mask;
    /* a max-heap of pair ids: the highest count first, then the smallest PAIR(left, right) */
    int32_t *heap, n_heap;
} trainer;

static void map_put(trainer *b, uint32_t key, int32_t id) {
    uint32_t i = hash_u32(key) & b->map_mask;
    while (b->map_key[i] != NO_PAIR) i = (i + 1) & b->map_mask;
    b->map_key[i] = key;
    b->map_id[i] = id;
}

/* The id of pair key, a new one (count 0) if it has none. */
static int32_t pair_id(trainer *b, uint32_t key) {
    for (uint32_t i = hash_u32(key) & b->map_mask;; i = (i + 1) & b->map_mask) {
        if (b->map_key[i] == key) return b->map_id[i];
        if (b->map_key[i] == NO_PAIR) break;
    }
    int32_t p = b->n_pairs++;
    if (p == b->cap_pairs) {
        b->cap_pairs = 2 * b->cap_pairs + 1024;
        size_t c = (size_t)b->cap_pairs;
        b->key = xrealloc(b->key, c * sizeof *b->key);
        b->pcount = xrealloc(b->pcount, c * sizeof *b->pcount);
        b->hpos = xrealloc(b->hpos, c * sizeof *b->hpos);
        b->words = xrealloc(b->words, c * sizeof *b->words);
        b->heap = xrealloc(b->heap, c * sizeof *b->heap);
    }
    b->key[p] = key;
    b->pcount[p] = 0;
    b->hpos[p] = -1;
    b->words[p] = (word_list){NULL, 0, 0};
    if (2 * (uint32_t)b->n_pairs > b->map_mask) { /* keep the map at most half full */
        uint32_t old_n = b->map_mask + 1, *old_key = b->map_key;
        int32_t *old_id = b->map_id;
        b->map_mask = 2 * old_n - 1;
        b->map_key = xrealloc(NULL, 2 * (size_t)old_n * sizeof *b->map_key);
        b->map_id = xrealloc(NULL, 2 * (size_t)old_n * sizeof *b->map_id);
        memset(b->map_key, 0xff, 2 * (size_t)old_n * sizeof *b->map_key);
        for (uint32_t i = 0; i < old_n; i++)
            if (old_key[i] != NO_PAIR) map_put(b, old_key[i], old_id[i]);
        free(old_key);
        free(old_id);
    }
    map_put(b, key, p);
    return p;
}

static inline bool above(const trainer *b, int32_t p, int32_t q) {
    return b->pcount[p] > b->pcount[q] || (b->pcount[p] == b->pcount[q] && b->key[p] < b->key[q]);
}

static void heap_set(trainer *b, int32_t i, int32_t p) {
    b->heap[i] = p;
    b->hpos[p] = i;
}

static void heap_up(trainer *b, int32_t i) {
    int32_t p = b->heap[i];
    while (i > 0 && above(b, p, b->heap[(i - 1) / 2])) {
        heap_set(b, i, b->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(b, i, p);
}

static void heap_down(trainer *b, int32_t i) {
    int32_t p = b->heap[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= b->n_heap) break;
        if (c + 1 < b->n_heap && above(b, b->heap[c + 1], b->heap[c])) c++;
        if (!above(b, b->heap[c], p)) break;
        heap_set(b, i, b->heap[c]);
        i = c;
    }
    heap_set(b, i, p);
}

/* Pair p's count changed: its place in the heap (out of it at 0). */
static void heap_fix(trainer *b, int32_t p) {
    int32_t i = b->hpos[p];
    if (b->pcount[p] <= 0) {
        if (i < 0) return;
        b->hpos[p] = -1;
        int32_t last = b->heap[--b->n_heap];
        if (i == b->n_heap) return;
        heap_set(b, i, last);
        heap_up(b, i);
        heap_down(b, b->hpos[last]);
        return;
    }
    if (i < 0) {
        i = b->n_heap++;
        heap_set(b, i, p);
    }
    heap_up(b, i);
    heap_down(b, b->hpos[p]);
}

/* Adds delta to the count of pair (x, y); an increase notes that word w holds it. */
static void adjust(trainer *b, uint16_t x, uint16_t y, int64_t delta, int32_t w) {
    int32_t p = pair_id(b, PAIR(x, y));
    b->pcount[p] += delta;
    word_list *l = &b->words[p];
    if (delta > 0 && (l->n == 0 || l->w[l->n - 1] != w)) {
        if (l->n == l->cap) {
            l->cap = 2 * l->cap + 4;
            l->w = xrealloc(l->w, (size_t)l->cap * sizeof *l->w);
        }
        l->w[l->n++] = w;
    }
    heap_fix(b, p);
}

/* Replaces the pair (x, y) by id in word w, left to right, adjusting the counts of the pairs
   around each occurrence: (prev, x) -> (prev, id), (y, next) -> (id, next). */
static void merge_word(trainer *b, int32_t w, uint16_t x, uint16_t y, uint16_t id) {
    uint16_t *s = b->sym + b->start[w];
    int n = b->len[w], j = 0;
    int64_t c = b->count[w];
    for (int i = 0; i < n;) {
        if (i + 1 < n && s[i] == x && s[i + 1] == y) {
            if (j > 0) { /* s[j - 1]: the token before, maybe an id made just now */
                adjust(b, s[j - 1], x, -c, w);
                adjust(b, s[j - 1], id, c, w);
            }
            if (i + 2 < n) {
                adjust(b, y, s[i + 2], -c, w);
                adjust(b, id, s[i + 2], c, w);
            }
            adjust(b, x, y, -c, w);
            s[j++] = id;
            i += 2;
        } else {
            s[j++] = s[i++];
        }
    }
    b->len[w] = (uint8_t)j;
}

/* Word counting: the distinct pre-tokens of a text and how often each occurs. */
typedef struct {
    uint64_t *hash; /* slot: 0 empty */
    int32_t *word;  /* slot -> word */
    size_t mask;
    int32_t n, cap;
    size_t *at; /* word -> text[at .. at + len) */
    uint8_t *len;
    int64_t *count;
} word_count;

static void words_init(word_count *wc) {
    memset(wc, 0, sizeof *wc);
    wc->mask = 4095;
    wc->hash = calloc(wc->mask + 1, sizeof *wc->hash);
    wc->word = xrealloc(NULL, (wc->mask + 1) * sizeof *wc->word);
    MT_ASSERT(wc->hash, "bpe: out of memory");
}

static void words_free(word_count *wc) {
    free(wc->hash);
    free(wc->word);
    free(wc->at);
    free(wc->len);
    free(wc->count);
}

/* Adds count occurrences of the pre-token text[at .. at + len) with hash h. */
static void words_add(word_count *wc, const unsigned char *text, size_t at, int len, uint64_t h,
                      int64_t count) {
    size_t j = h & wc->mask;
    for (; wc->hash[j]; j = (j + 1) & wc->mask) {
        int32_t w = wc->word[j];
        if (wc->hash[j] == h && wc->len[w] == len &&
            memcmp(text + wc->at[w], text + at, (size_t)len) == 0) {
            wc->count[w] += count;
            return;
        }
    }
    if (wc->n == wc->cap) {
        wc->cap = 2 * wc->cap + 1024;
        wc->at = xrealloc(wc->at, (size_t)wc->cap * sizeof *wc->at);
        wc->len = xrealloc(wc->len, (size_t)wc->cap * sizeof *wc->len);
        wc->count = xrealloc(wc->count, (size_t)wc->cap * sizeof *wc->count);
    }
    int32_t w = wc->n++;
    wc->at[w] = at;
    wc->len[w] = (uint8_t)len;
    wc->count[w] = count;
    wc->hash[j] = h;
    wc->word[j] = w;
    if (2 * (size_t)wc->n > wc->mask) { /* at most half full */
        size_t n = wc->mask + 1;
        uint64_t *old_hash = wc->hash;
        int32_t *old_word = wc->word;
        wc->mask = 2 * n - 1;
        wc->hash = calloc(2 * n, sizeof *wc->hash);
        wc->word = xrealloc(NULL, 2 * n * sizeof *wc->word);
        MT_ASSERT(wc->hash, "bpe: out of memory");
        for (size_t i = 0; i < n; i++)
            if (old_hash[i]) {
                size_t k = old_hash[i] & wc->mask;
                while (wc->hash[k]) k = (k + 1) & wc->mask;
                wc->hash[k] = old_hash[i];
                wc->word[k] = old_word[i];
            }
        free(old_hash);
        free(old_word);
    }
}

/* The distinct pre-tokens of text[from, to) (pre-token edges) with their counts. */
static void count_range(word_count *wc, const unsigned char *text, size_t from, size_t to) {
    for (size_t i = from, e; i < to; i = e) {
        e = mt_bpe_pretoken(text, i, to);
        words_add(wc, text, i, (int)(e - i), hash_bytes(text + i, e - i), 1);
    }
}

/* The words of the whole text: its parts counted on the threads, then added up. */
static void count_words(word_count *wc, const unsigned char *text, size_t len) {
    int threads = len < PAR_MIN_BYTES || omp_in_parallel() ? 1 : omp_get_max_threads();
    size_t cut[MAX_PARTS + 1];
    int parts = cut_parts(text, len, threads, cut);
    words_init(wc);
    if (parts == 1) {
        count_range(wc, text, 0, len);
        return;
    }
    word_count part[MAX_PARTS];
#pragma omp parallel for schedule(static, 1) num_threads(parts)
    for (int p = 0; p < parts; p++) {
        words_init(&part[p]);
        count_range(&part[p], text, cut[p], cut[p + 1]);
    }
    for (int p = 0; p < parts; p++) { /* in order: the same words in the same order every time */
        for (int32_t w = 0; w < part[p].n; w++) {
            size_t at = part[p].at[w];
            words_add(wc, text, at, part[p].len[w], hash_bytes(text + at, part[p].len[w]),
                      part[p].count[w]);
        }
        words_free(&part[p]);
    }
}

mt_status mt_tok_build_bpe(mt_tokenizer *t, const char *text, size_t len, int vocab_size,
                           mt_err *err) {
    memset(t, 0, sizeof *t);
    if (vocab_size < MT_BPE_MIN_VOCAB || vocab_size > MT_BPE_MAX_VOCAB)
        return mt_errorf(err, MT_EINVAL,
                         "--vocab-size %d: a bpe vocabulary holds the 256 bytes and at least one "
                         "merge, %d to %d tokens (ids are 16-bit)",
                         vocab_size, MT_BPE_MIN_VOCAB, MT_BPE_MAX_VOCAB);
    const unsigned char *s = (const unsigned char *)text;
    word_count wc;
    count_words(&wc, s, len);

    trainer b = {0};
    b.n_words = wc.n;
    size_t n_sym = 0;
    b.start = xrealloc(NULL, (size_t)wc.n * sizeof *b.start);
    for (int32_t w = 0; w < wc.n; w++) {
        b.start[w] = n_sym;
        n_sym += wc.len[w];
    }
    b.sym = xrealloc(NULL, n_sym * sizeof *b.sym);
    b.stamp = calloc((size_t)wc.n + 1, sizeof *b.stamp);
    b.len = wc.len; /* taken over */
    b.count = wc.count;
    wc.len = NULL;
    wc.count = NULL;
    MT_ASSERT(b.stamp, "bpe: out of memory");
    for (int32_t w = 0; w < wc.n; w++)
        for (int i = 0; i < b.len[w]; i++) b.sym[b.start[w] + (size_t)i] = s[wc.at[w] + (size_t)i];
    words_free(&wc);
    b.map_mask = 4095;
    b.map_key = xrealloc(NULL, (b.map_mask + 1) * sizeof *b.map_key);
    b.map_id = xrealloc(NULL, (b.map_mask + 1) * sizeof *b.map_id);
    memset(b.map_key, 0xff, (b.map_mask + 1) * sizeof *b.map_key);
    for (int32_t w = 0; w < b.n_words; w++) {
        const uint16_t *ws = b.sym + b.start[w];
        for (int i = 0; i + 1 < b.len[w]; i++) adjust(&b, ws[i], ws[i + 1], b.count[w], w);
    }

    uint16_t(*merges)[2] = xrealloc(NULL, (size_t)(vocab_size - 256) * sizeof *merges);
    int n = 0;
    while (256 + n < vocab_size && b.n_heap > 0 && b.pcount[b.heap[0]] >= 2) {
        int32_t p = b.heap[0];
        uint16_t x = (uint16_t)(b.key[p] >> 16), y = (uint16_t)(b.key[p] & 0xffff),
                 id = (uint16_t)(256 + n);
        merges[n][0] = x;
        merges[n][1] = y;
        n++;
        word_list l = b.words[p]; /* p's list is never added to now: no new pair is (x, y) */
        b.words[p] = (word_list){NULL, 0, 0};
        for (int32_t i = 0; i < l.n; i++) {
            int32_t w = l.w[i];
            if (b.stamp[w] == (uint32_t)n) continue; /* listed twice */
            b.stamp[w] = (uint32_t)n;
            merge_word(&b, w, x, y, id);
        }
        free(l.w);
        MT_ASSERT(b.pcount[p] == 0, "bpe: merge %d left %lld of its pair", n - 1,
                  (long long)b.pcount[p]);
    }

    for (int32_t p = 0; p < b.n_pairs; p++) free(b.words[p].w);
    free(b.words);
    free(b.key);
    free(b.pcount);
    free(b.hpos);
    free(b.heap);
    free(b.map_key);
    free(b.map_id);
    free(b.sym);
    free(b.start);
    free(b.len);
    free(b.count);
    free(b.stamp);
    return mt_bpe_from_merges(t, NULL, merges, n, err);
}
