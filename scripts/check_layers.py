#!/usr/bin/python3
"""Fails when an #include points the wrong way between baton's folders.

The allowed direction is written once, in docs/architecture.md: the ```layers block lists the
folders from the top layer down (folders beside each other share a line, split by "|"), and the
```external-includes block names the external headers only some folders may include. A source
file may include headers of its own folder and of folders on lower lines only: never one above
it, never one beside it. Every folder with C++ sources must be in the picture.

  scripts/check_layers.py [ROOT]   exit 0, or 1 with one line per wrong include
"""
import os
import re
import sys

CHECKED = ("core", "engine", "tools", "policies", "adapters")  # production code; tests and bench may use anything
SOURCE = (".cpp", ".hpp", ".h", ".cc")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def block(text, name):
    m = re.search(r"^```" + re.escape(name) + r"\n(.*?)^```", text, re.M | re.S)
    if not m:
        sys.exit(f"docs/architecture.md has no ```{name} block")
    return [line.strip() for line in m.group(1).splitlines() if line.strip() and not line.strip().startswith("#")]


def read_rules(root):
    text = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
    rank = {}
    for depth, line in enumerate(block(text, "layers")):
        for folder in line.split("|"):
            rank[folder.strip()] = depth  # a smaller depth is a higher layer
    externals = []
    for line in block(text, "external-includes"):
        prefix, _, folders = line.partition(":")
        externals.append((prefix.strip(), {f.strip() for f in folders.split(",")}))
    return rank, externals


def sources(root):
    for top in CHECKED:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(SOURCE):
                    yield os.path.relpath(os.path.join(folder, f), root)


def problems(root):
    rank, externals = read_rules(root)
    out = []
    for path in sources(root):
        folder = os.path.dirname(path)
        if folder not in rank:
            out.append(f"{path}: its folder {folder}/ is not in docs/architecture.md's layers")
            continue
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
