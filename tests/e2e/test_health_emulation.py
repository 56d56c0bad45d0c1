"""The emulated SetInstanceHealth replacement and DescribeLifecycleHooks, through boto3 only."""

import json
import urllib.request

import boto3
import pytest


def _drain(moto, feed):
    return json.loads(urllib.request.urlopen(f"{moto}/_sim/{feed}").read())


@pytest.fixture
def group(moto):
    kw = dict(endpoint_url=moto, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    ec2, asg = boto3.client("ec2", **kw), boto3.client("autoscaling", **kw)
    ec2.create_launch_template(LaunchTemplateName="lt-health",
                               LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.small"})
    asg.create_auto_scaling_group(AutoScalingGroupName="g", LaunchTemplate={"LaunchTemplateName": "lt-health"},
                                  MinSize=0, MaxSize=5, DesiredCapacity=0, AvailabilityZones=["us-east-1a"])
    asg.put_lifecycle_hook(AutoScalingGroupName="g", LifecycleHookName="launch", HeartbeatTimeout=600,
                           LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING", DefaultResult="ABANDON")
    asg.put_lifecycle_hook(AutoScalingGroupName="g", LifecycleHookName="terminate", HeartbeatTimeout=300,
                           LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING", DefaultResult="CONTINUE")
    asg.set_desired_capacity(AutoScalingGroupName="g", DesiredCapacity=2)
    for i in instances(asg):
        asg.complete_lifecycle_action(AutoScalingGroupName="g", LifecycleHookName="launch",
                                      InstanceId=i["InstanceId"], LifecycleActionResult="CONTINUE")
    assert [i["LifecycleState"] for i in instances(asg)] == ["InService", "InService"]
    _drain(moto, "events")
    return asg


def instances(asg):
    return asg.describe_auto_scaling_groups(AutoScalingGroupNames=["g"])["AutoScalingGroups"][0]["Instances"]


def test_an_instance_marked_unhealthy_leaves_through_the_terminate_hook_and_is_replaced(moto, group):
    asg = group
    sick, well = (i["InstanceId"] for i in instances(asg))
    asg.set_instance_health(InstanceId=sick, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False)

    states = {i["InstanceId"]: (i["LifecycleState"], i["HealthStatus"]) for i in instances(asg)}
    assert states.pop(sick) == ("Terminating:Wait", "Unhealthy")
    assert states.pop(well) == ("InService", "Healthy")
    ((new, (state, _)),) = states.items()
    assert state == "Pending:Wait", "the replacement launches through the launch hook"

    events = _drain(moto, "events")
    terminating = [e for e in events if e["detail-type"] == "EC2 Instance-terminate Lifecycle Action"]
    launching = [e for e in events if e["detail-type"] == "EC2 Instance-launch Lifecycle Action"]
    assert [e["detail"]["EC2InstanceId"] for e in terminating] == [sick], "one event, like a scale-in"
    assert [e["detail"]["EC2InstanceId"] for e in launching] == [new]
    detail = terminating[0]["detail"]
    assert detail["LifecycleHookName"] == "terminate"
    assert detail["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert (detail["Origin"], detail["Destination"]) == ("AutoScalingGroup", "EC2")

    assert _drain(moto, "health") == [{"InstanceId": sick, "HealthStatus": "Unhealthy",
                                       "ShouldRespectGracePeriod": False, "sdk": False, "error": None}]
    # Marking it again while it is held changes nothing.
    asg.set_instance_health(InstanceId=sick, HealthStatus="Unhealthy")
    assert len(instances(asg)) == 3 and _drain(moto, "events") == []

    asg.complete_lifecycle_action(AutoScalingGroupName="g", LifecycleHookName="terminate",
                                  LifecycleActionToken=detail["LifecycleActionToken"], LifecycleActionResult="CONTINUE")
    assert sick not in {i["InstanceId"] for i in instances(asg)}
    assert _drain(moto, "terminated") == [sick]
    group_now = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["g"])["AutoScalingGroups"][0]
    assert group_now["DesiredCapacity"] == 2


def test_an_unknown_instance_is_a_validation_error_and_is_recorded(moto, group):
    with pytest.raises(group.exceptions.ClientError) as failed:
        group.set_instance_health(InstanceId="i-0123456789abcdef0", HealthStatus="Unhealthy")
    assert "ValidationError" in str(failed.value) and "i-0123456789abcdef0" in str(failed.value)
    (call,) = _drain(moto, "health")
    assert call["InstanceId"] == "i-0123456789abcdef0" and "No managed instance" in call["error"]


def test_describe_lifecycle_hooks_names_both_hooks(group):
    hooks = {h["LifecycleHookName"]: h for h in
             group.describe_lifecycle_hooks(AutoScalingGroupName="g")["LifecycleHooks"]}
    assert set(hooks) == {"launch", "terminate"}
    assert hooks["launch"]["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_LAUNCHING"
    assert hooks["launch"]["DefaultResult"] == "ABANDON" and hooks["launch"]["HeartbeatTimeout"] == 600
    assert hooks["terminate"]["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert all(h["AutoScalingGroupName"] == "g" for h in hooks.values())
    only = group.describe_lifecycle_hooks(AutoScalingGroupName="g", LifecycleHookNames=["terminate"])
    assert [h["LifecycleHookName"] for h in only["LifecycleHooks"]] == ["terminate"]
    assert group.describe_lifecycle_hooks(AutoScalingGroupName="nobody")["LifecycleHooks"] == []
