#!/bin/sh
# scripts/scale_run.py end to end on a slice (docs/scale.md): 300 KB of GCIDE's text (tiny
# Shakespeare's where dict-gcide is not installed), BPE 300, llm.c shards, a tiny LLaMA with
# --recompute block and --grad-accum 4 trained in two parts (the first ended by --part-steps at
# its checkpoint, the second resumed to the end), the CSVs and the page; then --bench. The two
# parts must give the losses of one run never stopped, every step once in metrics.csv, and the
# bench's --recompute block a smaller peak RSS than none.
NAME=test_scale
. "$(dirname "$0")/lib.sh"
MODEL="--n-layer 2 --n-embd 64 --n-head 2 --n-ctx 64"
FLAGS="$MODEL --steps 30 --warmup 3 --save-every 5 --eval-every 10 --eval-batches 2"
if [ -e /usr/share/dictd/gcide.dict.dz ]; then
    TEXT=""
else
    echo "test_scale: dict-gcide not installed (make deps): tiny Shakespeare's text instead"
    TEXT="--text data/tinyshakespeare.txt"
fi
scale() { python3 scripts/scale_run.py --root "$T/root" --docs "$T/scale" "$@" >>"$T/log" 2>&1; }
# shellcheck disable=SC2086
scale $TEXT --text-bytes 300000 --vocab-size 300 --shard-tokens 30000 --part-steps 10 \
    --train-flags "$FLAGS" || fail "part 1 exited $?: $(tail -5 "$T/log")"
scale || fail "part 2 exited $?: $(tail -5 "$T/log")"
for f in prep.csv run.csv parts.csv metrics.csv loss.png; do
    [ -s "$T/scale/$f" ] || fail "no $f"
done
grep -q "vocabulary 300" "$T/scale/run.csv" || fail "run.csv: $(cat "$T/scale/run.csv")"
# part 1 stopped at a checkpoint 10 to 29 steps on, unfinished; part 2 finished at 30
awk -F, 'NR == 2 && !($3 >= 10 && $3 < 30 && $5 == 0) { exit 1 }
         NR == 3 && !($2 == 0 + p && $3 == 30 && $5 == 1) { exit 1 } { p = $3 }
         END { exit NR != 3 }' "$T/scale/parts.csv" || fail "parts: $(cat "$T/scale/parts.csv")"
# the same flags in one run never stopped: the same losses at every step
# shellcheck disable=SC2086
./train --config configs/gcide-llama.ini --data "$T/root/shards" --out "$T/once" --threads 1 \
    $FLAGS >"$T/once.log" 2>&1 || fail "the uninterrupted run: $(tail -3 "$T/once.log")"
cut -d, -f1-3 "$T/once/metrics.csv" >"$T/want"
cut -d, -f1-3 "$T/scale/metrics.csv" >"$T/got"
cmp -s "$T/want" "$T/got" ||
    fail "the two parts' losses differ from one run's: $(diff "$T/want" "$T/got" | head -5)"
grep -q "complete: 30 steps" "$T/scale.md" || fail "the page: $(head -30 "$T/scale.md")"
grep -q "^| 30 | 61,440 |" "$T/scale.md" ||
    fail "no validation row at step 30 (32 x 64 tokens a step): $(grep "^| 30" "$T/scale.md")"
# memory: 4 layers at n_ctx 128, where the activations outweigh the weights
scale --bench --bench-steps 2 --train-flags "--n-layer 4 --n-embd 128 --n-head 4 --n-ctx 128" ||
    fail "--bench exited $?: $(tail -5 "$T/log")"
awk -F, '$1 == "none" { n = $6 } $1 == "block" { b = $6 }
         END { exit !(n > 0 && b > 0 && b < n) }' "$T/scale/bench.csv" ||
    fail "bench: $(cat "$T/scale/bench.csv")"
finish
