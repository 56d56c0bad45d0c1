"""The SAM translator that creates the stack in the emulator (sim/stack.py, requirements.txt) is
the one SAM CLI runs (aws-sam-cli pins it exactly; this venv is requirements-template.txt's)."""

import re
from importlib.metadata import requires, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_emulator_deployment_translates_with_the_sam_cli_translator():
    pinned = re.search(r"^aws-sam-translator==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert pinned, "requirements.txt pins aws-sam-translator"
    assert f"aws-sam-translator=={pinned[1]}" in requires("aws-sam-cli"), requires("aws-sam-cli")
    assert version("aws-sam-translator") == pinned[1]
