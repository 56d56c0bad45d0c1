#!/usr/bin/env python3
"""`make test`'s stages, one after the other, each timed: `tools/stages.py check unit …` runs
`make check`, then `make unit`, …, prints each stage's time as it ends and a summary at the end,
and stops at the first stage that fails (with its exit code)."""

import os
import subprocess
import sys
import time


def main(stages: list[str]) -> int:
    make = os.environ.get("MAKE", "make")
    took = []
    began = time.monotonic()
    code = 0
    for stage in stages:
        print(f"== {stage}", flush=True)
        t = time.monotonic()
        code = subprocess.run([make, "--no-print-directory", stage]).returncode
        took.append((stage, time.monotonic() - t, code))
        print(f"== {stage}: {'ok' if code == 0 else f'FAILED ({code})'} in {took[-1][1] / 60:.1f} min",
              flush=True)
        if code != 0:
            break
    line = (", ".join(f"{s} {d / 60:.1f} min{'' if c == 0 else ' FAILED'}" for s, d, c in took)
            + f" — {(time.monotonic() - began) / 60:.1f} min in all")
    print(f"== stages: {line}", flush=True)
    # For `make bench`, which prints it beside its goal.
    cache = os.environ.get("CACHE", "/var/tmp/etcd-asg-lifecycle")
    try:
        with open(os.path.join(cache, "last-test-stages.txt"), "w") as f:
            f.write(line + "\n")
    except OSError:
        pass
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
