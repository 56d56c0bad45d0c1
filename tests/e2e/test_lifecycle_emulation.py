"""The emulated lifecycle itself, and the function's answer to an instance that never boots."""

import json
import time
import urllib.request

import boto3
import pytest


def test_a_held_instance_gets_the_hooks_default_result_when_its_heartbeat_times_out(moto):
    kw = dict(endpoint_url=moto, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    ec2, asg = boto3.client("ec2", **kw), boto3.client("autoscaling", **kw)
    ec2.create_launch_template(LaunchTemplateName="lt-timeout",
                               LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.small"})
    asg.create_auto_scaling_group(AutoScalingGroupName="g", LaunchTemplate={"LaunchTemplateName": "lt-timeout"},
                                  MinSize=0, MaxSize=3, DesiredCapacity=0, AvailabilityZones=["us-east-1a"])
    asg.put_lifecycle_hook(AutoScalingGroupName="g", LifecycleHookName="launch", HeartbeatTimeout=2,
                           LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING", DefaultResult="ABANDON")
    asg.set_desired_capacity(AutoScalingGroupName="g", DesiredCapacity=1)
    (first,) = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["g"])["AutoScalingGroups"][0]["Instances"]
    assert first["LifecycleState"] == "Pending:Wait"
    # A heartbeat restarts the timeout...
    time.sleep(1.2)
    asg.record_lifecycle_action_heartbeat(AutoScalingGroupName="g", LifecycleHookName="launch",
                                          InstanceId=first["InstanceId"])
    time.sleep(1.2)
    states = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["g"])["AutoScalingGroups"][0]["Instances"]
    assert [i["InstanceId"] for i in states] == [first["InstanceId"]]
    # ...and without one, ABANDON terminates the instance and the group replaces it.
    time.sleep(2.5)
    states = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["g"])["AutoScalingGroups"][0]["Instances"]
    assert first["InstanceId"] not in [i["InstanceId"] for i in states]
    assert [i["LifecycleState"] for i in states] == ["Pending:Wait"]
    # (On a loaded machine the replacement's own 2 s can lapse before these are read: each
    # feed is asserted up to the first instance's end and the replacement's launch.)
    terminated = json.loads(urllib.request.urlopen(f"{moto}/_sim/terminated").read())
    assert terminated[:1] == [first["InstanceId"]] and states[0]["InstanceId"] not in terminated[:1], terminated
    lapsed = json.loads(urllib.request.urlopen(f"{moto}/_sim/lapsed").read())
    assert lapsed[:1] == [{"InstanceId": first["InstanceId"], "Hook": "launch", "Result": "ABANDON", "Global": False}]
    events = json.loads(urllib.request.urlopen(f"{moto}/_sim/events").read())
    launches = [e["detail"]["EC2InstanceId"] for e in events if "EC2InstanceId" in e["detail"]]
    assert launches[:2] == [first["InstanceId"], states[0]["InstanceId"]], "one event per held instance"
    assert len(set(launches)) == len(launches), "one event per held instance"
    try:
        asg.complete_lifecycle_action(AutoScalingGroupName="g", LifecycleHookName="launch",
                                      InstanceId=first["InstanceId"], LifecycleActionResult="CONTINUE")
        raise AssertionError("completed an action AWS no longer holds")
    except asg.exceptions.ClientError as e:
        assert "No active Lifecycle Action found" in str(e)


def _group(moto, name, zones, hook_timeout=30):
    kw = dict(endpoint_url=moto, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    ec2, asg = boto3.client("ec2", **kw), boto3.client("autoscaling", **kw)
    ec2.create_launch_template(LaunchTemplateName=f"lt-{name}",
                               LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.small"})
    asg.create_auto_scaling_group(AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateName": f"lt-{name}"},
                                  MinSize=0, MaxSize=9, DesiredCapacity=0, AvailabilityZones=zones)
    asg.put_lifecycle_hook(AutoScalingGroupName=name, LifecycleHookName="launch", HeartbeatTimeout=hook_timeout,
                           LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING", DefaultResult="ABANDON")
    return asg


def _zones(moto, spec):
    req = urllib.request.Request(f"{moto}/_sim/zones", data=json.dumps(spec).encode(), method="POST")
    return json.loads(urllib.request.urlopen(req).read())


def _instances(asg, name):
    return asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]["Instances"]


def _complete_all(asg, name):
    for i in _instances(asg, name):
        if i["LifecycleState"] == "Pending:Wait":
            asg.complete_lifecycle_action(AutoScalingGroupName=name, LifecycleHookName="launch",
                                          InstanceId=i["InstanceId"], LifecycleActionResult="CONTINUE")


def test_a_held_action_ends_at_its_global_timeout_whatever_its_heartbeats(moto):
    # The lesser of 48 h and 100 heartbeat timeouts (API_LifecycleHook), here capped to 2 s.
    _zones(moto, {"global_timeout_cap": 2})
    asg = _group(moto, "global", ["us-east-1a"])
    asg.set_desired_capacity(AutoScalingGroupName="global", DesiredCapacity=1)
    (first,) = _instances(asg, "global")
    for _ in range(5):
        time.sleep(0.5)
        try:
            asg.record_lifecycle_action_heartbeat(AutoScalingGroupName="global", LifecycleHookName="launch",
                                                  InstanceId=first["InstanceId"])
        except asg.exceptions.ClientError:
            break
    time.sleep(0.5)
    lapsed = json.loads(urllib.request.urlopen(f"{moto}/_sim/lapsed").read())
    assert lapsed == [{"InstanceId": first["InstanceId"], "Hook": "launch", "Result": "ABANDON", "Global": True}]


def test_instances_are_balanced_across_zones_and_launch_elsewhere_when_one_is_lost(moto):
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    asg = _group(moto, "zones", zones)
    asg.set_desired_capacity(AutoScalingGroupName="zones", DesiredCapacity=5)
    assert _zones(moto, {"group": "zones"})["zones"] == {"us-east-1a": 2, "us-east-1b": 2, "us-east-1c": 1}
    _complete_all(asg, "zones")
    # Scale-in takes from the zone with the most.
    asg.set_desired_capacity(AutoScalingGroupName="zones", DesiredCapacity=3)
    assert sorted(_zones(moto, {"group": "zones"})["zones"].values()) == [1, 1, 1]
    # A zone lost: what replaces its instance launches elsewhere.
    _zones(moto, {"impaired": ["us-east-1b"]})
    (in_b,) = [i for i in _instances(asg, "zones") if i["AvailabilityZone"] == "us-east-1b"]
    asg.terminate_instance_in_auto_scaling_group(InstanceId=in_b["InstanceId"], ShouldDecrementDesiredCapacity=False)
    assert _zones(moto, {"group": "zones"})["zones"] == {"us-east-1a": 2, "us-east-1b": 0, "us-east-1c": 1}
    # Back: one rebalance step, launch before terminate.
    _zones(moto, {"impaired": []})
    launched = _zones(moto, {"rebalance": "zones"})["launched"]
    new = [i for i in _instances(asg, "zones") if i["InstanceId"] == launched]
    assert new and new[0]["AvailabilityZone"] == "us-east-1b", new
    assert len([i for i in _instances(asg, "zones") if i["LifecycleState"] != "Terminating"]) == 4
    _complete_all(asg, "zones")
    time.sleep(0.5)  # the emulator's timer ends the other half
    assert _zones(moto, {"group": "zones"})["zones"] == {"us-east-1a": 1, "us-east-1b": 1, "us-east-1c": 1}
    assert _zones(moto, {"rebalance": "zones"})["launched"] is None


def test_an_unhealthy_instance_stays_while_replace_unhealthy_is_suspended(moto):
    asg = _group(moto, "suspended", ["us-east-1a"])
    asg.set_desired_capacity(AutoScalingGroupName="suspended", DesiredCapacity=1)
    _complete_all(asg, "suspended")
    (one,) = _instances(asg, "suspended")
    asg.suspend_processes(AutoScalingGroupName="suspended", ScalingProcesses=["ReplaceUnhealthy"])
    asg.set_instance_health(InstanceId=one["InstanceId"], HealthStatus="Unhealthy")
    (still,) = _instances(asg, "suspended")
    assert (still["LifecycleState"], still["HealthStatus"]) == ("InService", "Unhealthy")
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["suspended"])["AutoScalingGroups"][0]
    assert [p["ProcessName"] for p in group["SuspendedProcesses"]] == ["ReplaceUnhealthy"]
    asg.resume_processes(AutoScalingGroupName="suspended", ScalingProcesses=["ReplaceUnhealthy"])
    states = {i["InstanceId"]: i["LifecycleState"] for i in _instances(asg, "suspended")}
    assert one["InstanceId"] not in states, states  # no terminate hook: gone at once
    assert list(states.values()) == ["Pending:Wait"], states


@pytest.mark.long(45)
def test_an_instance_that_never_boots_is_removed_abandoned_and_replaced(simulation):
    sim = simulation(function_env={"LEARNER_START_TIMEOUT_SECS": "10"})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    sim.start_history()
    sim.dead_on_arrival = 1
    sim.scale(4)
    sim.wait_converged(4, label="dead instance replaced", timeout=120)
    sim.verify_history()
    # From the decisions the function logged: an invocation that failed after applying a step
    # (loaded machine, a timeout) returns no list of its steps, but its log line stays.
    (dead,) = sim.never_booted
    with open(f"{sim.workdir}/function.log") as f:
        decisions = [json.loads(line)["fields"] for line in f if '"message":"decision"' in line]
    removed = [d for d in decisions if d.get("outcome") == "removed" and dead in d.get("detail", "")]
    assert removed, [d.get("why") for d in decisions]
    abandoned = [d for d in decisions if d.get("outcome") == "completed" and dead in d.get("detail", "")
                 and "Abandon" in d.get("detail", "")]
    assert abandoned, [d.get("why") for d in decisions]
    assert dead not in {i["InstanceId"] for i in sim.group_instances()}, "it was replaced"
