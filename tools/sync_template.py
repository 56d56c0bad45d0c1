"""Writes boot/etcd-boot.sh into template.yaml's user data, byte for byte.

The script sits in a YAML literal block whose header line ends with the marker below; the block
runs until the first non-blank line indented less than its content. `--check` only compares.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "- |  # boot/etcd-boot.sh"
INDENT = " " * 18


def render(template: str, script: str) -> str:
    lines = template.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip().endswith(MARKER)) + 1
    end = start
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith(INDENT)):
        end += 1
    # Keep the blank line that separates the block from the next resource out of the block.
    while end > start and not lines[end - 1].strip():
        end -= 1
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
