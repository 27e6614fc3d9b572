#!/bin/sh
# No include cycle, no cycle between the src/**/*.c files (from their objects' symbols), and the
# layering of docs/design.md (scripts/deps.py says how). Needs the objects: make test builds them.
if ! command -v python3 >/dev/null || ! command -v nm >/dev/null; then
    echo "test_deps: SKIPPED (needs python3 and nm to run scripts/deps.py)"
    exit 0
fi
# The one cycle tolerated for now: mt_encdec_tally calls the decoders of encdec_infer.c, which
# call encdec.c's embedding and encoder. The attention branch (one attention for training and
# generation) removes it; drop the --allow line then (deps.py prints a note once it is gone).
exec python3 scripts/deps.py --build "${MT_BUILD:-build}" \
    --allow src/models/encdec.c:src/models/encdec_infer.c
