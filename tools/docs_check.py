#!/usr/bin/env python3
"""The docs check (`make check`): the README and docs/ say what the code and the template do.

- Every relative link of README.md and docs/*.md leads to a file that exists, and its #anchor to
  one of that file's headings (GitHub's slugs).
- Every page of docs/ is linked from the README.
- Every subcommand of the CLI (src/bin/etcd-asg.rs) is in docs/cli.md, every parameter of
  template.yaml in docs/deploy.md, every metric the function reports (src/metrics.rs,
  src/reconciler/) in docs/operating.md or docs/backups.md. (Every variable of the function is
  in docs/configuration.md's table: a unit test of src/config/ checks it, defaults included.)
- docs/deploy.md's one list of endpoints (its table under "### The endpoints") is what the code
  calls: the function's and the CLI's SDK clients (src/adapters/), the boot script's AWS CLI
  commands (boot/etcd-boot.sh), and Session Manager's when the template attaches its policy.
- The README stays short: at most MAX_README lines.

Run: python3 tools/docs_check.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_README = 250


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lstrip("#").strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(path: Path) -> set[str]:
    out, fence = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"^#{1,6} ", line):
            out.add(slug(line))
    return out


def prose(path: Path) -> str:
    """The page without its code blocks (a `[x](y)` in a shell sample is no link)."""
    out, fence = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            out.append(line)
    return "\n".join(out)


def check_links(pages: list[Path]) -> list[str]:
    failures = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                failures.append(f"{page.relative_to(ROOT)}: link to {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in headings(dest):
                failures.append(f"{page.relative_to(ROOT)}: link to {target}: no heading #{anchor}")
    return failures


def cli_commands() -> list[str]:
    """The `Command` enum's variants, as clap names them (kebab case)."""
    text = (ROOT / "src" / "bin" / "etcd-asg.rs").read_text()
    body = text[text.index("enum Command {"):]
    body = body[: body.index("\n}\n")]
    names = re.findall(r"^    ([A-Z]\w*)\s*[{,(]", body, re.M)
    return [re.sub(r"(?<!^)([A-Z])", r"-\1", n).lower() for n in names]


def template_parameters() -> list[str]:
    text = (ROOT / "template.yaml").read_text()
    block = text[text.index("\nParameters:\n") + 1:]
    block = block[: re.search(r"\n[A-Z]\w*:\n", block[1:]).start() + 1]
    return re.findall(r"^  ([A-Z]\w*):$", block, re.M)


def metrics() -> set[str]:
    """Names the function sets or counts (a `Kind.<x>` family once, as `Kind.<…>`)."""
    names = set()
    for path in [ROOT / "src" / "metrics.rs", *sorted((ROOT / "src" / "reconciler").glob("*.rs")),
                 ROOT / "src" / "reconciler.rs"]:
        text = path.read_text()
        names |= set(re.findall(r'\.set\(\s*"([A-Za-z]+)"', text))
        names |= set(re.findall(r'\.count\(\s*"([A-Za-z]+)"', text))
        names |= {f"{k}." for k in re.findall(r'\.count\(format!\("([A-Za-z]+)\.', text)}
    return names


def endpoints_called() -> dict[str, set[str]]:
    """The AWS services each side calls, as the code has it: {service: {"function", "instances"}}."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / "src" / "adapters").rglob("*.rs")):
        for svc in re.findall(r"aws_sdk_([a-z0-9]+)::Client", path.read_text()):
            out.setdefault(svc, set()).add("function")
    boot = (ROOT / "boot" / "etcd-boot.sh").read_text()
    for svc in re.findall(r"\baws ([a-z0-9]+) [a-z]", boot):
        out.setdefault(svc, set()).add("instances")
    if "AmazonSSMManagedInstanceCore" in (ROOT / "template.yaml").read_text():
        # Session Manager's agent: https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-create-vpc.html
        for svc in ("ssm", "ssmmessages", "ec2messages"):
            out.setdefault(svc, set()).add("instances")
    return out


def endpoints_listed(deploy: str) -> dict[str, set[str]]:
    """The table under "### The endpoints": `com.amazonaws.<region>.<service>` | who."""
    section = deploy[deploy.index("### The endpoints"):]
    section = section[: section.find("\n#", 1) if "\n#" in section[1:] else len(section)]
    out: dict[str, set[str]] = {}
    for svc, who in re.findall(r"^\| `com\.amazonaws\.<region>\.([a-z0-9]+)` \| ([^|]+)\|", section, re.M):
        out[svc] = {w for w in ("function", "instances") if w in who}
    return out


def main() -> int:
    readme = ROOT / "README.md"
    docs = sorted((ROOT / "docs").glob("*.md"))
    failures = check_links([readme, *docs])
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", prose(readme)))
    failures += [f"README.md does not link docs/{d.name}" for d in docs if d.name not in linked]
    cli = (ROOT / "docs" / "cli.md").read_text()
    failures += [f"docs/cli.md lacks `etcd-asg {c}`" for c in cli_commands() if f"etcd-asg {c}" not in cli]
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    failures += [f"docs/deploy.md lacks the template parameter `{p}`" for p in template_parameters()
                 if f"`{p}`" not in deploy]
    if "### The endpoints" not in deploy:
        failures.append("docs/deploy.md lacks its list of endpoints (### The endpoints)")
    elif endpoints_listed(deploy) != endpoints_called():
        failures.append(f"docs/deploy.md's endpoints {endpoints_listed(deploy)} are not what the code calls "
                        f"{endpoints_called()}")
    operating = (ROOT / "docs" / "operating.md").read_text() + (ROOT / "docs" / "backups.md").read_text()
    failures += [f"docs/operating.md lacks the metric `{m}`" for m in sorted(metrics())
                 if f"`{m}" not in operating]
    lines = len(readme.read_text().splitlines())
    if lines > MAX_README:
        failures.append(f"README.md has {lines} lines (at most {MAX_README}: the rest goes to docs/)")
    for f in failures:
        print(f, file=sys.stderr)
    if not failures:
        print(f"docs: {len(docs)} pages linked from the README ({lines} lines), every link, CLI "
              f"command, template parameter and metric found")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
