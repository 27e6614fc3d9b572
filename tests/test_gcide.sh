#!/bin/sh
# scripts/gcide_text.py (docs/scale.md) on a hand-made dictd database of three entries: the
# database's own entry is left out, the preface before the first headword goes, pronunciation
# markup and source lines go, wrapped lines join, an entry two words share is written once, and
# a missing dictionary is an error naming the package.
NAME=test_gcide
. "$(dirname "$0")/lib.sh"
python3 - "$T" <<'PY' || fail "could not build the test database"
import gzip, sys
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
def b64(n):
    s = ""
    while True:
        s = B64[n % 64] + s
        n //= 64
        if n == 0:
            return s
parts = [("00-database-url", "00-database-url\n   ftp://ftp.gnu.org/gnu/gcide\n"),
         ("Abdomen", "\n      the end of a preface.\n\nAbdomen \\Ab*do\"men\\, n. [L.\n"
                     "   abdomen.]\n   1. (Anat.) The belly.\n      [1913 Webster]\n\n"
                     "   2. (Zool.) The posterior section.\n      [1913 Webster] [PJC]\n"),
         ("Aaronic", "Aaronic ([asl]*r[o^]n\"[i^]k), Aaronical \\Aa*ron\"ic*al\\\n"
                     "   (-[i^]*kal), a.\n   Pertaining to Aaron.\n")]
data, index, off = b"", [], 0
for word, text in parts:
    raw = text.encode()
    index.append(f"{word}\t{b64(len(data))}\t{b64(len(raw))}")
    data += raw
index.append(f"Aaronical\t{index[-1].split(chr(9))[1]}\t{index[-1].split(chr(9))[2]}")
with gzip.open(sys.argv[1] + "/t.dict.dz", "wb") as f:
    f.write(data)
with open(sys.argv[1] + "/t.index", "w") as f:
    f.write("\n".join(sorted(index)) + "\n")
PY
python3 scripts/gcide_text.py --dict "$T/t.dict.dz" --index "$T/t.index" -o "$T/out.txt" \
    >"$T/log" 2>&1 || fail "exit $?: $(cat "$T/log")"
printf '%s\n' "Abdomen, n. [L. abdomen.] 1. (Anat.) The belly." "2. (Zool.) The posterior section." \
    "" "Aaronic, Aaronical, a. Pertaining to Aaron." >"$T/want.txt"
cmp -s "$T/want.txt" "$T/out.txt" || fail "output differs: $(diff "$T/want.txt" "$T/out.txt")"
grep -q "2 entries" "$T/log" || fail "entry count: $(cat "$T/log")"
python3 scripts/gcide_text.py --dict "$T/none.dz" --index "$T/t.index" -o "$T/o2.txt" >"$T/log" 2>&1
[ $? -ne 0 ] && grep -q "dict-gcide" "$T/log" && [ ! -e "$T/o2.txt" ] ||
    fail "a missing dictionary: $(cat "$T/log")"
finish
