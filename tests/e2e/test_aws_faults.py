"""AWS failing as it does (sim/faults.py between the function and moto): calls refused,
throttled, applied with their answer lost, never answered; a zone's instances EC2 cannot
describe; new instances EC2 does not know yet; the function killed inside its invocations."""

import time

import pytest

from conftest import invocation_outcomes, wait_for
from sim import faults


def _member_names(sim) -> set[str]:
    listed = sim.member_list()
    return {m.get("name", "") for m in listed[1]} if listed else set()


def _held_for_quorum(sim, instance):
    for _, body in invocation_outcomes(sim):
        for h in (body or {}).get("held_for_quorum", []):
            if h["instance"] == instance:
                return h
    return None


@pytest.mark.long(200)
def test_a_termination_held_for_quorum_outlasts_ssm_throttled_and_never_answering(simulation):
    # Hooks of 30 s, AWS's shortest: SSM failing for 120 s is four of them. The dead member is
    # replaced only after UNHEALTHY_REPLACE_SECS, which passes while SSM fails.
    sim = simulation(function_env={"UNHEALTHY_REPLACE_SECS": "45"}, hook_timeout=30)
    sim.start_writer()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    first, dead, leaving = sorted(i["InstanceId"] for i in sim.group_instances())
    sim.kill_instance(dead)
    sim.terminate(leaving, decrement=True)
    wait_for("the quorum guard to hold the termination", 60, lambda: _held_for_quorum(sim, leaving))
    # SSM throttles every call of the function's for a minute, then answers none for another
    # (a connection that stalls after connecting); Auto Scaling answers all along.
    sim.faults([{"fault": "throttle", "service": "ssm", "seconds": 60}], seed=26)
    time.sleep(60)
    sim.faults([{"fault": "hang", "service": "ssm", "seconds": 60}])
    time.sleep(60)
    sim.faults([])
    # No hook lapsed into its default result: the voter was not let go while the other was down.
    assert sim.drain("lapsed") == []
    state = {i["InstanceId"]: i["LifecycleState"] for i in sim.group_instances()}
    assert state[leaving] == "Terminating:Wait", state
    assert leaving in _member_names(sim)
    report = sim.fault_report()
    assert report["faults"].get("ssm.GetParametersByPath.throttle", 0) > 0, report
    assert report["faults"].get("ssm.GetParametersByPath.hang", 0) > 0, report
    # SSM back: the dead member is replaced, then the held termination goes on.
    sim.wait_converged(2, label="SSM back: dead member replaced, termination released", timeout=180)
    ids = {i["InstanceId"] for i in sim.group_instances()}
    assert first in ids and dead not in ids and leaving not in ids, ids
    assert sim.drain("lapsed") == []
    sim.writer.stop()
    assert sim.writer.lost() == []


def _lapsed_none(sim):
    lapsed = sim.drain("lapsed")
    assert lapsed == [], f"hooks lapsed into their default result: {lapsed}"


@pytest.mark.long(300)
def test_churn_through_refused_calls_lost_answers_and_kills_inside_invocations(simulation):
    sim = simulation()
    # A fifth of the function's AWS calls refused (503, not applied), a tenth more applied with
    # their answer lost (500 after the write), from the first invocation on.
    sim.faults([{"fault": "refuse", "rate": 0.2}, {"fault": "lose", "rate": 0.125}], seed=26)
    sim.start_writer()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap, faults", timeout=240)
    sim.scale(5)
    sim.wait_converged(5, label="scale out, faults", timeout=240)
    oldest = sorted(sim.group_instances(), key=lambda i: i["InstanceId"])[0]["InstanceId"]
    sim.terminate(oldest, decrement=False)
    sim.wait_converged(5, label="replace, faults", timeout=240)
    sim.scale(3)
    sim.wait_converged(3, label="scale in, faults", timeout=240)
    done = sim.fault_report(clear=True)["faults"]
    refused = sum(n for k, n in done.items() if k.endswith(".refuse"))
    lost = sum(n for k, n in done.items() if k.endswith(".lose"))
    writes_lost = [k for k in done if k.endswith(".lose") and faults.WRITE.match(k.split(".")[1])]
    assert refused > 20 and lost > 10 and writes_lost, done
    _lapsed_none(sim)

    # Then the function killed inside its invocations: at a random moment of most of them, and
    # right after a fifth of its writes (between two writes of one step).
    first = len(sim.function.invocations)
    sim.faults([{"fault": "crash", "rate": 0.2}], seed=27)
    sim.function.kill_inside(0.8, within=2.0)
    sim.scale(4)
    sim.wait_converged(4, label="scale out, kills", timeout=300)
    victim = sorted(sim.group_instances(), key=lambda i: i["InstanceId"])[0]["InstanceId"]
    sim.terminate(victim, decrement=False)
    sim.wait_converged(4, label="replace, kills", timeout=300)
    sim.scale(3)
    sim.wait_converged(3, label="scale in, kills", timeout=300)
    sim.function.kill_inside(0)
    sim.faults([])
    crashed = [i for i in sim.function.invocations[first:] if i.outcome == "crashed"]
    assert len(crashed) >= 10, f"{len(crashed)} of {len(sim.function.invocations) - first} killed"
    assert sim.fault_report()["kills"] > 0
    # No orphan member and no learner left (wait_converged), no hook lapsed, nothing lost.
    _lapsed_none(sim)
    sim.writer.stop()
    assert sim.writer.lost() == []


@pytest.mark.long(270)
def test_a_zone_of_two_members_of_five_lost_in_a_fresh_environment_then_rebalanced(simulation):
    sim = simulation(function_env={"UNHEALTHY_REPLACE_SECS": "15"})
    sim.start_writer()
    sim.scale(5)
    sim.wait_converged(5, label="bootstrap 5", timeout=240)
    # Five members over three zones, as Auto Scaling balances them: 2 + 2 + 1.
    counts = sim.zone_counts()
    assert sorted(counts.values()) == [1, 2, 2], counts
    zone = min(z for z, n in counts.items() if n == 2)
    # The zone's outage: its members' etcd gone, EC2 failing every DescribeInstances that names
    # them, launches there failing; new instances unknown to EC2 for their first 8 seconds. A
    # fresh Lambda environment, with no address cached.
    sim.faults(unknown_for=8)
    lost = sim.lose_zone(zone)
    assert len(lost) == 2
    with sim.function.lock:
        sim.function.restart()
    wait_for("both lost members' instances replaced", 300,
             lambda: not {i["InstanceId"] for i in sim.group_instances()} & set(lost), every=1)
    sim.wait_converged(5, label="both replaced elsewhere", timeout=180)
    assert zone not in sim.zone_of().values(), sim.zone_of()
    done = sim.fault_report()["faults"]
    assert done.get("ec2.DescribeInstances.impaired", 0) > 0, done
    assert done.get("ec2.DescribeInstances.not-yet-known", 0) > 0, done
    # What an operator sees: each member's zone, and that one zone's loss would now cost the
    # quorum (five voters in two zones, 3 + 2).
    status = sim.status_table()
    assert "AT RISK" in status, status
    # The zone back: Auto Scaling rebalances, launch before terminate, one step at a time.
    sim.restore_zone(zone)
    while sim.rebalance():
        sim.wait_converged(5, label="rebalanced one step", timeout=180)
    assert sorted(sim.zone_counts().values()) == [1, 2, 2], sim.zone_counts()
    assert "AT RISK" not in sim.status_table()
    _lapsed_none(sim)
    sim.writer.stop()
    # The quorum was never lost: writes went on (a stall is an election's, seconds).
    assert sim.writer.longest_stall < 20, sim.writer.longest_stall
    assert sim.writer.lost() == []
