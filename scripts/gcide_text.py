#!/usr/bin/env python3
"""Turns GCIDE, the GNU Collaborative International Dictionary of English (Debian's dict-gcide:
/usr/share/dictd/gcide.dict.dz and gcide.index, ~40 MB of text), into plain English text for
training: one paragraph per line, a blank line between entries (docs/scale.md).

The .index lists every headword with its entry's offset and length in the .dict (base64 numbers,
dictd's format); words that share a definition point at one entry, which is written once, in
the order of the file. Per entry:
  - the entry starts at its headword line (the first line not indented); in its first paragraph
    the pronunciation markup goes: "Abdomen \\Ab*do"men\\, n." -> "Abdomen, n." (and "([a^]*b[o^]"m[e^]n)");
  - lines that only name sources ("[1913 Webster]", "[PJC]", "[WordNet 1.5]") go;
  - a paragraph's wrapped lines become one line; paragraphs stay apart.
The dictd database's own entries (00-database-*, 00-gcide-*) with the license text are left out.

usage: scripts/gcide_text.py [--dict F] [--index F] -o out.txt
Python 3 standard library.
"""
import argparse
import gzip
import os
import re
import sys

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
SOURCES = re.compile(r"^(\s*\[[^\]]*\])+\s*$")
# on a headword line: "\Ab*do"men\" and "([a^]*b[o^]"m[e^]n)", the dictionary's two markups
PRONUNCIATION = re.compile(r"\s*(\\[^\\\n]*\\|\([^()\n]*[*\"\[][^()\n]*\))")


def b64_number(s):
    """dictd's offsets and lengths: base64 digits, most significant first."""
    n = 0
    for ch in s:
        n = n * 64 + B64.index(ch)
    return n


def entries(index_lines):
    """(offset, length) of each distinct entry, in file order, without the database's own."""
    seen = set()
    for line in index_lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3 or parts[0].startswith("00-"):  # 00-database-*, 00-gcide-*
            continue
        span = (b64_number(parts[1]), b64_number(parts[2]))
        if span not in seen:
            seen.add(span)
    return sorted(seen)


def paragraphs(entry):
    """The entry's text as a list of one-line paragraphs, markup and source lines removed."""
    lines = entry.split("\n")
    # the entry starts at its headword, the first line not indented (the first entry's span
    # also holds the end of the dictionary's preface, indented)
    start = next((i for i, line in enumerate(lines) if line[:1].strip()), len(lines))
    out, cur = [], []
    for line in lines[start:]:
        if not line.strip() or SOURCES.match(line):
            if cur:
                out.append(" ".join(cur))
                cur = []
            continue
        cur.append(line.strip())
    if cur:
        out.append(" ".join(cur))
    if out:
        out[0] = PRONUNCIATION.sub("", out[0])
    return out


def convert(dict_bytes, index_lines):
    text = []
    for offset, length in entries(index_lines):
        entry = dict_bytes[offset:offset + length].decode("utf-8", errors="replace")
        body = paragraphs(entry)
        if body:
            text.append("\n".join(body))
    return "\n\n".join(text) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dict", default="/usr/share/dictd/gcide.dict.dz")
    ap.add_argument("--index", default="/usr/share/dictd/gcide.index")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    try:
        with gzip.open(args.dict, "rb") as f:
            dict_bytes = f.read()
        with open(args.index, encoding="utf-8") as f:
            index_lines = f.readlines()
    except OSError as e:
        sys.exit(f"gcide_text: {e}; install Debian's dict-gcide (make deps) or pass --dict/--index")
    text = convert(dict_bytes, index_lines)
    with open(args.out + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(args.out + ".tmp", args.out)  # a failed write leaves an older out.txt whole
    print(f"gcide_text: {len(entries(index_lines))} entries, {len(text.encode())} bytes -> {args.out}")


if __name__ == "__main__":
    main()
