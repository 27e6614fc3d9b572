#!/bin/sh
# --tokenizer gpt2 --tokenizer-file model.gguf: a GGUF's gpt2 (byte-level BPE) vocabulary as the
# tokenizer. A Llama of GPT-2's vocabulary (encoder.json, vocab.bpe) exports to GGUF; read back,
# its vocabulary encodes a text to the ids GPT-2's files give, and so does llama.cpp (npm's
# node-llama-cpp, MT_NODE_LLAMA_CPP: its node_modules; make deps-llamacpp) with the same file;
# the GGUF fine-tunes with its own vocabulary. A merge naming an unknown token, two ids of one
# string, merges out of GPT-2's order, a bpe vocabulary (not GPT-2's byte order), another
# tokenizer.ggml.model and --tokenizer sp are refused (exit 2, nothing written).
NAME=test_gguf_gpt2
. "$(dirname "$0")/lib.sh"
need_gpt2
command -v python3 >/dev/null || skip "needs python3 to read token files and rewrite the GGUF"
head -c 20000 data/tinyshakespeare.txt >"$T/text.txt"
train() {
    "$B/train" --threads 2 --data "$T/text.txt" --batch 2 --eval-batches 1 "$@" >"$T/log" 2>&1
}
ids() { # an mt token file's ids on one line
    python3 -c "import struct, sys; b = open(sys.argv[1], 'rb').read(); \
n = struct.unpack_from('<I', b, 24)[0]; print(' '.join(map(str, struct.unpack_from( \
'<%dH' % ((len(b) - 28 - n) // 2), b, 28 + n))))" "$1"
}
TINY="--arch llama --n-layer 1 --n-head 2 --n-embd 16 --n-ctx 16"
train --tokenizer gpt2 --tokenizer-file "$G2" $TINY --steps 1 --out "$T/g2" ||
    fail "train exited $?: $(cat "$T/log")"
"$B/export" --checkpoint "$T/g2/model.safetensors" --format gguf --out "$T/g2.gguf" >/dev/null ||
    fail "export gguf"
{ head -c 3000 "$T/text.txt"; printf 'Ça va — naïve 東京 🙂 x  y\t\n<|endoftext|> end\n'; } >"$T/some.txt"
train --tokenizer gpt2 --tokenizer-file "$G2" --prepare "$T/files.bin" --data "$T/some.txt" \
    --val-fraction 0 || fail "prepare with GPT-2's files: $(cat "$T/log")"
mt=$(ids "$T/files.bin")
train --tokenizer gpt2 --tokenizer-file "$T/g2.gguf" --prepare "$T/gguf.bin" --data "$T/some.txt" \
    --val-fraction 0 || fail "prepare with the GGUF's vocabulary: $(cat "$T/log")"
grep -q "tokens, gpt2 tokenizer, vocabulary 50257" "$T/log" || fail "prepare: $(cat "$T/log")"
[ -n "$mt" ] && [ "$(ids "$T/gguf.bin")" = "$mt" ] || fail "the GGUF's vocabulary encodes otherwise"
train --tokenizer gpt2 --tokenizer-file "$T/g2.gguf" --init-from "$T/g2.gguf" --steps 1 \
    --out "$T/from-gguf" || fail "fine-tuning the GGUF with its vocabulary: $(cat "$T/log")"
NLC=${MT_NODE_LLAMA_CPP:-build-node/node_modules}
if [ ! -r "$NLC/node-llama-cpp/dist/index.js" ] || ! command -v node >/dev/null; then
    skip_case "llama.cpp" "node-llama-cpp missing in $NLC (make deps-llamacpp; MT_NODE_LLAMA_CPP)"
else
    lc=$(MT_NODE_LLAMA_CPP=$NLC node tests/llamacpp_tokenize.mjs "$T/g2.gguf" "$T/some.txt" \
        2>"$T/node.log") || fail "llama.cpp exited $?: $(cat "$T/node.log")"
    [ -n "$mt" ] && [ "$mt" = "$lc" ] || fail "llama.cpp's ids differ: $(echo "$lc" | head -c 200)"
fi

# the GGUF rewritten in place (strings of the same length): merge 0 "Ġ t" naming a byte that is no
# token, token 257 "Ġa" spelled "Ġt" (id 256's), merges 0 and 1 swapped, the model "bert"
python3 - "$T/g2.gguf" "$T" <<'PY' || fail "rewriting the file: exit $?"
import struct, sys
src, T = sys.argv[1], sys.argv[2]
b = open(src, "rb").read()
def s(t): return struct.pack("<Q", len(t.encode())) + t.encode()
def put(name, old, new):
    assert b.count(old) == 1, (name, b.count(old))
    open(T + "/" + name + ".gguf", "wb").write(b.replace(old, new))
put("unknown", s("Ġ t"), s("Ġ \x01"))
put("twice", s("Ń") + s("Ġt") + s("Ġa"), s("Ń") + s("Ġt") + s("Ġt"))
put("order", s("Ġ t") + s("Ġ a"), s("Ġ a") + s("Ġ t"))
put("bert", s("tokenizer.ggml.model") + struct.pack("<I", 8) + s("gpt2"),
    s("tokenizer.ggml.model") + struct.pack("<I", 8) + s("bert"))
PY
refused() { # what, expected text, train's flags...
    what=$1 want=$2
    shift 2
    rm -rf "$T/no" # what a failed case wrote
    train "$@" --steps 1 --out "$T/no"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$want" "$T/log" && [ ! -e "$T/no" ] ||
        fail "$what: exit $rc: $(cat "$T/log")"
}
refused "unknown token" "unknown.gguf merge 0: \"$(printf '\001')\" is not a token of tokenizer.ggml.tokens" \
    --tokenizer gpt2 --tokenizer-file "$T/unknown.gguf"
refused "two ids" "twice.gguf: ids 25[67] and 25[67] are both \"Ġt\"" --tokenizer gpt2 \
    --tokenizer-file "$T/twice.gguf"
refused "merge order" "order.gguf merge 0: merge 0 joins \"Ġ\" (id 220) and \"a\" (id 64), but tokenizer.ggml.tokens's id 256 is \"Ġt\"" \
    --tokenizer gpt2 --tokenizer-file "$T/order.gguf"
refused "bert" "its vocabulary is tokenizer.ggml.model 'bert'; mt reads a GGUF's SentencePiece vocabulary ('llama', --tokenizer sp) and its GPT-2 byte-level BPE one ('gpt2', --tokenizer gpt2)" \
    --tokenizer gpt2 --tokenizer-file "$T/bert.gguf"
refused "--tokenizer sp" "its vocabulary is tokenizer.ggml.model 'gpt2'" --tokenizer sp \
    --tokenizer-file "$T/g2.gguf"
train --tokenizer bpe --vocab-size 300 $TINY --steps 1 --out "$T/bpe" ||
    fail "bpe model: $(cat "$T/log")"
"$B/export" --checkpoint "$T/bpe/model.safetensors" --format gguf --out "$T/bpe.gguf" \
    >/dev/null || fail "bpe gguf"
refused "a bpe vocabulary" "bpe.gguf: id 0 is \"Ā\"; GPT-2's ids 0..255 are the bytes in bytes_to_unicode's order" \
    --tokenizer gpt2 --tokenizer-file "$T/bpe.gguf"
finish
