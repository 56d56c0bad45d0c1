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

- the group converges within `CONVERGE_SECS` (members = instances, nothing held);
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
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from dataclasses import asdict, dataclass, field

from sim import etcd, procs
from sim.world import NFT, Simulation

# How long the group may take to converge once everything has healed: a killed member is replaced
# after UNHEALTHY_REPLACE_SECS, a join takes seconds, a wake restores from the bucket.
CONVERGE_SECS = 300
UNHEALTHY_SECS = 20

REFRESH_RUNNING = ("Pending", "InProgress", "Cancelling", "RollbackInProgress")
REFRESH_ENDED = ("Successful", "Failed", "Cancelled", "RollbackSuccessful", "RollbackFailed")

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

# The minors a version move chooses from, oldest first (sim/etcd.py builds each).
MINORS = ["3.6", "3.7"]


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


class Run:
    """One seeded run against one simulation: applies the schedule, heals, judges."""

    def __init__(self, sim: Simulation, seed: int, ops: list[Op], log=print):
        self.sim, self.seed, self.ops, self.log = sim, seed, ops, log
        self.heals: list[tuple[float, str, object]] = []  # (due, what, undo)
        self.faulted: dict[str, str] = {}  # instance -> the fault it is under
        self.slept = False  # a scale to zero happened: a restore (the wake) is justified
        # The newest minor the template ran: the heal keeps it (never a launch etcd refuses).
        self.newest = etcd.version_of(sim.etcd_bin).rsplit(".", 1)[0]
        self.done: list[str] = []
        self.refresh_id: str | None = None  # the last instance refresh started

    # --- applying ------------------------------------------------------------------------------

    def members(self) -> list[str]:
        """The group's instances in service, sorted: the candidates a draw picks from."""
        return sorted(i["InstanceId"] for i in self.sim.group_instances()
                      if i["LifecycleState"] == "InService")

    def victim(self, pick: float, exclude: tuple[str, ...] = ()) -> str | None:
        """The instance `pick` names among the healthy members, if one more may be faulted: at
        most a minority of the members faulted at once."""
        members = self.members()
        budget = (len(members) - 1) // 2
        faulted = [i for i in self.faulted if i in members]
        healthy = [i for i in members if i not in self.faulted and i not in exclude]
        if not healthy or len(faulted) >= budget:
            return None
        return healthy[int(pick * len(healthy))]

    def apply(self, op: Op):
        action = getattr(self, f"op_{op.kind}")
        said = action(op)
        self.done.append(f"{op.at:7.1f}s {op.kind}: {said}")
        self.log(f"nemesis[{self.seed}] {op.at:7.1f}s {op.kind}: {said}")

    def later(self, seconds: float, what: str, undo):
        self.heals.append((time.monotonic() + seconds, what, undo))

    def op_scale(self, op: Op) -> str:
        self.sim.scale(op.to)
        return f"desired {op.to}"

    def op_terminate(self, op: Op) -> str:
        iid = self.victim(op.pick)
        if iid is None:
            return "skipped: a minority is faulted already"
        self.sim.terminate(iid, decrement=False)
        return iid

    def op_kill(self, op: Op) -> str:
        iid = self.victim(op.pick)
        if iid is None:
            return "skipped: a minority is faulted already"
        self.sim.kill_instance(iid)
        self.faulted[iid] = "killed"  # until the group replaces it (it leaves the candidates)
        return iid

    def op_pause(self, op: Op) -> str:
        iid = self.victim(op.pick)
        if iid is None:
            return "skipped: a minority is faulted already"
        self.sim.pause_instance(iid)
        self.faulted[iid] = "paused"
        self.later(op.seconds, f"resume {iid}", lambda: self._resume(iid))
        return f"{iid} for {op.seconds}s"

    def _resume(self, iid: str):
        inst = self.sim.instances.get(iid)
        if inst is not None and inst.proc is not None:
            self.sim.resume_instance(iid)
        self.faulted.pop(iid, None)

    def op_slow(self, op: Op) -> str:
        iid = self.victim(op.pick)
        if iid is None:
            return "skipped: a minority is faulted already"
        tracer = self.sim.slow_disk(iid, op.delay_ms)
        if tracer is None:
            return f"skipped: no etcd runs on {iid}"
        time.sleep(0.5)
        if tracer.poll() is not None:  # not attached (ptrace refused, the process gone)
            return f"skipped: strace did not attach to {iid}'s etcd (exit {tracer.returncode}; slow-{iid}.log)"
        self.faulted[iid] = "slow disk"
        self.later(op.seconds, f"{iid}'s disk fast again", lambda: (procs.stop(tracer), self.faulted.pop(iid, None)))
        return f"{iid}: each fsync held {op.delay_ms} ms, for {op.seconds}s"

    def op_cut(self, op: Op) -> str:
        iid = self.victim(op.pick)
        if iid is None:
            return "skipped: a minority is faulted already"
        cut = self.sim.cut_off(iid)
        cut.__enter__()
        self.faulted[iid] = "cut off"
        self.later(op.seconds, f"reconnect {iid}", lambda: (cut.__exit__(None, None, None),
                                                            self.faulted.pop(iid, None)))
        return f"{iid} for {op.seconds}s"

    def op_partition(self, op: Op) -> str:
        a = self.victim(op.pick)
        members = [i for i in self.members() if i != a]
        if a is None or not members:
            return "skipped: a minority is faulted already"
        b = members[int(op.pick2 * len(members))]
        table = partition(self.sim, a, b, op.one_way)
        self.faulted[a] = "partitioned"
        self.later(op.seconds, f"heal {a}|{b}", lambda: (heal(table), self.faulted.pop(a, None)))
        return f"{a} {'->' if op.one_way else '<->'} {b} for {op.seconds}s"

    def op_nospace(self, op: Op) -> str:
        members = self.members()
        listed = self.sim.member_list()
        if not members or listed is None:
            return "skipped: no member answers"
        _, ms = listed
        named = [m for m in ms if m.get("name") in members]
        if not named:
            return "skipped: no member named yet"
        m = named[int(op.pick * len(named))]
        url = self.sim.running_client_urls()[0]
        try:
            etcd.call(url, "/v3/maintenance/alarm",
                      {"action": "ACTIVATE", "memberID": m["ID"], "alarm": "NOSPACE"}, timeout=5)
        except etcd.EtcdError as e:
            return f"skipped: {e}"
        return f"NOSPACE for {m['name']}"

    def op_aws(self, op: Op) -> str:
        self.sim.faults(op.mix, seed=self.seed)
        longest = max(r.get("seconds", 0) for r in op.mix)
        self.later(longest, "AWS faults end", lambda: None)
        return json.dumps(op.mix)

    def op_crash(self, op: Op) -> str:
        rule = {"fault": "crash", "service": "*", "writes": True, "rate": 0.3, "count": 1 + int(op.pick * 2),
                "seconds": 30}
        self.sim.faults([rule], seed=self.seed)
        return f"the function killed after up to {rule['count']} applied writes"

    def op_zone(self, op: Op) -> str:
        zones = sorted(set(self.sim.zone_of().values()))
        if not zones:
            return "skipped: no instance"
        zone = zones[int(op.pick * len(zones))]
        took = [i for i, z in self.sim.zone_of().items() if z == zone]
        members = self.members()
        faulted = [i for i in self.faulted if i in members]
        if len(faulted) + len(took) > (len(members) - 1) // 2:
            return f"skipped: losing {zone} would fault a majority"
        lost = self.sim.lose_zone(zone)
        for iid in lost:
            self.faulted[iid] = "zone lost"
        self.later(op.seconds, f"restore {zone}", lambda: self.sim.restore_zone(zone))
        return f"{zone}: {lost}"

    def op_zero(self, op: Op) -> str:
        if self.faulted:
            return "skipped: members are faulted"
        self.sim.scale(0)
        deadline = time.monotonic() + 240
        while self.sim.group_instances() and time.monotonic() < deadline:
            time.sleep(1)
        asleep = not self.sim.group_instances()
        self.slept = True
        self.sim.cluster_id = None  # woken, a new cluster id from the final snapshot
        self.sim.scale(3)
        return "asleep, then woken" if asleep else "not asleep within 240 s (the group still has instances)"

    def op_version(self, op: Op) -> str:
        """The template's etcd to `op.minor`: forward at any time (an upgrade, instance by
        instance as the group replaces them), back only while the cluster version allows it (a
        member older than the cluster version would be refused: that case is an e2e test's,
        which an operator fixes by hand)."""
        cluster = self.sim.cluster_version() or ""
        if MINORS.index(op.minor) < max((MINORS.index(m) for m in MINORS if cluster.startswith(m + ".")),
                                        default=0):
            return f"skipped: the cluster version is {cluster}"
        self.sim.etcd_bin = etcd.binary(op.minor)
        self.newest = max(self.newest, op.minor, key=MINORS.index)
        return f"launches run etcd {etcd.version_of(self.sim.etcd_bin)}"

    def op_refresh(self, op: Op) -> str:
        """An instance refresh to `op.minor`, or to the newest minor the template ran if that is
        newer (forward only), with `op.healthy`'s percentages and `op.seconds` of warmup."""
        if self.refresh_id and self.sim.describe_instance_refresh(self.refresh_id)["Status"] in REFRESH_RUNNING:
            return "skipped: a refresh is running"
        minor = max(self.newest, op.minor, key=MINORS.index)
        self.sim.etcd_bin = etcd.binary(minor)
        self.newest = minor
        low, high = op.healthy
        self.refresh_id = self.sim.start_instance_refresh(MinHealthyPercentage=low, MaxHealthyPercentage=high,
                                                          InstanceWarmup=int(op.seconds))
        return f"{self.refresh_id} to etcd {etcd.version_of(self.sim.etcd_bin)}, healthy {low}-{high} %"

    def end_refresh(self):
        """A refresh still running cancelled, and waited for until it ends."""
        if not self.refresh_id:
            return
        status = self.sim.describe_instance_refresh(self.refresh_id)["Status"]
        if status in ("Pending", "InProgress"):
            self.sim.cancel_instance_refresh()
        try:
            ended = self.sim.wait_instance_refresh(self.refresh_id, REFRESH_ENDED, timeout=CONVERGE_SECS)
            self.log(f"nemesis[{self.seed}] refresh {self.refresh_id}: {ended['Status']}")
        except AssertionError as e:
            self.log(f"nemesis[{self.seed}] {e}")

    def op_request(self, op: Op) -> str:
        r = self.sim.cli("restore", "latest")
        return f"etcd-asg restore latest: exit {r.returncode}"

    # --- running and judging ---------------------------------------------------------------------

    def play(self):
        began = time.monotonic()
        for op in self.ops:
            while time.monotonic() < began + op.at:
                self.heal_due()
                time.sleep(0.2)
            self.heal_due()
            self.forget_replaced()
            self.apply(op)

    def heal_due(self, everything: bool = False):
        now = time.monotonic()
        due = [h for h in self.heals if everything or h[0] <= now]
        self.heals = [h for h in self.heals if h not in due]
        for _, what, undo in due:
            undo()
            self.log(f"nemesis[{self.seed}] healed: {what}")

    def forget_replaced(self):
        """A killed or lost member counts against the budget until the group replaced it."""
        present = {i["InstanceId"] for i in self.sim.group_instances()}
        for iid in [i for i, why in self.faulted.items() if i not in present]:
            del self.faulted[iid]

    def heal_all(self):
        self.heal_due(everything=True)
        self.sim.etcd_bin = etcd.binary(self.newest)
        self.sim.faults([])
        for zone in sorted(set(self.sim.zone_of().values()) | set(self.sim.zones)):
            self.sim.restore_zone(zone)
        self.end_refresh()
        self.sim.scale(3)

    def judge(self) -> list[str]:
        """What went wrong, one line each; empty: the run passed."""
        found = []
        try:
            self.sim.wait_converged(3, timeout=CONVERGE_SECS, label=f"nemesis seed {self.seed}")
        except AssertionError as e:
            found.append(f"not converged {CONVERGE_SECS} s after healing: {str(e).splitlines()[0]}")
        restores = self.sim.restores_declared()
        if restores and not self.slept:
            found.append(f"restored {restores} with no scale to zero: no fault here loses a quorum for good")
        self.sim.writer.stop(verify=False)
        try:
            self.sim.verify_history(restores)
        except AssertionError as e:
            found.append(f"history: {str(e).splitlines()[0]}")
        lost = self.sim.writer.lost()
        if lost:
            found.append(f"{len(lost)} acknowledged writes lost (first {lost[:5]})")
        for lapse in lapsed(self.sim):
            if lapse.get("Hook") == self.sim.hooks[1]:
                found.append(f"a terminate hook lapsed: {lapse}")
        return found


def partition(sim: Simulation, a: str, b: str, one_way: bool) -> str:
    """Drops the peer traffic (2380) from `a` to `b`, and from `b` to `a` unless `one_way`: an
    nftables table of the simulation's own (removed by `heal`, and at the simulation's close)."""
    src, dst = sim.instances[a].address, sim.instances[b].address
    table = f"etcdsim_part_{src.replace('.', '_')}_{dst.replace('.', '_')}"
    rules = [f"ip saddr {src} ip daddr {dst} tcp dport 2380 drop"]
    if not one_way:
        rules.append(f"ip saddr {dst} ip daddr {src} tcp dport 2380 drop")
    script = f"add table inet {table}\nadd chain inet {table} out {{ type filter hook output priority 0 ; }}\n"
    script += "".join(f"add rule inet {table} out {r}\n" for r in rules)
    subprocess.run([NFT, "-f", "-"], input=script, text=True, check=True, capture_output=True)
    sim._cut_tables.add(table)
    return table


def heal(table: str):
    subprocess.run([NFT, "delete", "table", "inet", table], capture_output=True)


def lapsed(sim: Simulation) -> list[dict]:
    """The held actions whose heartbeat timeout passed (the emulator's feed, drained)."""
    with urllib.request.urlopen(f"{sim.endpoint}/_sim/lapsed", timeout=5) as r:
        return json.loads(r.read())


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
