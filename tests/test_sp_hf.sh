#!/bin/sh
# --tokenizer sp of Hugging Face's tokenizer.json of a Llama: written here from Llama 2's real
# tokenizer.model by HF's LlamaConverter rules (convert_slow_tokenizer.py: the vocab the model's
# pieces in order; the merges as SentencePieceExtractor makes them, for each piece every split
# into two pieces of the vocab, ordered by the piece's score, then the left and right lengths,
# descending; byte_fallback; normalizer Prepend "▁" + Replace " " -> "▁"), with
# tokenizer_config.json beside it. Its ids (tests/parity/tokenize_driver: read, carried through
# mt's tokenizer JSON, BOS as add_bos_token says) equal Debian's sentencepiece's encoding with
# that tokenizer.model, and decode as its ids do (to the text), for texts of spaces, newlines,
# digits, unicode, emoji (byte fallback) and a literal U+2581 (the space piece: HF's Replace
# leaves it), and for each line of tinyshakespeare and paragraph of docs/*.md; so do the merges
# as [a, b] pairs, a Metaspace pre_tokenizer (prepend_scheme first) and add_bos_token false.
# ./train --prepare reads it (a file or its directory), a document BOS first and EOS last as
# add_bos_token and add_eos_token say (as HF's tokenizer(text)), and so does
# --init-from a LlamaForCausalLM's directory holding them; its export's tokenizer.bin encodes the
# corpus as Llama 2's tokenizer.bin does, its GGUF's add_bos_token and add_eos_token are
# tokenizer_config.json's. A WordPiece model, byte_fallback false
# without byte tokens, no model.vocab, a merge of a token not in the vocabulary and a bos_token
# other than <s> are refused (exit 2).
NAME=test_sp_hf
. "$(dirname "$0")/lib.sh"
L2=${MT_LLAMA2C:-../shared/third_party/llama2c}
[ -r "$L2/tokenizer.model" ] || skip "no $L2/tokenizer.model: ../shared is absent"
/usr/bin/python3 -c 'import sentencepiece' 2>/dev/null ||
    skip "needs python3-sentencepiece (make deps-test)"
D=$B/tests/parity/tokenize_driver
[ -x "$D" ] || skip "no $D: make $D"
/usr/bin/python3 - "$L2/tokenizer.model" "$T" <<'PY' || fail "writing the fixtures: exit $?"
import copy, json, os, sys
import sentencepiece as spm
model, T = sys.argv[1], sys.argv[2]
sp = spm.SentencePieceProcessor(model_file=model)
pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
vocab = {p: i for i, (p, _) in enumerate(pieces)}
merges = []  # SentencePieceExtractor.extract(vocab_scores)
for piece, score in pieces:
    local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
             if piece[:k] in vocab and piece[k:] in vocab]
    merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
merges = sorted(merges, key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
added = [{"id": i, "content": sp.id_to_piece(i), "single_word": False, "lstrip": False,
          "rstrip": False, "normalized": False, "special": True} for i in range(3)]
tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
       "normalizer": {"type": "Sequence", "normalizers": [
           {"type": "Prepend", "prepend": "▁"},
           {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
       "pre_tokenizer": None,
       "post_processor": {"type": "TemplateProcessing",
                          "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                     {"Sequence": {"id": "A", "type_id": 0}}]},
       "decoder": {"type": "Sequence", "decoders": [
           {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
           {"type": "ByteFallback"}, {"type": "Fuse"},
           {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
       "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                 "continuing_subword_prefix": None, "end_of_word_suffix": None,
                 "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                 "vocab": vocab, "merges": ["%s %s" % (l, r) for l, r, _ in merges]}}
config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
          "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer", "legacy": True,
          "chat_template": "{% for message in messages %}{{ message['content'] }}{% endfor %}"}
def write(name, t, c=config):
    os.makedirs(T + "/" + name)
    json.dump(t, open(T + "/" + name + "/tokenizer.json", "w", encoding="utf-8"),
              ensure_ascii=False)
    json.dump(c, open(T + "/" + name + "/tokenizer_config.json", "w"))
write("strings", tok)
t = copy.deepcopy(tok)
t["model"]["merges"] = [[l, r] for l, r, _ in merges]
write("pairs", t)
t = copy.deepcopy(tok)
t["normalizer"] = None
t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                      "split": False}
write("metaspace", t)
write("nobos", tok, dict(config, add_bos_token=False))
write("flags", tok, dict(config, add_bos_token=False, add_eos_token=True))
t = copy.deepcopy(tok)
t["model"]["type"] = "WordPiece"
write("wordpiece", t)
t = copy.deepcopy(tok)
t["model"]["byte_fallback"] = False
t["model"]["vocab"] = {p: (i if i < 3 else i - 256) for p, i in vocab.items() if not 3 <= i < 259}
write("nobytes", t)
t = copy.deepcopy(tok)
del t["model"]["vocab"]
write("novocab", t)
t = copy.deepcopy(tok)
t["model"]["merges"][5] = "▁t qqqzzz"
write("unknown", t)
write("bos", tok, dict(config, bos_token="</s>"))
texts = ["Hello world", "The quick brown fox jumps over the lazy dog.", " leading space",
         "trailing space ", "   three leading, then  two  inner and trailing   ", "a\nb\n\nc\n",
         "line one\n  indented line\n\ttab", "digits 0123456789 and 3.14159, 1,000,000",
         "Ça va — naïve café, Straße, Ελληνικά, русский, 東京タワー, 한국어",
         "emoji 🙂🚀👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𠀋 a rare CJK ideograph and \u0001 a control byte",
         "    ", " ", "x", "<s> is not BOS in text </s>",
         "def f(x):\n    return x ** 2  # squared\n", "a literal ▁ (U+2581) and ▁▁ two"]
open(T + "/texts", "wb").write(b"\0".join(t.encode() for t in texts))
corpus = [l for l in open("data/tinyshakespeare.txt", encoding="utf-8").read().split("\n") if l]
for f in sorted(os.listdir("docs")):
    if f.endswith(".md"):
        corpus += [p for p in open("docs/" + f, encoding="utf-8").read().split("\n\n") if p]
open(T + "/corpus", "wb").write(b"\0".join(t.encode() for t in corpus))
open(T + "/want_corpus", "w").write("".join(" ".join(map(str, sp.encode(t, add_bos=True))) + "\n"
                                            for t in corpus))
# a LlamaForCausalLM of that vocabulary (1 layer, 16 channels, zero weights) beside "strings"
import struct
V, C, F, P = len(vocab), 16, 32, 32
shapes = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C], "lm_head.weight": [V, C]}
for k, shape in {"input_layernorm.weight": [C], "post_attention_layernorm.weight": [C],
                 "self_attn.q_proj.weight": [C, C], "self_attn.k_proj.weight": [C, C],
                 "self_attn.v_proj.weight": [C, C], "self_attn.o_proj.weight": [C, C],
                 "mlp.gate_proj.weight": [F, C], "mlp.up_proj.weight": [F, C],
                 "mlp.down_proj.weight": [C, F]}.items():
    shapes["model.layers.0." + k] = shape
h, off = {}, 0
for k in sorted(shapes):
    n = 4 * shapes[k][0] * (shapes[k][1] if len(shapes[k]) > 1 else 1)
    h[k] = {"dtype": "F32", "shape": shapes[k], "data_offsets": [off, off + n]}
    off += n
j = json.dumps(h).encode()
j += b" " * (-len(j) % 8)
open(T + "/strings/model.safetensors", "wb").write(struct.pack("<Q", len(j)) + j + bytes(off))
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
           "intermediate_size": F, "num_attention_heads": 2, "num_key_value_heads": 2,
           "num_hidden_layers": 1, "max_position_embeddings": P, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2, "vocab_size": V},
          open(T + "/strings/config.json", "w"))
one = "Ça va — 東京 🙂  x\n  y"  # a document for ./train --prepare: sentencepiece's ids as
open(T + "/one", "w").write(one)  # HF's tokenizer(text) gives them, BOS and EOS as configured
for name, bos, eos in (("strings", True, False), ("flags", False, True)):
    open(T + "/want_prepare_" + name, "w").write(
        " ".join(map(str, sp.encode(one, add_bos=bos) + [2] * eos)) + "\n")
for bos in (True, False):  # sentencepiece's ids and the text they decode to
    with open(T + "/want" + ("" if bos else "_nobos"), "w") as f:
        for t in texts:
            ids = sp.encode(t, add_bos=bos)
            f.write(" ".join(map(str, ids)) + "\t" + sp.decode(ids).encode().hex() + "\n")
PY
for form in strings pairs metaspace nobos; do
    want=$T/want
    [ $form = nobos ] && want=$T/want_nobos
    "$D" "$T/$form/tokenizer.json" "$T/texts" >"$T/got_$form" 2>"$T/err" ||
        fail "$form: the driver: $(cat "$T/err")"
    if [ $form = nobos ]; then # the dummy prefix stays without BOS: compare the ids only
        cut -f1 "$want" >"$T/w" && cut -f1 "$T/got_$form" >"$T/g" && want=$T/w
        cp "$T/g" "$T/got_$form"
    fi
    cmp -s "$want" "$T/got_$form" ||
        fail "$form: mt's ids (or their text) differ from sentencepiece's (want, got):
$(diff "$want" "$T/got_$form" | head -8)"
done
# sentencepiece's decoding gives the texts back (U+2581 as a space), so mt's does too
/usr/bin/python3 -c "import sys; t = open(sys.argv[1], 'rb').read().replace('▁'.encode(), \
b' ').split(b'\0'); \
g = [bytes.fromhex(l.split('\t')[1]) for l in open(sys.argv[2]).read().splitlines()]; \
sys.exit(t != g)" "$T/texts" "$T/got_strings" || fail "mt's ids do not decode to the texts"

# so are the ids of each line of tinyshakespeare and each paragraph of docs/*.md
"$D" "$T/strings/tokenizer.json" "$T/corpus" | cut -f1 >"$T/got_corpus"
cmp -s "$T/want_corpus" "$T/got_corpus" ||
    fail "corpus: $(diff "$T/want_corpus" "$T/got_corpus" | wc -l) lines of diff, first:
$(diff "$T/want_corpus" "$T/got_corpus" | head -4)"

# ./train --prepare reads it too, a file or its directory: a document's ids start with BOS when
# add_bos_token says and end with EOS when add_eos_token says, as HF's tokenizer(text)
train() { "$B/train" --threads 2 --data "$T/text" --val-fraction 0 "$@" >"$T/log" 2>&1; }
ids() { # an mt token file's ids on one line
    python3 -c "import struct, sys; b = open(sys.argv[1], 'rb').read(); \
n = struct.unpack_from('<I', b, 24)[0]; print(' '.join(map(str, struct.unpack_from( \
'<%dH' % ((len(b) - 28 - n) // 2), b, 28 + n))))" "$1"
}
cp "$T/one" "$T/text"
for f in strings/tokenizer.json strings flags; do
    rm -f "$T/p.bin"
    train --tokenizer sp --tokenizer-file "$T/$f" --prepare "$T/p.bin" ||
        fail "prepare with $f: $(cat "$T/log")"
    want=$(cat "$T/want_prepare_${f%%/*}")
    [ "$(ids "$T/p.bin")" = "$want" ] || fail "prepare with $f: $(ids "$T/p.bin"), not $want"
done

# --init-from the LlamaForCausalLM's directory: --tokenizer sp takes its tokenizer.json
head -c 2000 data/tinyshakespeare.txt >"$T/text"
"$B/train" --threads 2 --data "$T/text" --batch 2 --eval-batches 1 --tokenizer sp \
    --init-from "$T/strings" --steps 1 --out "$T/ft" >"$T/log" 2>&1 ||
    fail "--init-from the directory: $(cat "$T/log")"
grep -q "tokens (sp tokenizer, vocabulary 32000)" "$T/log" && grep -q "^init    loaded" "$T/log" ||
    fail "--init-from the directory: $(grep "data\|init" "$T/log")"
# its GGUF export carries the tokenizer's add_bos_token and add_eos_token, as llama.cpp reads them
gguf_kv() { # the GGUF file, keys: their values on one line
    /usr/bin/python3 -c "import sys; sys.path.insert(0, 'tests/parity'); \
from test_export import read_gguf; kv = read_gguf(sys.argv[1])[1]; \
print(' '.join(repr(kv.get(k)) for k in sys.argv[2:]))" "$@"
}
FLAGS="tokenizer.ggml.add_bos_token tokenizer.ggml.add_eos_token"
"$B/train" --threads 2 --data "$T/text" --batch 2 --eval-batches 1 --tokenizer sp \
    --tokenizer-file "$T/flags" --init-from "$T/strings" --steps 0 --out "$T/ft_flags" \
    >"$T/log" 2>&1 || fail "--init-from with the flags' tokenizer: $(cat "$T/log")"
for ft in ft:"True False" ft_flags:"False True"; do
    "$B/export" --checkpoint "$T/${ft%%:*}/model.safetensors" --format gguf --out "$T/f.gguf" \
        >"$T/log" 2>&1 || fail "export gguf: $(cat "$T/log")"
    [ "$(gguf_kv "$T/f.gguf" $FLAGS)" = "${ft#*:}" ] ||
        fail "${ft%%:*}'s GGUF: $FLAGS are $(gguf_kv "$T/f.gguf" $FLAGS), not ${ft#*:}"
done
# its export to llama2.c's format writes each piece's score as -(the lowest rank making it): the
# exported tokenizer.bin, merged by score as run.c does, encodes the corpus as Llama 2's own does
"$B/export" --checkpoint "$T/ft/model.safetensors" --format llama2c --out "$T/m.bin" \
    >"$T/log" 2>&1 || fail "export: $(cat "$T/log")"
"$D" "$T/tokenizer.bin" "$T/corpus" >"$T/got_export" 2>"$T/err" || fail "export: $(cat "$T/err")"
"$D" "$L2/tokenizer.bin" "$T/corpus" >"$T/want_export" 2>"$T/err" || fail "$(cat "$T/err")"
cmp -s "$T/want_export" "$T/got_export" ||
    fail "the exported tokenizer.bin: $(diff "$T/want_export" "$T/got_export" | wc -l) lines of diff"

refused() { # what, expected text, the fixture
    "$D" "$T/$3/tokenizer.json" "$T/texts" >/dev/null 2>"$T/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$2" "$T/err" || fail "$1: exit $rc: $(cat "$T/err")"
    rm -rf "$T/no"
    train --tokenizer sp --tokenizer-file "$T/$3/tokenizer.json" --prepare "$T/no"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$2" "$T/log" && [ ! -e "$T/no" ] ||
        fail "$1, ./train: exit $rc: $(cat "$T/log")"
}
refused "WordPiece" "wordpiece/tokenizer.json: model.type WordPiece; --tokenizer sp reads a Llama's tokenizer.json: model.type BPE with byte_fallback true" wordpiece
refused "no byte tokens" "nobytes/tokenizer.json: model.byte_fallback false; --tokenizer sp reads" nobytes
refused "no vocab" "novocab/tokenizer.json: model.vocab absent; expected an object of 259 to 65536 token -> id" novocab
refused "unknown token" "unknown/tokenizer.json: model.merges\[5\]: 'qqqzzz' is not a token of model.vocab" unknown
refused "bos_token" "bos/tokenizer_config.json: bos_token '</s>'; mt's sp tokenizer has <unk> 0, <s> 1 (BOS), </s> 2 (EOS)" bos
finish
