#!/bin/sh
# --tokenizer gpt2 --tokenizer-file tokenizer.json (or a directory holding one and no
# encoder.json): Hugging Face's tokenizer.json of GPT-2's byte-level BPE (model.type BPE,
# pre_tokenizer ByteLevel), written here from GPT-2's published encoder.json and vocab.bpe with
# the merges as "a b" strings and as ["a", "b"] pairs (newer files), encodes a text to the ids
# GPT-2's files give (whose ids tests/test_gpt2.c checks against Encoder.js's); --init-from a
# GPT2LMHeadModel's directory holding it gives --tokenizer gpt2 its vocabulary. Malformed JSON, a
# merge naming an unknown token, an id out of range, an added token not in the vocabulary, a
# WordPiece model, a Metaspace pre-tokenizer and a Llama's (SentencePiece-style BPE, byte fallback:
# tests/test_sp_hf.sh's) with --tokenizer gpt2, and GPT-2's with --tokenizer sp, are refused (exit
# 2, nothing written).
NAME=test_hf_tokenizer
. "$(dirname "$0")/lib.sh"
need_gpt2
command -v python3 >/dev/null || skip "needs python3 to write tokenizer.json"
head -c 3000 data/tinyshakespeare.txt >"$T/text.txt"
printf 'Ça va — naïve 東京 🙂 x  y\t\n<|endoftext|> end\n' >>"$T/text.txt"
train() { "$B/train" --threads 2 --data "$T/text.txt" --val-fraction 0 "$@" >"$T/log" 2>&1; }
ids() { # an mt token file's ids on one line
    python3 -c "import struct, sys; b = open(sys.argv[1], 'rb').read(); \
n = struct.unpack_from('<I', b, 24)[0]; print(' '.join(map(str, struct.unpack_from( \
'<%dH' % ((len(b) - 28 - n) // 2), b, 28 + n))))" "$1"
}
python3 - "$G2" "$T" <<'PY' || fail "writing tokenizer.json: exit $?"
import copy, json, os, sys
G2, T = sys.argv[1], sys.argv[2]
vocab = json.load(open(G2 + "/encoder.json", encoding="utf-8"))
lines = open(G2 + "/vocab.bpe", encoding="utf-8").read().split("\n")[1:]
merges = [m for m in lines if m]
tok = {"version": "1.0", "truncation": None, "padding": None,
       "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False,
                         "lstrip": False, "rstrip": False, "normalized": True, "special": True}],
       "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                         "use_regex": True},
       "post_processor": None, "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                 "byte_fallback": False, "vocab": vocab, "merges": merges}}
def write(name, t):
    os.makedirs(T + "/" + name)
    json.dump(t, open(T + "/" + name + "/tokenizer.json", "w", encoding="utf-8"), ensure_ascii=False)
write("strings", tok)
pairs = copy.deepcopy(tok)
pairs["model"]["merges"] = [m.split(" ") for m in merges]
write("pairs", pairs)
bad = copy.deepcopy(tok)
bad["model"]["merges"][2] = "Ġ qqqzzz"
write("unknown", bad)
bad = copy.deepcopy(tok)
bad["model"]["vocab"]["!"] = 99999
write("range", bad)
bad = copy.deepcopy(tok)
bad["added_tokens"][0]["id"] = 50300
write("added", bad)
bad = copy.deepcopy(tok)
bad["model"]["type"] = "WordPiece"
write("wordpiece", bad)
bad = copy.deepcopy(tok)
bad["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁"}
write("metaspace", bad)
bad = copy.deepcopy(tok) # a Llama's form: SentencePiece-style BPE with byte fallback
bad["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                     {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
bad["pre_tokenizer"] = None
bad["model"]["byte_fallback"] = True
write("llama", bad)
# a GPT2LMHeadModel of that vocabulary (1 layer, 16 channels, zero weights) beside it
V, C, P = 50257, 16, 32
shapes = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [P, C],
          "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
for k, shape in {"ln_1.weight": [C], "ln_1.bias": [C], "ln_2.weight": [C], "ln_2.bias": [C],
                 "attn.c_attn.weight": [C, 3 * C], "attn.c_attn.bias": [3 * C],
                 "attn.c_proj.weight": [C, C], "attn.c_proj.bias": [C],
                 "mlp.c_fc.weight": [C, 4 * C], "mlp.c_fc.bias": [4 * C],
                 "mlp.c_proj.weight": [4 * C, C], "mlp.c_proj.bias": [C]}.items():
    shapes["transformer.h.0." + k] = shape
h, off = {}, 0
for k in sorted(shapes):
    n = 4
    for d in shapes[k]:
        n *= d
    h[k] = {"dtype": "F32", "shape": shapes[k], "data_offsets": [off, off + n]}
    off += n
j = json.dumps(h).encode()
j += b" " * (-len(j) % 8)
import struct
open(T + "/strings/model.safetensors", "wb").write(struct.pack("<Q", len(j)) + j + bytes(off))
json.dump({"architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
           "model_type": "gpt2", "n_ctx": P, "n_embd": C, "n_head": 2, "n_layer": 1,
           "n_positions": P, "layer_norm_epsilon": 1e-5, "vocab_size": V},
          open(T + "/strings/config.json", "w"))
open(T + "/malformed.json", "w").write(json.dumps(tok)[:5000])
os.rename(T + "/malformed.json", T + "/strings/../malformed-tokenizer.json")
PY
train --tokenizer gpt2 --tokenizer-file "$G2" --prepare "$T/files.bin" ||
    fail "prepare with GPT-2's files: $(cat "$T/log")"
want=$(ids "$T/files.bin")
for form in strings pairs; do
    for f in "$T/$form/tokenizer.json" "$T/$form"; do
        rm -f "$T/hf.bin"
        train --tokenizer gpt2 --tokenizer-file "$f" --prepare "$T/hf.bin" ||
            fail "$form: prepare with $f: $(cat "$T/log")"
        [ -n "$want" ] && [ "$(ids "$T/hf.bin")" = "$want" ] ||
            fail "$form: $f encodes otherwise than GPT-2's files"
    done
done

# --init-from the checkpoint's directory: --tokenizer gpt2 takes its tokenizer.json
"$B/train" --threads 2 --data "$T/text.txt" --batch 2 --eval-batches 1 --tokenizer gpt2 \
    --init-from "$T/strings" --steps 1 --out "$T/ft" >"$T/log" 2>&1 ||
    fail "--init-from the directory: $(cat "$T/log")"
grep -q "tokens (gpt2 tokenizer, vocabulary 50257)" "$T/log" && grep -q "^init    loaded" "$T/log" ||
    fail "--init-from the directory: $(grep "data\|init" "$T/log")"

refused() { # what, expected text, train's flags...
    what=$1 want=$2
    shift 2
    rm -rf "$T/no"
    train "$@" --prepare "$T/no"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$want" "$T/log" && [ ! -e "$T/no" ] ||
        fail "$what: exit $rc: $(cat "$T/log")"
}
refused "malformed" "malformed-tokenizer.json: not JSON; expected Hugging Face's tokenizer.json" \
    --tokenizer gpt2 --tokenizer-file "$T/malformed-tokenizer.json"
refused "unknown token" "unknown/tokenizer.json merge 2: \"qqqzzz\" is not a token of model.vocab" \
    --tokenizer gpt2 --tokenizer-file "$T/unknown"
refused "id out of range" "range/tokenizer.json: \"!\" has id not an integer in range" \
    --tokenizer gpt2 --tokenizer-file "$T/range/tokenizer.json"
refused "added token" "added token '<|endoftext|>' of id 50300: expected an id of model.vocab" \
    --tokenizer gpt2 --tokenizer-file "$T/added"
refused "WordPiece" "model.type WordPiece, pre_tokenizer ByteLevel, normalizer none; --tokenizer gpt2 reads GPT-2's byte-level BPE" \
    --tokenizer gpt2 --tokenizer-file "$T/wordpiece"
refused "Llama's, gpt2" "model.type BPE, pre_tokenizer absent, normalizer Sequence; --tokenizer gpt2" \
    --tokenizer gpt2 --tokenizer-file "$T/llama/tokenizer.json"
refused "GPT-2's, sp" "strings/tokenizer.json: model.byte_fallback false; --tokenizer sp reads a Llama's tokenizer.json" \
    --tokenizer sp --tokenizer-file "$T/strings/tokenizer.json"
refused "Metaspace" "model.type BPE, pre_tokenizer Metaspace" --tokenizer gpt2 \
    --tokenizer-file "$T/metaspace/tokenizer.json"
finish
