"""Figures from the simulation: how long membership changes take, how much of that is the
function's own work, how many invocations and calls each change costs, and the binary's cold
start, peak memory and size. Printed, not asserted."""

from __future__ import annotations

import argparse
import os
import time

from . import scenario
from .world import Simulation, default_binary


def phase(sim: Simulation, name: str, action, rows: list):
    sim.drain("requests")
    first = len(sim.function.invocations)
    began = time.monotonic()
    action()
    took = time.monotonic() - began
    time.sleep(sim.schedule_every + 1)  # let the last invocations finish and be counted
    invs = sim.function.invocations[first:]
    stats = [i.body["stats"] for i in invs if isinstance(i.body, dict) and "stats" in i.body]
    total = {k: sum(s[k] for s in stats) for k in ("own_ms", "etcd_ms", "aws_ms", "waited_ms", "etcd_calls")}
    aws_calls = sum(sim.drain("requests").values())
    rows.append((name, f"{took:.1f}", str(len(invs)), str(total["own_ms"]), str(total["etcd_ms"]),
                 str(total["aws_ms"]), str(total["waited_ms"]), str(aws_calls), str(total["etcd_calls"])))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=None)
    args = parser.parse_args(argv)
    binary = args.binary or default_binary()
    rows: list = []
    with Simulation(name="etcd-bench", binary=binary, writer=False, schedule_every=5.0) as sim:
        phase(sim, "bootstrap 3", lambda: scenario.bootstrap(sim), rows)
        phase(sim, "add one (3->4)", lambda: (sim.scale(4), sim.wait_converged(4)), rows)
        phase(sim, "remove one (4->3)", lambda: (sim.scale(3), sim.wait_converged(3)), rows)
        phase(sim, "replace all 3", lambda: scenario.replace_all(sim), rows)
        cold = sim.function.cold_starts[0]
        sim.function.kill()  # samples peak memory first
        peak = sim.function.peak_rss_kib
    head = ("change", "wall s", "invocations", "own ms", "etcd ms", "aws ms", "waited ms", "AWS calls",
            "etcd calls")
    widths = [max(len(r[c]) for r in rows + [head]) for c in range(len(head))]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    print(f"binary: {binary}")
    print(fmt.format(*head))
    for r in rows:
        print(fmt.format(*r))
    print("(own = the function's time apart from etcd, AWS and waiting; AWS calls counted by the emulator,")
    print(" etcd calls as port calls — one observation is a member list, a status and one probe per member)")
    print(f"cold start to first poll: {cold * 1000:.0f} ms")
    print(f"peak memory (VmHWM):      {peak / 1024:.1f} MiB")
    print(f"binary size:              {os.path.getsize(binary) / 1048576:.1f} MiB")
    arm = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "lambda", "bootstrap", "bootstrap")
    if os.path.exists(arm):
        print(f"arm64 package (make package): {os.path.getsize(arm) / 1048576:.1f} MiB")


if __name__ == "__main__":
    main()
