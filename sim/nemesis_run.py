"""The nemesis's runs (sim/nemesis.py draws the schedules): one seeded schedule applied to one
simulation, each operation by its kind (`op_<kind>`), the faults healed when due and all at the
end, then the run judged. A victim is named by a draw among the members in service (sorted by
instance id), so that a replay picks the same way in the same state; at most a minority of the
members is faulted at once."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from typing import TYPE_CHECKING

from sim import etcd, procs
from sim.world import NFT, Simulation

if TYPE_CHECKING:  # the schedule's operations (sim/nemesis.py imports this module)
    from sim.nemesis import Op

# How long the group may take to converge once everything has healed: a killed member is replaced
# after UNHEALTHY_REPLACE_SECS, a join takes seconds, a wake restores from the bucket.
CONVERGE_SECS = 300
UNHEALTHY_SECS = 20

REFRESH_RUNNING = ("Pending", "InProgress", "Cancelling", "RollbackInProgress")
REFRESH_ENDED = ("Successful", "Failed", "Cancelled", "RollbackSuccessful", "RollbackFailed")

# The minors a version move chooses from, oldest first (sim/etcd.py builds each).
MINORS = ["3.6", "3.7"]


def drawn(candidates: list, draw: float):
    """The candidate a draw in [0, 1] names. A schedule's draws are rounded to three places, so
    one can be 1.0 (the nemesis, seed 701: the run broke with an IndexError); it names the last."""
    return candidates[min(int(draw * len(candidates)), len(candidates) - 1)]


def version_refused(minor: str, cluster: str | None, newest: str) -> str:
    """Why the template may not move to `minor` ("" if it may): forward at any time; back only
    while the cluster version is known and no newer. With none known (asleep, waking, or no
    member answering) the cluster may be at `newest`, the newest minor the template ran, and its
    final snapshot would need it: seed 703 moved the template back to 3.6 while a 3.7 cluster
    slept, and the wake waited (`no-restorable-backup`) for an operator who never came."""
    if MINORS.index(minor) >= MINORS.index(newest):
        return ""
    if not cluster:
        return "skipped: the cluster version is unknown (asleep, or no member answers)"
    if MINORS.index(minor) < max((MINORS.index(m) for m in MINORS if cluster.startswith(m + ".")), default=0):
        return f"skipped: the cluster version is {cluster}"
    return ""


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
        return drawn(healthy, pick)

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
        b = drawn(members, op.pick2)
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
        m = drawn(named, op.pick)
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
        zone = drawn(zones, op.pick)
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
        refused = version_refused(op.minor, self.sim.cluster_version(), self.newest)
        if refused:
            return refused
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
        found += [f"snapshot revision unread: {line}" for line in self.sim.snapshot_revisions_unread()[:3]]
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
