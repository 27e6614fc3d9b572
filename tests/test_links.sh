#!/bin/sh
# Every relative link and image of README.md, docs/**/*.md and bench/*.md names a file of the
# repository, and every #anchor to a Markdown page one of its headings (scripts/check_links.py,
# also `make check-links`).
NAME=test_links
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "no python3 to run scripts/check_links.py"
python3 scripts/check_links.py
