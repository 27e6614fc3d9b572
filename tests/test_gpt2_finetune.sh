#!/bin/sh
# --tokenizer gpt2 --tokenizer-file DIR (GPT-2's encoder.json and vocab.bpe): a tiny model of
# GPT-2's 50257 tokens trains on a text and ./infer encodes a prompt and decodes what it samples
# with the checkpoint's tokenizer (whose ids tests/test_gpt2.c checks against Encoder.js's); an
# llm.c gpt2 model file of GPT-2's vocabulary is accepted by --init-from, one of another vocabulary
# refused; --prepare --format llmc writes llm.c shards of Encoder.js's ids, whose meta.json gives
# llm.c's own shards the gpt2 tokenizer; a missing file, malformed encoder.json, a merge of an
# unknown token, a merge whose string is not encoder.json's next id, llm.c's gpt2_tokenizer.bin
# (no merges) and a missing --tokenizer-file are refused (exit 2, nothing written).
NAME=test_gpt2_finetune
. "$(dirname "$0")/lib.sh"
need_gpt2
command -v python3 >/dev/null || skip "needs python3 to write an llm.c model file"
head -c 20000 data/tinyshakespeare.txt >"$T/text.txt"
train() {
    "$B/train" --threads 2 --data "$T/text.txt" --batch 2 --eval-batches 1 "$@" >"$T/log" 2>&1
}
GPT2="--tokenizer gpt2 --tokenizer-file $G2"
TINY="--n-layer 1 --n-head 2 --n-embd 16 --n-ctx 32"

train $GPT2 $TINY --steps 3 --out "$T/g2" || fail "train exited $?: $(cat "$T/log")"
grep -q "6047 tokens (gpt2 tokenizer, vocabulary 50257)" "$T/log" || fail "data line: $(grep data "$T/log")"
"$B/infer" --checkpoint "$T/g2/model.safetensors" --prompt "ROMEO: Thou art" --tokens 6 \
    --temperature 0 2>"$T/infer.log" >"$T/out.txt" || fail "infer exited $?: $(cat "$T/infer.log")"
case "$(cat "$T/out.txt")" in
"ROMEO: Thou art"?*) ;;
*) fail "infer printed '$(cat "$T/out.txt")'" ;;
esac
grep -q "6 tokens" "$T/infer.log" || fail "infer: $(cat "$T/infer.log")"

# llm.c model files (zero weights) of GPT-2's vocabulary (padded to 50304) and of another
C=16
n=$((50304 * C + 32 * C + 4 * C + 3 * C * C + 3 * C + C * C + C + 8 * C * C + 5 * C + 2 * C))
llmc_header "$T/gpt2.bin" 20240326 3 32 50257 1 2 $C 50304 $((4 * n))
train $GPT2 --steps 1 --init-from "$T/gpt2.bin" --out "$T/ft" || fail "--init-from: $(cat "$T/log")"
grep -q "^init    loaded 20 of 20 tensors" "$T/log" || fail "--init-from: $(grep init "$T/log")"
# llm.c shards of GPT-2's ids (--prepare --format llmc), the ids Encoder.js gives the text; with
# its meta.json beside llm.c's own shards the run has the gpt2 tokenizer
train $GPT2 --val-fraction 0 --prepare "$T/shards" --format llmc ||
    fail "--prepare --format llmc: $(cat "$T/log")"
grep -q "6047 tokens, gpt2 tokenizer, vocabulary 50257 (GPT-2's ids)" "$T/log" ||
    fail "--prepare: $(cat "$T/log")"
if command -v node >/dev/null; then
    node -e 'const {encode} = require(process.argv[1]), fs = require("fs");
const ids = encode(fs.readFileSync(process.argv[2], "utf8")), b = fs.readFileSync(process.argv[3]);
const n = b.readInt32LE(8), got = [];
for (let i = 0; i < n; i++) got.push(b.readUInt16LE(1024 + 2 * i));
process.exit(got.join(" ") === ids.join(" ") ? 0 : 1);' "$(realpath "$G2/Encoder.js")" \
        "$T/text.txt" "$T/shards/train_000000.bin" || fail "the shard's ids are not Encoder.js's"
else
    skip_case "the shard's ids against Encoder.js" "node is absent"
fi
mkdir "$T/llmc"
cp "$T/shards/train_000000.bin" "$T/llmc/tiny_shakespeare_train.bin"
cp "$T/shards/meta.json" "$T/llmc/"
"$B/train" --threads 2 --data "$T/llmc" --batch 2 --eval-batches 1 --val-fraction 0.1 --steps 1 \
    --init-from "$T/gpt2.bin" --out "$T/sh" >"$T/log" 2>&1 || fail "shards: $(cat "$T/log")"
grep -q "6047 tokens (gpt2 tokenizer, vocabulary 50257)" "$T/log" || fail "shards: $(grep data "$T/log")"
"$B/infer" --checkpoint "$T/sh/model.safetensors" --prompt "ROMEO:" --tokens 2 --temperature 0 \
    >"$T/out.txt" 2>&1 || fail "infer on the shards' run: $(cat "$T/out.txt")"
n=$((128 * C + 32 * C + 4 * C + 3 * C * C + 3 * C + C * C + C + 8 * C * C + 5 * C + 2 * C))
llmc_header "$T/v59.bin" 20240326 3 32 59 1 2 $C 128 $((4 * n))

refused() { # what, expected text, train's flags...
    what=$1 want=$2
    shift 2
    rm -rf "$T/no" # what a failed case wrote
    train "$@" --steps 1 --out "$T/no"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$want" "$T/log" && [ ! -e "$T/no" ] || fail "$what: exit $rc: $(cat "$T/log")"
}
refused "vocabulary" "n_vocab is 59 in the file, 50257 here" $GPT2 --init-from "$T/v59.bin"
refused "no file" "needs --tokenizer-file (a directory of GPT-2's encoder.json and vocab.bpe)" \
    --tokenizer gpt2
refused "missing" "$T/none/encoder.json is missing" --tokenizer gpt2 --tokenizer-file "$T/none"
mkdir "$T/bad"
cp "$G2/encoder.json" "$T/bad/encoder.json"
refused "missing vocab.bpe" "$T/bad/vocab.bpe is missing" --tokenizer gpt2 --tokenizer-file "$T/bad"
cp "$G2/vocab.bpe" "$T/bad/vocab.bpe"
head -c 5000 "$G2/encoder.json" >"$T/bad/encoder.json"
refused "malformed encoder.json" "$T/bad/encoder.json: not JSON; expected GPT-2's encoder.json" \
    --tokenizer gpt2 --tokenizer-file "$T/bad"
cp "$G2/encoder.json" "$T/bad/encoder.json"
sed '3s/.*/Ġ qqqzzz/' "$G2/vocab.bpe" >"$T/bad/vocab.bpe"
refused "unknown token" "$T/bad/vocab.bpe line 3: \"qqqzzz\" is not a token of encoder.json" \
    --tokenizer gpt2 --tokenizer-file "$T/bad/encoder.json"
sed '2{h;d};3G' "$G2/vocab.bpe" >"$T/bad/vocab.bpe" # merges 0 and 1 swapped
refused "merge order" "line 2: merge 0 joins \"Ġ\" (id 220) and \"a\" (id 64), but encoder.json's id 256 is \"Ġt\"" \
    --tokenizer gpt2 --tokenizer-file "$T/bad"
python3 -c 'import struct, sys
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240328, 2, 50257, 50256, *[0] * 252))' \
    "$T/gpt2_tokenizer.bin"
refused "gpt2_tokenizer.bin" "llm.c's gpt2_tokenizer.bin (magic 20240328) holds each token's bytes but not GPT-2's merges, so it cannot encode text" \
    --tokenizer gpt2 --tokenizer-file "$T/gpt2_tokenizer.bin"
finish
