"""The demo's steps, shared by `make demo` and the end-to-end tests. Each step changes the group
the way an operator or AWS would, then waits until the cluster has converged (or raises)."""

from __future__ import annotations

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
