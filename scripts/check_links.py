#!/usr/bin/env python3
"""Checks the relative links and images of the project's Markdown pages (make check-links).

  python3 scripts/check_links.py [FILE.md ...]

Without arguments: README.md, docs/**/*.md and bench/*.md. Every link [text](target), image
![alt](target), reference definition [id]: target and HTML href="..." / src="..." outside code
must name a file or directory of the repository (tracked, or new and not ignored by git: a
generated file under out/ does not count), and a #fragment on a Markdown page must be one of its
headings as GitHub spells it (lower case, punctuation dropped, spaces as '-', '-1', '-2' for
repeats). External links (http:, https:, mailto:) are not fetched. Prints one line per broken
link, "FILE:LINE: ...", and exits 1 when there is any. Python 3 standard library only.
"""
import glob
import os
import re
import subprocess
import sys
import urllib.parse

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^()\s]+(?:\([^()\s]*\)[^()\s]*)*)"
                  r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*\b(?:name|id)\s*=\s*["']([^"']+)["']""")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def repo_files():
    """Files of the repository: tracked or untracked but not ignored, and present on disk; None
    when git cannot tell (then anything on disk counts)."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    files = {f for f in out.decode("utf-8", "replace").split("\0") if f}
    return {f for f in files if os.path.isfile(os.path.join(ROOT, f))}


def dirs_of(files):
    d = set()
    for f in files:
        p = os.path.dirname(f)
        while p and p not in d:
            d.add(p)
            p = os.path.dirname(p)
    return d


def prose_lines(text):
    """(line number, line with code spans blanked) for every line outside fenced code."""
    fence = None
    for i, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield i, CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line)


def slug(heading):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)                        # inline HTML
    text = text.replace("`", "").lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, out = {}, set()
        try:
            text = open(path, encoding="utf-8").read()
        except OSError:
            text = ""
        fence = None
        for line in text.split("\n"):
            m = FENCE.match(line)
            if fence or m:
                if fence and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                    fence = None
                elif not fence and m:
                    fence = m.group(1)
                continue
            h = HEADING.match(line)
            if h:
                s = slug(h.group(2))
                n = seen.get(s, 0)
                seen[s] = n + 1
                out.add(s if n == 0 else "%s-%d" % (s, n))
            out.update(HTML_ANCHOR.findall(line))
        _anchors[path] = out
    return _anchors[path]


def check(md, files, dirs):
    """Broken links of one page (a path relative to ROOT), as messages."""
    bad = []
    text = open(os.path.join(ROOT, md), encoding="utf-8").read()
    for no, line in prose_lines(text):
        targets = [m.group(1) for m in LINK.finditer(line)]
        targets += [m.group(1) for m in [REFDEF.match(line)] if m]
        targets += HTML.findall(line)
        for target in targets:
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            scheme = urllib.parse.urlsplit(target).scheme
            if scheme or target.startswith("//"):
                continue  # external: http, https, mailto, ...
            path, _, frag = target.partition("#")
            path = urllib.parse.unquote(path.partition("?")[0])
            frag = urllib.parse.unquote(frag)
            if path:
                base = "" if path.startswith("/") else os.path.dirname(md)
                rel = os.path.normpath(os.path.join(base, path.lstrip("/")))
                if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
                    bad.append("%s:%d: '%s' points outside the repository" % (md, no, target))
                    continue
                if rel == ".":
                    exists = True
                elif files is None:
                    exists = os.path.exists(os.path.join(ROOT, rel))
                else:
                    exists = rel in files or rel in dirs
                if not exists:
                    bad.append("%s:%d: '%s': no file %s in the repository" % (md, no, target, rel))
                    continue
            else:
                rel = md
            if frag and rel.endswith(".md") and os.path.isfile(os.path.join(ROOT, rel)):
                if frag not in anchors(os.path.join(ROOT, rel)):
                    bad.append("%s:%d: '%s': %s has no heading with the anchor '#%s'"
                               % (md, no, target, rel, frag))
    return bad


def main(argv):
    if argv:
        pages = [os.path.relpath(os.path.abspath(p), ROOT) for p in argv]
    else:
        pages = ["README.md"] + sorted(glob.glob("docs/**/*.md", root_dir=ROOT, recursive=True)) \
            + sorted(glob.glob("bench/*.md", root_dir=ROOT))
    files = repo_files()
    dirs = dirs_of(files) if files is not None else set()
    bad = []
    for md in pages:
        if not os.path.isfile(os.path.join(ROOT, md)):
            bad.append("%s: no such page" % md)
            continue
        bad += check(md, files, dirs)
    for b in bad:
        print(b)
    print("check-links: %d page(s), %s" % (len(pages), "%d broken link(s)" % len(bad) if bad
                                            else "every relative link resolves"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
