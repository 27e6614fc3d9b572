#!/usr/bin/env python3
"""Checks mt's dependency graphs for cycles and for the layering of docs/design.md (make test runs
it as tests/test_deps.sh).

  python3 scripts/deps.py [--build DIR] [--allow A.c:B.c ...] [--includes] [--models]

Two graphs, both built from the tree as it is:

1. Includes: every `#include "..."` of the C sources and headers (src/, tests/, bench/, the
   programs), resolved as the compiler does (the including file's directory, then -Isrc). A cycle
   is a header that ends up including itself.

2. Modules: one node per src/**/*.c file (its object, DIR/src/**/*.o, so `make` must have built
   them), an edge A -> B when A's object has an undefined symbol that B's object defines
   (`nm`). This is what the files really call, not what they could see: a directory's shared
   header (nn.h, data.h) declares the API of several files, so the headers a .c includes would
   merge a directory into one node and hide the cycles between its files, while the objects keep
   each file apart. A file is the unit because a cycle between two files of one directory makes
   each unreadable without the other just as much as one between directories. An op calling
   tensor.c's helpers while tensor.c calls none of the op's is one edge, no cycle.

A cycle is a strongly connected component of more than one node (or a self-include). Layering
(docs/design.md, "Modules"): a directory of src/ may use, through its includes and its objects,
only itself and the directories LAYERS allows: nothing in src/tensor knows a layer, nothing in
src/nn a model, src/io only src/tensor, src/data, src/nn and src/optim also src/io (files; the
field tables of their components' options), src/models src/nn,
src/data and src/io, src/tasks also src/models (through a model's type only), src/ckpt (model
files) src/models' interface, src/io and src/tensor, src/train all of those, src/diag also
src/train (the diagnostics read the trainer), and src/app (the programs' work) everything.
--includes also checks that every src/ file includes the header of each mt_ / MT_ name it uses,
itself or through a header of its own directory (include_uses says how; clean today, not yet in
the test while other branches merge). --models also checks the last rule of design.md's:
nothing above src/models (the programs, src/ckpt, src/train, src/io, src/diag, src/app) nor beside it
(src/tasks, which reaches a model through its type) names a model (mt_gpt*, mt_vit*, mt_encdec*).

Prints each cycle with the symbols or includes that make it, each layering violation, and exits 1
when there is any not allowed by --allow (a cycle given as two files, A.c:B.c: the cycle that
contains both is tolerated, with a note). Python 3 standard library and nm only.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# The directories of src/ each directory may depend on (itself always), from docs/design.md.
LAYERS = {
    "tensor": set(),
    "nn": {"tensor", "io"},
    "data": {"tensor", "io"},
    "io": {"tensor"},
    "optim": {"tensor", "io"},
    "models": {"tensor", "nn", "data", "io"},
    "tasks": {"tensor", "nn", "data", "io", "models"},
    "ckpt": {"tensor", "io", "models"},
    "train": {"tensor", "nn", "data", "io", "optim", "models", "tasks", "ckpt"},
    "diag": {"tensor", "nn", "data", "io", "optim", "models", "tasks", "ckpt", "train"},
    "app": {"tensor", "nn", "data", "io", "optim", "models", "tasks", "ckpt", "train", "diag"},
}
MODEL_NAME = re.compile(r"\bmt_(gpt|vit|encdec)(_\w*|\b)")  # not the tokenizer's mt_gpt2_*
ABOVE_MODELS = ["train.c", "infer.c", "export.c", "src/ckpt", "src/train", "src/io", "src/diag",
                "src/tasks", "src/app"]


def rel(path):
    return os.path.relpath(path, ROOT)


def sources():
    """The C files of the tree (not the build directories), relative to ROOT."""
    files = glob.glob(os.path.join(ROOT, "*.c"))
    for top in ("src", "tests", "bench"):
        for ext in ("c", "h"):
            files += glob.glob(os.path.join(ROOT, top, "**", "*." + ext), recursive=True)
    return sorted(rel(f) for f in files)


def include_graph(files):
    """{file: {included file: line}} for the quoted includes that resolve; unresolved ones are
    reported (the compiler would fail on them anyway)."""
    graph, bad = {}, []
    for f in files:
        text = open(os.path.join(ROOT, f), encoding="utf-8", errors="replace").read()
        graph[f] = {}
        for m in INCLUDE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            for base in (os.path.dirname(f), "src"):
                cand = os.path.normpath(os.path.join(base, m.group(1)))
                if os.path.isfile(os.path.join(ROOT, cand)):
                    graph[f][cand] = line
                    break
            else:
                bad.append(f"{f}:{line}: #include \"{m.group(1)}\" names no file")
    return graph, bad


def strip_c(text):
    """text without comments and string literals."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


DECLS = [
    re.compile(r"^\s*#\s*define\s+(\w+)", re.M),                    # macros
    re.compile(r"\}\s*(mt_\w+)\s*;"),                                # typedef struct {...} mt_x;
    re.compile(r"typedef\s[^;{}()]*?\b(mt_\w+)\s*;"),                # typedef ... mt_x;
    re.compile(r"\bstruct\s+(mt_\w+)\s*\{"),                         # struct mt_x {
    re.compile(r"^(?:(?:static|inline|extern|const|_Noreturn|unsigned)\s+)*(?!typedef\b)\w+"
               r"[\s*]+(mt_\w+)\s*\(", re.M),                          # functions
    re.compile(r"typedef[^;]*?\(\s*\*\s*(mt_\w+)\s*\)"),                  # function types
    re.compile(r"^extern\s+const\s+\w+\s+(MT_\w+)", re.M),           # extern const mt_enum MT_X
]
ENUM_BODY = re.compile(r"\benum\s*\w*\s*\{([^}]*)\}")


def declared_names(text):
    """The mt_ / MT_ names (and macros) a file declares or defines, from its stripped text."""
    names = set()
    for r in DECLS:
        names |= set(r.findall(text))
    for body in ENUM_BODY.findall(text):
        names |= set(re.findall(r"\b(MT_\w+)\b", body))
    return names


def include_uses(files, incs):
    """Each src/ file must see every mt_ / MT_ name it uses from another header through a header
    it includes itself or through headers of its own directory (a module's header stands for its
    files): nn/linear.c may reach tensor/gemm.h through nn/nn.h, not through tensor/tensor.h. So a
    header includes what it uses and a .c what it uses beyond its module's header. The
    declarations are read with regular expressions, good enough for mt's style (one declaration
    a line, return type first); a name no header declares is not checked."""
    texts = {f: strip_c(open(os.path.join(ROOT, f), encoding="utf-8").read()) for f in files}
    owners = {}
    for f in files:
        if f.endswith(".h"):
            for n in declared_names(texts[f]):
                owners.setdefault(n, set()).add(f)
    bad = []
    for f in files:
        here, seen, todo = os.path.dirname(f), {f}, [f]
        while todo:
            for g in incs.get(todo.pop(), {}):
                if g not in seen:
                    seen.add(g)
                    if os.path.dirname(g) == here:
                        todo.append(g)
        missing = {}
        used = set(re.findall(r"\b(?:mt|MT)_\w+", texts[f])) - declared_names(texts[f])
        for n in sorted(used):
            hs = owners.get(n)
            if hs and not hs & seen:
                missing.setdefault(" or ".join(sorted(hs)), []).append(n)
        for h, names in sorted(missing.items()):
            more = f" (+{len(names) - 4})" if len(names) > 4 else ""
            bad.append(f"includes: {f} uses {', '.join(names[:4])}{more} of {h} without "
                       "including it")
    return bad


def nm_symbols(objs):
    """{object: (defined, undefined)} external symbols, from one nm run over all of them."""
    out = subprocess.run(["nm", "-A"] + objs, capture_output=True, text=True, check=True).stdout
    syms = {o: (set(), set()) for o in objs}
    for line in out.splitlines():
        obj, _, rest = line.rpartition(".o:")
        parts = rest.split()
        if len(parts) == 3 and parts[1] in "TDBRCVWGS":
            syms[obj + ".o"][0].add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            syms[obj + ".o"][1].add(parts[1])
    return syms


def module_graph(build):
    """{src file: {src file: [symbols]}} from the objects under build/src; None when absent."""
    objs = sorted(glob.glob(os.path.join(ROOT, build, "src", "**", "*.o"), recursive=True))
    names = {o: os.path.relpath(o, os.path.join(ROOT, build))[:-2] + ".c" for o in objs}
    # an object whose source is gone (renamed, deleted) is stale: make never removes it
    objs = [o for o in objs if os.path.isfile(os.path.join(ROOT, names[o]))]
    if not objs:
        return None
    syms = {names[o]: s for o, s in nm_symbols(objs).items()}
    owner = {s: f for f, (defined, _) in syms.items() for s in defined}
    graph = {f: {} for f in syms}
    for f, (_, undefined) in syms.items():
        for s in sorted(undefined):
            g = owner.get(s)
            if g and g != f:
                graph[f].setdefault(g, []).append(s)
    return graph


def cycles(graph):
    """The strongly connected components with a cycle (Tarjan), each a sorted list."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):  # iterative, so that deep include chains do not hit the recursion limit
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        while work:
            u, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[u] = min(low[u], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[u])
            if low[u] == index[u]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == u:
                        break
                if len(comp) > 1 or u in graph.get(u, ()):
                    out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def describe(comp, graph, what):
    """The edges inside a component, one line each, with what makes them."""
    lines = []
    for a in comp:
        for b in sorted(graph[a]):
            if b in comp:
                why = graph[a][b]
                why = f"line {why}" if isinstance(why, int) else ", ".join(why[:6]) + (
                    f" (+{len(why) - 6})" if len(why) > 6 else "")
                lines.append(f"    {a} -> {b}: {why}")
    return f"{what} cycle: " + " <-> ".join(comp) + "\n" + "\n".join(lines)


def src_dir(f):
    parts = f.split(os.sep)
    return parts[1] if len(parts) > 2 and parts[0] == "src" else None


def layering(graph, what):
    """Edges from one directory of src/ to one that LAYERS does not allow it."""
    bad = []
    for a in sorted(graph):
        da = src_dir(a)
        if da not in LAYERS:
            continue
        for b in sorted(graph[a]):
            db = src_dir(b)
            if db and db != da and db not in LAYERS[da]:
                why = graph[a][b]
                why = f"line {why}" if isinstance(why, int) else ", ".join(why[:4])
                bad.append(f"layering ({what}): {a} -> {b} ({why}): src/{da} may use "
                           f"{', '.join('src/' + d for d in sorted(LAYERS[da])) or 'nothing'}")
    return bad


def names_models(files):
    hits = []
    for f in files:
        if not any(f == p or f.startswith(p + os.sep) for p in ABOVE_MODELS):
            continue
        for n, line in enumerate(open(os.path.join(ROOT, f), encoding="utf-8"), 1):
            m = MODEL_NAME.search(line)
            if m:
                hits.append(f"{f}:{n}: names a model ({m.group(0)})")
    return hits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("MT_BUILD", "build"),
                    help="the build directory holding src/**/*.o (default: $MT_BUILD or build)")
    ap.add_argument("--allow", action="append", default=[], metavar="A.c:B.c",
                    help="tolerate the module cycle that contains both files")
    ap.add_argument("--includes", action="store_true",
                    help="also check that each src/ file includes the headers of what it uses")
    ap.add_argument("--models", action="store_true",
                    help="also check that nothing above src/models names a model")
    args = ap.parse_args()

    files = sources()
    incs, errors = include_graph(files)
    mods = module_graph(args.build)
    if mods is None:
        errors.append(f"no objects under {args.build}/src: run make first")
        mods = {}
    notes = []
    for comp in cycles(incs):
        errors.append(describe(comp, incs, "include"))
    allowed = [tuple(os.path.normpath(p) for p in a.split(":")) for a in args.allow]
    for comp in cycles(mods):
        ok = [a for a in allowed if all(p in comp for p in a)]
        (notes if ok else errors).append(describe(comp, mods, "module") +
                                         ("\n    (allowed for now)" if ok else ""))
    for a in allowed:
        if not any(all(p in comp for p in a) for comp in cycles(mods)):
            notes.append(f"note: the allowed cycle {':'.join(a)} is gone; drop --allow")
    errors += layering({f: e for f, e in incs.items() if f.startswith("src" + os.sep)},
                       "includes")
    errors += layering(mods, "objects")
    if args.includes:
        errors += include_uses([f for f in files if f.startswith("src" + os.sep)], incs)
    if args.models:
        errors += names_models(files)

    for line in notes + errors:
        print(line)
    n_inc = sum(len(e) for e in incs.values())
    n_mod = sum(len(e) for e in mods.values())
    print(f"deps: {len(incs)} files, {n_inc} includes; {len(mods)} modules, {n_mod} module "
          f"edges; {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
