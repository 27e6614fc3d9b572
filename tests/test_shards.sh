#!/bin/sh
# Token shards (docs/data.md): --prepare --format llmc writes llm.c's layout (read back here with
# numpy from llm.c's format, and holding the same ids as the mt token file of the same text);
# ./train reads a directory, a glob, llm.c shards written as llm.c writes them (version 1 and 2),
# nanoGPT's raw train.bin/val.bin (meta.json or --data-vocab); a run on shards resumes bit-exactly;
# bad shards exit 2 naming the file and what was expected, writing nothing; --prepare on a full
# disk leaves the previous token file as it was. MT_BUILD names the build directory.
NAME=test_shards
. "$(dirname "$0")/lib.sh"
MNT=$T/tiny
trap 'umount "$MNT" 2>/dev/null; rm -rf "$T"' EXIT
train() { "$B/train" --threads 1 "$@" >"$T/log" 2>&1; }
PY=/usr/bin/python3
head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
TINY="--n-layer 1 --n-head 2 --n-embd 16 --n-ctx 16 --batch 4 --eval-every 10 --eval-batches 2
      --log-every 5"

# 1. llm.c shards of 8000 tokens and meta.json; the same ids as the token file of the same text
BPE="--data $T/text.txt --tokenizer bpe --vocab-size 300"
train $BPE --prepare "$T/ll" --format llmc --shard-tokens 8000 || fail "prepare llmc: $(cat "$T/log")"
grep -q "mt's ids, not GPT-2's" "$T/log" || fail "prepare llmc does not say whose ids: $(cat "$T/log")"
train $BPE --prepare "$T/text.bin" || fail "prepare mt: $(cat "$T/log")"
$PY - "$T/ll" "$T/text.bin" <<'EOF' || fail "llm.c shards read with numpy"
import glob, json, struct, sys
import numpy as np
d, mt = sys.argv[1], open(sys.argv[2], "rb").read()
L = struct.unpack("<I", mt[24:28])[0]
want = np.frombuffer(mt[28 + L:], dtype=np.uint16)
ids = []
for part in ("train", "val"):
    for f in sorted(glob.glob(f"{d}/{part}_*.bin")):
        h = np.fromfile(f, dtype=np.int32, count=256)  # llm.c: magic, version, count
        t = np.fromfile(f, dtype=np.uint16, offset=1024)
        assert h[0] == 20240520 and h[1] == 1 and h[2] == len(t) and not h[3:].any(), f
        assert len(t) <= 8000, f
        ids.append(t)
got = np.concatenate(ids)
assert np.array_equal(got, want), "shards differ from the token file"
meta = json.load(open(f"{d}/meta.json"))
assert meta["type"] == "bpe" and len(meta["merges"]) == 300 - 256
EOF

# 2. the directory and a glob; 30 steps at once and 15 + 15 resumed give the same bits (constant
# lr and warmup: the schedule does not depend on --steps)
R="$TINY --data $T/ll --schedule const --warmup 2 --dropout 0.1 --steps 30 --save-every 10"
train $R --out "$T/r" && mv "$T/r" "$T/once" || fail "run on shards: $(cat "$T/log")"
grep -q "in 6 shards (mapped)" "$T/log" || fail "shards line: $(head -1 "$T/log")"
train $R --steps 15 --out "$T/r" || fail "first half"
train --resume --out "$T/r" --steps 30 || fail "resume: $(cat "$T/log")"
cmp -s "$T/once/model.safetensors" "$T/r/model.safetensors" || fail "resumed weights differ"
cmp -s "$T/once/optim.safetensors" "$T/r/optim.safetensors" || fail "resumed optimizer differs"
# step, loss, lr, grad_norm (the first half also evaluated at its last step)
[ "$(cut -d, -f1,2,4,5 "$T/once/metrics.csv")" = "$(cut -d, -f1,2,4,5 "$T/r/metrics.csv")" ] ||
    fail "resumed metrics differ"
train $TINY --data "$T/ll/train_00000[0-3].bin" --steps 2 --out "$T/glob" &&
    grep -q "in 4 shards" "$T/log" || fail "glob: $(cat "$T/log")"
"$B/infer" --checkpoint "$T/once/model.safetensors" --prompt "ROMEO:" --tokens 5 >"$T/log" 2>&1 ||
    fail "infer on a model of shards with meta.json's tokenizer: $(cat "$T/log")"

# 3. llm.c shards as llm.c's write_datafile writes them (version 1: uint16, 2: uint32) and
# nanoGPT's raw uint16 train.bin / val.bin
mkdir -p "$T/lc" "$T/lc4" "$T/ng"
$PY - "$T" <<'EOF' || fail "writing shards with numpy"
import sys
import numpy as np
t, r = sys.argv[1], np.random.default_rng(0)
def shard(path, ids, version):
    h = np.zeros(256, dtype=np.int32)
    h[0], h[1], h[2] = 20240520, version, len(ids)
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(np.asarray(ids, dtype=np.uint16 if version == 1 else np.uint32).tobytes())
ids = r.integers(0, 250, 9000)
ids[4321] = 299
shard(f"{t}/lc/a_train_000000.bin", ids[:4000], 1)
shard(f"{t}/lc/a_train_000001.bin", ids[4000:8000], 1)
shard(f"{t}/lc/a_val_000000.bin", ids[8000:], 1)
shard(f"{t}/lc4/b_train_000000.bin", ids[:8000], 2)
ids[:8000].astype(np.uint16).tofile(f"{t}/ng/train.bin")
ids[8000:].astype(np.uint16).tofile(f"{t}/ng/val.bin")
EOF
train $TINY --data "$T/lc" --data-vocab 300 --steps 2 --out "$T/o1" &&
    grep -q "9000 tokens (ids tokenizer, vocabulary 300), train 8000, val 1000 in 3" "$T/log" ||
    fail "llm.c v1 shards: $(cat "$T/log")"
train $TINY --data "$T/lc4" --data-vocab 300 --steps 2 --out "$T/o2" ||
    fail "llm.c v2 shards: $(cat "$T/log")"
train $TINY --data "$T/ng" --data-vocab 300 --steps 2 --out "$T/o3" &&
    grep -q "train 8000, val 1000" "$T/log" || fail "nanoGPT with --data-vocab: $(cat "$T/log")"
echo '{"vocab_size": 300}' >"$T/ng/meta.json"
train $TINY --data "$T/ng/train.bin" --steps 2 --out "$T/o4" ||
    fail "nanoGPT's train.bin with meta.json: $(cat "$T/log")"

# 4. bad input: exit 2, a message naming the file and what was expected, no --out written
mkdir -p "$T/bad/magic" "$T/bad/trunc" "$T/bad/width" "$T/bad/empty" "$T/bad/val"
cp "$T/lc/a_train_00000"[01].bin "$T/bad/magic/"
printf 'XXXX' | dd of="$T/bad/magic/a_train_000001.bin" conv=notrunc 2>/dev/null
cp "$T/lc/a_train_000000.bin" "$T/bad/trunc/"
head -c 5000 "$T/lc/a_train_000001.bin" >"$T/bad/trunc/a_train_000001.bin"
cp "$T/lc/a_train_000000.bin" "$T/lc4/b_train_000000.bin" "$T/bad/width/"
cp "$T/lc/a_train_000000.bin" "$T/bad/val/"
head -c 1034 "$T/lc/a_val_000000.bin" | $PY -c "import sys; b = bytearray(sys.stdin.buffer.read())
b[8:12] = (5).to_bytes(4, 'little'); sys.stdout.buffer.write(b)" >"$T/bad/val/a_val_000000.bin"
offset=$((1024 + 2 * 321)) # ids[4321]: the 321st of the second shard
bad() { # expected text, then the flags
    want=$1
    shift
    rm -rf "$T/no"
    train $TINY --steps 2 --out "$T/no" "$@"
    rc=$?
    [ $rc -eq 2 ] && grep -qF -- "$want" "$T/log" && [ ! -e "$T/no" ] ||
        fail "$* exited $rc (want 2, no --out, '$want'): $(cat "$T/log")"
}
bad "$T/bad/magic/a_train_000001.bin: starts with 0x58585858, so it is raw uint16 ids" \
    --data "$T/bad/magic" --data-vocab 300
bad "but $T/bad/magic/a_train_000000.bin is an llm.c shard (magic 20240520)" \
    --data "$T/bad/magic" --data-vocab 300
bad "$T/bad/trunc/a_train_000001.bin: the header announces 4000 ids of 2 bytes (8000 bytes) but \
the file holds 3976 bytes after its 1024-byte header: truncated" --data "$T/bad/trunc" \
    --data-vocab 300
bad "$T/bad/width/b_train_000000.bin holds 4-byte ids but $T/bad/width/a_train_000000.bin holds \
2-byte ids" --data "$T/bad/width" --data-vocab 300
bad "--data '$T/lc/*.shard': the pattern matches no file" --data "$T/lc/*.shard"
bad "$T/lc/a_train_000001.bin: token 321 is 299 (file offset $offset), outside the vocabulary \
of 299 (from --data-vocab)" --data "$T/lc" --data-vocab 299
bad "$T/bad/empty is a directory without token shards" --data "$T/bad/empty"
bad "the validation split, the files named *val*, has no file of a window of n_ctx + 1 = 17 \
tokens (5 tokens in all)" --data "$T/bad/val" --data-vocab 300
bad "$T/lc/a_train_000000.bin is an llm.c shard, which carries no vocabulary size" --data "$T/lc"
bad "--data-vocab 300: $T/text.bin is an mt token file" --data "$T/text.bin" --data-vocab 300
bad "--tokenizer char: this run does not read it (only --data of text" \
    --data "$T/lc" --data-vocab 300 --tokenizer char
"$B/train" $BPE --prepare "$T/ll" --format llmc >"$T/log" 2>&1
[ $? -eq 2 ] && grep -q "already holds meta.json\|already holds train_" "$T/log" ||
    fail "--prepare llmc over shards: $(cat "$T/log")"
"$B/train" --data "$T/text.txt" --format llmc >"$T/log" 2>&1
[ $? -eq 2 ] && grep -q "give --prepare too" "$T/log" || fail "--format alone: $(cat "$T/log")"

# 5. --prepare over a good token file on a full disk (a 300 KiB tmpfs; else a file size limit)
mkdir -p "$MNT"
if mount -t tmpfs -o size=300k tmpfs "$MNT" 2>/dev/null; then limit=unlimited how="tmpfs"
else limit=600 how="ulimit -f" # 512-byte blocks in dash
fi
head -c 20000 data/tinyshakespeare.txt >"$T/small.txt"
"$B/train" --data "$T/small.txt" --prepare "$MNT/ok.bin" >"$T/log" 2>&1 || fail "small prepare"
cp "$MNT/ok.bin" "$T/ok.copy"
(ulimit -f $limit && trap '' XFSZ && "$B/train" --data data/tinyshakespeare.txt \
    --prepare "$MNT/ok.bin") >"$T/log" 2>&1 && fail "prepare on a full disk ($how) succeeded"
grep -q "cannot write" "$T/log" || fail "full disk ($how): $(cat "$T/log")"
cmp -s "$MNT/ok.bin" "$T/ok.copy" || fail "full disk ($how): the previous token file was changed"
[ -z "$(ls "$MNT" | grep -v '^ok.bin$')" ] || fail "full disk ($how): left $(ls "$MNT")"

# 6. memory does not grow with the corpus: 20 steps on a 192 MiB set (3 shards of 32 Mi ids) take
# at most 24 MiB more than on a 2 MiB one (bench/shards_rss.sh measures 4 GiB against 10 MiB)
if [ -x /usr/bin/time ]; then
    mkdir -p "$T/rss/large" "$T/rss/small"
    $PY - "$T/rss" <<'EOF' || fail "writing the RSS shards"
import sys
import numpy as np
h = np.zeros(256, dtype=np.int32)
h[0], h[1] = 20240520, 1
ids = np.random.default_rng(1).integers(0, 256, 32 << 20, dtype=np.uint16)
sets = [(f"{sys.argv[1]}/large/train_{k}.bin", (ids + k) % 256) for k in range(3)]
for path, a in sets + [(f"{sys.argv[1]}/small/train_0.bin", ids[: 1 << 20])]:
    h[2] = len(a)
    with open(path, "wb") as f:
        f.write(h.tobytes())
        a.tofile(f)
EOF
    for set in small large; do
        /usr/bin/time -f %M -o "$T/rss/$set.kib" "$B/train" --data "$T/rss/$set" --data-vocab 256 \
            --n-layer 1 --n-embd 32 --n-head 2 --n-ctx 128 --batch 8 --steps 20 --eval-batches 4 \
            --threads 1 --out "$T/rss/out-$set" >"$T/log" 2>&1 || fail "RSS run, $set: $(cat "$T/log")"
    done
    small=$(cat "$T/rss/small.kib") large=$(cat "$T/rss/large.kib")
    [ "$large" -le $((small + 24 * 1024)) ] ||
        fail "peak RSS grows with the corpus: $large KiB on 192 MiB, $small KiB on 2 MiB"
    rm -rf "$T/rss"
else
    skip_case "the RSS check" "no /usr/bin/time (apt-get install time)"
fi

finish
