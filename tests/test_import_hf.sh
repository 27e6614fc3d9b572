#!/bin/sh
# Importing a Hugging Face checkpoint (./train --init-from DIR: config.json and model.safetensors).
# transformers and safetensors are not installed here, so the files are written by hand in the
# layout save_pretrained writes: the safetensors format (a u64 header length, the JSON header,
# the raw data; huggingface/safetensors' README), the tensor names of transformers'
# modeling_llama.py (LlamaForCausalLM: model.embed_tokens, model.layers.N.self_attn.q_proj, ...,
# lm_head) and modeling_gpt2.py (GPT2LMHeadModel: transformer.wte, transformer.h.N.attn.c_attn as
# Conv1D, (in, out)), and config.json with the keys LlamaConfig and GPT2Config write. The
# reference is a float64 PyTorch forward written here from the published architectures (HF's
# rotate_half RoPE, repeat_kv, RMSNorm; GPT-2's Conv1D, tanh GELU): mt's --score loss is the
# reference's to 3e-6 and mt's greedy continuation is the reference's token for token, for a
# Llama with grouped-query heads (float32, untied; bfloat16, tied) and a GPT-2 (float32 under
# GPT2LMHeadModel's names, float16 under GPT2Model's with the BOOL attn.bias masks older
# transformers saved). Bad files refused, exit 2, nothing written.
# And back out (./export --format hf): the untied and the tied Llama and the GPT-2, fine-tuned
# two steps, exported and imported again are the same numbers bit for bit and the same config;
# the exported directories run through the same reference forward (which reads its sizes, eps
# and theta from config.json) give the fine-tuned model's score and greedy tokens, and where
# /usr/bin/python3 imports transformers, its own model of each directory gives that forward's
# logits (skipped with a message where absent); --merge-lora's export reads back as --format
# checkpoint's merge; what is neither shape is refused, exit 2, no directory made.
NAME=test_import_hf
. "$(dirname "$0")/lib.sh"
has_torch || skip "$TORCH_MISSING"
train() { "$B/train" --threads 2 "$@" >"$T/log" 2>&1; }
head -c 60000 data/tinyshakespeare.txt >"$T/text.txt"
head -c 3000 "$T/text.txt" >"$T/score.txt"
DATA="--data $T/text.txt --tokenizer char --batch 4 --eval-batches 1"

/usr/bin/python3 - "$T" >"$T/write.log" 2>&1 <<'PY' || fail "writing the files: $(cat "$T/write.log")"
import json, os, struct, sys, torch
T = sys.argv[1]
DT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.bool: "BOOL"}
def save(d, sd, cfg, dtype):
    """save_pretrained's two files: config.json and model.safetensors (header sorted by name,
    data in that order, the header padded with spaces to 8 bytes as safetensors does)."""
    os.makedirs(d, exist_ok=True)
    json.dump(cfg, open(f"{d}/config.json", "w"), indent=2, sort_keys=True)
    h, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k in sorted(sd):
        b = sd[k].to(dtype if sd[k].is_floating_point() else sd[k].dtype).contiguous().view(torch.uint8).numpy().tobytes()
        h[k] = {"dtype": DT[dtype if sd[k].is_floating_point() else sd[k].dtype], "shape": list(sd[k].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    j = json.dumps(h, separators=(",", ":")).encode()
    j += b" " * (-len(j) % 8)
    open(f"{d}/model.safetensors", "wb").write(struct.pack("<Q", len(j)) + j + b"".join(blobs))
g = torch.Generator().manual_seed(0)
def mat(o, i): return torch.randn(o, i, generator=g) / i ** 0.5
def gain(n): return 1 + 0.1 * torch.randn(n, generator=g)
def bias(n): return 0.1 * torch.randn(n, generator=g)
V, C, L, P = 59, 32, 2, 64
# LlamaForCausalLM: 4 heads of 8, 2 key-value heads, MLP 64
def llama(tied):
    sd = {"model.embed_tokens.weight": torch.randn(V, C, generator=g) * 0.5, "model.norm.weight": gain(C)}
    for i in range(L):
        p = f"model.layers.{i}."
        sd |= {p + "input_layernorm.weight": gain(C), p + "post_attention_layernorm.weight": gain(C),
               p + "self_attn.q_proj.weight": mat(C, C), p + "self_attn.k_proj.weight": mat(16, C),
               p + "self_attn.v_proj.weight": mat(16, C), p + "self_attn.o_proj.weight": mat(C, C),
               p + "mlp.gate_proj.weight": mat(64, C), p + "mlp.up_proj.weight": mat(64, C),
               p + "mlp.down_proj.weight": mat(C, 64)}
    if not tied:
        sd["lm_head.weight"] = mat(V, C)
    return sd
llama_cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
             "bos_token_id": 1, "eos_token_id": 2, "head_dim": 8, "hidden_act": "silu", "hidden_size": C,
             "initializer_range": 0.02, "intermediate_size": 64, "max_position_embeddings": P,
             "mlp_bias": False, "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": L,
             "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-5, "rope_scaling": None,
             "rope_theta": 500.0, "tie_word_embeddings": False, "torch_dtype": "float32",
             "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V}
sd = llama(False)
save(f"{T}/llama", sd, llama_cfg, torch.float32)
torch.save(sd, f"{T}/llama.pt")
# the same in two shards, as save_pretrained's max_shard_size writes them: each file a whole
# safetensors, and model.safetensors.index.json's weight_map naming each tensor's file
names = sorted(sd)
shards = {f"model-0000{i + 1}-of-00002.safetensors": names[i::2] for i in range(2)}
for f, ns in shards.items():
    save(f"{T}/llama_sharded", {n: sd[n] for n in ns}, llama_cfg, torch.float32)
    os.rename(f"{T}/llama_sharded/model.safetensors", f"{T}/llama_sharded/{f}")
json.dump({"metadata": {"total_size": 4 * sum(v.numel() for v in sd.values())},
           "weight_map": {n: f for f, ns in shards.items() for n in ns}},
          open(f"{T}/llama_sharded/model.safetensors.index.json", "w"), indent=2)
sd = {k: v.to(torch.bfloat16).float() for k, v in llama(True).items()}
save(f"{T}/llama_bf16", sd, llama_cfg | {"tie_word_embeddings": True, "torch_dtype": "bfloat16"},
     torch.bfloat16)
torch.save(sd, f"{T}/llama_bf16.pt")
# GPT2LMHeadModel: 4 heads, Conv1D weights (in, out)
sd = {"transformer.wte.weight": torch.randn(V, C, generator=g) * 0.5,
      "transformer.wpe.weight": 0.1 * torch.randn(P, C, generator=g),
      "transformer.ln_f.weight": gain(C), "transformer.ln_f.bias": bias(C)}
for i in range(L):
    p = f"transformer.h.{i}."
    sd |= {p + "ln_1.weight": gain(C), p + "ln_1.bias": bias(C), p + "ln_2.weight": gain(C),
           p + "ln_2.bias": bias(C), p + "attn.c_attn.weight": mat(3 * C, C).T,
           p + "attn.c_attn.bias": bias(3 * C), p + "attn.c_proj.weight": mat(C, C).T,
           p + "attn.c_proj.bias": bias(C), p + "mlp.c_fc.weight": mat(4 * C, C).T,
           p + "mlp.c_fc.bias": bias(4 * C), p + "mlp.c_proj.weight": mat(C, 4 * C).T,
           p + "mlp.c_proj.bias": bias(C)}
gpt2_cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
            "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-5, "model_type": "gpt2", "n_ctx": P, "n_embd": C, "n_head": 4,
            "n_inner": None, "n_layer": L, "n_positions": P, "reorder_and_upcast_attn": False,
            "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
            "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
            "summary_type": "cls_index", "summary_use_proj": True, "torch_dtype": "float32",
            "transformers_version": "4.46.0", "use_cache": True, "vocab_size": V}
save(f"{T}/gpt2", sd, gpt2_cfg, torch.float32)
torch.save(sd, f"{T}/gpt2.pt")
sd = {k.removeprefix("transformer."): v.to(torch.float16).float() for k, v in sd.items()}
torch.save({"transformer." + k: v for k, v in sd.items()}, f"{T}/gpt2_f16.pt")
for i in range(L):  # the causal mask, a persistent buffer in transformers before 4.36
    sd[f"h.{i}.attn.bias"] = torch.ones(1, 1, P, P, dtype=torch.bool).tril()
save(f"{T}/gpt2_f16", sd, gpt2_cfg | {"torch_dtype": "float16"}, torch.float16)
PY

for m in llama llama_sharded llama_bf16 gpt2 gpt2_f16; do
    at=$T/$m
    [ $m = llama_bf16 ] && at=$T/$m/model.safetensors # the file's path reads the same
    train $DATA --steps 0 --init-from "$at" --out "$T/out_$m" ||
        fail "$m: import exited $?: $(cat "$T/log")"
    grep "^init" "$T/log" | head -1 >"$T/init_$m"
    "$B/infer" --threads 2 --checkpoint "$T/out_$m/model.safetensors" --score "$T/score.txt" \
        >"$T/score_$m" || fail "$m: infer --score exited $?"
    "$B/infer" --threads 2 --checkpoint "$T/out_$m/model.safetensors" --tokens 63 --temperature 0 \
        >"$T/gen_$m" 2>/dev/null || fail "$m: infer exited $?"
done
# back out (./export --format hf): each fine-tuned two steps, exported, imported again
for m in llama llama_bf16 gpt2; do
    train $DATA --steps 2 --init-from "$T/$m" --out "$T/ft_$m" || fail "$m: fine-tuning exited $?"
    "$B/export" --checkpoint "$T/ft_$m/model.safetensors" --format hf --out "$T/hf_$m" \
        >"$T/log" 2>&1 || fail "$m: export exited $?: $(cat "$T/log")"
    train $DATA --steps 0 --init-from "$T/hf_$m" --out "$T/back_$m" ||
        fail "hf_$m: import exited $?: $(cat "$T/log")"
    "$B/infer" --threads 2 --checkpoint "$T/ft_$m/model.safetensors" --score "$T/score.txt" \
        >"$T/score_hf_$m" || fail "ft_$m: infer --score exited $?"
    "$B/infer" --threads 2 --checkpoint "$T/ft_$m/model.safetensors" --tokens 63 \
        --temperature 0 >"$T/gen_hf_$m" 2>/dev/null || fail "ft_$m: infer exited $?"
done
if /usr/bin/python3 -c "import transformers" 2>/dev/null; then HAS_HF=1; else
    HAS_HF=0
    skip_case "transformers" "/usr/bin/python3 cannot import transformers: the exported" \
        "directories are checked against the reference forward only"
fi
/usr/bin/python3 - "$T" "$HAS_HF" <<'PY' || fail "the import or the export is not the reference's model"
import json, math, re, struct, sys, torch
T, HAS_HF = sys.argv[1], sys.argv[2] == "1"
P = 64
def rms(x, w, eps): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
def rotate_half(x): return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), -1)
def llama(w, ids, cfg):
    """modeling_llama.py's LlamaForCausalLM: RoPE on halves (rotate_half), repeat_kv, float64;
    the sizes, eps and theta config.json's."""
    t, NH, NKV = len(ids), cfg["num_attention_heads"], cfg["num_key_value_heads"]
    C, L, eps = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    HS = C // NH
    x = w["model.embed_tokens.weight"][ids]
    inv = 1 / cfg["rope_theta"] ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    f = torch.arange(t, dtype=torch.float64)[:, None] * inv
    cos, sin = torch.cat((f, f), -1).cos(), torch.cat((f, f), -1).sin()
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        q, k, v = (z.view(t, -1, HS).transpose(0, 1) for z in (q, k, v))
        q, k = (z * cos + rotate_half(z) * sin for z in (q, k))
        k, v = (z.repeat_interleave(NH // NKV, 0) for z in (k, v))
        a = (q @ k.transpose(-1, -2) / math.sqrt(HS)).masked_fill(~mask, -math.inf).softmax(-1)
        x = x + (a @ v).transpose(0, 1).reshape(t, C) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (g * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight" if cfg["tie_word_embeddings"] else "lm_head.weight"]
    return rms(x, w["model.norm.weight"], eps) @ head.T
def gelu(x): return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
def gpt2(w, ids, cfg):
    """modeling_gpt2.py's GPT2LMHeadModel: Conv1D y = x W + b with W (in, out), float64."""
    t, NH, C, L = len(ids), cfg["n_head"], cfg["n_embd"], cfg["n_layer"]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"],
                                                     cfg["layer_norm_epsilon"])
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:t]
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(L):
        p = f"transformer.h.{i}."
        q, k, v = (ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(C, -1)
        q, k, v = (z.view(t, NH, C // NH).transpose(0, 1) for z in (q, k, v))
        a = (q @ k.transpose(-1, -2) / math.sqrt(C // NH)).masked_fill(~mask, -math.inf).softmax(-1)
        x = x + (a @ v).transpose(0, 1).reshape(t, C) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = gelu(ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T
def tensors(path):
    """A float32 safetensors file's tensors by name (mt's checkpoints, the exported files)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return h["__metadata__"], {k: (e["dtype"], torch.frombuffer(bytearray(b[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]), dtype=torch.float32).view(e["shape"])) for k, e in h.items() if k != "__metadata__"}
bad = 0
# back out: each exported directory is read back by ./train to the fine-tuned checkpoint's every
# number, its config.json is the one the import gave (the model's config the same), it holds HF's
# tensors in float32, and (below) it computes the fine-tuned model's scores and greedy tokens
for m in ("llama", "llama_bf16", "gpt2"):
    (ma, a), (mb, b) = tensors(f"{T}/ft_{m}/model.safetensors"), tensors(f"{T}/back_{m}/model.safetensors")
    same = sorted(a) == sorted(b) and all(torch.equal(a[k][1], b[k][1]) for k in a)
    ref = json.load(open(f"{T}/{m}/config.json"))
    hf = json.load(open(f"{T}/hf_{m}/config.json"))
    keys = [k for k in ref if k in hf and ref[k] != hf[k] and k not in ("torch_dtype", "bos_token_id", "eos_token_id", "n_ctx", "attention_dropout", "attn_pdrop", "embd_pdrop", "resid_pdrop", "transformers_version", "use_cache")]
    names = sorted(tensors(f"{T}/hf_{m}/model.safetensors")[1])
    want = sorted(torch.load(f"{T}/{m}.pt"))
    dtypes = {d for d, _ in tensors(f"{T}/hf_{m}/model.safetensors")[1].values()}
    print(f"hf_{m}: back bit for bit: {same}; config as the import's: {ma['config'] == mb['config']}; config.json keys differing from the fixture's: {keys}; tensors HF's: {names == want}; dtypes {dtypes}")
    if not same or ma["config"] != mb["config"] or keys or names != want or dtypes != {"F32"}:
        bad += 1
models = [(m, {k: v.double() for k, v in torch.load(f"{T}/{m.removesuffix('_sharded')}.pt").items()}, f"{T}/{m}", m)
          for m in ("llama", "llama_sharded", "llama_bf16", "gpt2", "gpt2_f16")]
models += [(f"hf_{m}", {k: v.double() for k, (_, v) in tensors(f"{T}/hf_{m}/model.safetensors")[1].items()}, f"{T}/hf_{m}", f"ft_{m}")
           for m in ("llama", "llama_bf16", "gpt2")]
for m, w, d, ck in models:
    cfg = json.load(open(f"{d}/config.json"))
    fwd = (llama if cfg["architectures"][0] == "LlamaForCausalLM" else gpt2)
    fwd = (lambda f, c: lambda w, ids: f(w, ids, c))(fwd, cfg)
    b = open(f"{T}/out_{ck}/model.safetensors" if ck == m else f"{T}/{ck}/model.safetensors", "rb").read()
    chars = json.loads(json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])["__metadata__"]["tokenizer"])["chars"]
    ids = torch.tensor([chars.index(ord(c)) for c in open(f"{T}/score.txt").read()])
    nll = lambda s: float(torch.nn.functional.cross_entropy(fwd(w, s[:-1]), s[1:], reduction="sum"))
    total = sum(nll(ids[s:s + P + 1]) for s in range(0, len(ids) - 1, P + 1) if len(ids[s:s + P + 1]) > 1)
    ref = total / (len(ids) - math.ceil(len(ids) / (P + 1)))
    mt = float(re.search(r"loss=(\S+)", open(f"{T}/score_{m}").read()).group(1))
    init = open(f"{T}/init_{m}").read().strip() if ck == m else "exported"
    print(f"{m}: {init}; score: mt {mt:.6f}, torch {ref:.6f}")
    if abs(mt - ref) > 3e-6:
        print(f"{m}: mt's loss {mt} is not the reference's {ref}")
        bad += 1
    seq = [chars.index(10)]
    while len(seq) < P:
        seq.append(int(fwd(w, torch.tensor(seq))[-1].argmax()))
    mine = [chars.index(ord(c)) for c in open(f"{T}/gen_{m}").read()]
    print(f"{m}: greedy {len(seq) - 1} tokens, the reference's and mt's {'the same' if seq == mine else 'differ'}")
    if seq != mine:
        print(f"{m}: greedy: reference {seq}, mt {mine}")
        bad += 1
    if HAS_HF and m.startswith("hf_"):  # transformers' own model of the directory
        import transformers
        hm = transformers.AutoModelForCausalLM.from_pretrained(d).double().eval()
        with torch.no_grad():
            diff = float((hm(ids[None, :P]).logits[0] - fwd(w, ids[:P])).abs().max())
        print(f"{m}: transformers {transformers.__version__}: logits within {diff:.2e} of the reference's")
        if diff > 1e-5:  # its RoPE frequencies are float32
            bad += 1
sys.exit(bad != 0)
PY

# fine-tuning: the file's architecture is the run's, a shape-changing flag refused
train $DATA --steps 2 --init-from "$T/llama" --out "$T/ft" || fail "fine-tuning exited $?: $(cat "$T/log")"
[ -s "$T/ft/model.safetensors" ] || fail "fine-tuning wrote no checkpoint"
refused "--n-embd" "n_embd is 32 in the file, 64 here (--n-embd 32)" --init-from "$T/gpt2" --n-embd 64

# back out with --merge-lora: the adapters folded in, as --format checkpoint folds them
train $DATA --steps 2 --init-from "$T/llama" --lora-rank 2 --lora-targets q,k,down --out "$T/lora" ||
    fail "LoRA fine-tuning exited $?: $(cat "$T/log")"
"$B/export" --checkpoint "$T/lora/model.safetensors" --merge-lora --format checkpoint \
    --out "$T/merged.safetensors" >"$T/log" 2>&1 || fail "--merge-lora checkpoint: $(cat "$T/log")"
"$B/export" --checkpoint "$T/lora/model.safetensors" --merge-lora --format hf --out "$T/hf_lora" \
    >"$T/log" 2>&1 || fail "--merge-lora hf: $(cat "$T/log")"
train $DATA --steps 0 --init-from "$T/hf_lora" --out "$T/back_lora" || fail "hf_lora: $(cat "$T/log")"
cmp -s "$T/merged.safetensors" "$T/back_lora/model.safetensors" ||
    /usr/bin/python3 - "$T/merged.safetensors" "$T/back_lora/model.safetensors" <<'PY' ||
import json, struct, sys
def tensors(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]] for k, e in h.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
sys.exit(a != b)
PY
        fail "--merge-lora: the hf export read back is not --format checkpoint's merged weights"

# back out refused (exit 2, no directory): what is neither a Llama nor a GPT-2, with both lists
export_refused() { # what, what the message says, export flags...
    what=$1 says=$2
    shift 2
    "$B/export" --out "$T/refused_hf" "$@" >"$T/log" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc: $(cat "$T/log")"
    grep -q -- "$says" "$T/log" || fail "$what: the message does not say '$says': $(cat "$T/log")"
    [ ! -e "$T/refused_hf" ] || fail "$what: wrote $T/refused_hf"
}
TINY="--n-layer 1 --n-head 2 --n-embd 16 --n-ctx 16"
train $DATA --steps 0 $TINY --arch llama --pos learned --out "$T/mixed" || fail "train: $(cat "$T/log")"
export_refused "neither" "for a Llama, pos = learned (--pos rope); for a GPT-2, bias = false (no --no-bias), .*norm = rms (--norm ln), act = swiglu" \
    --checkpoint "$T/mixed/model.safetensors" --format hf
train $DATA --steps 0 $TINY --untie --out "$T/untied" || fail "train: $(cat "$T/log")"
export_refused "an untied GPT-2" "for a GPT-2, tied = false (no --untie" \
    --checkpoint "$T/untied/model.safetensors" --format hf
train $DATA --steps 0 $TINY --n-kv-head 1 --out "$T/gqa" || fail "train: $(cat "$T/log")"
export_refused "a GPT-2 of grouped-query heads" "n_kv_head = 1 of 2 (--n-kv-head 2)" \
    --checkpoint "$T/gqa/model.safetensors" --format hf
export_refused "LoRA unmerged" "holds LoRA adapters .* --merge-lora" \
    --checkpoint "$T/lora/model.safetensors" --format hf
export_refused "--f16" "--f16: --format gguf only" --checkpoint "$T/untied/model.safetensors" \
    --format hf --f16
export_refused "--tokenizer-out" "--tokenizer-out: --format llama2c only" \
    --checkpoint "$T/ft_gpt2/model.safetensors" --format hf --tokenizer-out "$T/tok.bin"
cp "$T/ft_gpt2/model.safetensors" "$T/ft_gpt2.keep"
"$B/export" --checkpoint "$T/ft_gpt2/model.safetensors" --format hf --out "$T/ft_gpt2" \
    >"$T/log" 2>&1
[ $? -eq 2 ] && grep -q "destroy" "$T/log" || fail "--out over the checkpoint: $(cat "$T/log")"
cmp -s "$T/ft_gpt2/model.safetensors" "$T/ft_gpt2.keep" || fail "--out over the checkpoint wrote it"

# bad input
mkdir "$T/empty"
refused "no config.json" "empty: a Hugging Face checkpoint needs $T/empty/config.json (its config.json)" \
    --init-from "$T/empty"
cp -r "$T/gpt2" "$T/bert"
sed -i 's/"GPT2LMHeadModel"/"BertForMaskedLM"/' "$T/bert/config.json"
refused "another architecture" "bert/config.json: architectures\[0\] is 'BertForMaskedLM': mt reads LlamaForCausalLM and GPT2LMHeadModel" \
    --init-from "$T/bert"
cp -r "$T/llama" "$T/scaled"
sed -i 's/"rope_scaling": null/"rope_scaling": {"rope_type": "llama3", "factor": 8.0}/' "$T/scaled/config.json"
refused "rope_scaling" 'scaled/config.json: rope_scaling is {"rope_type":"llama3","factor":8}: mt' \
    --init-from "$T/scaled"
cp -r "$T/llama" "$T/biased"
sed -i 's/"attention_bias": false/"attention_bias": true/' "$T/biased/config.json"
refused "attention_bias" "biased/config.json: attention_bias is true" --init-from "$T/biased"
cp -r "$T/llama" "$T/gelu"
sed -i 's/"hidden_act": "silu"/"hidden_act": "gelu"/' "$T/gelu/config.json"
refused "hidden_act" 'gelu/config.json: hidden_act is "gelu": mt.s model reads silu' --init-from "$T/gelu"
cp -r "$T/gpt2" "$T/unscaled"
sed -i 's/"scale_attn_weights": true/"scale_attn_weights": false/' "$T/unscaled/config.json"
refused "scale_attn_weights" "unscaled/config.json: scale_attn_weights is not true" --init-from "$T/unscaled"
cp -r "$T/llama" "$T/wide"
sed -i 's/"intermediate_size": 64/"intermediate_size": 96/' "$T/wide/config.json"
refused "a tensor of another shape" "wide/model.safetensors: tensor model.layers.0.mlp.gate_proj.weight has shape \[64,32\], expected \[96, 32\]" \
    --init-from "$T/wide"
cp -r "$T/llama" "$T/deep"
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$T/deep/config.json"
refused "a tensor missing" "deep/model.safetensors: tensor model.layers.2.input_layernorm.weight is missing" \
    --init-from "$T/deep"
mkdir "$T/short"
cp "$T/llama/config.json" "$T/short/"
head -c 20000 "$T/llama/model.safetensors" >"$T/short/model.safetensors"
refused "a truncated file" "short/model.safetensors: tensor .* data section (truncated?)" --init-from "$T/short"
mkdir "$T/f64"
cp "$T/llama/config.json" "$T/f64/"
sed 's/"F32"/"F64"/g' "$T/llama/model.safetensors" >"$T/f64/model.safetensors"
refused "dtype F64" "f64/model.safetensors: tensor .* has dtype F64: F32, F16 and BF16 are read" \
    --init-from "$T/f64"
cp -r "$T/llama_sharded" "$T/lost"
rm "$T/lost/model-00002-of-00002.safetensors"
refused "a shard missing" "lost/model.safetensors.index.json: its weight_map names $T/lost/model-00002-of-00002.safetensors: No such file" --init-from "$T/lost"
cp -r "$T/llama_sharded" "$T/mapped"
python3 -c 'import json, sys
i = json.load(open(sys.argv[1]))
f = i["weight_map"]["model.norm.weight"]
i["weight_map"]["model.norm.weight"] = f.replace("00001-of", "0000x-of").replace("00002-of", "00001-of").replace("0000x-of", "00002-of")
json.dump(i, open(sys.argv[1], "w"))' "$T/mapped/model.safetensors.index.json"
refused "a weight_map naming another shard" "mapped/model-0000[12]-of-00002.safetensors: tensor model.norm.weight is missing (expected by $T/mapped/model.safetensors.index.json)" \
    --init-from "$T/mapped"
mkdir "$T/neither"
cp "$T/llama/config.json" "$T/neither/"
refused "no model.safetensors" "neither: a Hugging Face checkpoint needs $T/neither/model.safetensors (or a sharded one's model.safetensors.index.json)" \
    --init-from "$T/neither"
finish
