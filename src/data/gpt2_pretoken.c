/* GPT-2's pre-tokenizer (gpt2.c's tokenizer; bpe.c cuts a text with it).
 *
 * The regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * by hand. Every character has a class: L (\p{L}), N (\p{N}), S (\s, JavaScript's set as
 * Encoder.js matches it) or O (the rest, and each invalid UTF-8 byte, as the U+FFFD it would be
 * read as), from unicode_classes.h (scripts/gen_unicode_classes.py, Python's unicodedata). At s[i]:
 *   1. a contraction 's 't 're 've 'm 'll 'd;
 *   2. else an optional ' ' and a run of one class L, N or O (the class of the character after the
 *      space, when it is not S);
 *   3. else a run of S: all of it when it ends the text or is one character long, else all but
 *      its last character (\s+(?!\S) backs off so that a non-space follows no space of it; the
 *      last one then starts the next pre-token: " word" by 2, or alone by \s+).
 * "Hello,  world!\n\nIt's" -> "Hello" "," " " " world" "!" "\n" "\n" "It" "'s". */
#include "data.h"
#include "unicode_classes.h"

static char cp_class(uint32_t c) {
    int lo = 0, hi = (int)(sizeof UNICODE_CLASSES / sizeof *UNICODE_CLASSES) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < UNICODE_CLASSES[mid].first) hi = mid - 1;
        else if (c > UNICODE_CLASSES[mid].last) lo = mid + 1;
        else return UNICODE_CLASSES[mid].cls;
    }
    return 'O';
}

/* The class of the character at s[i] (i < len); *next: the index after it. */
static char class_at(const unsigned char *s, size_t i, size_t len, size_t *next) {
    /* unicode_classes.h's for ASCII, rows of 64 from 0 */
    static const char ascii[129] =
        "OOOOOOOOOSSSSSOOOOOOOOOOOOOOOOOOSOOOOOOOOOOOOOOONNNNNNNNNNOOOOOO"
        "OLLLLLLLLLLLLLLLLLLLLLLLLLLOOOOOOLLLLLLLLLLLLLLLLLLLLLLLLLLOOOOO";
    uint32_t cp;
    *next = i + 1;
    if (s[i] < 0x80) return ascii[s[i]];
    size_t j = i;
    if (!mt_utf8_next(s, len, &j, &cp)) return 'O';
    *next = j;
    return cp_class(cp);
}

/* The length of the contraction at s[i] ('s 't 'm 'd: 2, 're 've 'll: 3), or 0. */
static size_t contraction(const unsigned char *s, size_t i, size_t len) {
    if (s[i] != '\'' || i + 1 >= len) return 0;
    unsigned char a = s[i + 1], b = i + 2 < len ? s[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

size_t mt_gpt2_pretoken(const unsigned char *s, size_t i, size_t len) {
    size_t c_len = contraction(s, i, len), j, k;
    if (c_len) return i + c_len;
    char c = class_at(s, i, len, &j);
    if (s[i] == ' ' && j < len) { /* rule 2's optional space */
        char d = class_at(s, j, len, &k);
        if (d != 'S') c = d, j = k;
    }
    if (c != 'S') {
        while (j < len && class_at(s, j, len, &k) == c) j = k;
        return j;
    }
    size_t last = i; /* rule 3: where the run's last character starts */
    while (j < len && class_at(s, j, len, &k) == 'S') last = j, j = k;
    return j == len || last == i ? j : last;
}
