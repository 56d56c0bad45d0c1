"""The template as CloudFormation tooling reads it, once per session for every template test."""

from pathlib import Path

import pytest
from cfnlint.decode import decode

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def template():
    t, errors = decode(str(ROOT / "template.yaml"))
    assert not errors, errors
    return t
