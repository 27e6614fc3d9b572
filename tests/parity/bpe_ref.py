"""A naive byte-level BPE written from the rules in src/data/bpe.c: the reference of
test_bpe.py and test_score.py.

The pre-tokenizer is a regex; training counts every pair of every word afresh at each step,
merges the pair with the highest count (ties: the smallest left id, then the smallest right id)
left to right in every word, and stops at the vocabulary size or when the best count is below 2.
A word is encoded by applying the merges in the order they were learnt."""
import re
from collections import Counter

PRETOKEN = re.compile(rb" ?[A-Za-z\x80-\xff]+| ?[0-9]+| ?[^\sA-Za-z0-9\x80-\xff]+|\s+(?= \S)|\s+")
MAX_BYTES = 64


def pretokens(text):
    """The pre-tokens of text (bytes): the regex's matches cut into pieces of 64 bytes."""
    for m in PRETOKEN.finditer(text):
        w = m.group()
        for i in range(0, len(w), MAX_BYTES):
            yield w[i:i + MAX_BYTES]


def merge(word, pair, new):
    """word (a tuple of ids) with every occurrence of pair replaced by new, left to right."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train(text, vocab_size):
    words = list(Counter(tuple(w) for w in pretokens(text)).items())
    merges = []
    while 256 + len(merges) < vocab_size:
        pairs = Counter()
        for w, c in words:
            for pair in zip(w, w[1:]):
                pairs[pair] += c
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], -p[0], -p[1]))
        if pairs[best] < 2:
            break
        new = 256 + len(merges)
        merges.append(best)
        words = [(merge(w, best, new) if best[0] in w else w, c) for w, c in words]
    return merges


def encode(text, merges):
    cache, ids = {}, []
    for w in pretokens(text):
        if w not in cache:
            t = tuple(w)
            for k, pair in enumerate(merges):
                if len(t) < 2:
                    break
                if pair[0] in t:
                    t = merge(t, pair, 256 + k)
            cache[w] = t
        ids.extend(cache[w])
    return ids


def token_bytes(merges):
    """The bytes of every token: the 256 bytes, then each merge's two tokens joined."""
    toks = [bytes([i]) for i in range(256)]
    for a, b in merges:
        toks.append(toks[a] + toks[b])
    return toks
