#!/bin/sh
# No include cycle, no cycle between the src/**/*.c files (from their objects' symbols), and the
# layering of docs/design.md, that nothing above src/models names a model, and that each src/
# file includes the headers of what it uses
# (scripts/deps.py says how). Needs the objects: make test builds them.
NAME=test_deps
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null && command -v nm >/dev/null ||
    skip "needs python3 and nm to run scripts/deps.py"
python3 scripts/deps.py --build "$B" --models --includes
