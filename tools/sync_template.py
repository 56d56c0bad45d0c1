"""Writes boot/etcd-boot.sh into template.yaml's user data, without its comment lines.

EC2 takes at most 16 KiB of user data: the script's comments stay in boot/etcd-boot.sh, where
it is read and tested, and every other line reaches the instance byte for byte (comment lines
inside a here-document are kept: they are data). The script sits in a YAML literal block whose
header line ends with the marker below; the block runs until the first non-blank line indented
less than its content. `--check` only compares.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "- |  # boot/etcd-boot.sh"
INDENT = " " * 18


def without_comments(script: str) -> str:
    """The script less its full-line comments (the shebang kept) and blank lines, outside
    here-documents."""
    out, heredoc = [], None
    for n, line in enumerate(script.splitlines(keepends=True)):
        if heredoc is not None:
            out.append(line)
            if line.strip() == heredoc:
                heredoc = None
            continue
        stripped = line.strip()
        if (stripped.startswith("#") and n > 0) or not stripped:
            continue
        out.append(line)
        m = re.search(r"<<-?\s*['\"]?([A-Za-z_]+)['\"]?\s*$", line)
        if m:
            heredoc = m.group(1)
    return "".join(out)


def render(template: str, script: str) -> str:
    lines = template.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip().endswith(MARKER)) + 1
    end = start
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith(INDENT)):
        end += 1
    # Keep the blank line that separates the block from the next resource out of the block.
    while end > start and not lines[end - 1].strip():
        end -= 1
    script = without_comments(script)
    block = [INDENT + line if line.strip() else "\n" for line in script.splitlines(keepends=True)]
    return "".join(lines[:start] + block + lines[end:])


def main() -> int:
    template_path = ROOT / "template.yaml"
    template = template_path.read_text()
    wanted = render(template, (ROOT / "boot" / "etcd-boot.sh").read_text())
    if "--check" in sys.argv:
        if wanted != template:
            print("template.yaml's user data differs from boot/etcd-boot.sh: run `make template-sync`")
            return 1
        return 0
    template_path.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
