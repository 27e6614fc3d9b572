#!/bin/sh
# Importing GGUF (./train --init-from model.gguf): an mt Llama exported (float32 and --f16, tied
# and untied with 2 of 4 key/value heads), imported and exported again is the same file byte for
# byte, version 2 as version 3; the import fine-tunes and ./infer runs it; a shape-changing flag,
# another vocabulary, a truncated file, another magic or version, another architecture, a tensor
# type not read and a tensor past the file's end are refused with exit 2 and nothing written.
# With llama.cpp (npm's node-llama-cpp, MT_NODE_LLAMA_CPP: its node_modules; make deps-llamacpp):
# its own quantizer (libllama's llama_model_quantize) turns the export into BF16, Q8_0, Q4_0,
# Q4_K and Q6_K files, each imports, and mt's greedy continuation from the import is llama.cpp's
# on the same file, token for token (and on the float32 and --f16 files).
NAME=test_import_gguf
. "$(dirname "$0")/lib.sh"
NLC=${MT_NODE_LLAMA_CPP:-build-node/node_modules}
command -v python3 >/dev/null || skip "needs python3 to rewrite the files"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }
head -c 200000 data/tinyshakespeare.txt >"$T/text.txt"
DATA="--data $T/text.txt --tokenizer byte --batch 8 --eval-batches 1"
# rows of 256: whole blocks of the K-quants
LLAMA="$DATA --arch llama --n-layer 2 --n-head 4 --n-embd 256 --n-ff 256 --n-ctx 64"

# export -> import -> export: the same bytes
train $LLAMA --n-kv-head 4 --steps 2 --out "$T/tied" || fail "tied: train exited $?: $(cat "$T/log")"
train $LLAMA --n-kv-head 2 --untie --steps 2 --out "$T/untied" ||
    fail "untied: train exited $?: $(cat "$T/log")"
for name in tied untied; do
    for f16 in "" --f16; do
        g=$T/$name$f16.gguf
        "$B/export" --checkpoint "$T/$name/model.safetensors" --format gguf $f16 --out "$g" \
            >/dev/null || fail "$name$f16: export exited $?"
        train $DATA --steps 0 --init-from "$g" --out "$T/$name$f16-in" ||
            fail "$name$f16: import exited $?: $(cat "$T/log")"
        grep -q "^init    loaded 2[01] of 2[01] tensors" "$T/log" ||
            fail "$name$f16: $(grep init "$T/log")"
        "$B/export" --checkpoint "$T/$name$f16-in/model.safetensors" --format gguf $f16 \
            --out "$T/again.gguf" >/dev/null || fail "$name$f16: the second export exited $?"
        cmp -s "$g" "$T/again.gguf" || fail "$name$f16: export -> import -> export differs"
    done
done

# fine-tuning the import, and ./infer on it
train $DATA --steps 3 --init-from "$T/untied.gguf" --out "$T/tuned" ||
    fail "fine-tuning exited $?: $(cat "$T/log")"
"$B/infer" --checkpoint "$T/tuned/model.safetensors" --prompt "ROMEO:" --tokens 8 >"$T/gen" 2>&1 ||
    fail "infer exited $?: $(cat "$T/gen")"

# the export rewritten: version 2, version 1, architecture mamba, a q4_1 tensor, a tensor past the
# end, another magic, two tensors of one name; and rand.gguf: its weights drawn here (norms
# 1 + 0.1 N(0, 1), matrices N(0, 1 / in), the head 3x: greedy picks farther from ties than a model
# trained briefly's)
python3 - "$T/untied.gguf" "$T" <<'PY' || fail "rewriting the file: exit $?"
import random, struct, sys
src, T = sys.argv[1], sys.argv[2]
b = bytearray(open(src, "rb").read())
at = 24
S = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(t):
    global at
    if t == 8:
        at += 8 + struct.unpack_from("<Q", b, at)[0]
    elif t == 9:
        et, n = struct.unpack_from("<IQ", b, at)
        at += 12
        for _ in range(n):
            skip(et)
    else:
        at += S[t]
nt, nkv = struct.unpack_from("<QQ", b, 8)
for _ in range(nkv):
    n = struct.unpack_from("<Q", b, at)[0]
    key, at = b[at + 8:at + 8 + n].decode(), at + 8 + n
    t = struct.unpack_from("<I", b, at)[0]
    at += 4
    if key == "general.architecture":
        arch = at + 8
    skip(t)
info = {}
for _ in range(nt):
    n = struct.unpack_from("<Q", b, at)[0]
    name, at = b[at + 8:at + 8 + n].decode(), at + 8 + n
    nd = struct.unpack_from("<I", b, at)[0]
    at += 4 + 8 * nd
    info[name] = (at, nd, struct.unpack_from(f"<{nd}Q", b, at - 8 * nd))  # type, offset at at
    at += 12
data = (at + 31) // 32 * 32
def write(name, edit):
    c = bytearray(b)
    edit(c)
    open(f"{T}/{name}.gguf", "wb").write(c)
write("v2", lambda c: struct.pack_into("<I", c, 4, 2))
write("v1", lambda c: struct.pack_into("<I", c, 4, 1))
write("mamba", lambda c: c.__setitem__(slice(arch, arch + 5), b"mamba"))
write("q4_1", lambda c: struct.pack_into("<I", c, info["blk.0.attn_q.weight"][0], 3))
write("past", lambda c: struct.pack_into("<Q", c, info["output.weight"][0] + 4, len(b)))
write("magic", lambda c: c.__setitem__(slice(0, 4), b"GGML"))
k = b.index(b"blk.0.attn_k.weight")
write("twice", lambda c: c.__setitem__(slice(k, k + 19), b"blk.0.attn_q.weight"))
random.seed(0)
def draw(c):
    for name, (pos, nd, ne) in info.items():
        off, n = data + struct.unpack_from("<Q", b, pos + 4)[0], ne[0] * (ne[1] if nd == 2 else 1)
        x = [1 + 0.1 * random.gauss(0, 1) if nd == 1 else
             random.gauss(0, 1) / ne[0] ** 0.5 * (3 if name == "output.weight" else 1) for _ in range(n)]
        struct.pack_into(f"<{n}f", c, off, *x)
write("rand", draw)
PY
train $DATA --steps 0 --init-from "$T/v2.gguf" --out "$T/v2" || fail "version 2: exit $?: $(cat "$T/log")"
"$B/export" --checkpoint "$T/v2/model.safetensors" --format gguf --out "$T/again.gguf" >/dev/null &&
    cmp -s "$T/untied.gguf" "$T/again.gguf" || fail "version 2 imports to other weights"

U=$T/untied.gguf
refused "--n-embd" "n_embd is 256 in the file, 128 here (--n-embd 256)" --init-from "$U" --n-embd 128
refused "--tokenizer char" "n_vocab is 256 in the file, 62 here" --init-from "$U" --tokenizer char
head -c 100000 "$U" >"$T/short.gguf"
refused "a truncated file" "short.gguf: tensor 'token_embd.weight' of the GGUF file .* ends past the file's 100000 bytes (truncated?)" \
    --init-from "$T/short.gguf"
head -c 20 "$U" >"$T/tiny.gguf"
refused "less than a header" "tiny.gguf: truncated: 20 bytes, less than a GGUF header (24)" \
    --init-from "$T/tiny.gguf"
head -c 3000 "$U" >"$T/cut.gguf"
refused "cut in the metadata" "cut.gguf: a GGUF file whose key-value 'tokenizer.ggml.tokens' is truncated" \
    --init-from "$T/cut.gguf"
refused "another magic" 'magic.gguf: not a GGUF file: it starts with 47 47 4d 4c, not "GGUF"' \
    --init-from "$T/magic.gguf"
refused "version 1" "v1.gguf: a GGUF file of version 1: versions 2 and 3 are read" \
    --init-from "$T/v1.gguf"
refused "architecture mamba" "mamba.gguf: a GGUF file of architecture 'mamba': mt reads the \"llama\"" \
    --init-from "$T/mamba.gguf"
refused "a q4_1 tensor" "q4_1.gguf: tensor 'blk.0.attn_q.weight' is of type q4_1 (ggml type 3): mt reads f32, f16, bf16, q8_0, q4_0, q4_K and q6_K" \
    --init-from "$T/q4_1.gguf"
refused "two tensors of one name" "twice.gguf: the GGUF file holds two tensors named 'blk.0.attn_q.weight'" \
    --init-from "$T/twice.gguf"
refused "a tensor past the end" "past.gguf: tensor 'output.weight' of the GGUF file .* ends past the file's" \
    --init-from "$T/past.gguf"

# llama.cpp's own quantizer and generator
LIB=$NLC/@node-llama-cpp/linux-x64/bins/linux-x64
if [ ! -r "$NLC/node-llama-cpp/dist/index.js" ] || [ ! -d "$LIB" ] || ! command -v node >/dev/null; then
    skip_case "llama.cpp" "node-llama-cpp missing in $NLC (make deps-llamacpp; MT_NODE_LLAMA_CPP)"
else
    # llama_model_quantize_params: nthread (offset 0), ftype (4), pure (19: every matrix of the
    # type); the struct is returned through a buffer larger than llama.h's
    cat >"$T/quantize.c" <<'C'
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
typedef struct { unsigned char b[512]; } params;
params llama_model_quantize_default_params(void);
uint32_t llama_model_quantize(const char *in, const char *out, const params *p);
int main(int argc, char **argv) {
    params p = llama_model_quantize_default_params();
    int32_t nthread = 2, ftype = atoi(argv[3]);
    memcpy(p.b, &nthread, 4), memcpy(p.b + 4, &ftype, 4), p.b[19] = 1;
    return argc == 4 ? (int)llama_model_quantize(argv[1], argv[2], &p) : 2;
}
C
    # llama.cpp's reader and dequantizers (libggml-base): each tensor's name, u64 count, floats
    cat >"$T/dequant.c" <<'C'
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct gguf_init_params { bool no_alloc; void **ctx; };
void *gguf_init_from_file(const char *fname, struct gguf_init_params p);
int64_t gguf_get_n_tensors(const void *g);
const char *gguf_get_tensor_name(const void *g, int64_t i);
int gguf_get_tensor_type(const void *g, int64_t i);
size_t gguf_get_tensor_offset(const void *g, int64_t i), gguf_get_tensor_size(const void *g, int64_t i);
size_t gguf_get_data_offset(const void *g);
typedef void (*deq)(const void *x, float *y, int64_t k);
void dequantize_row_q8_0(const void *, float *, int64_t), dequantize_row_q4_0(const void *, float *, int64_t),
    dequantize_row_q4_K(const void *, float *, int64_t), dequantize_row_q6_K(const void *, float *, int64_t),
    ggml_fp16_to_fp32_row(const void *, float *, int64_t), ggml_bf16_to_fp32_row(const void *, float *, int64_t);
static const struct { int type, block, bytes; deq d; } TYPES[] = {
    {0, 1, 4, NULL}, {1, 1, 2, ggml_fp16_to_fp32_row}, {30, 1, 2, ggml_bf16_to_fp32_row},
    {8, 32, 34, dequantize_row_q8_0}, {2, 32, 18, dequantize_row_q4_0},
    {12, 256, 144, dequantize_row_q4_K}, {14, 256, 210, dequantize_row_q6_K}};
int main(int argc, char **argv) {
    void *g = gguf_init_from_file(argv[1], (struct gguf_init_params){true, NULL});
    FILE *f = fopen(argv[1], "rb"), *o = fopen(argv[2], "wb");
    if (argc != 3 || !g || !f || !o) return 1;
    for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
        size_t size = gguf_get_tensor_size(g, i), k = 0;
        while (k < 7 && TYPES[k].type != gguf_get_tensor_type(g, i)) k++;
        if (k == 7) return 3;
        int64_t n = (int64_t)(size / TYPES[k].bytes * TYPES[k].block);
        unsigned char *b = malloc(size);
        float *y = malloc(n * 4);
        fseek(f, (long)(gguf_get_data_offset(g) + gguf_get_tensor_offset(g, i)), SEEK_SET);
        if (fread(b, 1, size, f) != size) return 1;
        if (TYPES[k].d) TYPES[k].d(b, y, n);
        else memcpy(y, b, size);
        fprintf(o, "%s\n", gguf_get_tensor_name(g, i));
        fwrite(&n, 8, 1, o), fwrite(y, 4, n, o);
        free(b), free(y);
    }
    return fclose(o) != 0;
}
C
    # greedy continuation of the ids (no BOS) by llama.cpp: node gen.mjs model.gguf N id...
    cat >"$T/gen.mjs" <<JS
const [model, n, ...ids] = process.argv.slice(2);
const { getLlama, LlamaLogLevel } = await import("$(cd "$NLC" && pwd)/node-llama-cpp/dist/index.js");
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const m = await llama.loadModel({ modelPath: model });
const seq = (await m.createContext({ contextSize: 64, threads: 2 })).getSequence();
const out = [];
for await (const t of seq.evaluate(ids.map(Number), { temperature: 0 })) {
    out.push(t);
    if (out.length >= Number(n)) break;
}
console.log(out.join(" "));
process.exit(0);
JS
    RPATH=-Wl,-rpath,$(cd "$LIB" && pwd)
    if ! gcc -o "$T/quantize" "$T/quantize.c" -L"$LIB" -l:libllama.v0.5.0.so "$RPATH" \
        2>"$T/gcc.log" ||
        ! gcc -o "$T/dequant" "$T/dequant.c" -L"$LIB" -l:libggml-base.so "$RPATH" 2>>"$T/gcc.log"; then
        fail "gcc quantize.c: $(cat "$T/gcc.log")"
    else
        for q in f32:0 f16:1 bf16:32 q8_0:7 q4_0:2 q4_k:14 q6_k:18; do
            "$T/quantize" "$T/rand.gguf" "$T/${q%:*}.gguf" "${q#*:}" >"$T/q.log" 2>&1 ||
                fail "llama.cpp's quantize to ${q%:*}: exit $?: $(tail -3 "$T/q.log")"
        done
        # the weights: mt's import of each file is ggml's dequantization of it, bit for bit;
        # the tokens: llama.cpp computes a bf16 or quantized matrix's products on activations
        # rounded to bf16 or quantized to 8 bits (q8_0, q8_K), mt on float32, so its greedy path
        # may part at a near tie (here after 5 to 20 tokens): the f32 and f16 files are compared
        # on 32 tokens, the others on 8. llama.cpp stops at
        # its end of generation (id 11 for a gpt2 vocabulary): mt's next must be 11.
        PROMPT="82 79 77 69 79 58" # ROMEO:
        for q in f32 f16 bf16 q8_0 q4_0 q4_k q6_k; do
            train $DATA --steps 0 --init-from "$T/$q.gguf" --out "$T/$q" ||
                { fail "$q: import exited $?: $(cat "$T/log")"; continue; }
            "$T/dequant" "$T/$q.gguf" "$T/$q.deq" || fail "$q: llama.cpp's dequantization: exit $?"
            python3 - "$T/$q.deq" "$T/$q/model.safetensors" <<'PY' || fail "$q: the import is not ggml's dequantization"
import json, struct, sys
b = open(sys.argv[2], "rb").read()
n = int.from_bytes(b[:8], "little")
h = json.loads(b[8:8 + n])
st = {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
MT = {"token_embd": "tok_emb", "output_norm": "final_norm", "output": "lm_head", "attn_norm": "attn_norm",
      "ffn_norm": "ffn_norm", "attn_q": "attn.q_proj", "attn_k": "attn.k_proj", "attn_v": "attn.v_proj",
      "attn_output": "attn.out_proj", "ffn_gate": "ffn.fc1", "ffn_down": "ffn.fc2", "ffn_up": "ffn.fc3"}
deq, at, bad, seen = open(sys.argv[1], "rb").read(), 0, [], 0
while at < len(deq):
    e = deq.index(b"\n", at)
    name, n = deq[at:e].decode(), struct.unpack_from("<Q", deq, e + 1)[0]
    x, at = deq[e + 9:e + 9 + 4 * n], e + 9 + 4 * n
    p = name[:-len(".weight")].split(".")
    mt = f"blocks.{p[1]}.{MT[p[2]]}.weight" if p[0] == "blk" else MT[p[0]] + ".weight"
    seen += 1
    if st.get(mt) != x:
        bad.append(f"{name} ({mt})")
if bad or seen != len(st):
    print(f"{seen} tensors of {len(st)}; differ: {bad}")
sys.exit(bool(bad) or seen != len(st))
PY
            lc=$(node "$T/gen.mjs" "$T/$q.gguf" 32 $PROMPT 2>"$T/node.log") ||
                fail "$q: llama.cpp exited $?: $(cat "$T/node.log")"
            mt=$("$B/infer" --checkpoint "$T/$q/model.safetensors" --threads 2 --prompt "ROMEO:" \
                --tokens 32 --temperature 0 2>/dev/null | od -An -v -tu1 | tr -s ' ' '\n' |
                grep . | tail -n +7 | head -32 | tr '\n' ' ')
            case $q in f*) k=32 ;; *) k=8 ;; esac
            python3 -c 'import sys; lc, mt, k = sys.argv[1].split(), sys.argv[2].split(), int(sys.argv[3])
n = min(len(lc), k)
sys.exit(not (lc[:n] == mt[:n] and (n == k or mt[n] == "11")))' "$lc" "$mt" $k ||
                fail "$q: llama.cpp's greedy ids $lc; mt's $mt (compared: $k)"
        done
    fi
fi
finish
