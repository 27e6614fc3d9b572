#!/bin/sh
# Short runs of the shipped configs whose outputs a refactor must leave bit-identical: prints one
# "name sha256" line per file (metrics.csv's step, loss, val_loss, lr and grad_norm columns; the
# checkpoint's tensors and config; the diagnostics' CSVs). Compare the lines of two builds on the
# same machine and thread count:  scripts/golden_runs.sh [BIN_DIR] > a.txt
# BIN_DIR holds train (default: the checkout's ./train); runs go to a temporary directory.
set -eu
cd "$(dirname "$0")/.."
bin=${1:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--threads 2 --save-every 0 --log-every 10"
# The tensors of a safetensors file: the bytes after its header (whose options name the --out).
tensor_bytes() {
    python3 -c 'import sys; f = open(sys.argv[1], "rb"); n = int.from_bytes(f.read(8), "little"); f.seek(8 + n); sys.stdout.buffer.write(f.read())' "$1"
}
run() { # name, flags...
    name=$1
    shift
    "$bin/train" "$@" $common --out "$tmp/$name" >"$tmp/$name.log" 2>&1 ||
        { echo "$name: ./train failed:" >&2; tail -5 "$tmp/$name.log" >&2; exit 1; }
    printf '%s metrics %s\n' "$name" "$(cut -d, -f1-5 "$tmp/$name/metrics.csv" | sha256sum | cut -c1-16)"
    printf '%s tensors %s\n' "$name" "$(tensor_bytes "$tmp/$name/model.safetensors" | sha256sum | cut -c1-16)"
    for d in "$tmp/$name"/diag_*.csv; do
        [ -e "$d" ] && printf '%s %s %s\n' "$name" "${d##*/}" "$(sha256sum "$d" | cut -c1-16)"
    done
    return 0
}
run quickstart --config configs/tiny-gpt.ini --steps 100 --eval-every 50
run tiny-llama --config configs/tiny-llama.ini --steps 100 --eval-every 50
run tiny-ngpt --config configs/tiny-ngpt.ini --steps 100 --eval-every 50
run vit --config configs/vit-mnist.ini --steps 60 --warmup 10 --eval-every 30
if [ -e /usr/share/festival/dicts/cmu/cmudict-0.4.out ]; then
    run g2p --config configs/g2p.ini --steps 40 --warmup 10 --eval-every 20 --eval-batches 2 --precision fp32
fi
run post12 --config configs/deep100-post.ini --n-layer 12 --steps 60 --warmup 10 --diag-grad-every 20 \
    --diag-update-steps 20 --diag-resid-every 20 --diag-attn-every 20 --diag-logz-every 20 \
    --diag-skip-every 30
