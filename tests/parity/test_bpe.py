"""mt's BPE against the naive Python BPE of bpe_ref.py, written from the rules in
src/data/bpe.c (pre-tokenizer regex, the highest count first, ties to the smallest (left, right),
stop below a count of 2, merges applied in the order learnt). ./train --prepare writes
mt's merges (the token file's tokenizer JSON) and tokens; both must equal the reference's, on
tiny Shakespeare (learnt from the text before the validation part) and on a text of random
bytes, random UTF-8 and long runs."""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

from bpe_ref import encode, train
from harness import BUILD

def mt_prepare(path, vocab_size, val_fraction, out):
    subprocess.run([os.path.join(BUILD, "train"), "--data", path, "--tokenizer", "bpe",
                    "--vocab-size", str(vocab_size), "--val-fraction", str(val_fraction),
                    "--prepare", out], check=True, stdout=subprocess.DEVNULL)
    raw = open(out, "rb").read()
    vocab, count, jlen = struct.unpack("<IQI", raw[12:28])
    tok = json.loads(raw[28:28 + jlen])
    ids = list(struct.unpack(f"<{count}H", raw[28 + jlen:]))
    assert tok["type"] == "bpe" and vocab == 256 + len(tok["merges"]), (vocab, tok["type"])
    return [tuple(m) for m in tok["merges"]], ids


def mixed_text(seed=7):
    """Random bytes, random UTF-8, long runs (past 64 bytes) of each class and of mixed spaces,
    and repeated words, so that many merges tie and the vocabulary runs out of repeated pairs."""
    r = random.Random(seed)
    parts = []
    for _ in range(3000):
        k = r.randrange(8)
        if k == 0:
            parts.append(bytes(r.randrange(1, 256) for _ in range(r.randrange(1, 20))))
        elif k == 1:
            parts.append("".join(chr(r.choice([r.randrange(0x20, 0x7f), r.randrange(0xa0, 0x800),
                                               r.randrange(0x800, 0xd800),
                                               r.randrange(0x10000, 0x110000)]))
                                 for _ in range(r.randrange(1, 12))).encode())
        elif k == 2:
            parts.append(r.choice([b" ", b"\n", b"\t", b"a", b"7", b"-", b"\xc3\xa9", b" \n"])
                         * r.randrange(1, 150))
        elif k == 3:
            parts.append(r.choice([b"  ", b"\n ", b" \t ", b"\r\n"]) * r.randrange(1, 5))
        else:
            parts.append(r.choice([b" the", b" cat", b" sat", b"on", b" mat", b"!", b"42",
                                   b"\xe2\x98\x83", b" caf\xc3\xa9", b"..."]))
    return b"".join(parts)


failed = 0


def case(label, text, vocab_size, val_fraction, d):
    global failed
    path = os.path.join(d, "text.txt")
    with open(path, "wb") as f:
        f.write(text)
    got_merges, got_ids = mt_prepare(path, vocab_size, val_fraction, os.path.join(d, "t.bin"))
    cut = len(text) - int(len(text) * val_fraction)
    want_merges = train(text[:cut], vocab_size)
    want_ids = encode(text[:cut], want_merges) + encode(text[cut:], want_merges)
    ok = got_merges == want_merges
    first = next((i for i, (a, b) in enumerate(zip(got_merges, want_merges)) if a != b), None)
    print(f"  {label}: {len(text)} bytes, {len(got_merges)} merges (reference {len(want_merges)})"
          f"{'' if ok else f', first difference at merge {first}'}")
    ok_ids = got_ids == want_ids
    print(f"  {label}: {len(got_ids)} tokens{'' if ok_ids else ', DIFFER from the reference'}")
    failed += (not ok) + (not ok_ids)


with tempfile.TemporaryDirectory() as d:
    shakespeare = open("data/tinyshakespeare.txt", "rb").read()
    case("tiny Shakespeare 200 KB, vocab 1024, val 0.1", shakespeare[:200000], 1024, 0.1, d)
    case("mixed bytes, vocab 1500", mixed_text(), 1500, 0.0, d)
    # every pair ties: the smallest (left, right) goes first
    case("ties", b" ab cd ef ab cd ef zy", 300, 0.0, d)
print(f"parity bpe: {'FAILED ' + str(failed) if failed else 'ok'}")
sys.exit(1 if failed else 0)
