"""Figures from the simulation: how long membership changes take, how much of that is the
function's own work, how many invocations and calls each change costs, and the binary's cold
start, peak memory and size; then a backup of a database of at least 256 MiB streamed through
etcd's gateway into S3 (moto), with its throughput and the function's peak memory. Printed, not
asserted (the backup's memory figure is checked against the 100 MiB budget in the exit code)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import etcd, scenario
from .world import Simulation, default_binary

# The function has 128 MB in Lambda: streaming a snapshot must fit well inside.
RSS_BUDGET_MIB = 100
# AWS calls of each change, by API (the emulator counts them).
BY_API: dict[str, dict[str, int]] = {}


def idle(inv) -> bool:
    """A scheduled run that found nothing to do or wait for: the schedule's own cost, once a
    minute in the stack whatever changes, apart from any change's."""
    b = inv.body if isinstance(inv.body, dict) else {}
    return b.get("trigger") == "schedule" and not b.get("steps") and b.get("waiting") is None


def change_calls(invs, log) -> int:
    """The AWS calls made during the invocations that did or waited for something."""
    busy = [(i.started, i.ended or time.time()) for i in invs if not idle(i)]
    return sum(1 for t, _ in log if any(a - 0.01 <= t <= b + 0.01 for a, b in busy))


def phase(sim: Simulation, name: str, action, rows: list):
    sim.drain("requests")
    sim.drain("request-log")
    first = len(sim.function.invocations)
    began = time.monotonic()
    action()
    took = time.monotonic() - began
    time.sleep(sim.schedule_every + 1)  # let the last invocations finish and be counted
    invs = sim.function.invocations[first:]
    stats = [i.body["stats"] for i in invs if isinstance(i.body, dict) and "stats" in i.body]
    total = {k: sum(s[k] for s in stats) for k in ("own_ms", "etcd_ms", "aws_ms", "waited_ms", "etcd_calls")}
    by_api = sim.drain("requests")
    aws_calls = sum(by_api.values())
    changing = change_calls(invs, sim.drain("request-log"))
    rows.append((name, f"{took:.1f}", str(len(invs)), str(total["own_ms"]), str(total["etcd_ms"]),
                 str(total["aws_ms"]), str(total["waited_ms"]), str(aws_calls), str(changing),
                 str(total["etcd_calls"])))
    BY_API[name] = by_api


def backup_figures(binary: str, mib: int) -> dict:
    """One member holding `mib` MiB of values; the next scheduled backup streams it to S3."""
    env = {"BACKUP_INTERVAL_MINUTES": "1", "QUOTA_BACKEND_BYTES": str(4 << 30)}
    with Simulation(name="etcd-bench-backup", binary=binary, writer=False, backups=True,
                    function_env=env) as sim:
        sim.scale(1)
        sim.wait_converged(1, label="bootstrap")
        url = sim.running_client_urls()[0]
        began = time.monotonic()
        for n in range(mib):
            etcd.put(url, f"/bench/big/{n:05d}", os.urandom(512 * 1024).hex(), timeout=30)
        wrote = time.monotonic() - began
        status = etcd.status(url)
        revision, db_size = int(status["header"]["revision"]), int(status["dbSize"])
        deadline = time.monotonic() + 300
        while not any(b["revision"] >= revision for b in sim.backups()):
            if time.monotonic() > deadline:
                raise SystemExit("no backup of the written revision within 300 s")
            time.sleep(2)
        backup = next(b for b in sim.backups() if b["revision"] >= revision)
        stored = None
        with open(os.path.join(sim.workdir, "function.log")) as f:
            for line in f:
                if backup["key"] in line and '"backup stored"' in line:
                    stored = json.loads(line)["fields"]
        sim.function.kill()  # samples peak memory first
        return {
            "db_mib": db_size / 1048576,
            "backup_mib": backup["size"] / 1048576,
            "write_s": wrote,
            "elapsed_s": int(stored["elapsed_ms"]) / 1000,
            "mib_per_s": float(stored["mib_per_s"]),
            "peak_mib": sim.function.peak_rss_kib / 1024,
        }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=None)
    parser.add_argument("--backup-mib", type=int, default=256, help="database size for the backup figures")
    parser.add_argument("--only-backup", action="store_true", help="skip the membership figures")
    parser.add_argument("--only-membership", action="store_true", help="skip the backup figures")
    args = parser.parse_args(argv)
    binary = args.binary or default_binary()
    rows: list = []
    if not args.only_backup:
        membership_figures(binary, rows)
    if args.only_membership:
        return
    b = backup_figures(binary, args.backup_mib)
    print(f"backup: a {b['db_mib']:.0f} MiB database ({args.backup_mib} MiB of values written in "
          f"{b['write_s']:.0f} s) streamed to S3 as {b['backup_mib']:.0f} MiB in {b['elapsed_s']:.1f} s: "
          f"{b['mib_per_s']:.1f} MiB/s")
    verdict = "within" if b["peak_mib"] < RSS_BUDGET_MIB else "OVER"
    print(f"backup: function peak memory (VmHWM) {b['peak_mib']:.1f} MiB, {verdict} the {RSS_BUDGET_MIB} MiB budget")
    if b["peak_mib"] >= RSS_BUDGET_MIB:
        sys.exit(1)


def membership_figures(binary: str, rows: list):
    with Simulation(name="etcd-bench", binary=binary, writer=False, schedule_every=5.0) as sim:
        phase(sim, "bootstrap 3", lambda: scenario.bootstrap(sim), rows)
        phase(sim, "add one (3->4)", lambda: (sim.scale(4), sim.wait_converged(4)), rows)
        phase(sim, "remove one (4->3)", lambda: (sim.scale(3), sim.wait_converged(3)), rows)
        phase(sim, "replace all 3", lambda: scenario.replace_all(sim), rows)
        cold = sim.function.cold_starts[0]
        sim.function.kill()  # samples peak memory first
        peak = sim.function.peak_rss_kib
    head = ("change", "wall s", "invocations", "own ms", "etcd ms", "aws ms", "waited ms", "AWS calls",
            "of the change", "etcd calls")
    widths = [max(len(r[c]) for r in rows + [head]) for c in range(len(head))]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    print(f"binary: {binary}")
    print(fmt.format(*head))
    for r in rows:
        print(fmt.format(*r))
    print("(own = the function's time apart from etcd, AWS and waiting; AWS calls counted by the emulator,")
    print(" all of them, and those of the change: apart from scheduled runs with nothing to do, which cost")
    print(" the same once a minute whatever changes; etcd calls as port calls)")
    for name, by_api in BY_API.items():
        calls = ", ".join(f"{api} {n}" for api, n in sorted(by_api.items(), key=lambda kv: -kv[1]))
        print(f"AWS calls, {name}: {calls}")
    print(f"cold start to first poll: {cold * 1000:.0f} ms")
    print(f"peak memory (VmHWM):      {peak / 1024:.1f} MiB")
    print(f"binary size:              {os.path.getsize(binary) / 1048576:.1f} MiB")
    arm = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "lambda", "bootstrap", "bootstrap")
    if os.path.exists(arm):
        print(f"arm64 package (make package): {os.path.getsize(arm) / 1048576:.1f} MiB")


if __name__ == "__main__":
    main()
