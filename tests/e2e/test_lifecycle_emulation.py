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
    terminated = json.loads(urllib.request.urlopen(f"{moto}/_sim/terminated").read())
    assert terminated == [first["InstanceId"]]
    lapsed = json.loads(urllib.request.urlopen(f"{moto}/_sim/lapsed").read())
    assert lapsed == [{"InstanceId": first["InstanceId"], "Hook": "launch", "Result": "ABANDON"}]
    events = json.loads(urllib.request.urlopen(f"{moto}/_sim/events").read())
    launches = [e["detail"]["EC2InstanceId"] for e in events if "EC2InstanceId" in e["detail"]]
    assert launches == [first["InstanceId"], states[0]["InstanceId"]], "one event per held instance"
    try:
        asg.complete_lifecycle_action(AutoScalingGroupName="g", LifecycleHookName="launch",
                                      InstanceId=first["InstanceId"], LifecycleActionResult="CONTINUE")
        raise AssertionError("completed an action AWS no longer holds")
    except asg.exceptions.ClientError as e:
        assert "No active Lifecycle Action found" in str(e)


@pytest.mark.long(45)
def test_an_instance_that_never_boots_is_removed_abandoned_and_replaced(simulation):
    sim = simulation(function_env={"LEARNER_START_TIMEOUT_SECS": "10"})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    sim.dead_on_arrival = 1
    sim.scale(4)
    sim.wait_converged(4, label="dead instance replaced", timeout=120)
    bodies = [i.body for i in sim.function.invocations if isinstance(i.body, dict)]
    steps = [s for b in bodies for s in b.get("steps", [])]
    assert any(s.startswith("remove-member") for s in steps), steps
    assert any(s.startswith("complete-lifecycle-action") and "ABANDON" in s for s in steps), steps
    (dead,) = sim.never_booted
    assert dead not in {i["InstanceId"] for i in sim.group_instances()}, "it was replaced"
    assert any(s.startswith(f"complete-lifecycle-action {dead}") and "ABANDON" in s for s in steps), steps
