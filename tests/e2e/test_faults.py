"""Faults on purpose: duplicated and reordered events, a function killed between two steps, two
terminations at once, a hung member, another group's events."""

import json
import time

import pytest

from sim.world import Chaos
from conftest import invocation_outcomes, wait_for
from sim import etcd


def test_bootstrap_events_delivered_twice_and_in_reverse_order(simulation):
    # No schedule: only the (duplicated, reversed) launch events drive the bootstrap.
    sim = simulation(chaos=Chaos(duplicate=1.0, reverse=True), schedule_every=3600)
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    launches = [e for e in sim.events_seen if e["detail-type"].startswith("EC2 Instance-launch")
                and "EC2InstanceId" in e["detail"]]
    assert len(launches) == 3
    # Converged can come before every duplicate was delivered: wait for them all.
    deadline = time.monotonic() + 30
    while True:
        outcomes = invocation_outcomes(sim)
        launch_runs = sum(1 for o, b in outcomes if b and b.get("trigger", "").startswith("launch"))
        if launch_runs >= 6 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert launch_runs >= 3, outcomes
    assert all(o == "ok" for o, _ in outcomes), outcomes
    # Duplicates found nothing left to do: no step was applied twice.
    created = [s for _, b in outcomes if b for s in b.get("steps", []) if s.startswith("create-cluster")]
    assert created == [created[0]] and created[0].endswith(": created"), created


def _crash_and_converge(simulation, failpoint):
    sim = simulation(crash_once_after=failpoint)
    sim.scale(3)
    sim.wait_converged(3, label=f"after crash at {failpoint}")
    assert sim.function.crashes == 1
    assert any(o == "crashed" for o, _ in invocation_outcomes(sim))
    assert len(sim.function.cold_starts) >= 2, "the function was started again"


@pytest.mark.v37
def test_function_killed_after_a_member_add_before_its_config_is_published(simulation):
    _crash_and_converge(simulation, "add-learner")


@pytest.mark.v37
def test_function_killed_after_a_promote_before_the_launch_action_completes(simulation):
    _crash_and_converge(simulation, "promote")


@pytest.mark.v37
def test_two_simultaneous_terminations_from_three_members_to_one(simulation):
    sim = simulation()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    sim.start_history()
    a, b = sorted(i["InstanceId"] for i in sim.group_instances())[:2]
    sim.terminate(a, decrement=True)
    sim.terminate(b, decrement=True)
    sim.wait_converged(1, label="3 -> 1")
    sim.verify_history()
    (survivor,) = sim.group_instances()
    url = sim.client_url(survivor["InstanceId"])
    etcd.put(url, "/after", "one member")
    assert etcd.keys_with_prefix(url, "/after") == {"/after"}


@pytest.mark.long(40)
def test_a_member_whose_etcd_hangs_during_a_scale_in(simulation):
    sim = simulation()
    sim.start_writer()
    sim.scale(5)
    sim.wait_converged(5, label="scale out")
    # Scale-in takes the oldest instances first: hang the oldest, the seed (often the leader).
    oldest = sim.group_instances()[0]["InstanceId"]
    sim.pause_instance(oldest)
    try:
        sim.scale(3)
        sim.wait_converged(3, label="scale in with a hung member", timeout=180)
    finally:
        if sim.instances[oldest].proc is not None:
            sim.resume_instance(oldest)
    assert oldest not in {i["InstanceId"] for i in sim.group_instances()}
    sim.writer.stop()
    assert sim.writer.lost() == []


def test_another_groups_events_are_ignored(simulation):
    sim = simulation()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    before = sim.parameters()
    sim.create_group("someone-elses-asg", 2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rejected = [b for o, b in invocation_outcomes(sim)
                    if b and b.get("outcome") == "rejected" and b.get("field") == "AutoScalingGroupName"]
        if len(rejected) >= 2:
            break
        time.sleep(0.2)
    assert len(rejected) >= 2, invocation_outcomes(sim)
    others = sim.group_instances("someone-elses-asg")
    assert [i["LifecycleState"] for i in others] == ["Pending:Wait", "Pending:Wait"], others
    assert sim.parameters() == before
    assert sim.problems(3) == []


def test_a_function_with_a_bad_setting_fails_at_start_naming_it(simulation):
    with pytest.raises(RuntimeError) as failed:
        simulation(function_env={"ETCD_PEER_PORT": "70000"})
    assert "ETCD_PEER_PORT" in str(failed.value) and "70000" in str(failed.value)


@pytest.mark.long(40)
def test_a_member_only_the_function_cannot_reach_is_not_replaced(simulation):
    # Its client port refused to everyone (a route or an ACL); its peers still reach it on 2380.
    sim = simulation(function_env={"UNHEALTHY_REPLACE_SECS": "10"})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    sim.start_writer()
    instances = sorted(i["InstanceId"] for i in sim.group_instances())
    leader = sim.leader()
    iid = next(i for i in instances if i != leader)
    began = len(sim.function.invocations)
    with sim.cut_off(iid):
        wait_for("the function's second view", 60, lambda: any(
            ((i.body or {}).get("waiting") or "").startswith(f"member-unreachable-from-function {iid}")
            for i in sim.function.invocations[began:]))
        time.sleep(15)  # past UNHEALTHY_REPLACE_SECS: still not replaced
        group = sim.group_instances()
        assert sorted(i["InstanceId"] for i in group) == instances
        assert all(i["HealthStatus"] == "Healthy" and i["LifecycleState"] == "InService" for i in group)
        steps = [s for i in sim.function.invocations[began:] if i.body for s in i.body.get("steps", [])]
        assert not [s for s in steps if s.startswith("replace-instance")], steps
        with open(f"{sim.workdir}/function.log") as f:
            emf = [json.loads(line) for line in f if '"_aws"' in line]
        assert emf and emf[-1].get("MemberUnreachableFromFunction") == 1, emf[-1:]
    # Reachable again: the same three members, nothing replaced, no write lost.
    sim.wait_converged(3, label="reachable again")
    assert sorted(i["InstanceId"] for i in sim.group_instances()) == instances
    sim.writer.stop()
    assert sim.writer.lost() == []
