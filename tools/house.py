#!/usr/bin/env python3
"""The house check (`make check`): how the files of src/ depend on each other, and how long the
files and functions of src/, tests/ (Rust, Go) and sim/, tests/, tools/ (Python) are.

- Every file is a room; an arrow goes from a file to each file whose items it names (`use`
  declarations and `crate::`/`super::`/`self::` paths, and a module's own `child::` paths).
  Test code (`tests.rs`, the in-memory fake of `src/fake/`, `#[cfg(test)] mod tests`) is left
  out: a test may reach anything. A circle of arrows fails the check; the floors (the longest
  chain of arrows below a room) are printed, top floor first.
- Rule files (the files of a RULE_DIRS directory but its mod.rs and its shared files) never
  import one another: an arrow from a file of the directory to another of its files must reach a
  shared file (`context`, `step`, …); what one rule needs from another its mod.rs (the ranking)
  asks and hands in. Each file of the directory is named (`name.rs`) in its mod.rs's doc comment,
  so that a newcomer finds the one file a question belongs to.
- Some rooms must never name others, whatever the floors say (FORBIDDEN): a file of
  src/adapters/ never names crate::reconciler (adapters are thin translators: the reconciler uses
  them, never the reverse). Each such name fails the check with its file and line; test code is
  left out here too.
- A source file longer than MAX_FILE_LINES lines fails the check, with no exception: Rust (src/,
  tests/), Python (sim/, tests/, tools/) and Go (tests/). Split it into rooms of one concern each.
- A function longer than MAX_LINES lines fails the check unless it says why, in a line starting
  `Long:`, in Rust, Go and Python alike:
  - Rust (src/): each `fn` with a body, from its `fn` line to its closing brace; the reason is a
    `/// Long: …` line of its doc comment.
  - Python (sim/, tests/, tools/): each function or method (`def`, `async def`, at any depth;
    classes are not functions), from its `def` line to its last line, decorators left out; the
    reason is a line of its docstring starting `Long:`.
  - Go (tests/, `_test.go` files too): each `func` declaration, from its `func` line to its
    closing brace; the reason is a `// Long: …` line of the comment block directly above it.
  node_modules, .git, __pycache__ and virtual environments are skipped.

Run: python3 tools/house.py [--floors]
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
MAX_LINES = 80
MAX_FILE_LINES = 800
TEST_FILES = {"tests.rs"}
# Directories of src/ that are test code whole: the in-memory fake behind the ports.
TEST_DIRS = {"fake"}
PYTHON_DIRS = ("sim", "tests", "tools")
GO_DIRS = ("tests",)
SKIP_DIRS = {"node_modules", ".git", "__pycache__", "venv", ".venv", "site-packages"}
# A directory of rule files, ranked by its mod.rs: its shared files, the only ones a rule file
# may import of its siblings.
RULE_DIRS = {("planner",): {"context", "step", "wait", "snapshots"}}
# Rooms that must never name another: (the rooms under this module, the module they must not
# name, anything under it included, and why).
FORBIDDEN = [
    (("adapters",), ("reconciler",),
     "adapters are thin translators: the reconciler uses them, never the reverse"),
]
PATH = r"\b((?:crate|etcd_asg_lifecycle|super|self)(?:::\w+)+)"


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


def blank_tests(text: str) -> str:
    """`text` with its comments and its `#[cfg(test)] mod tests { … }` block blanked out, every
    line break kept: an offset in it is on the same line as in `text`."""

    def blank(part: str) -> str:
        return re.sub(r"[^\n]", " ", part)

    text = re.sub(r"//[^\n]*", lambda c: blank(c.group(0)), text)
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if not m:
        return text
    depth, i = 0, m.end() - 1
    while i < len(text) and not (depth == 1 and text[i] == "}"):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[: m.start()] + blank(text[m.start() : i + 1]) + text[i + 1 :]


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
    # A module names its children by their own name (`leaving::removals(...)`, and the use-trees
    # of a mod.rs that re-exports them: `pub use record::{ClusterRecord, …}`).
    children = {m[-1] for m in modules if len(m) == len(mod) + 1 and m[: len(mod)] == mod}
    for child in children:
        if re.search(rf"\b{re.escape(child)}::[\w{{]", text):
            paths.append(f"self::{child}")
    found = set()
    for p in paths:
        target = resolve(mod, p, modules)
        if target is not None and target != mod and target in modules:
            found.add(target)
    return found


def resolve(mod: tuple[str, ...], path: str, modules) -> tuple[str, ...] | None:
    """The module a path of module `mod` names (`crate::model::Instance` -> ("model",)); None if
    it starts from no module of ours (a dependency, a local name)."""
    parts = path.split("::")
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
        return None
    target = base
    for part in rest:
        if target + (part,) in modules:
            target = target + (part,)
        else:
            break
    return target


def forbidden_names(modules: dict) -> list[str]:
    """Each name, in a room under a FORBIDDEN module, of the module that room must not name (or
    of what the library's root re-exports from it, `crate::Reconciler`): file and line."""
    failures = []
    root = modules.get(())
    for below, banned, why in FORBIDDEN:
        # What lib.rs re-exports from the banned module is named from the root.
        aliases = set()
        if root is not None:
            for m in re.finditer(r"\buse\s+([^;]+);", blank_tests(root.read_text())):
                for p in expand_use(m.group(1)):
                    full = p if p.split("::")[0] in ("crate", "self", "super") else f"crate::{p}"
                    target = resolve((), full, modules)
                    if target is not None and target[: len(banned)] == banned:
                        aliases.add(p.split("::")[-1])
        for mod, path in sorted(modules.items()):
            if mod[: len(below)] != below:
                continue
            text = blank_tests(path.read_text())
            named = [(m.start(1), m.end(1), expand_use(m.group(1)))
                     for m in re.finditer(r"\buse\s+([^;]+);", text)]
            named += [(m.start(1), m.end(1), [m.group(1)]) for m in re.finditer(PATH, text)]
            seen = set()
            for start, end, paths in named:
                for p in paths:
                    target = resolve(mod, p, modules)
                    if target is None:
                        continue
                    rest = p.split("::")[1:]
                    aliased = target == () and rest and rest[0] in aliases
                    if target[: len(banned)] != banned and not aliased:
                        continue
                    # The line of the banned name in the statement, else of the statement.
                    word = re.search(rf"\b({banned[-1]}|{'|'.join(aliases) or banned[-1]})\b",
                                     text[start:end])
                    line = text.count("\n", 0, start + (word.start() if word else 0)) + 1
                    if (line, p) not in seen:
                        seen.add((line, p))
                        failures.append(
                            f"{path.relative_to(ROOT)}:{line}: names {p}, of crate::"
                            f"{'::'.join(banned)}: {why}")
    return failures


def long_files() -> tuple[list[str], str]:
    """A failure for each source file over MAX_FILE_LINES lines; and a summary line."""
    failures, count, longest = [], 0, (0, None)
    for dirs, suffix in ((("src", "tests"), ".rs"), (PYTHON_DIRS, ".py"), (GO_DIRS, ".go")):
        for path in sources(dirs, suffix):
            n = len(path.read_text().splitlines())
            count += 1
            longest = max(longest, (n, str(path.relative_to(ROOT))))
            if n > MAX_FILE_LINES:
                failures.append(f"{path.relative_to(ROOT)}: {n} lines (over {MAX_FILE_LINES}): "
                                f"split it into rooms of one concern each")
    summary = (f"files: {count} source files (Rust, Python, Go), the longest {longest[1]} "
               f"({longest[0]} lines), none over {MAX_FILE_LINES}")
    return failures, summary


def rule_failures(graph: dict, modules: dict) -> tuple[list[str], list[str]]:
    """A rule file importing a sibling that is not shared, and a file of a rule directory its
    mod.rs's doc comment does not name; then one summary line per rule directory."""
    failures, summary = [], []
    for parent, shared in RULE_DIRS.items():
        children = sorted(m for m in graph if len(m) == len(parent) + 1 and m[:-1] == parent)
        for name in sorted(shared - {m[-1] for m in children}):
            failures.append(f"{'::'.join(parent)}: shared file {name} does not exist")
        for child in children:
            for target in sorted(graph[child]):
                if target in children and target[-1] not in shared:
                    failures.append(
                        f"{modules[child].relative_to(ROOT)}: imports its sibling rule file "
                        f"{target[-1]} (only {', '.join(sorted(shared))} are shared): let "
                        f"{'/'.join(parent)}/mod.rs ask {target[-1]} and hand the answer in")
        doc = "\n".join(l for l in modules[parent].read_text().splitlines()
                        if l.lstrip().startswith("//!"))
        files = sorted({p.name for p in modules[parent].parent.glob("*.rs")})
        for name in files:
            if f"`{name}`" not in doc:
                failures.append(f"{modules[parent].relative_to(ROOT)}: its doc comment does not "
                                f"name `{name}` (say which question the file answers)")
        rules = [c[-1] for c in children if c[-1] not in shared]
        summary.append(f"rules: {'::'.join(parent)}: {len(rules)} rule files "
                       f"({', '.join(rules)}), none importing another; shared: "
                       f"{', '.join(sorted(shared))}")
    return failures, summary


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


def sources(dirs: tuple[str, ...], suffix: str) -> list[Path]:
    """The files ending in `suffix` under ROOT's `dirs`, leaving out SKIP_DIRS and any virtual
    environment (a directory holding a `pyvenv.cfg`)."""
    found = []
    for d in dirs:
        for here, subdirs, names in os.walk(ROOT / d):
            if "pyvenv.cfg" in names:
                subdirs[:] = []
                continue
            subdirs[:] = sorted(s for s in subdirs if s not in SKIP_DIRS)
            found += [Path(here) / n for n in names if n.endswith(suffix)]
    return sorted(found)


def python_functions(text: str, filename: str = "<unknown>"):
    """(qualified name, first line, length in lines, docstring) of each function or method,
    nested ones included; the length runs from the `def` line (decorators left out) to the last."""

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                length = child.end_lineno - child.lineno + 1
                yield name, child.lineno, length, ast.get_docstring(child) or ""
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(text, filename=filename), "")


def go_tokens(text: str):
    """Go's tokens as (kind, value, line): kind is "id" (names, keywords, numbers), "lit"
    (strings, raw strings, runes), "nl" (a line break, or a block comment spanning lines) or "op"
    (any other character). Comments are dropped, and no brace inside a literal is seen."""
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            yield "nl", c, line
            line += 1
            i += 1
        elif c in " \t\r\f":
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            breaks = text.count("\n", i, end)
            if breaks:
                yield "nl", "\n", line
            line += breaks
            i = end
        elif c in "\"'":
            start, i = line, i + 1
            while i < n and text[i] != c and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            i += 1
            yield "lit", c, start
        elif c == "`":
            end = text.find("`", i + 1)
            end = n if end < 0 else end + 1
            yield "lit", c, line
            line += text.count("\n", i, end)
            i = end
        elif c.isalnum() or c == "_":
            start = i
            while i < n and (text[i].isalnum() or text[i] == "_"):
                i += 1
            yield "id", text[start:i], line
        else:
            yield "op", c, line
            i += 1


def go_functions(text: str):
    """(name, first line, length in lines, comment block above) of each top-level `func`
    declaration; a method is named `Type.Method`. The declaration ends where Go puts its
    semicolon: at a `;`, or at a line break after a name, literal, `)`, `]` or `}` with every
    bracket closed."""
    tokens = list(go_tokens(text))
    lines = text.split("\n")
    depth, k = 0, 0
    while k < len(tokens):
        kind, value, line = tokens[k]
        if kind == "op" and value in "({[":
            depth += 1
        elif kind == "op" and value in ")}]":
            depth -= 1
        # A declaration's `func` starts a statement (`var f = func() {…}` is no declaration).
        starts = k == 0 or tokens[k - 1][0] == "nl" or tokens[k - 1][1] == ";"
        if not (depth == 0 and starts and kind == "id" and value == "func"):
            k += 1
            continue
        names, inner, last, end, j = [], 0, None, line, k + 1
        while j < len(tokens):
            t_kind, t_value, t_line = tokens[j]
            if t_kind == "op" and t_value in "({[":
                inner += 1
            elif t_kind == "op" and t_value in ")}]":
                inner -= 1
            elif t_kind == "id" and inner <= 1 and len(names) < 3 and not t_value[0].isdigit():
                names.append((inner, t_value))
            if inner == 0 and (
                (t_kind == "op" and t_value == ";")
                or (t_kind == "nl" and last is not None
                    and (last[0] in ("id", "lit") or last[1] in ")]}"))
            ):
                break
            if t_kind != "nl":
                last, end = (t_kind, t_value), t_line
            j += 1
        # `func Name(`, or `func (r *Type) Name(`: the receiver's type is its last name.
        receiver = [v for d, v in names if d == 1]
        plain = [v for d, v in names if d == 0]
        name = plain[0] if plain else "?"
        if receiver and tokens[k + 1][1] == "(":
            name = f"{receiver[-1]}.{name}"
        comments, c = [], line - 2
        while c >= 0 and lines[c].strip().startswith("//"):
            comments.insert(0, lines[c].strip())
            c -= 1
        yield name, line, end - line + 1, comments
        k = j


def has_reason(lines, prefix: str = "") -> bool:
    """Whether one of `lines`, less `prefix` and blanks, starts `Long:`."""
    return any(l.strip()[len(prefix):].strip().startswith("Long:")
               for l in lines if l.strip().startswith(prefix))


def circles(graph: dict) -> list[str]:
    """An `import circle` failure for each strongly connected component of more than one room
    (Tarjan)."""
    failures = []
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
    return failures


def main(argv: list[str]) -> int:
    files = sorted(p for p in SRC.rglob("*.rs"))
    modules = {module_of(p): p for p in files
               if p.name not in TEST_FILES and p.relative_to(SRC).parts[0] not in TEST_DIRS}
    graph = {}
    for mod, path in modules.items():
        text = strip_tests(path.read_text())
        graph[mod] = references(mod, path.name == "mod.rs", text, set(modules))
    failures = circles(graph)
    rule_fails, rule_summary = rule_failures(graph, modules)
    failures += rule_fails
    forbidden = forbidden_names(modules)
    failures += forbidden
    file_fails, file_summary = long_files()
    failures += file_fails
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
        for line in rule_summary:
            print(line)
        for below, banned, _ in FORBIDDEN:
            print(f"forbidden: nothing under {'::'.join(below)} names "
                  f"crate::{'::'.join(banned)}")
        print(file_summary)
    for path in files:
        for name, line, length, doc in functions(path.read_text()):
            if length > MAX_LINES and not any(d.startswith("/// Long:") for d in doc):
                failures.append(f"{path.relative_to(ROOT)}:{line}: fn {name} is {length} lines "
                                f"(over {MAX_LINES}, and no '/// Long:' reason in its doc comment)")
    for path in sources(PYTHON_DIRS, ".py"):
        try:
            found = list(python_functions(path.read_text(), str(path)))
        except SyntaxError as e:
            failures.append(f"{path.relative_to(ROOT)}:{e.lineno}: cannot be parsed: {e.msg}")
            continue
        for name, line, length, doc in found:
            if length > MAX_LINES and not has_reason(doc.split("\n")):
                failures.append(f"{path.relative_to(ROOT)}:{line}: def {name} is {length} lines "
                                f"(over {MAX_LINES}, and no 'Long:' reason in its docstring)")
    for path in sources(GO_DIRS, ".go"):
        for name, line, length, comments in go_functions(path.read_text()):
            if length > MAX_LINES and not has_reason(comments, "//"):
                failures.append(f"{path.relative_to(ROOT)}:{line}: func {name} is {length} lines "
                                f"(over {MAX_LINES}, and no '// Long:' reason in the comment "
                                f"above it)")
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
