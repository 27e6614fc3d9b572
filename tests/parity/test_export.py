"""./export against readers written from the formats alone (docs/export.md).

Tiny Llama-style models (--arch llama) are trained a few steps by ./train with the byte, bpe and
char tokenizers (tied and untied heads, grouped-query and multi-query attention) and exported to
llama2.c's model.bin + tokenizer.bin and to GGUF.

llama2.c: a reader that implements run.c's forward (a token at a time with a KV cache: RMSNorm
with eps 1e-5, RoPE on adjacent pairs with theta 10000, grouped-query attention, SwiGLU, the
shared or separate classifier) and its tokenizer (greedy merges by score over the token strings,
byte fallback, decoding by the token's bytes) loads the two files. On 64 tokens of held-out text
its logits must match mt's (the GPT driver, mt's training forward) to 1e-4, and its greedy
continuation of 32 tokens must be ./infer --temperature 0's, token for token (the continuation's
bytes equal ./infer's output, and each token is the argmax of mt's logits at its position).

GGUF: a second reader parses the file: every metadata key is asserted, every tensor compared with
the checkpoint's (with --f16: the matrices rounded to float16), the token strings and merges
mapped back to mt's tokens."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

import bpe_ref
from harness import BUILD, load, run_driver

FAILED = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail else ""))
    if not ok:
        FAILED.append(what)


# ---- llama2.c: model.bin ---------------------------------------------------------------------


def read_llama2c(path):
    """run.c's read_checkpoint and memory_map_weights, from its version-0 layout."""
    raw = open(path, "rb").read()
    dim, hidden, L, NH, KVH, V, T = struct.unpack("<7i", raw[:28])
    cfg = dict(dim=dim, hidden=hidden, L=L, NH=NH, KVH=KVH, shared=V > 0, V=abs(V), T=T)
    V, HS = abs(V), dim // NH
    KV = KVH * HS
    f = np.frombuffer(raw, "<f4", offset=28)
    at = 0

    def take(*shape):
        nonlocal at
        n = int(np.prod(shape))
        a = f[at:at + n].reshape(shape).astype(np.float64)
        at += n
        return a

    w = {"emb": take(V, dim), "rms_att": take(L, dim), "wq": take(L, dim, dim),
         "wk": take(L, KV, dim), "wv": take(L, KV, dim), "wo": take(L, dim, dim),
         "rms_ffn": take(L, dim), "w1": take(L, hidden, dim), "w2": take(L, dim, hidden),
         "w3": take(L, hidden, dim), "rms_final": take(dim)}
    take(T, HS // 2)  # freq_cis_real and freq_cis_imag: skipped
    take(T, HS // 2)
    w["wcls"] = w["emb"] if cfg["shared"] else take(V, dim)
    assert at == f.size, f"{path}: {f.size - at} floats after the classifier"
    return cfg, w


def rmsnorm(x, weight):
    return weight * (x / np.sqrt(np.mean(x * x) + 1e-5))


class RunC:
    """run.c's forward: one token at a time at position pos, keys and values cached."""

    def __init__(self, cfg, w):
        self.c, self.w = cfg, w
        KV = cfg["KVH"] * cfg["dim"] // cfg["NH"]
        self.k = np.zeros((cfg["L"], cfg["T"], KV))
        self.v = np.zeros((cfg["L"], cfg["T"], KV))

    def forward(self, token, pos):
        c, w = self.c, self.w
        dim, NH, HS = c["dim"], c["NH"], c["dim"] // c["NH"]
        kv_mul = NH // c["KVH"]
        x = w["emb"][token].copy()
        i = np.arange(0, dim, 2)
        freq = 1.0 / 10000.0 ** ((i % HS) / HS)
        fcr, fci = np.cos(pos * freq), np.sin(pos * freq)
        for l in range(c["L"]):
            xb = rmsnorm(x, w["rms_att"][l])
            q, k, v = w["wq"][l] @ xb, w["wk"][l] @ xb, w["wv"][l] @ xb
            for vec in (q, k):  # (vec[i], vec[i+1]) turned by pos * freq; k only where i < kv_dim
                n = vec.size
                v0, v1 = vec[0:n:2].copy(), vec[1:n:2].copy()
                vec[0:n:2] = v0 * fcr[:n // 2] - v1 * fci[:n // 2]
                vec[1:n:2] = v0 * fci[:n // 2] + v1 * fcr[:n // 2]
            self.k[l, pos], self.v[l, pos] = k, v
            out = np.zeros(dim)
            for h in range(NH):
                g = (h // kv_mul) * HS
                att = self.k[l, :pos + 1, g:g + HS] @ q[h * HS:(h + 1) * HS] / math.sqrt(HS)
                att = np.exp(att - att.max())
                att /= att.sum()
                out[h * HS:(h + 1) * HS] = att @ self.v[l, :pos + 1, g:g + HS]
            x = x + w["wo"][l] @ out
            xb = rmsnorm(x, w["rms_ffn"][l])
            h1, h3 = w["w1"][l] @ xb, w["w3"][l] @ xb
            x = x + w["w2"][l] @ (h1 / (1 + np.exp(-h1)) * h3)
        return w["wcls"] @ rmsnorm(x, w["rms_final"])


# ---- llama2.c: tokenizer.bin -----------------------------------------------------------------


class Tokenizer:
    """run.c's tokenizer: build_tokenizer, encode (bos, the dummy " " prefix, UTF-8 code points
    looked up as strings with byte fallback to id byte + 3, then the adjacent pair whose joined
    string is a token of the highest score merged, the leftmost on ties, until none) and decode
    (the token's bytes; after BOS a leading space dropped; "<0xXX>" a raw byte). Strings are C
    strings: a token holding a NUL byte is looked up by its bytes before it."""

    def __init__(self, path, V):
        raw = open(path, "rb").read()
        (self.max_len,), at = struct.unpack("<i", raw[:4]), 4
        self.pieces, self.scores = [], []
        for _ in range(V):
            score, n = struct.unpack("<fi", raw[at:at + 8])
            self.pieces.append(raw[at + 8:at + 8 + n])
            self.scores.append(score)
            at += 8 + n
        assert at == len(raw), f"{path}: {len(raw) - at} bytes after the last token"
        self.index = {}
        for i, p in enumerate(self.pieces):
            self.index.setdefault(p.split(b"\0")[0], i)

    def encode(self, text, bos, dummy_prefix):
        tokens = [1] if bos else []
        if text and dummy_prefix:
            tokens.append(self.index[b" "])
        i = 0
        while i < len(text):  # a code point: a lead byte and up to 3 continuation bytes
            j = i + 1
            while j < len(text) and j - i < 4 and text[j] & 0xC0 == 0x80:
                j += 1
            cp = text[i:j]
            if cp in self.index:
                tokens.append(self.index[cp])
            else:
                tokens.extend(b + 3 for b in cp)
            i = j
        while True:
            best, best_id, best_at = -1e10, -1, -1
            for k in range(len(tokens) - 1):
                joined = self.pieces[tokens[k]].split(b"\0")[0] + \
                    self.pieces[tokens[k + 1]].split(b"\0")[0]
                t = self.index.get(joined, -1)
                if t != -1 and self.scores[t] > best:
                    best, best_id, best_at = self.scores[t], t, k
            if best_at == -1:
                return tokens
            tokens[best_at:best_at + 2] = [best_id]

    def decode(self, prev, token):
        piece = self.pieces[token]
        if prev == 1 and piece[:1] == b" ":
            piece = piece[1:]
        if len(piece) == 6 and piece[:3] == b"<0x" and piece[5:] == b">":
            return bytes([int(piece[3:5], 16)])
        return piece


# ---- GGUF ------------------------------------------------------------------------------------


def read_gguf(path):
    """The GGUF v3 format: header, key-values, tensor infos, aligned data."""
    raw = open(path, "rb").read()
    at = 0

    def get(fmt):
        nonlocal at
        v = struct.unpack_from("<" + fmt, raw, at)
        at += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal at
        n = get("Q")
        s = raw[at:at + n]
        at += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
              12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = get("I"), get("Q")
            return [value(et) for _ in range(n)]
        return get(scalar[t])

    assert raw[:4] == b"GGUF", "magic"
    at = 4
    version, n_tensors, n_kv = get("I"), get("Q"), get("Q")
    kv, types = {}, {}
    for _ in range(n_kv):
        key = string().decode()
        types[key] = get("I")
        kv[key] = value(types[key])
    infos = []
    for _ in range(n_tensors):
        name = string().decode()
        nd = get("I")
        dims = [get("Q") for _ in range(nd)]
        infos.append((name, dims, get("I"), get("Q")))
    align = kv.get("general.alignment", 32)
    start = (at + align - 1) // align * align
    assert all(b == 0 for b in raw[at:start]), "padding before the data"
    tensors, end = {}, start
    for name, dims, ty, off in infos:  # type 0 F32, 1 F16
        assert ty in (0, 1) and off % align == 0, f"{name}: type {ty}, offset {off}"
        n, dtype = int(np.prod(dims)), ("<f4", "<f2")[ty]
        tensors[name] = np.frombuffer(raw, dtype, n, start + off).reshape(dims[::-1])
        end = max(end, start + off + tensors[name].nbytes)
    assert len(raw) - end < align, f"{len(raw) - end} bytes after the last tensor"
    return version, kv, types, tensors


def gpt2_byte_decoder():
    """GPT-2's bytes_to_unicode, inverted: printable stand-in -> byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


# ---- the test --------------------------------------------------------------------------------


def mt_tokens(tok):
    """The bytes of each id of the checkpoint's tokenizer, and an encoder (mt's rules)."""
    if tok["type"] == "byte":
        return [bytes([i]) for i in range(256)], lambda b: list(b)
    if tok["type"] == "bpe":
        merges = [tuple(m) for m in tok["merges"]]
        return bpe_ref.token_bytes(merges), lambda b: bpe_ref.encode(b, merges)
    index = {c: i for i, c in enumerate(tok["chars"])}
    return [chr(c).encode() for c in tok["chars"]], \
        lambda b: [index[ord(ch)] for ch in b.decode()]


def run(cmd):
    """cmd[0] names an mt program of the build (MT_BUILD: the sanitized ones under make asan)."""
    cmd = [os.path.join(BUILD, cmd[0])] + cmd[1:]
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))}: exit {r.returncode}\n{r.stderr.decode()}")
    return r.stdout


def case(d, name, text_path, val_text, flags, f16=False):
    out = os.path.join(d, name)
    run(["train", "--data", text_path, "--arch", "llama", "--n-layer", "2", "--n-head", "4",
         "--n-embd", "32", "--n-ctx", "128", "--batch", "8", "--lr", "1e-2",
         "--eval-every", "0", "--log-every", "1000", "--threads", "2", "--out", out] + flags)
    ckpt = os.path.join(out, "model.safetensors")
    params, meta = load(ckpt)
    cfg, tok = json.loads(meta["config"]), json.loads(meta["tokenizer"])
    binp, tokp, ggufp = (os.path.join(out, f) for f in ("model.bin", "tokenizer.bin", "model.gguf"))
    run(["export", "--checkpoint", ckpt, "--format", "llama2c", "--out", binp])
    run(["export", "--checkpoint", ckpt, "--format", "gguf", "--out", ggufp])
    pieces, encode = mt_tokens(tok)
    V, C, NH = cfg["n_vocab"], cfg["n_embd"], cfg["n_head"]
    KVH = cfg["n_kv_head"] or NH

    # llama2.c: the header and the tokenizer
    lc, w = read_llama2c(binp)
    check(f"{name}: model.bin header", lc == dict(dim=C, hidden=cfg["n_ff"], L=cfg["n_layer"],
          NH=NH, KVH=KVH, shared=cfg["tied"], V=V, T=cfg["n_ctx"]), str(lc))
    tk = Tokenizer(tokp, V)
    check(f"{name}: tokenizer.bin holds each id's bytes", tk.pieces == pieces)
    check(f"{name}: max_token_length", tk.max_len == max(len(p) for p in pieces))

    # the prompt: whole lines of held-out text, at least 64 tokens, and the next line's first word
    # (after a newline these tiny models mostly predict newlines)
    lines, prompt = val_text.split(b"\n"), b""
    for k, line in enumerate(lines[1:], 2):
        prompt += line + b"\n"
        if len(encode(prompt)) >= 64:
            break
    prompt += lines[k].split(b" ")[0] + b" "
    ids = encode(prompt)
    assert 64 <= len(ids) <= cfg["n_ctx"] - 32, len(ids)
    got = tk.encode(prompt, bos=False, dummy_prefix=False)
    if tok["type"] == "bpe":
        words = prompt.split(b" ")
        same = sum(tk.encode(x, False, False) == encode(x) for x in words)
        # not so in general (docs/export.md), but so for this prompt and tokenizer
        check(f"{name}: run.c's encoder gives mt's ids", got == ids,
              f"{same} of {len(words)} space-separated pieces alike")
    else:
        check(f"{name}: run.c's encoder gives mt's ids", got == ids)

    # logits on 64 tokens: run.c's forward against mt's
    r = RunC(lc, w)
    ref = np.stack([r.forward(t, pos) for pos, t in enumerate(ids[:64])])
    drv = run_driver("gpt", {**params, "ids": np.array(ids[:64], np.float32),
                             "targets": np.array((ids + [0])[1:65], np.float32)},
                     {"config": meta["config"], "B": 1, "T": 64})
    err = np.abs(drv["logits"].reshape(64, V) - ref).max()
    check(f"{name}: run.c's logits on 64 tokens match mt's", err <= 1e-4, f"max error {err:.2e}")

    # greedy: 32 tokens after the whole prompt against ./infer --temperature 0
    r = RunC(lc, w)
    for pos, t in enumerate(ids):
        logits = r.forward(t, pos)
    cont, margins = [], []
    for i in range(32):
        top = np.argsort(logits)[::-1]
        margins.append(logits[top[0]] - logits[top[1]])
        cont.append(int(top[0]))
        if i < 31:
            logits = r.forward(cont[-1], len(ids) + i)
    text = run(["infer", "--checkpoint", ckpt, "--prompt", prompt, "--tokens", "32",
                "--temperature", "0", "--threads", "1"])
    ours = b"".join(tk.decode(-1, t) for t in cont)
    check(f"{name}: run.c's greedy continuation is ./infer's", text == prompt + ours,
          f"{ours[:40]!r} vs {text[len(prompt):][:40]!r}, smallest top-2 margin "
          f"{min(margins):.2e}")
    seq = ids + cont
    n = len(seq) - 1
    drv = run_driver("gpt", {**params, "ids": np.array(seq[:n], np.float32),
                             "targets": np.array(seq[1:], np.float32)},
                     {"config": meta["config"], "B": 1, "T": n})
    best = drv["logits"].reshape(n, V).argmax(axis=1)[len(ids) - 1:]
    check(f"{name}: each greedy token is the argmax of mt's logits", list(best) == cont)

    # GGUF
    version, kv, types, t = read_gguf(ggufp)
    HS = C // NH
    want = {"general.architecture": b"llama", "general.alignment": 32,
            "llama.context_length": cfg["n_ctx"], "llama.embedding_length": C,
            "llama.block_count": cfg["n_layer"], "llama.feed_forward_length": cfg["n_ff"],
            "llama.attention.head_count": NH, "llama.attention.head_count_kv": KVH,
            "llama.attention.layer_norm_rms_epsilon": np.float32(cfg["norm_eps"]),
            "llama.rope.freq_base": np.float32(cfg["rope_theta"]),
            "llama.rope.dimension_count": HS, "llama.vocab_size": V,
            "tokenizer.ggml.model": b"llama" if tok["type"] == "char" else b"gpt2",
            "tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.add_eos_token": False}
    if tok["type"] != "char":
        want["tokenizer.ggml.pre"] = b"default"
    bad = {k: kv.get(k) for k, v in want.items() if kv.get(k) != v}
    check(f"{name}: GGUF v3, its metadata", version == 3 and not bad, str(bad))
    check(f"{name}: GGUF key types", all(types[k] == 4 for k in want
                                         if isinstance(want[k], int) and
                                         not isinstance(want[k], bool)))
    names = {"token_embd.weight": "tok_emb.weight", "output_norm.weight": "final_norm.weight"}
    if not cfg["tied"]:
        names["output.weight"] = "lm_head.weight"
    for l in range(cfg["n_layer"]):
        for g, m in [("attn_norm", "attn_norm"), ("attn_q", "attn.q_proj"),
                     ("attn_k", "attn.k_proj"), ("attn_v", "attn.v_proj"),
                     ("attn_output", "attn.out_proj"), ("ffn_norm", "ffn_norm"),
                     ("ffn_gate", "ffn.fc1"), ("ffn_up", "ffn.fc3"), ("ffn_down", "ffn.fc2")]:
            names[f"blk.{l}.{g}.weight"] = f"blocks.{l}.{m}.weight"
    same = sorted(t) == sorted(names) and all(
        t[g].dtype == np.float32 and t[g].shape == params[m].shape and
        np.array_equal(t[g], params[m]) for g, m in names.items())
    check(f"{name}: GGUF's {len(t)} tensors are the checkpoint's", same)
    if f16:  # the matrices rounded to float16 (to nearest, ties to even), the norms float32
        run(["export", "--checkpoint", ckpt, "--format", "gguf", "--f16", "--out", ggufp])
        _, kv16, _, t16 = read_gguf(ggufp)
        same = sorted(t16) == sorted(names) and all(
            np.array_equal(t16[g], params[m].astype(t16[g].dtype)) and
            t16[g].dtype == (np.float16 if params[m].ndim == 2 else np.float32)
            for g, m in names.items())
        check(f"{name}: --f16: float16 matrices, float32 norms", same and
              kv16["general.file_type"] == 1 and kv["general.file_type"] == 0)
    toks = kv["tokenizer.ggml.tokens"]
    if tok["type"] == "char":
        back = [s.replace("\u2581".encode(), b" ") for s in toks]
    else:
        dec = gpt2_byte_decoder()
        back = [bytes(dec[ch] for ch in s.decode()) for s in toks]
    check(f"{name}: GGUF's tokens are mt's", back == pieces)
    check(f"{name}: GGUF's token types and scores", kv["tokenizer.ggml.token_type"] == [1] * V and
          np.allclose(kv["tokenizer.ggml.scores"], tk.scores))
    if tok["type"] != "char":
        merges = [tuple(m) for m in tok.get("merges", [])]
        want_m = [(pieces[a], pieces[b]) for a, b in merges]
        got_m = [tuple(bytes(dec[ch] for ch in part) for part in s.decode().split(" "))
                 for s in kv["tokenizer.ggml.merges"]]
        check(f"{name}: GGUF's merges are mt's, in rank order", got_m == want_m)


def main():
    text = open("data/tinyshakespeare.txt", "rb").read()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "text.txt")
        open(path, "wb").write(text[:100000])
        val = text[90000:100000]  # the held-out tenth
        case(d, "byte", path, val, ["--n-kv-head", "2", "--steps", "400"])
        case(d, "bpe", path, val, ["--tokenizer", "bpe", "--vocab-size", "320",
                                   "--n-kv-head", "1", "--untie", "--steps", "150"], f16=True)
        case(d, "char", path, val, ["--tokenizer", "char", "--n-kv-head", "4", "--steps", "150"])
    if FAILED:
        print(f"export: {len(FAILED)} checks failed")
        sys.exit(1)
    print("export: every check passed")


if __name__ == "__main__":
    main()
