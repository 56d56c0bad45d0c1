#!/usr/bin/env python3
"""Write the variables' table (src/config/vars.rs) into docs/configuration.md, between its
markers, after changing a variable: the unit test that checks the page prints the table it wants."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "configuration.md"

run = subprocess.run(
    ["cargo", "test", "--locked", "--lib", "config::tests::the_docs_table"],
    cwd=ROOT, capture_output=True, text=True)
text = run.stdout + run.stderr
if run.returncode == 0:
    print("docs/configuration.md: the table is up to date")
    sys.exit(0)
m = re.search(r"should read:\n(\| variable \|.*?\n)\n", text, re.S)
if not m:
    sys.exit(f"no table in the test's output:\n{text[-2000:]}")
page = PAGE.read_text()
page = re.sub(r"<!-- variables -->\n.*?<!-- /variables -->",
              lambda _: f"<!-- variables -->\n{m.group(1)}<!-- /variables -->", page, flags=re.S)
PAGE.write_text(page)
print("docs/configuration.md: table rewritten")
