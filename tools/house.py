#!/usr/bin/env python3
"""The house check (`make check`): how the files of src/ depend on each other, and how long
their functions are.

- Every file is a room; an arrow goes from a file to each file whose items it names (`use`
  declarations and `crate::`/`super::`/`self::` paths, and a module's own `child::` paths).
  Test code (`tests.rs`, `fake.rs`, `#[cfg(test)] mod tests`) is left out: a test may reach
  anything. A circle of arrows fails the check; the floors (the longest chain of arrows below a
  room) are printed, top floor first.
- A function longer than MAX_LINES lines fails the check unless its doc comment says why, in a
  line starting `Long:`.

Run: python3 tools/house.py [--floors]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
MAX_LINES = 80
TEST_FILES = {"tests.rs", "fake.rs"}


def module_of(path: Path) -> tuple[str, ...]:
    """src/planner/mod.rs -> ("planner",); src/reconciler/apply.rs -> ("reconciler", "apply");
    the binaries' roots are modules of their own (`main`, `bin::etcd-asg`)."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


def strip_tests(text: str) -> str:
    """The file without its `#[cfg(test)] mod tests { … }` block and comments."""
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if not m:
        return text
    depth, i = 0, m.end() - 1
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[: m.start()] + text[i + 1 :]
        i += 1
    return text[: m.start()]


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [tree]
    prefix, inner = m.groups()
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    items.append(cur)
    return [p for item in items if item for p in expand_use(prefix + item)]


def references(mod: tuple[str, ...], is_dir_module: bool, text: str, modules: set) -> set:
    """The modules `text` (of module `mod`) names."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        paths += expand_use(m.group(1))
    paths += re.findall(r"\b((?:crate|etcd_asg_lifecycle|super|self)(?:::\w+)+)", text)
    # A module names its children by their own name (`leaving::removals(...)`).
    children = {m[-1] for m in modules if len(m) == len(mod) + 1 and m[: len(mod)] == mod}
    for child in children:
        if re.search(rf"\b{re.escape(child)}::\w", text):
            paths.append(f"self::{child}")
    found = set()
    for p in paths:
        parts = p.split("::")
        if parts[0] in ("crate", "etcd_asg_lifecycle"):  # the binaries name the library
            base, rest = (), parts[1:]
        elif parts[0] in ("super", "self"):
            # In a file module `a/b.rs`, `self` is a::b and `super` is a; in `a/mod.rs` the same.
            base = mod
            while parts and parts[0] == "super":
                base = base[:-1]
                parts = parts[1:]
            if parts and parts[0] == "self":
                parts = parts[1:]
            rest = parts
        else:
            continue
        target = base
        for part in rest:
            if target + (part,) in modules:
                target = target + (part,)
            else:
                break
        if target != mod and target in modules:
            found.add(target)
    return found


def functions(text: str):
    """(name, first line, length in lines, doc comment) of each `fn` with a body."""
    lines = text.split("\n")
    for n, line in enumerate(lines):
        m = re.match(r"\s*(?:pub(?:\([\w:]+\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)", line)
        if not m:
            continue
        depth, started, end = 0, False, None
        for k in range(n, len(lines)):
            code = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])\'|//.*', "", lines[k])
            if not started and ";" in code and "{" not in code:
                break  # a declaration without a body
            for ch in code:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
            if started and depth <= 0:
                end = k
                break
        if end is None:
            continue
        doc, k = [], n - 1
        while k >= 0 and (lines[k].strip().startswith("///") or lines[k].strip().startswith("#[")):
            doc.insert(0, lines[k].strip())
            k -= 1
        yield m.group(1), n + 1, end - n + 1, doc


def main(argv: list[str]) -> int:
    files = sorted(p for p in SRC.rglob("*.rs"))
    modules = {module_of(p): p for p in files if p.name not in TEST_FILES}
    graph = {}
    for mod, path in modules.items():
        text = strip_tests(path.read_text())
        graph[mod] = references(mod, path.name == "mod.rs", text, set(modules))
    failures = []
    # Circles: strongly connected components of more than one room (Tarjan).
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(comp)

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    for comp in sccs:
        if len(comp) > 1:
            names = ", ".join(sorted("::".join(c) or "lib" for c in comp))
            failures.append(f"import circle: {names}")
    if not failures:
        floor = {}

        def height(v):
            if v not in floor:
                floor[v] = 1 + max((height(w) for w in graph[v]), default=-1)
            return floor[v]

        for v in graph:
            height(v)
        if "--floors" in argv:
            for f in sorted(set(floor.values()), reverse=True):
                rooms = sorted("::".join(v) or "lib" for v in graph if floor[v] == f)
                print(f"floor {f}: {', '.join(rooms)}")
        print(f"house: {len(graph)} rooms on {max(floor.values()) + 1} floors, no circle")
    for path in files:
        for name, line, length, doc in functions(path.read_text()):
            if length > MAX_LINES and not any(d.startswith("/// Long:") for d in doc):
                failures.append(f"{path.relative_to(ROOT)}:{line}: fn {name} is {length} lines "
                                f"(over {MAX_LINES}, and no '/// Long:' reason in its doc comment)")
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
