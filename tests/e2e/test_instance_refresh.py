"""Instance refresh as AWS runs one (sim/emulator/refresh.py): the emulator's own rules with
nothing but a test completing the hooks, then the function under a refresh that rolls a cluster
to etcd 3.7 launch-before-terminate with the writer on, and one paused at a checkpoint and
cancelled there."""

import json
import time
import urllib.request

import boto3
import pytest

from conftest import wait_for
from sim import etcd

ENDED = ("Successful", "Failed", "Cancelled", "RollbackSuccessful", "RollbackFailed")


def _clients(moto):
    kw = dict(endpoint_url=moto, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    return boto3.client("ec2", **kw), boto3.client("autoscaling", **kw)


def _group(moto, name, size):
    ec2, asg = _clients(moto)
    ec2.create_launch_template(LaunchTemplateName=f"lt-{name}",
                               LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.small"})
    asg.create_auto_scaling_group(AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateName": f"lt-{name}"},
                                  MinSize=0, MaxSize=20, DesiredCapacity=0,
                                  AvailabilityZones=["us-east-1a", "us-east-1b", "us-east-1c"])
    for hook, transition in (("launch", "LAUNCHING"), ("terminate", "TERMINATING")):
        asg.put_lifecycle_hook(AutoScalingGroupName=name, LifecycleHookName=hook, HeartbeatTimeout=60,
                               LifecycleTransition=f"autoscaling:EC2_INSTANCE_{transition}", DefaultResult="CONTINUE")
    asg.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=size)
    _complete_held(asg, name)
    return asg


def _instances(asg, name):
    return asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]["Instances"]


def _complete_held(asg, name) -> list[dict]:
    """What the function does, simply: every held launch and termination completed (CONTINUE)."""
    instances = _instances(asg, name)
    for i in instances:
        hook = {"Pending:Wait": "launch", "Terminating:Wait": "terminate"}.get(i["LifecycleState"])
        if hook:
            try:
                asg.complete_lifecycle_action(AutoScalingGroupName=name, LifecycleHookName=hook,
                                              InstanceId=i["InstanceId"], LifecycleActionResult="CONTINUE")
            except asg.exceptions.ClientError:
                pass  # concluded meanwhile
    return instances


def _drive(asg, name, rid, until, samples, timeout=90, stop=None):
    """Completes the hooks until the refresh's status is in `until` (or `stop(refresh)`); every
    look at the group's instances is appended to `samples`."""
    deadline = time.monotonic() + timeout
    while True:
        samples.append(_complete_held(asg, name))
        r = asg.describe_instance_refreshes(AutoScalingGroupName=name, InstanceRefreshIds=[rid])["InstanceRefreshes"][0]
        if r["Status"] in until or (stop and stop(r)):
            return r
        assert time.monotonic() < deadline, f"refresh still {r}"
        time.sleep(0.2)


def _generations(moto) -> dict:
    return json.loads(urllib.request.urlopen(f"{moto}/_sim/generations").read())


def test_launch_before_terminate_keeps_the_minimum_and_stays_under_the_maximum(moto):
    asg = _group(moto, "lbt", 4)
    old = {i["InstanceId"] for i in _instances(asg, "lbt")}
    rid = asg.start_instance_refresh(AutoScalingGroupName="lbt", Preferences={
        "MinHealthyPercentage": 50, "MaxHealthyPercentage": 150, "InstanceWarmup": 1})["InstanceRefreshId"]
    samples = []
    done = _drive(asg, "lbt", rid, ENDED, samples)
    assert done["Status"] == "Successful", done
    assert (done["PercentageComplete"], done["InstancesToUpdate"]) == (100, 0)
    assert done["Preferences"]["MaxHealthyPercentage"] == 150 and done["Preferences"]["InstanceWarmup"] == 1
    for seen in samples:
        active = [i for i in seen if i["LifecycleState"] in ("Pending", "Pending:Wait", "InService")]
        assert len(active) <= 6, seen  # 150 % of 4
        assert sum(i["LifecycleState"] == "InService" for i in seen) >= 2, seen  # 50 % of 4
    assert max(len(s) for s in samples) > 4, "replacements launched before the old left"
    final = _instances(asg, "lbt")
    assert len(final) == 4 and not {i["InstanceId"] for i in final} & old
    gens = _generations(moto)
    assert gens["current"]["lbt"] == 1
    assert all(gens["instances"][i["InstanceId"]] == {"Generation": 1, "Refresh": rid} for i in final), gens
    assert asg.describe_auto_scaling_groups(AutoScalingGroupNames=["lbt"])["AutoScalingGroups"][0]["DesiredCapacity"] == 4


def test_a_rollback_replaces_what_the_refresh_launched_with_the_configuration_before(moto):
    asg = _group(moto, "rb", 3)
    old = {i["InstanceId"] for i in _instances(asg, "rb")}
    # 100 % of 100 %: one at a time, terminate first.
    rid = asg.start_instance_refresh(AutoScalingGroupName="rb", Preferences={
        "MinHealthyPercentage": 100, "MaxHealthyPercentage": 100, "InstanceWarmup": 0})["InstanceRefreshId"]
    samples = []
    _drive(asg, "rb", rid, ENDED, samples, stop=lambda r: r["PercentageComplete"] >= 33)
    assert max(len([i for i in s if i["LifecycleState"] != "Terminating:Wait"]) for s in samples) <= 3
    refreshed = {i["InstanceId"] for i in _instances(asg, "rb")} - old
    assert refreshed
    assert asg.rollback_instance_refresh(AutoScalingGroupName="rb")["InstanceRefreshId"] == rid
    done = _drive(asg, "rb", rid, ENDED, samples)
    assert done["Status"] == "RollbackSuccessful", done
    assert done["RollbackDetails"]["RollbackReason"] and done["RollbackDetails"]["PercentageCompleteOnRollback"] == 100
    final = {i["InstanceId"] for i in _instances(asg, "rb")}
    assert len(final) == 3 and not final & refreshed
    gens = _generations(moto)
    assert gens["current"]["rb"] == 0
    assert all(gens["instances"][i]["Generation"] == 0 for i in final), gens


def test_refresh_requests_answer_as_aws_does(moto):
    asg = _group(moto, "val", 1)
    for prefs in ({"MaxHealthyPercentage": 201}, {"MinHealthyPercentage": 101},
                  {"MinHealthyPercentage": 50, "MaxHealthyPercentage": 200}, {"CheckpointDelay": 10}):
        with pytest.raises(asg.exceptions.ClientError, match="ValidationError"):
            asg.start_instance_refresh(AutoScalingGroupName="val", Preferences=prefs)
    with pytest.raises(asg.exceptions.ClientError, match="ActiveInstanceRefreshNotFound"):
        asg.cancel_instance_refresh(AutoScalingGroupName="val")
    rid = asg.start_instance_refresh(AutoScalingGroupName="val", Preferences={
        "CheckpointPercentages": [100]})["InstanceRefreshId"]
    with pytest.raises(asg.exceptions.ClientError, match="InstanceRefreshInProgress"):
        asg.start_instance_refresh(AutoScalingGroupName="val")
    (r,) = asg.describe_instance_refreshes(AutoScalingGroupName="val")["InstanceRefreshes"]
    assert r["InstanceRefreshId"] == rid and r["Status"] in ("Pending", "InProgress")
    assert r["Preferences"]["MinHealthyPercentage"] == 90 and r["Preferences"]["CheckpointDelay"] == 3600
    assert asg.cancel_instance_refresh(AutoScalingGroupName="val")["InstanceRefreshId"] == rid
    done = _drive(asg, "val", rid, ENDED, [])
    assert done["Status"] == "Cancelled", done


def _watch_refresh(sim, rid, timeout):
    """Polls the refresh to its end; the fewest InService and the most instances the group had."""
    deadline = time.monotonic() + timeout
    fewest, most = 99, 0
    while True:
        states = [i["LifecycleState"] for i in sim.group_instances()]
        fewest, most = min(fewest, states.count("InService")), max(most, len(states))
        r = sim.describe_instance_refresh(rid)
        if r["Status"] in ENDED:
            return r, fewest, most
        assert time.monotonic() < deadline, f"refresh not ended in {timeout}s: {r}\n{sim.table()}"
        time.sleep(0.5)


def _server_version(sim, iid):
    def ask():
        try:
            return etcd.versions(sim.client_url(iid), timeout=5)["etcdserver"]
        except etcd.EtcdError:
            return None  # a TLS handshake cut off on a loaded machine: asked again
    return wait_for(f"{iid}'s version", 30, ask)


@pytest.mark.long(200)
def test_a_refresh_launching_before_terminating_rolls_the_cluster_to_3_7(simulation):
    v36, v37 = etcd.binary("3.6"), etcd.binary("3.7")
    sim = simulation(etcd_bin=v36)
    sim.scale(3)
    sim.wait_converged(3, timeout=180, label="bootstrap")
    sim.start_writer()
    old = {i["InstanceId"] for i in sim.group_instances()}
    sim.etcd_bin = v37
    rid = sim.start_instance_refresh(MinHealthyPercentage=100, MaxHealthyPercentage=200, InstanceWarmup=5)
    done, fewest, most = _watch_refresh(sim, rid, timeout=420)
    assert done["Status"] == "Successful", f"{done}\n{sim.table()}"
    assert (done["PercentageComplete"], done["InstancesToUpdate"]) == (100, 0)
    assert fewest >= 3, "the refresh took the group below 100 % in service"
    assert most > 3, "replacements launched before the old instances left"
    sim.wait_converged(3, timeout=180, label="after the refresh")
    live = {i["InstanceId"] for i in sim.group_instances()}
    assert not live & old
    assert {sim.instances[i].etcd_bin for i in live} == {v37}
    release = etcd.version_of(v37)
    assert {iid: _server_version(sim, iid) for iid in live} == {iid: release for iid in live}
    sim.writer.stop()
    assert sim.writer.lost() == []


@pytest.mark.long(200)
def test_a_refresh_paused_at_its_checkpoint_is_cancelled_there(simulation):
    v36, v37 = etcd.binary("3.6"), etcd.binary("3.7")
    sim = simulation(etcd_bin=v36)
    sim.scale(3)
    sim.wait_converged(3, timeout=180, label="bootstrap")
    old = {i["InstanceId"] for i in sim.group_instances()}
    sim.etcd_bin = v37
    rid = sim.start_instance_refresh(MinHealthyPercentage=100, MaxHealthyPercentage=200, InstanceWarmup=2,
                                     CheckpointPercentages=[50, 100], CheckpointDelay=3600)

    def paused():
        r = sim.describe_instance_refresh(rid)
        assert r["Status"] in ("Pending", "InProgress"), r
        return r if "checkpoint" in (r.get("StatusReason") or "") else None

    at = wait_for("the refresh at its checkpoint", 300, paused, every=0.5)
    # 50 % of 3 is 2 instances (rounded up): two replaced, one to go.
    assert (at["Status"], at["PercentageComplete"], at["InstancesToUpdate"]) == ("InProgress", 66, 1), at
    sim.wait_converged(3, timeout=180, label="at the checkpoint")
    assert sim.describe_instance_refresh(rid)["InstancesToUpdate"] == 1, "replacing past the checkpoint"
    assert sim.cancel_instance_refresh() == rid
    done = sim.wait_instance_refresh(rid, ENDED, timeout=120)
    assert done["Status"] == "Cancelled", done
    sim.wait_converged(3, timeout=180, label="cancelled")
    live = {i["InstanceId"] for i in sim.group_instances()}
    assert len(live & old) == 1, "the one not replaced stays"
    assert sorted(sim.instances[i].etcd_bin for i in live) == sorted([v36, v37, v37])
