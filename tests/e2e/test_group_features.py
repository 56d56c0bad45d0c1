"""The Auto Scaling group as operators run it: its processes suspended, a warm pool added."""

import json
import time

import pytest

from conftest import invocation_outcomes, wait_for


def _emf(sim, metric):
    """The values of `metric` in the function's EMF lines so far."""
    out = []
    with open(f"{sim.workdir}/function.log") as f:
        for line in f:
            if line.startswith("{") and '"_aws"' in line:
                d = json.loads(line)
                if metric in d:
                    out.append(d[metric])
    return out


@pytest.mark.long(90)
def test_a_dead_member_is_not_marked_while_replace_unhealthy_is_suspended_and_replaced_once_resumed(simulation):
    # Was: nothing read the group's SuspendedProcesses; the function marked the instance
    # Unhealthy, the group kept it, and the mark held up every replacement and rotation after.
    sim = simulation(function_env={"UNHEALTHY_REPLACE_SECS": "10"})
    sim.start_writer()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    sim.asg.suspend_processes(AutoScalingGroupName=sim.group, ScalingProcesses=["ReplaceUnhealthy"])
    dead = sorted(i["InstanceId"] for i in sim.group_instances())[1]
    sim.kill_instance(dead)

    def waiting():
        return [b["waiting"] for _, b in invocation_outcomes(sim)
                if isinstance(b, dict) and (b.get("waiting") or "").startswith(f"replacement-suspended {dead}")]

    wait_for("the replacement to wait for the suspended process", 90, waiting)
    assert sim.drain("health") == [], "nothing marked Unhealthy while the group would keep it"
    assert max(_emf(sim, "ReplacementsSuspended")) == 1
    status = sim.status_table()
    assert "ReplaceUnhealthy" in status, status
    # Resumed: marked, replaced, converged.
    sim.asg.resume_processes(AutoScalingGroupName=sim.group, ScalingProcesses=["ReplaceUnhealthy"])
    wait_for("the dead member's instance replaced", 120,
             lambda: dead not in {i["InstanceId"] for i in sim.group_instances()}, every=1)
    sim.wait_converged(3, label="replaced once resumed", timeout=180)
    assert [h["InstanceId"] for h in sim.drain("health")] == [dead]
    assert sim.drain("lapsed") == []
    sim.writer.stop()
    assert sim.writer.lost() == []


@pytest.mark.long(40)
def test_a_group_with_a_warm_pool_is_refused_until_it_is_deleted(simulation):
    sim = simulation(writer=False, tls=False)
    sim.scale(1)
    sim.wait_converged(1, label="one member")
    sim.asg.put_warm_pool(AutoScalingGroupName=sim.group, MinSize=1, PoolState="Stopped")
    # The next environment refuses, every invocation, naming the pool and how to remove it.
    with sim.function.lock:
        sim.function.restart()
    first = len(sim.function.invocations)

    def refused():
        return [i.body for i in sim.function.invocations[first:]
                if i.outcome == "error" and "warm pool" in (i.body or {}).get("errorMessage", "")]

    (body, *_) = wait_for("an invocation refused for the warm pool", 30, refused)
    assert body["errorType"] == "Fatal.Config", body
    assert "delete-warm-pool" in body["errorMessage"], body
    sim.asg.delete_warm_pool(AutoScalingGroupName=sim.group, ForceDelete=True)
    with sim.function.lock:
        sim.function.restart()
    later = len(sim.function.invocations)
    wait_for("invocations that succeed again", 30,
             lambda: [i for i in sim.function.invocations[later:] if i.outcome == "ok"])
    sim.wait_converged(1, label="still one member")


@pytest.mark.long(200)
def test_a_termination_held_for_quorum_outlasts_a_hundred_heartbeat_timeouts_of_the_old_hooks(simulation):
    # Global timeouts at 1/250 of AWS's: the template's 1800 s hooks give 48 h, here 691 s; the
    # 300 s hooks it had gave 8 h 20 min, here 120 s, after which the termination held for
    # quorum went on (CONTINUE) with the other member down, and the quorum was lost.
    scale = 0.004
    sim = simulation(function_env={"UNHEALTHY_REPLACE_SECS": "170"}, hook_timeout=1800)
    sim.global_timeout_scale(scale)
    sim.start_writer()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    first, dead, leaving = sorted(i["InstanceId"] for i in sim.group_instances())
    sim.kill_instance(dead)
    sim.terminate(leaving, decrement=True)
    wait_for("the quorum guard to hold the termination", 60, lambda: [
        h for _, b in invocation_outcomes(sim) for h in (b or {}).get("held_for_quorum", [])
        if h["instance"] == leaving])
    old_global = scale * 100 * 300
    time.sleep(old_global + 15)
    state = {i["InstanceId"]: i["LifecycleState"] for i in sim.group_instances()}
    assert state[leaving] == "Terminating:Wait", state
    assert sim.drain("lapsed") == []
    # The dead member replaced (UNHEALTHY_REPLACE_SECS), the termination goes on.
    sim.wait_converged(2, label="dead member replaced, termination released", timeout=240)
    assert sim.drain("lapsed") == []
    sim.writer.stop()
    assert sim.writer.lost() == []
