#!/bin/sh
# Peak RSS of ./train on token shards read by mmap (docs/data.md): a synthetic 4 GiB set (16
# llm.c shards of 128 Mi uint16 ids) against a 10 MiB one (one shard of 5 Mi ids), the same model,
# steps and evaluation; the RSS must not grow with the corpus. The shards hold real bytes (random
# ids below 256, --data-vocab 256), written into a temporary directory and removed after: sparse
# files would read as zeros from holes and would not show that the checking pass, which reads
# every id, keeps nothing. Prints a Markdown table (bench/run.sh appends it to bench/RESULTS.md).
# Alone: sh bench/shards_rss.sh. Environment: MT_BUILD (build dir), SHARDS_GIB (4: the large
# set's size), TMPDIR (where the shards are written; needs SHARDS_GIB of free disk).
set -e
cd "$(dirname "$0")/.."
BUILD=${MT_BUILD:-build}
GIB=${SHARDS_GIB:-4}
PY=/usr/bin/python3
if [ ! -x /usr/bin/time ]; then
    echo "shards_rss.sh: /usr/bin/time is missing (Debian: apt-get install time)" >&2
    exit 1
fi
D=$(mktemp -d "${TMPDIR:-/var/tmp}/mt_shards_rss_XXXXXX")
trap 'rm -rf "$D"' EXIT
mkdir -p "$D/large" "$D/small"
# name, shards, ids per shard: 16 x 128 Mi ids x 2 bytes = 4 GiB; 1 x 5 Mi ids = 10 MiB
$PY - "$D" "$GIB" <<'EOF'
import sys
import numpy as np
d, gib = sys.argv[1], int(sys.argv[2])
def shard(path, ids):  # llm.c's layout: int32 header of 256 (magic, version 1, count), uint16 ids
    h = np.zeros(256, dtype=np.int32)
    h[0], h[1], h[2] = 20240520, 1, len(ids)
    with open(path, "wb") as f:
        f.write(h.tobytes())
        ids.tofile(f)
base = np.random.default_rng(0).integers(0, 256, 128 << 20, dtype=np.uint16)
for k in range(4 * gib):  # each shard its own ids
    shard(f"{d}/large/train_{k:06d}.bin", (base + k) % 256)
shard(f"{d}/small/train_000000.bin", base[: 5 << 20])
EOF
ARGS="--data-vocab 256 --n-layer 2 --n-embd 64 --n-head 2 --n-ctx 128 --batch 8 --steps 20
      --eval-every 0 --eval-batches 4 --threads 2"
echo "| token data | on disk | peak RSS of ./train (MiB) | wall time (s) | ./train's data line |"
echo "|---|---|---|---|---|"
for set in small large; do
    size=$(du -sm "$D/$set" | cut -f1)
    start=$(date +%s.%N)
    if ! /usr/bin/time -f %M -o "$D/rss" "$BUILD/train" --data "$D/$set" $ARGS --out "$D/out-$set" \
        >"$D/log" 2>&1; then
        cat "$D/log" >&2
        exit 1
    fi
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    line=$(grep '^data' "$D/log" | sed 's|^data *[^:]*: ||')
    awk -v s="$set" -v m="$size" -v t="$secs" -v l="$line" 'NR == 1 {
        printf "| %s | %d MiB | %.1f | %.1f | %s |\n", s, m, $1 / 1024, t, l }' "$D/rss"
done
echo
echo "Model: 2 layers, n_embd 64, n_ctx 128, batch 8, 20 steps, 4 evaluation batches, 2 threads;"
echo "the wall time includes the checking pass over every id (a sequential read of the set)."
