"""The nemesis: seeded schedules of group operations, member faults, function faults and AWS
faults over the whole simulation (real etcd, the emulated AWS with its fault layer, the real
binary), every run judged, as etcd's robustness tests and Jepsen search for bugs instead of
imagining them one by one (docs/simulation.md, "The nemesis").

    python -m sim.nemesis --seed 7 --seconds 120        one run: the same seed, the same schedule
    python -m sim.nemesis --seeds 1-20 --seconds 600    the long search (make nemesis)
    python -m sim.nemesis --seed 7 --seconds 120 --show the schedule only, nothing run

A schedule is a list of operations at times from the start, drawn from one random.Random(seed):
the same seed gives the same schedule (what real etcd and processes then do may differ in
timing). An operation names its victim by a draw in [0, 1) that picks among the candidates when
it runs (sorted by instance id), so that a replay picks the same way in the same state.

Faults stay within what a correct operator must survive without losing acknowledged writes: at
most a minority of the voters faulted at once (paused, cut off, partitioned, killed and not yet
replaced, or in a lost zone); an operation that would exceed it is skipped (and said so). At the
end everything heals, the group is scaled back to three, and the run is judged:

- the group converges within `CONVERGE_SECS` (sim/nemesis_run.py; members = instances, nothing held);
- the client history (tests/history: porcupine and etcd's watch rules) is valid, with cuts only
  where the function declared a restore, and a restore only after a scale to zero (the cluster
  asleep): no fault here loses a quorum for good;
- no acknowledged write of the writer is lost;
- no terminate hook lapsed into its default result (a voter's disk deleted on a guess).

A failing run prints its seed and the command that replays it, and keeps its work folder (the
schedule, the function's log, the history).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field

from sim.nemesis_run import MINORS, UNHEALTHY_SECS, Run
from sim.world import Simulation


# What the schedule draws from, with its weight.
KINDS = {
    "scale": 3,  # to 3, 4 or 5 members (out or in)
    "terminate": 2,  # an instance terminated, the group replacing it
    "kill": 2,  # a member's etcd killed (the function replaces it once down long enough)
    "pause": 3,  # a member's etcd paused, then resumed (a hung process, its disk intact)
    "cut": 2,  # a member's client port cut off (a route, an ACL)
    "partition": 2,  # two members' peer ports (2380) apart, both ways or one way
    "nospace": 1,  # NOSPACE raised for a member, as a full disk raises it
    "aws": 3,  # a window of AWS faults: throttled, refused, answers lost, slow
    "crash": 2,  # the function killed inside its steps (after an AWS call applied)
    "zone": 1,  # an Availability Zone lost, then restored
    "zero": 1,  # the group scaled to zero (the cluster sleeps), then back to three (it wakes)
    "version": 1,  # the launch template's etcd moved a minor forward, or back while etcd allows it
    "request": 1,  # an operator's restore request (`etcd-asg restore latest`): never over a serving cluster
    "refresh": 1,  # an instance refresh (forward only: the newest minor, or the same), cancelled at the heal
    "slow": 2,  # a slow member: its etcd under strace, each fsync held 50 ms to 1 s (and every syscall a ptrace stop)
}

# A refresh's (MinHealthyPercentage, MaxHealthyPercentage): AWS's default, launch before
# terminate, and half of the group replaced at once.
REFRESH_HEALTHY = [(90, 100), (100, 200), (50, 150)]



@dataclass
class Op:
    at: float  # seconds from the schedule's start
    kind: str
    pick: float = 0.0  # the victim's draw
    pick2: float = 0.0  # a second one (a partition's other side)
    seconds: float = 0.0  # how long the fault lasts, where it heals by itself
    to: int = 0  # scale: the desired capacity
    one_way: bool = False  # partition: one direction only
    mix: list = field(default_factory=list)  # aws: the fault layer's rules
    minor: str = ""  # version, refresh: the minor the template moves to
    healthy: list = field(default_factory=list)  # refresh: [MinHealthyPercentage, MaxHealthyPercentage]
    delay_ms: int = 0  # slow: how long each fsync is held


def schedule(seed: int, seconds: float) -> list[Op]:
    """The operations of a run of `seconds`, from `seed` alone."""
    rng = random.Random(seed)
    kinds, weights = list(KINDS), list(KINDS.values())
    out, t = [], rng.uniform(3, 10)
    while t < seconds:
        kind = rng.choices(kinds, weights)[0]
        op = Op(round(t, 1), kind, pick=round(rng.random(), 3), pick2=round(rng.random(), 3),
                seconds=round(rng.uniform(5, 40), 1))
        if kind == "scale":
            op.to = rng.choice([3, 4, 5])
        elif kind == "partition":
            op.one_way = rng.random() < 0.5
        elif kind == "aws":
            op.mix = aws_mix(rng)
        elif kind == "zero":
            op.seconds = 0
        elif kind == "version":
            op.minor = rng.choice(MINORS)
        elif kind == "refresh":
            op.minor = rng.choice(MINORS)
            op.healthy = list(rng.choice(REFRESH_HEALTHY))
            op.seconds = round(rng.uniform(2, 8), 1)  # the warmup
        elif kind == "slow":
            op.delay_ms = rng.choice([50, 200, 500, 1000])
        out.append(op)
        t += rng.uniform(4, 20)
    return out


def aws_mix(rng: random.Random) -> list[dict]:
    """One window of faults of the kinds AWS has (sim/faults.py; shared/reference/aws-failures.md)."""
    service = rng.choice(["*", "autoscaling", "ec2", "ssm", "s3"])
    fault = rng.choice(["throttle", "refuse", "lose", "slow", "hang"])
    rule = {"fault": fault, "service": service, "rate": round(rng.uniform(0.1, 0.5), 2),
            "seconds": round(rng.uniform(10, 40), 1)}
    if fault == "lose":
        rule["writes"] = True
    if fault == "slow":
        rule["delay"] = round(rng.uniform(0.5, 3), 1)
    if fault == "hang":  # calls never answered: invocations cut at their deadline
        rule["rate"] = round(rng.uniform(0.05, 0.2), 2)
        rule["seconds"] = round(rng.uniform(5, 20), 1)
    return [rule]


def replay_command(seed: int, seconds: float, only: list[int] | None = None) -> str:
    version = os.environ.get("ETCD_VERSION", "3.6")
    kept = f" ONLY={','.join(map(str, only))}" if only is not None else ""
    return f"ETCD_VERSION={version} make nemesis SEED={seed} SECONDS={seconds:g}{kept}"


def run(seed: int, seconds: float, workdir: str | None = None, log=print,
        only: list[int] | None = None) -> list[str]:
    """One seeded run in a simulation of its own: the problems found (empty: passed). `only`:
    the indexes of the schedule's operations to keep (a minimized schedule), at their times."""
    ops = schedule(seed, seconds)
    if only is not None:
        ops = [ops[i] for i in only if i < len(ops)]
    workdir = workdir or tempfile.mkdtemp(prefix=f"nemesis-{seed}-")
    with open(os.path.join(workdir, "schedule.json"), "w") as f:
        json.dump({"seed": seed, "seconds": seconds, "ops": [asdict(o) for o in ops]}, f, indent=1)
    sim = Simulation(name=f"nemesis-{seed}", backups=True, warm_aws=True, workdir=workdir, hook_timeout=60,
                     function_env={"BACKUP_INTERVAL_MINUTES": "1", "UNHEALTHY_REPLACE_SECS": str(UNHEALTHY_SECS)})
    found = []
    try:
        sim.start()
        sim.scale(3)
        sim.wait_converged(3, timeout=180, label="bootstrap")
        sim.start_writer(history_through_restore=True)
        nemesis = Run(sim, seed, ops, log)
        try:
            nemesis.play()
        finally:
            nemesis.heal_all()
        found = nemesis.judge()
        with open(os.path.join(workdir, "done.txt"), "w") as f:
            f.write("\n".join(nemesis.done + ["", "found:"] + found) + "\n")
    except Exception as e:  # a broken run is a finding too, with its trace kept
        found.append(f"the run broke: {e!r}")
        with open(os.path.join(workdir, "trace.txt"), "w") as f:
            traceback.print_exc(file=f)
    finally:
        sim.close()
    if found:
        log(f"nemesis: seed {seed} FAILED ({len(found)} findings), kept in {workdir}:")
        for line in found:
            log(f"  - {line}")
        log(f"  replay: {replay_command(seed, seconds, only)}")
    else:
        log(f"nemesis: seed {seed} passed ({len(ops)} operations over {seconds:g} s)")
        shutil.rmtree(workdir, ignore_errors=True)
    return found


# What a finding is about: a minimized schedule must fail the same way, not on something else.
FINDING_KINDS = ("not converged", "with no scale to zero", "history:", "acknowledged writes lost",
                 "a terminate hook lapsed", "the run broke")


def finding_kinds(found: list[str]) -> set[str]:
    return {next((k for k in FINDING_KINDS if k in line), line[:30]) for line in found}


def minimize(seed: int, seconds: float, log=print, only: list[int] | None = None) -> list[int]:
    """The fewest of a failing seed's operations (of `only`, if given) that still fail the same
    way, by Zeller's ddmin: the whole schedule is run first (a pass: nothing to minimize), then
    a chunk is dropped and the drop kept if the run still fails with a finding of the same kind,
    chunks halving down to single operations. Each try is a whole run (minutes), and real timing
    varies: a schedule that failed once may pass the next time, so the result is the shortest
    found, not a proof of the shortest. Each failing try keeps its folder."""
    keep = only if only is not None else list(range(len(schedule(seed, seconds))))
    first = run(seed, seconds, log=log, only=keep)
    if not first:
        log(f"nemesis: seed {seed} passed: nothing to minimize")
        return keep
    target = finding_kinds(first)
    chunks = 2
    while len(keep) > 1:
        size = max(1, len(keep) // chunks)
        for start in range(0, len(keep), size):
            trial = keep[:start] + keep[start + size:]
            log(f"nemesis: minimizing seed {seed}: trying {len(trial)} of {len(keep)} operations {trial}")
            if finding_kinds(run(seed, seconds, log=log, only=trial)) & target:
                keep, chunks = trial, max(chunks - 1, 2)
                break
        else:
            if size == 1:
                break
            chunks = min(len(keep), chunks * 2)
    log(f"nemesis: seed {seed} minimized to operations {keep}: {replay_command(seed, seconds, keep)}")
    return keep


def seeds_of(spec: str) -> list[int]:
    """`7`, `1-20` or `3,5,8`."""
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", help="one seed, or a list: 7, 1-20, 3,5,8")
    p.add_argument("--seeds", help="as --seed")
    p.add_argument("--seconds", type=float, default=120, help="each schedule's length")
    p.add_argument("--show", action="store_true", help="print the schedule only")
    p.add_argument("--only", help="keep only these operations of the schedule (indexes: 0,3,5)")
    p.add_argument("--minimize", action="store_true",
                   help="a failing seed: find the fewest of its operations that still fail")
    args = p.parse_args(argv)
    seeds = seeds_of(args.seed or args.seeds or "1")
    only = [int(i) for i in args.only.split(",")] if args.only else None
    if args.minimize:
        for seed in seeds:
            minimize(seed, args.seconds, only=only)
        return 0
    if args.show:
        for seed in seeds:
            for n, op in enumerate(schedule(seed, args.seconds)):
                if only is None or n in only:
                    print(seed, n, json.dumps(asdict(op)))
        return 0
    failed = []
    began = time.monotonic()
    for seed in seeds:
        if run(seed, args.seconds, only=only):
            failed.append(seed)
    print(f"nemesis: {len(seeds) - len(failed)} passed, {len(failed)} failed in {time.monotonic() - began:.0f} s"
          + (f"; failed seeds {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
