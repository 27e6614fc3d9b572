# The preamble every shell test sources (`. "$(dirname "$0")/lib.sh"`), with NAME set to the
# test's name:
#   B               the build directory (MT_BUILD; default build)
#   T               a temporary directory, removed on exit (a test with more to undo sets its own
#                   trap and removes $T in it)
#   fail MSG...     a "FAIL NAME: MSG" line; the test goes on and finish exits 1
#   skip MSG...     a "SKIPPED NAME: MSG" line and exit 0: this machine lacks what the test needs
#   skip_case WHAT MSG...  a "SKIPPED NAME: WHAT: MSG" line; the test goes on without that case
#   finish          "NAME: ok" and exit 0, or "NAME: N failed" and exit 1
# and one probe per capability a test may lack: has_bf16, has_torch, has_cmudict (CMU), need_gpt2,
# need_mpi, need_netns (each need_ skips the test where the capability is missing).
B=${MT_BUILD:-build}
T=$(mktemp -d "/tmp/mt_${NAME}_XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL $NAME: $*"; fails=$((fails + 1)); }
skip() { echo "SKIPPED $NAME: $*"; exit 0; }
skip_case() { # what, why...
    what=$1
    shift
    echo "SKIPPED $NAME: $what: $*"
}
finish() {
    [ "$fails" -eq 0 ] && { echo "$NAME: ok"; exit 0; }
    echo "$NAME: $fails failed"
    exit 1
}

# has_bf16 [TRAIN]: whether TRAIN (default $B/train) trains with --precision bf16: this build has
# oneDNN and the CPU AVX512_BF16 (mt_bf16_check). If not, BF16_RC is its exit status and
# BF16_WHY its last line (the refusal's reason).
has_bf16() {
    "${1:-$B/train}" --threads 1 --precision bf16 --data data/tinyshakespeare.txt --n-layer 1 \
        --n-head 1 --n-embd 8 --n-ctx 8 --batch 1 --steps 0 --out "$T/bf16-probe" \
        >"$T/bf16-probe.log" 2>&1
    BF16_RC=$?
    BF16_WHY=$(tail -n 1 "$T/bf16-probe.log")
    rm -rf "$T/bf16-probe" "$T/bf16-probe.log"
    [ "$BF16_RC" -eq 0 ]
}

# Kill loops (a run killed at random moments, then resumed) time their kills by the run's own
# progress, not by fixed delays, so that they test the same under qemu or on a loaded machine:
#   last_step CSV         the last step a metrics.csv logged (0 for none)
#   step_ms CSV           a finished run's mean milliseconds a step (its ms column), at least 1
#   running PID           whether the background run PID is still running (an ended one is a
#                         zombie until waited for: /proc says Z)
#   wait_step CSV N PID   waits until the run PID logged a step beyond N, or ended (false)
#   random_ms N           sleeps a random 0 to N - 1 milliseconds
last_step() { tail -n 1 "$1" 2>/dev/null | cut -d, -f1 | grep -x '[0-9][0-9]*' || echo 0; }
step_ms() { awk -F, 'NR > 1 { s += $6; n++ } END { printf "%d", (n ? s / n : 0) + 1 }' "$1"; }
running() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }
wait_step() {
    while running "$3"; do
        [ "$(last_step "$1")" -gt "$2" ] && return 0
        sleep 0.01
    done
    return 1
}
random_ms() {
    r=$(($(od -An -N4 -tu4 /dev/urandom) % $1))
    sleep "$((r / 1000)).$(printf '%03d' $((r % 1000)))"
}

# Debian's /usr/bin/python3 with torch and numpy: the PyTorch twins and parity tests
TORCH_MISSING="/usr/bin/python3 cannot import torch and numpy (make deps-test installs python3-torch)"
has_torch() { /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; }
# GPT-2's published encoder.json and vocab.bpe in $G2 ($MT_GPT2, else ../shared's), or skip
need_gpt2() {
    G2=${MT_GPT2:-../shared/third_party/gpt2}
    [ -r "$G2/encoder.json" ] && [ -r "$G2/vocab.bpe" ] ||
        skip "no $G2/encoder.json: ../shared is absent"
}

# CMUdict 0.4 (festlex-cmu): the encoder-decoder's G2P data
CMU=/usr/share/festival/dicts/cmu/cmudict-0.4.out
CMU_MISSING="$CMU missing (make deps installs festlex-cmu)"
has_cmudict() { [ -r "$CMU" ]; }

need_mpi() {
    command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
        skip "mpicc or mpirun missing (make deps-test installs libopenmpi-dev openmpi-bin)"
}

# need_netns NS...: creates each network namespace (the caller deletes them), or skips the test
# where they cannot be made (no iproute2; a container without CAP_SYS_ADMIN)
need_netns() {
    command -v ip >/dev/null || skip "ip missing (make deps-test installs iproute2)"
    for ns in "$@"; do
        ip netns add "$ns" 2>/dev/null || skip "cannot create a network namespace (needs root)"
    done
}

# Safetensors files compared by python3 (the caller checks it is there): tensors same|differ
# REGEX A B, the names matching REGEX whose bytes in A equal (or differ from) B's; tensors names
# A, every name; tensors shape A NAME, its shape. count: how many names tensors prints.
tensors() {
    python3 - "$@" <<'PY'
import json, re, sys
def load(p, shapes=False):
    b = open(p, "rb").read()
    n = int.from_bytes(b[:8], "little")
    h = json.loads(b[8:8 + n])
    return {k: v["shape"] if shapes else b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items() if k != "__metadata__"}
if sys.argv[1] == "names":
    print("\n".join(sorted(load(sys.argv[2]))))
elif sys.argv[1] == "shape":
    print(load(sys.argv[2], True)[sys.argv[3]])
else:
    how, regex, a, b = sys.argv[1:5]
    x, y = load(a), load(b)
    for k in sorted(x):
        if re.fullmatch(regex, k) and (x[k] == y.get(k)) == (how == "same"):
            print(k)
PY
}
count() { tensors "$@" | wc -l; }

# llmc_header FILE MAGIC VERSION T V L NH C VP BYTES: an llm.c model file (python3) of a header
# (magic, version, max_seq_len, vocab_size, num_layers, num_heads, channels, padded_vocab_size)
# and BYTES zero bytes of body
llmc_header() {
    python3 -c 'import struct, sys
a = [int(x) for x in sys.argv[2:]]
open(sys.argv[1], "wb").write(struct.pack("<8i", *a[:8]).ljust(1024, b"\0") + bytes(a[8]))' "$@"
}

# An importer test's refusal (the caller's train and $DATA): refused WHAT SAYS FLAGS... checks
# exit 2, a message holding SAYS, and nothing written.
refused() { # what, what the message says, flags...
    what=$1 says=$2
    shift 2
    train $DATA --steps 0 --out "$T/refused" "$@"
    rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc: $(cat "$T/log")"
    grep -q -- "$says" "$T/log" || fail "$what: the message does not say '$says': $(cat "$T/log")"
    [ ! -e "$T/refused" ] || fail "$what: wrote $T/refused"
}
