#!/usr/bin/python3
"""Fails when an #include points the wrong way between baton's folders, or inside one.

The allowed direction is written once, in docs/architecture.md: the ```layers block lists the
folders from the top layer down (folders beside each other share a line, split by "|"), and the
```external-includes block names the external headers only some folders may include. A source
file may include headers of its own folder and of folders on lower lines only: never one above
it, never one beside it. Every folder with C++ sources must be in the picture.

A folder may also order its own files: a ```layers FOLDER block lists its components (a file's
name without its extension: thinker.hpp and thinker.cpp are `thinker`) from the top down, in the
same way. Inside such a folder a file may include its own component's header and those of
components on lower lines only, and every source file directly in it must be in that picture.

  scripts/check_layers.py [ROOT]   exit 0, or 1 with one line per wrong include or file out of the picture
"""
import os
import re
import sys

CHECKED = ("core", "engine", "tools", "policies", "adapters")  # production code; tests and bench may use anything
SOURCE = (".cpp", ".hpp", ".h", ".cc")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def lines_of(body):
    return [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("#")]


def block(text, name):
    m = re.search(r"^```" + re.escape(name) + r"\n(.*?)^```", text, re.M | re.S)
    if not m:
        sys.exit(f"docs/architecture.md has no ```{name} block")
    return lines_of(m.group(1))


def ranks(lines):
    rank = {}
    for depth, line in enumerate(lines):
        for name in line.split("|"):
            rank[name.strip()] = depth  # a smaller depth is a higher layer
    return rank


def read_rules(root):
    text = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
    rank = ranks(block(text, "layers"))
    externals = []
    for line in block(text, "external-includes"):
        prefix, _, folders = line.partition(":")
        externals.append((prefix.strip(), {f.strip() for f in folders.split(",")}))
    # ```layers FOLDER blocks: each folder's own components, from the top down.
    inner = {m.group(1): ranks(lines_of(m.group(2)))
             for m in re.finditer(r"^```layers[ \t]+(\S+)[ \t]*\n(.*?)^```", text, re.M | re.S)}
    return rank, externals, inner


def component(path):
    return os.path.splitext(os.path.basename(path))[0]


def inner_problems(root, rank, inner):
    """Folders whose own picture names what is not there, or is not in the folders' picture."""
    out = []
    for folder, parts in sorted(inner.items()):
        if folder not in rank:
            out.append(f"docs/architecture.md's layers of {folder}/: the folder is not in the layers")
            continue
        where = os.path.join(root, folder)
        present = {component(f) for f in os.listdir(where) if f.endswith(SOURCE)} if os.path.isdir(where) else set()
        for name in sorted(set(parts) - present):
            out.append(f"docs/architecture.md's layers of {folder}/ name {name}, which has no source file there")
    return out


def sources(root):
    for top in CHECKED:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(SOURCE):
                    yield os.path.relpath(os.path.join(folder, f), root)


def problems(root):
    rank, externals, inner = read_rules(root)
    out = inner_problems(root, rank, inner)
    for path in sources(root):
        folder = os.path.dirname(path)
        if folder not in rank:
            out.append(f"{path}: its folder {folder}/ is not in docs/architecture.md's layers")
            continue
        parts = inner.get(folder)
        me = component(path)
        if parts is not None and me not in parts:
            out.append(f"{path}: {me} is not in docs/architecture.md's layers of {folder}/")
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, name = m.groups()
                if kind == "<":
                    for prefix, allowed in externals:
                        if name.startswith(prefix) and folder not in allowed:
                            out.append(f"{path}:{number}: <{name}> is included only in {', '.join(sorted(allowed))}")
                    continue
                target = os.path.dirname(name)
                if not target and os.path.exists(os.path.join(root, folder, name)):
                    target, name = folder, os.path.join(folder, name)  # found beside the includer
                if target == folder and parts is not None and me in parts:
                    other = component(name)
                    if other != me and other in parts and parts[other] <= parts[me]:
                        where = "beside" if parts[other] == parts[me] else "above"
                        out.append(f"{path}:{number}: includes {name}: {other} is {where} {me} in {folder}/")
                if target == folder or not target or not os.path.exists(os.path.join(root, name)):
                    continue  # its own folder, or not a header of baton's (a generated or test one)
                if target not in rank:
                    out.append(f"{path}:{number}: includes {name}, whose folder is not in the layers")
                elif rank[target] <= rank[folder]:
                    where = "beside" if rank[target] == rank[folder] else "above"
                    out.append(f"{path}:{number}: includes {name}: {target}/ is {where} {folder}/")
    return out


def main(argv):
    root = argv[0] if argv else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    found = problems(root)
    for p in found:
        print(p)
    if found:
        print(f"check_layers: {len(found)} include(s) point the wrong way (docs/architecture.md, Layers)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
