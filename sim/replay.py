"""Replays event files through the real bootstrap binary behind the Lambda Runtime API.

The function is configured for the group and hooks of AWS's documented samples in `events/`
(`my-asg`, `my-lifecycle-hook` / `my-termination-hook`), against an emulated AWS where that group
exists with no instances and no cluster. Prints each file's outcome.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .world import ROOT, Simulation

GROUP = "my-asg"
HOOKS = ("my-lifecycle-hook", "my-termination-hook")


def replay(sim: Simulation, path: Path) -> tuple[str, object]:
    inv = sim.function.invoke(path.read_bytes(), timeout=30)
    return inv.outcome, inv.body


def summary(outcome: str, body) -> str:
    if outcome != "ok":
        return f"{outcome}: {body}"
    if body.get("outcome") == "rejected":
        return f"rejected: {body['field']} {body['value']} {body['reason']}"
    if body.get("outcome") == "reconciled":
        return f"reconciled: steps {body['steps']}, waiting {body['waiting']}"
    return f"{body.get('outcome')}: {body.get('what', '')}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="default: every file in events/")
    args = parser.parse_args(argv)
    files = args.files or sorted((ROOT / "events").glob("*.json"))
    with Simulation(name=GROUP, hooks=HOOKS, writer=False, schedule_every=3600) as sim:
        for path in files:
            print(f"{path.name:40} {summary(*replay(sim, path))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
