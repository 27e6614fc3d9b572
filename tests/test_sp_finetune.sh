#!/bin/sh
# --tokenizer sp --tokenizer-file tokenizer.bin: a llama2.c model of Llama 2's vocabulary trains
# on a text, exports, is fine-tuned from the file (--init-from) and ./infer generates from a prompt
# what llama2.c's run.c generates from the same file (greedy; a step at a small lr each keeps the
# untied random model from collapsing onto one token, so the texts say something); a model of
# another vocabulary, a missing or truncated tokenizer.bin and an unread --tokenizer-file are
# refused (exit 2). The export gives back the tokenizer.bin read, and a GGUF whose vocabulary
# llama.cpp (npm's node-llama-cpp) encodes a text with as mt does, and which --tokenizer-file
# reads back (a GGUF of a byte vocabulary is refused naming what it is). The training text is
# encoded without BOS or EOS (docs/finetune.md).
NAME=test_sp_finetune
. "$(dirname "$0")/lib.sh"
L2C=${MT_LLAMA2C:-../shared/third_party/llama2c}
TB=$L2C/tokenizer.bin
[ -r "$TB" ] && [ -r "$L2C/run.c" ] || skip "no $TB or run.c: ../shared is absent"
cc -O2 -w -o "$T/run" "$L2C/run.c" -lm || skip "cannot compile run.c"
head -c 20000 data/tinyshakespeare.txt >"$T/text.txt"
train() { "$B/train" --threads 2 --data "$T/text.txt" --batch 2 --eval-batches 1 "$@" >"$T/log" 2>&1; }
SP="--tokenizer sp --tokenizer-file $TB"
TINY="--arch llama --n-layer 2 --n-head 2 --n-embd 64 --n-ctx 16 --untie"

train $SP $TINY --steps 1 --lr 0.0001 --out "$T/sp" || fail "train exited $?: $(cat "$T/log")"
grep -q "sp tokenizer, vocabulary 32000" "$T/log" || fail "data line: $(grep data "$T/log")"
"$B/export" --checkpoint "$T/sp/model.safetensors" --out "$T/sp.bin" >/dev/null || fail "export"
train $SP --steps 2 --lr 0.0001 --init-from "$T/sp.bin" --out "$T/ft" || fail "fine-tune exited $?: $(cat "$T/log")"
"$B/export" --checkpoint "$T/ft/model.safetensors" --out "$T/ft.bin" >/dev/null || fail "export ft"
# run.c -n counts the prompt's 4 ids (BOS " ROM" "EO" ":"): 9 sampled, then a newline
"$T/run" "$T/ft.bin" -z "$TB" -t 0 -i "ROMEO:" -n 13 2>/dev/null | head -c -1 >"$T/run.txt"
"$B/infer" --checkpoint "$T/ft/model.safetensors" --prompt "ROMEO:" --tokens 9 --temperature 0 \
    2>/dev/null >"$T/mt.txt" || fail "infer exited $?"
cmp -s "$T/run.txt" "$T/mt.txt" || fail "infer: '$(cat "$T/mt.txt")', run.c: '$(cat "$T/run.txt")'"
cmp -s "$T/tokenizer.bin" "$TB" || fail "the exported tokenizer.bin is not the one read"

# the GGUF export's vocabulary is SentencePiece's: read back (--tokenizer-file model.gguf) it
# encodes a text as tokenizer.bin does, and so does llama.cpp with it
ids() { # an mt token file's ids on one line
    python3 -c "import struct, sys; b = open(sys.argv[1], 'rb').read(); \
n = struct.unpack_from('<I', b, 24)[0]; print(' '.join(map(str, struct.unpack_from( \
'<%dH' % ((len(b) - 28 - n) // 2), b, 28 + n))))" "$1"
}
"$B/export" --checkpoint "$T/ft/model.safetensors" --format gguf --out "$T/ft.gguf" >/dev/null ||
    fail "export gguf"
{ head -c 3000 "$T/text.txt"; printf 'Ça va — naïve 東京 🙂 x  y\t\n'; } >"$T/some.txt"
train $SP --prepare "$T/some.bin" --data "$T/some.txt" --val-fraction 0 ||
    fail "prepare: $(cat "$T/log")"
mt=$(ids "$T/some.bin")
[ "${mt%% *}" != 1 ] && [ "${mt##* }" != 2 ] ||
    fail "tokenizer.bin's training text is encoded with BOS or EOS: $(echo "$mt" | head -c 80)"
train --tokenizer sp --tokenizer-file "$T/ft.gguf" --prepare "$T/gguf.bin" --data "$T/some.txt" \
    --val-fraction 0 || fail "prepare with the GGUF's vocabulary: $(cat "$T/log")"
[ -n "$mt" ] && [ "$(ids "$T/gguf.bin")" = "$mt" ] || fail "the GGUF's vocabulary encodes otherwise"
train --tokenizer sp --tokenizer-file "$T/ft.gguf" --init-from "$T/ft.gguf" --steps 1 \
    --out "$T/from-gguf" || fail "fine-tuning the GGUF with its vocabulary: $(cat "$T/log")"
NLC=${MT_NODE_LLAMA_CPP:-build-node/node_modules}
if [ ! -r "$NLC/node-llama-cpp/dist/index.js" ] || ! command -v node >/dev/null; then
    skip_case "llama.cpp" "node-llama-cpp missing in $NLC (make deps-llamacpp; MT_NODE_LLAMA_CPP)"
else
    lc=$(MT_NODE_LLAMA_CPP=$NLC node tests/llamacpp_tokenize.mjs "$T/ft.gguf" "$T/some.txt" \
        2>"$T/node.log") || fail "llama.cpp exited $?: $(cat "$T/node.log")"
    [ -n "$mt" ] && [ "$mt" = "$lc" ] || fail "llama.cpp's ids differ: $(echo "$lc" | head -c 200)"
fi

refused() { # what, expected text, train's flags...
    what=$1 want=$2
    shift 2
    train "$@" --steps 1 --out "$T/no"
    rc=$?
    [ $rc -eq 2 ] && grep -q "$want" "$T/log" && [ ! -e "$T/no" ] || fail "$what: exit $rc: $(cat "$T/log")"
}
train --tokenizer byte $TINY --steps 1 --out "$T/byte" && "$B/export" --checkpoint \
    "$T/byte/model.safetensors" --out "$T/byte.bin" >/dev/null || fail "byte model"
refused "vocabulary" "n_vocab is 256 in the file, 32000 here" $SP --init-from "$T/byte.bin"
head -c 1000 "$TB" >"$T/trunc.bin"
refused "truncated" "$T/trunc.bin: truncated at byte 996, in piece 71" --tokenizer sp \
    --tokenizer-file "$T/trunc.bin"
refused "no file" "needs --tokenizer-file" --tokenizer sp
refused "unread" "does not read it" --tokenizer byte --tokenizer-file "$TB"
"$B/export" --checkpoint "$T/byte/model.safetensors" --format gguf --out "$T/byte.gguf" \
    >/dev/null || fail "byte gguf"
refused "a gpt2 GGUF vocabulary" "its vocabulary is tokenizer.ggml.model 'gpt2'" --tokenizer sp \
    --tokenizer-file "$T/byte.gguf"
finish
