#!/bin/sh
# Every relative link and image of README.md, docs/**/*.md and bench/*.md names a file of the
# repository, and every #anchor to a Markdown page one of its headings (scripts/check_links.py,
# also `make check-links`).
if ! command -v python3 >/dev/null; then
    echo "test_links: SKIPPED (no python3 to run scripts/check_links.py)"
    exit 0
fi
exec python3 scripts/check_links.py
