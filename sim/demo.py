"""The local simulation: one Auto Scaling group of real etcd instances, driven through bootstrap,
scale-out, replacement, scale-in, a leader's termination, a lost event and a vanished instance by
the real function binary, with a writer (through the load balancer, as an application would)
checking that no acknowledged write is lost; then every
member lost at once, and the cluster restored from its latest backup.

Exit status 0 only if every step converged and no acknowledged write was lost.
"""

from __future__ import annotations

import argparse
import sys
import time

from . import etcd, scenario
from .world import NotConverged, Simulation


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", help="the bootstrap binary (default: the dev build)")
    parser.add_argument("--keep", metavar="DIR", help="keep logs and data in DIR")
    parser.add_argument("--etcd-version", choices=etcd.VERSIONS,
                        help="the etcd the instances run (default: ETCD_VERSION, else 3.6)")
    args = parser.parse_args(argv)

    began = time.monotonic()
    failed = None
    etcd_bin = etcd.binary(args.etcd_version)
    # Backups on, every minute, for the last step.
    with Simulation(binary=args.binary, workdir=args.keep, verbose=True, etcd_bin=etcd_bin, backups=True,
                    function_env={"BACKUP_INTERVAL_MINUTES": "1"}) as sim:
        print(f"emulated AWS at {sim.endpoint}; function {sim.binary}; etcd {etcd.version_of(etcd_bin)} "
              f"({etcd_bin}); the writer through the load balancer at {sim.client_endpoint}; logs in "
              f"{sim.workdir}\n", flush=True)
        sim.start_writer()
        started_at = []  # (monotonic start, title) per step, to place the longest write stall
        total = len(scenario.DEMO) + 1
        converged = 0
        for n, (title, step) in enumerate(scenario.DEMO, 1):
            print(f"[{n}/{total}] {title}", flush=True)
            t0 = time.monotonic()
            started_at.append((t0, title))
            try:
                what = step(sim)
            except (NotConverged, AssertionError) as e:
                failed = f"step {n} ({title}): {e}"
                print(f"    FAILED: {e}", flush=True)
                break
            converged += 1
            print(f"    {what} — converged in {time.monotonic() - t0:.1f}s", flush=True)
            print(sim.status_table(), flush=True)
        sim.writer.stop()
        lost = sim.writer.lost()
        restored = None
        if not failed:
            # Last, on its own: a total loss changes the cluster id and loses the newest writes.
            title, step = scenario.RECOVERY
            print(f"[{total}/{total}] {title}", flush=True)
            t0 = time.monotonic()
            try:
                restored = step(sim)
                converged += 1
                print(f"    {restored} — converged in {time.monotonic() - t0:.1f}s", flush=True)
                print(sim.status_table(), flush=True)
            except (NotConverged, AssertionError) as e:
                failed = f"step {total} ({title}): {e}"
                print(f"    FAILED: {e}", flush=True)
        d = sim.delivery
        print("summary")
        ran = sorted({etcd.version_of(i.etcd_bin) for i in sim.instances.values() if i.etcd_bin})
        print(f"  etcd version          {', '.join(ran) or etcd.version_of(etcd_bin)}"
              f" (cluster version {sim.cluster_version() or 'unknown'})")
        print(f"  cluster id            {sim.cluster_id:x}" if sim.cluster_id else "  cluster id            none")
        print(f"  steps converged       {converged}/{total}")
        print(f"  writes acknowledged   {len(sim.writer.acked)}")
        print(f"  writes lost           {len(lost)} (before the total loss)")
        print(f"  backups taken         {len(sim.backups())} in the bucket")
        print(f"  write attempts failed {sim.writer.attempts_failed}")
        during = [t for t0, t in started_at if t0 <= sim.writer.longest_stall_ended]
        where = f" (ended during: {during[-1]})" if during else ""
        print(f"  longest write stall   {sim.writer.longest_stall:.2f}s{where}")
        print(f"  invocations           {len(sim.function.invocations)} "
              f"({d.failed} failed, {d.dropped} events dropped on purpose)")
        print(f"  total time            {time.monotonic() - began:.1f}s")
    if failed:
        print(f"\nFAILED: {failed}", file=sys.stderr)
        return 1
    if lost:
        print(f"\nFAILED: {len(lost)} acknowledged writes lost, first {lost[:5]}", file=sys.stderr)
        return 1
    print("\nOK: every step converged and no acknowledged write was lost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
