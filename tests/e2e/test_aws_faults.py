"""AWS failing as it does (sim/faults.py between the function and moto): calls refused,
throttled, applied with their answer lost, never answered; a zone's instances EC2 cannot
describe; new instances EC2 does not know yet; the function killed inside its invocations."""

import time

import pytest

from conftest import invocation_outcomes, wait_for


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
