"""The demo's steps, shared by `make demo` and the end-to-end tests. Each step changes the group
the way an operator or AWS would, then waits until the cluster has converged (or raises)."""

from __future__ import annotations

import time

from . import etcd
from .world import Simulation


def bootstrap(sim: Simulation) -> str:
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    return "group created with desired 3: one seed, two learners promoted"


def scale_out(sim: Simulation) -> str:
    sim.scale(5)
    sim.wait_converged(5, label="scale out")
    return "desired 3 -> 5"


def replace_all(sim: Simulation) -> str:
    """As an instance refresh would: one instance at a time, each replaced before the next."""
    originals = sorted(i["InstanceId"] for i in sim.group_instances())
    for n, iid in enumerate(originals, 1):
        sim.terminate(iid, decrement=False)
        sim.wait_converged(len(originals), label=f"replace {n}/{len(originals)}")
        if sim.verbose:
            print(f"    replaced {iid} ({n}/{len(originals)})", flush=True)
    left = {i["InstanceId"] for i in sim.group_instances()} & set(originals)
    assert not left, f"not replaced: {left}"
    return f"{len(originals)} instances replaced one at a time"


def scale_in(sim: Simulation) -> str:
    sim.scale(3)
    sim.wait_converged(3, label="scale in")
    return "desired 5 -> 3"


def terminate_leader(sim: Simulation) -> str:
    leader = sim.leader()
    assert leader, "no leader to terminate"
    sim.terminate(leader, decrement=False)
    sim.wait_converged(3, label="leader replaced")
    assert leader not in {i["InstanceId"] for i in sim.group_instances()}
    return f"leader {leader} terminated and replaced"


def lost_launch_event(sim: Simulation) -> str:
    """A new instance is held in Pending:Wait, but its event never arrives: the schedule joins it."""
    sim.delivery.drop_next_launches = 1
    before = sim.delivery.dropped
    sim.scale(4)
    sim.wait_converged(4, label="lost event")
    assert sim.delivery.dropped > before, "the launch event was not dropped"
    return "desired 3 -> 4 with the launch event lost; joined by the schedule"


def vanished_instance(sim: Simulation) -> str:
    """An instance leaves with no hook and no event (detached, its etcd killed): the schedule
    removes its member."""
    leader = sim.leader()
    victim = sorted(i["InstanceId"] for i in sim.group_instances() if i["InstanceId"] != leader)[0]
    sim.detach(victim)
    sim.wait_converged(3, label="vanished")
    return f"{victim} detached and killed without any event; its member removed"


DEMO = [
    ("bootstrap", bootstrap),
    ("scale out to 5", scale_out),
    ("replace every member", replace_all),
    ("scale in to 3", scale_in),
    ("terminate the leader", terminate_leader),
    ("lost launch event", lost_launch_event),
    ("instance vanishes", vanished_instance),
]


def lose_every_member(sim: Simulation) -> str:
    """Every member lost at once with no hook (an AZ outage): the next seed restores the latest
    backup, with no operator. Needs a simulation with backups."""
    url = sim.running_client_urls()[0]
    for n in range(20):
        etcd.put(url, f"/demo/kept/{n:02d}", f"value {n}", timeout=5)
    revision = int(etcd.status(url)["header"]["revision"])
    deadline = time.monotonic() + 150
    while True:
        backup = next((b for b in reversed(sim.backups()) if b["revision"] >= revision), None)
        if backup:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"no backup at revision {revision} after 150s")
        time.sleep(0.5)
    # Writes after the snapshot: what a restore cannot bring back.
    after, until = 0, time.monotonic() + 3
    while time.monotonic() < until:
        etcd.put(url, f"/demo/after/{after:04d}", "x", timeout=5)
        after += 1
        time.sleep(0.05)
    lost_at = time.time()
    for i in sim.group_instances():
        sim.detach(i["InstanceId"])
    sim.cluster_id = None  # a restore founds a new cluster id
    sim.scale(3)
    sim.wait_converged(3, label="restored", timeout=240)
    url = sim.running_client_urls()[0]
    kept = etcd.keys_with_prefix(url, "/demo/kept/")
    assert len(kept) == 20, f"{len(kept)} of 20 keys back"
    lacked = after - len(etcd.keys_with_prefix(url, "/demo/after/"))
    name = backup["key"].rsplit("/", 1)[-1]
    return (f"every member detached at once; restored from {name}: all 20 keys back; "
            f"{lacked} of {after} writes made after the snapshot lacked (its age at the loss "
            f"{lost_at - backup['taken_at']:.0f}s)")


# Run by the demo after DEMO, on its own: it changes the cluster id and loses the newest writes.
RECOVERY = ("lose every member → restored from backup", lose_every_member)
