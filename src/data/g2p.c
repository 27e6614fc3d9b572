/* Pronunciation dictionaries for grapheme-to-phoneme (data.h): festival's CMUdict and a plain
   one-entry-a-line format, the vocabulary of letters and phones, the split by word, and WER /
   PER scoring (Levenshtein distance to the closest reference). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../io/io.h"
#include "data.h"

static const mt_enum_item SPLITS[] = {
    [MT_G2P_TRAIN] = {.name = "train", .help = "the 90% trained on"},
    [MT_G2P_VALID] = {.name = "valid", .help = "the 5% evaluated during training"},
    [MT_G2P_TEST] = {.name = "test", .help = "the 5% held out"},
    [MT_G2P_ALL] = {.name = "all", .help = "every word"},
};
const mt_enum MT_G2P_SPLITS = MT_ENUM("split", SPLITS);

/* ---- parsing a line -------------------------------------------------------------------------- */

/* One entry as read: the word (lowercase) and its phones with digits, names separated by one
   space. */
typedef struct {
    char *word, *phones;
    int line;
} entry;

static bool letter_ok(int ch) { return ch > 32 && ch < 127 && ch != '"'; }

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

/* A phone name [a-z]+ (up to 5 letters) at p, lowercased into out; the end, or NULL. */
static const char *phone_name(const char *p, char out[8]) {
    int n = 0;
    while (isalpha((unsigned char)*p)) {
        if (n == 5) return NULL;
        out[n++] = (char)tolower((unsigned char)*p++);
    }
    out[n] = 0;
    return n ? p : NULL;
}

static bool is_vowel(const char *name) { return name[0] && strchr("aeiou", name[0]); }

/* Appends name (and digit when not 0) to buf (len used of cap); false when it does not fit. */
static bool append_phone(char *buf, int *len, int cap, const char *name, char digit) {
    int n = snprintf(buf + *len, (size_t)(cap - *len), "%s%s%.*s", *len ? " " : "", name,
                     digit ? 1 : 0, &digit);
    if (n < 0 || *len + n >= cap) return false;
    *len += n;
    return true;
}

/* ("word" pos (((ph ph) d) ((ph) d) ...)): word into w, phones with digits into ph. */
static bool parse_festival(const char *p, char *w, char *ph, int cap) {
    int n = 0, len = 0, count = 0;
    if (*p++ != '(' || *p++ != '"') return false;
    while (letter_ok((unsigned char)*p)) {
        if (n == MT_G2P_MAX_LEN) return false;
        w[n++] = (char)tolower((unsigned char)*p++);
    }
    w[n] = 0;
    if (!n || *p++ != '"' || (*p != ' ' && *p != '\t')) return false;
    p = skip_ws(p);
    while (*p && *p != ' ' && *p != '\t' && *p != '(') p++; /* part of speech */
    p = skip_ws(p);
    if (*p++ != '(') return false;
    p = skip_ws(p);
    while (*p == '(') { /* a syllable: ((ph ph) d) */
        char names[MT_G2P_MAX_LEN][8];
        int k = 0;
        p = skip_ws(p + 1);
        if (*p++ != '(') return false;
        for (p = skip_ws(p); *p != ')'; p = skip_ws(p)) {
            if (k == MT_G2P_MAX_LEN || !(p = phone_name(p, names[k++]))) return false;
        }
        p = skip_ws(p + 1);
        char digit = *p;
        if (!k || !isdigit((unsigned char)digit)) return false;
        p = skip_ws(p + 1);
        if (*p++ != ')') return false;
        int vowel = -1;
        for (int i = 0; i < k && vowel < 0; i++)
            if (is_vowel(names[i])) vowel = i;
        for (int i = 0; i < k; i++) {
            if (++count > MT_G2P_MAX_LEN) return false;
            if (!append_phone(ph, &len, cap, names[i], i == vowel ? digit : 0)) return false;
        }
        p = skip_ws(p);
    }
    if (*p++ != ')') return false;
    p = skip_ws(p);
    if (*p++ != ')') return false;
    p = skip_ws(p);
    return count > 0 && (*p == 0 || *p == '\n' || *p == '\r');
}

/* word ph ph1 ...: a word (a "(2)" variant suffix dropped), then phones with optional digits. */
static bool parse_plain(const char *p, char *w, char *ph, int cap) {
    int n = 0, len = 0, count = 0;
    p = skip_ws(p);
    while (letter_ok((unsigned char)*p)) {
        if (n == MT_G2P_MAX_LEN) return false;
        w[n++] = (char)tolower((unsigned char)*p++);
    }
    w[n] = 0;
    char *paren = strchr(w, '(');
    if (paren && paren > w && paren[strlen(paren) - 1] == ')') *paren = 0;
    if (!w[0]) return false;
    for (p = skip_ws(p); *p && *p != '\n' && *p != '\r'; p = skip_ws(p)) {
        char name[8], digit = 0;
        if (!(p = phone_name(p, name))) return false;
        if (isdigit((unsigned char)*p)) digit = *p++;
        if (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return false;
        if (++count > MT_G2P_MAX_LEN || !append_phone(ph, &len, cap, name, digit)) return false;
    }
    return count > 0;
}

/* ---- the vocabulary -------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(a, b); }
static int cmp_char(const void *a, const void *b) { return *(const char *)a - *(const char *)b; }

/* base[i]: the first phone whose name without a trailing digit is phone i's */
static void vocab_bases(mt_g2p_vocab *v) {
    for (int i = 0; i < v->n_phones; i++) {
        size_t li = strcspn(v->phones[i], "0123456789");
        v->base[i] = (short)i;
        for (int j = 0; j < i; j++)
            if (strcspn(v->phones[j], "0123456789") == li &&
                !strncmp(v->phones[i], v->phones[j], li)) {
                v->base[i] = v->base[j];
                break;
            }
    }
}

int mt_g2p_vocab_size(const mt_g2p_vocab *v) {
    return MT_G2P_TOK_SPECIAL + v->n_letters + v->n_phones;
}

int mt_g2p_letter_id(const mt_g2p_vocab *v, char ch) {
    const char *at = ch ? memchr(v->letters, ch, (size_t)v->n_letters) : NULL;
    return at ? MT_G2P_TOK_SPECIAL + (int)(at - v->letters) : -1;
}

/* index into v->phones, -1 when absent (binary search: the names are sorted) */
static int phone_index(const mt_g2p_vocab *v, const char *name) {
    int lo = 0, hi = v->n_phones - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(v->phones[mid], name);
        if (!c) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

int mt_g2p_phone_id(const mt_g2p_vocab *v, const char *name) {
    int i = phone_index(v, name);
    return i < 0 ? -1 : MT_G2P_TOK_SPECIAL + v->n_letters + i;
}

const char *mt_g2p_token_name(const mt_g2p_vocab *v, int id, char buf[8]) {
    static const char *special[] = {"<pad>", "<bos>", "<eos>"};
    if (id >= 0 && id < MT_G2P_TOK_SPECIAL) return special[id];
    id -= MT_G2P_TOK_SPECIAL;
    if (id >= 0 && id < v->n_letters) {
        buf[0] = v->letters[id], buf[1] = 0;
        return buf;
    }
    id -= v->n_letters;
    return id >= 0 && id < v->n_phones ? v->phones[id] : "<?>";
}

char *mt_g2p_vocab_to_json(const mt_g2p_vocab *v) {
    cJSON *o = cJSON_CreateObject(), *ph = cJSON_CreateArray();
    char letters[sizeof v->letters + 1];
    memcpy(letters, v->letters, (size_t)v->n_letters);
    letters[v->n_letters] = 0;
    cJSON_AddStringToObject(o, "letters", letters);
    for (int i = 0; i < v->n_phones; i++)
        cJSON_AddItemToArray(ph, cJSON_CreateString(v->phones[i]));
    cJSON_AddItemToObject(o, "phones", ph);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    MT_ASSERT(s, "g2p: out of memory for the vocabulary's JSON");
    return s;
}

mt_status mt_g2p_vocab_from_json(const char *json, mt_g2p_vocab *v, mt_err *err) {
    memset(v, 0, sizeof *v);
    cJSON *o = cJSON_Parse(json);
    mt_status s = MT_OK;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "letters"),
                *ph = cJSON_GetObjectItemCaseSensitive(o, "phones");
    if (!cJSON_IsString(l) || !cJSON_IsArray(ph)) {
        s = mt_errorf(err, MT_EFORMAT,
                      "g2p vocabulary: expected {\"letters\": string, \"phones\": "
                      "[strings]}");
        goto done;
    }
    size_t nl = strlen(l->valuestring);
    int np = cJSON_GetArraySize(ph);
    if (nl < 1 || nl > sizeof v->letters || np < 1 || np > MT_G2P_MAX_PHONES) {
        s = mt_errorf(err, MT_EFORMAT,
                      "g2p vocabulary: %zu letters and %d phones (1 to %zu and 1 "
                      "to %d)",
                      nl, np, sizeof v->letters, MT_G2P_MAX_PHONES);
        goto done;
    }
    for (size_t i = 0; i < nl; i++)
        if (!letter_ok((unsigned char)l->valuestring[i]) ||
            (i && l->valuestring[i] <= l->valuestring[i - 1])) {
            s = mt_errorf(err, MT_EFORMAT,
                          "g2p vocabulary: the letters must be distinct printable "
                          "characters in ascending order");
            goto done;
        }
    memcpy(v->letters, l->valuestring, nl);
    v->n_letters = (int)nl;
    for (int i = 0; i < np; i++) {
        const cJSON *e = cJSON_GetArrayItem(ph, i);
        size_t n = cJSON_IsString(e) ? strlen(e->valuestring) : 0;
        if (n < 1 || n >= sizeof(mt_g2p_phone) ||
            (i && strcmp(e->valuestring, v->phones[i - 1]) <= 0)) {
            s = mt_errorf(err, MT_EFORMAT,
                          "g2p vocabulary: phone %d: expected distinct names of 1 "
                          "to %zu characters in ascending order",
                          i, sizeof(mt_g2p_phone) - 1);
            goto done;
        }
        memcpy(v->phones[i], e->valuestring, n + 1);
    }
    v->n_phones = np;
    vocab_bases(v);
done:
    cJSON_Delete(o);
    return s;
}

/* ---- loading --------------------------------------------------------------------------------- */

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    int c = strcmp(x->word, y->word);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

static void free_entries(entry *e, int n) {
    for (int i = 0; i < n; i++) free(e[i].word), free(e[i].phones);
    free(e);
}

/* The vocabulary of the entries: their letters and phone names, sorted. */
static mt_status build_vocab(const entry *e, int n, mt_g2p_vocab *v, const char *path,
                             mt_err *err) {
    bool seen[128] = {0};
    memset(v, 0, sizeof *v);
    for (int i = 0; i < n; i++)
        for (const char *p = e[i].word; *p; p++) seen[(unsigned char)*p] = true;
    for (int ch = 0; ch < 128; ch++)
        if (seen[ch]) v->letters[v->n_letters++] = (char)ch;
    qsort(v->letters, (size_t)v->n_letters, 1, cmp_char);
    for (int i = 0; i < n; i++) {
        char buf[MT_G2P_MAX_LEN * 8];
        snprintf(buf, sizeof buf, "%s", e[i].phones);
        for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
            if (phone_index(v, t) >= 0) continue;
            if (v->n_phones == MT_G2P_MAX_PHONES)
                return mt_errorf(err, MT_EFORMAT,
                                 "%s: more than %d distinct phones: not a pronunciation "
                                 "dictionary? One is a word and its phones a line, festival's "
                                 "(\"hello\" nil (((hh ax) 0) ((l ow) 1))) or plain hello hh "
                                 "ax0 l ow1",
                                 path, MT_G2P_MAX_PHONES);
            snprintf(v->phones[v->n_phones++], sizeof(mt_g2p_phone), "%s", t);
            qsort(v->phones, (size_t)v->n_phones, sizeof(mt_g2p_phone), cmp_str);
        }
    }
    vocab_bases(v);
    return MT_OK;
}

/* Appends the entry (w, ph) of line `line` to *e (n of cap); false when out of memory. */
static bool add_entry(entry **e, int *n, int *cap, const char *w, const char *ph, int line) {
    if (*n == *cap) {
        entry *grown = realloc(*e, (size_t)(*cap = 2 * *cap + 1024) * sizeof *grown);
        if (!grown) return false;
        *e = grown;
    }
    (*e)[*n] = (entry){strdup(w), strdup(ph), line};
    if (!(*e)[*n].word || !(*e)[*n].phones) {
        free((*e)[*n].word), free((*e)[*n].phones);
        return false;
    }
    ++*n;
    return true;
}

/* Every line of f that is an entry (festival's or the plain format) into *e (n of them); blank
   lines are passed over, others counted and listed (the first 5) as skipped in d. */
static mt_status read_entries(FILE *f, const char *path, mt_g2p_dict *d, entry **e, int *n,
                              mt_err *err) {
    int cap = 0, sl = 0;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        d->n_lines++;
        bool whole = strchr(line, '\n') || feof(f);
        if (!whole) { /* longer than any entry: skip the rest of it */
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n') {}
        }
        const char *p = skip_ws(line);
        if (!*p || *p == '\n' || *p == '\r') continue; /* blank */
        char w[MT_G2P_MAX_LEN + 1], ph[MT_G2P_MAX_LEN * 8];
        bool ok = whole && (*p == '(' ? parse_festival(p, w, ph, sizeof ph)
                                      : parse_plain(p, w, ph, sizeof ph));
        if (!ok) {
            if (d->n_skipped++ < 5)
                sl += snprintf(d->skipped + sl, sizeof d->skipped - (size_t)sl, "%s%d",
                               sl ? ", " : "", d->n_lines);
            continue;
        }
        if (!add_entry(e, n, &cap, w, ph, d->n_lines))
            return mt_errorf(err, MT_ENOMEM, "%s: out of memory at line %d", path, d->n_lines);
    }
    if (ferror(f)) return mt_errorf(err, MT_EIO, "%s: read error: %s", path, strerror(errno));
    if (*n == 0)
        return mt_errorf(err, MT_EFORMAT,
                         "%s: no dictionary entry in %d lines (expected lines "
                         "like (\"hello\" nil (((hh ax) 0) ((l ow) 1))) or hello hh ax0 l ow1)",
                         path, d->n_lines);
    return MT_OK;
}

/* Every letter of the entries is one of the model's. */
static mt_status check_letters(const entry *e, int n, const mt_g2p_vocab *vocab, const char *path,
                               mt_err *err) {
    for (int i = 0; i < n; i++)
        for (const char *p = e[i].word; *p; p++)
            if (mt_g2p_letter_id(vocab, *p) < 0)
                return mt_errorf(err, MT_EFORMAT,
                                 "%s:%d: the letter '%c' of \"%s\" is not in "
                                 "the model's letters \"%.*s\"",
                                 path, e[i].line, *p, e[i].word, vocab->n_letters, vocab->letters);
    return MT_OK;
}

/* The sorted entries as d's words, pronunciations (distinct per word, in line order) and phone
   ids; the words move from e into d. */
static mt_status build_dict(entry *e, int n, mt_g2p_dict *d, const char *path, mt_err *err) {
    size_t n_ph = 0;
    for (int i = 0; i < n; i++) n_ph += (strlen(e[i].phones) + 1) / 2;
    d->words = calloc((size_t)n, sizeof *d->words);
    d->pron_start = malloc(((size_t)n + 1) * sizeof *d->pron_start);
    d->phone_start = malloc(((size_t)n + 1) * sizeof *d->phone_start);
    d->phones = malloc((n_ph ? n_ph : 1) * sizeof *d->phones);
    if (!d->words || !d->pron_start || !d->phone_start || !d->phones)
        return mt_errorf(err, MT_ENOMEM, "%s: out of memory for %d entries", path, n);
    int np = 0, first = 0; /* the current word's first entry */
    d->phone_start[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(e[i].word, d->words[d->n_words - 1])) {
            first = i;
            d->pron_start[d->n_words] = np;
            d->words[d->n_words++] = e[i].word;
            e[i].word = NULL; /* owned by d now */
        } else {
            bool dup = false;
            for (int j = first; j < i && !dup; j++) dup = !strcmp(e[j].phones, e[i].phones);
            if (dup) continue;
        }
        int k = d->phone_start[np];
        char buf[MT_G2P_MAX_LEN * 8];
        snprintf(buf, sizeof buf, "%s", e[i].phones);
        for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
            int id = phone_index(&d->vocab, t);
            if (id < 0)
                return mt_errorf(err, MT_EFORMAT,
                                 "%s:%d: the phone \"%s\" is not one of the "
                                 "model's %d",
                                 path, e[i].line, t, d->vocab.n_phones);
            d->phones[k++] = id;
        }
        d->phone_start[++np] = k;
    }
    d->pron_start[d->n_words] = np;
    d->n_prons = np;
    return MT_OK;
}

mt_status mt_g2p_load(const char *path, const mt_g2p_vocab *vocab, mt_g2p_dict *d, mt_err *err) {
    memset(d, 0, sizeof *d);
    if (access(path, F_OK) != 0 && errno == ENOENT)
        return mt_errorf(err, MT_EINVAL,
                         "%s: no such file (CMUdict in festival's format comes "
                         "with the Debian package festlex-cmu: apt-get install festlex-cmu, "
                         "or make deps)",
                         path);
    FILE *f;
    mt_status s = mt_file_open("the dictionary", path, "rb", &f, err);
    if (s != MT_OK) return s;
    entry *e = NULL;
    int n = 0;
    s = read_entries(f, path, d, &e, &n, err);
    fclose(f);
    d->n_entries = n;
    if (s == MT_OK && vocab) {
        d->vocab = *vocab;
        s = check_letters(e, n, vocab, path, err);
    } else if (s == MT_OK) s = build_vocab(e, n, &d->vocab, path, err);
    if (s == MT_OK) {
        qsort(e, (size_t)n, sizeof *e, cmp_entry);
        s = build_dict(e, n, d, path, err);
    }
    free_entries(e, n);
    if (s != MT_OK) mt_g2p_free(d);
    return s;
}

void mt_g2p_free(mt_g2p_dict *d) {
    for (int i = 0; i < d->n_words && d->words; i++) free(d->words[i]);
    free(d->words);
    free(d->pron_start);
    free(d->phone_start);
    free(d->phones);
    d->words = NULL, d->pron_start = d->phone_start = d->phones = NULL;
    d->n_words = d->n_prons = 0;
}

/* ---- split ----------------------------------------------------------------------------------- */

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void mt_g2p_split(const mt_g2p_dict *d, int *idx, int n[MT_G2P_PARTS]) {
    int W = d->n_words;
    mt_rng r;
    mt_rng_seed(&r, MT_G2P_SPLIT_SEED);
    for (int i = 0; i < W; i++) idx[i] = i;
    for (int i = W - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)mt_rng_below(&r, (uint32_t)i + 1), t = idx[i];
        idx[i] = idx[j], idx[j] = t;
    }
    int held = (int)(W * 0.05 + 0.5);
    if (held < 1 && W >= 3) held = 1;
    n[MT_G2P_VALID] = n[MT_G2P_TEST] = held;
    n[MT_G2P_TRAIN] = W - 2 * held;
    for (int k = 0, from = 0; k < MT_G2P_PARTS; from += n[k++])
        qsort(idx + from, (size_t)n[k], sizeof *idx, cmp_int);
}

/* ---- scoring --------------------------------------------------------------------------------- */

int mt_levenshtein(const int *a, int na, const int *b, int nb) {
    int row[2 * MT_G2P_MAX_LEN + 2], *prev = row, cur[2 * MT_G2P_MAX_LEN + 2];
    MT_ASSERT(nb <= 2 * MT_G2P_MAX_LEN + 1, "levenshtein: %d symbols, at most %d", nb,
              2 * MT_G2P_MAX_LEN + 1);
    for (int j = 0; j <= nb; j++) prev[j] = j;
    for (int i = 1; i <= na; i++) {
        cur[0] = i;
        for (int j = 1; j <= nb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]), del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (size_t)(nb + 1) * sizeof *cur);
    }
    return prev[nb];
}

void mt_g2p_tally_add(const mt_g2p_dict *d, int w, const int *pred, int n, mt_g2p_tally t[2]) {
    const mt_g2p_vocab *v = &d->vocab;
    int off = MT_G2P_TOK_SPECIAL + v->n_letters, p[2][2 * MT_G2P_MAX_LEN + 1];
    if (n > 2 * MT_G2P_MAX_LEN + 1) n = 2 * MT_G2P_MAX_LEN + 1; /* wrong anyway */
    for (int i = 0; i < n; i++) { /* phone indices, -1 for a token that is no phone */
        int k = pred[i] - off;
        p[0][i] = k >= 0 && k < v->n_phones ? k : -1;
        p[1][i] = p[0][i] >= 0 ? v->base[p[0][i]] : -1;
    }
    for (int s = 0; s < 2; s++) {
        int best = -1, best_len = 0;
        for (int r = d->pron_start[w]; r < d->pron_start[w + 1]; r++) {
            int ref[MT_G2P_MAX_LEN], len = d->phone_start[r + 1] - d->phone_start[r];
            for (int i = 0; i < len; i++) {
                int k = d->phones[d->phone_start[r] + i];
                ref[i] = s ? v->base[k] : k;
            }
            int e = mt_levenshtein(p[s], n, ref, len);
            if (best < 0 || e < best) best = e, best_len = len;
        }
        t[s].words += 1;
        t[s].wrong += best != 0;
        t[s].edits += best;
        t[s].ref_len += best_len;
    }
}

double mt_g2p_wer(const mt_g2p_tally *t) { return t->words > 0 ? t->wrong / t->words : 0; }
double mt_g2p_per(const mt_g2p_tally *t) { return t->ref_len > 0 ? t->edits / t->ref_len : 0; }

/* mt_g2p_rows_of (data.h) */
mt_g2p_rows mt_g2p_rows_of(mt_ctx *c, const mt_g2p_dict *d, const int *wp, int n) {
    mt_g2p_rows r = {0};
    const mt_g2p_vocab *v = &d->vocab;
    int off = MT_G2P_TOK_SPECIAL + v->n_letters;
    for (int i = 0; i < n; i++) {
        int w = wp[2 * i], p = wp[2 * i + 1], ls = (int)strlen(d->words[w]),
            lt = d->phone_start[p + 1] - d->phone_start[p] + 1;
        r.S = ls > r.S ? ls : r.S;
        r.T = lt > r.T ? lt : r.T;
    }
    r.src = mt_arena_alloc(c, (size_t)n * r.S * sizeof(int));
    r.src_len = mt_arena_alloc(c, (size_t)n * sizeof(int));
    r.tgt = mt_arena_alloc(c, (size_t)n * r.T * sizeof(int));
    r.targets = mt_arena_alloc(c, (size_t)n * r.T * sizeof(int));
    for (int i = 0; i < n; i++) {
        const char *word = d->words[wp[2 * i]];
        int p = wp[2 * i + 1], np = d->phone_start[p + 1] - d->phone_start[p];
        const int *ph = d->phones + d->phone_start[p];
        int *s = r.src + (size_t)i * r.S, *t = r.tgt + (size_t)i * r.T,
            *y = r.targets + (size_t)i * r.T;
        r.src_len[i] = (int)strlen(word);
        for (int j = 0; j < r.S; j++)
            s[j] = j < r.src_len[i] ? mt_g2p_letter_id(v, word[j]) : MT_G2P_PAD;
        for (int j = 0; j < r.T; j++) {
            t[j] = j == 0 ? MT_G2P_BOS : j <= np ? off + ph[j - 1] : MT_G2P_PAD;
            y[j] = j < np ? off + ph[j] : j == np ? MT_G2P_EOS : -1;
        }
        r.tokens += np + 1;
    }
    return r;
}
