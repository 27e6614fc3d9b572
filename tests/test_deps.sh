#!/bin/sh
# No include cycle, no cycle between the src/**/*.c files (from their objects' symbols), and the
# layering of docs/design.md, including that nothing above src/models names a model
# (scripts/deps.py says how). Needs the objects: make test builds them.
if ! command -v python3 >/dev/null || ! command -v nm >/dev/null; then
    echo "test_deps: SKIPPED (needs python3 and nm to run scripts/deps.py)"
    exit 0
fi
# Cycles tolerated for now (deps.py prints a note once one is gone: drop its --allow then):
# gpt.c, gpt_infer.c, gpt_export.c, text_task.c, model.c, registry.c; vit.c <-> image_task.c:
# a model's type table (in gpt.c, vit.c) names functions of the other files, which call back
# into gpt.c / vit.c; and model.c's mt_model_type_find reads the registry, which names every
# type. A type table in a file of its own (above the model's parts) and the lookup in
# registry.c remove them.
exec python3 scripts/deps.py --build "${MT_BUILD:-build}" --models \
    --allow src/models/gpt.c:src/models/gpt_infer.c \
    --allow src/models/vit.c:src/models/image_task.c
