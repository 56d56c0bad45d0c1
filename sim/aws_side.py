"""Simulation's AWS side: the emulator's feeds and controls (/_sim/*: events, zones, the fault
layer; sim/emulator/) and the Auto Scaling, EC2 and SSM calls a test makes, through the
simulation's boto3 clients.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter


class AwsSide:
    """The emulator at ``self.endpoint`` and the boto3 clients ``self.asg``, ``self.ec2``,
    ``self.ssm`` made by Simulation.start (sim/world.py)."""

    def drain(self, feed: str) -> list:
        with urllib.request.urlopen(f"{self.endpoint}/_sim/{feed}", timeout=5) as r:
            return json.loads(r.read())

    def zone_of(self) -> dict[str, str]:
        """Each of the group's instances' Availability Zone."""
        return {i["InstanceId"]: i["AvailabilityZone"] for i in self.group_instances()}

    def _zones(self, spec: dict) -> dict:
        req = urllib.request.Request(f"{self.endpoint}/_sim/zones", data=json.dumps(spec).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def lose_zone(self, zone: str) -> list[str]:
        """A zone's outage: every instance there gone at once (its etcd killed; Auto Scaling
        still lists it, as it does until its health check fails), EC2 failing every
        DescribeInstances that names one of them, the group's launches there failing (it
        launches elsewhere). The instances it took."""
        lost = [iid for iid, z in self.zone_of().items() if z == zone]
        impaired = set(self._zones({})["impaired"]) | {zone}
        self._zones({"impaired": sorted(impaired)})
        self.faults(impaired=sorted(set(self._impaired) | set(lost)))
        self._impaired = sorted(set(self._impaired) | set(lost))
        for iid in lost:
            self.kill_instance(iid)
        return lost

    def restore_zone(self, zone: str):
        """The zone back: launches there succeed again (its lost instances stay lost)."""
        impaired = set(self._zones({})["impaired"]) - {zone}
        self._zones({"impaired": sorted(impaired)})

    def rebalance(self) -> str | None:
        """One AZRebalance step, launch before terminate (the emulator's `rebalance`): the
        instance it launched, or None when the zones are balanced."""
        return self._zones({"rebalance": self.group})["launched"]

    def zone_counts(self) -> dict[str, int]:
        return self._zones({"group": self.group})["zones"]

    def global_timeout_cap(self, seconds: float):
        """Lowers the most a held lifecycle action lasts (AWS: 48 h) for the actions held from
        now on."""
        self._zones({"global_timeout_cap": seconds})

    def global_timeout_scale(self, factor: float):
        """Every global timeout of the actions held from now on times `factor`: hours of AWS's
        in minutes of a test (heartbeat timeouts keep their real length)."""
        self._zones({"global_timeout_scale": factor})

    def faults(self, rules: list[dict] | None = None, **settings):
        """Sets the fault layer between the function (and the CLI) and the emulator
        (sim/faults.py): its `rules`, which replace the ones before, and any of `seed`,
        `impaired`, `unknown_for`. ``sim.faults([])`` ends every fault."""
        body = dict(settings)
        if rules is not None:
            body["rules"] = rules
        req = urllib.request.Request(f"{self.endpoint}/_sim/faults", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            r.read()

    def fault_report(self, clear: bool = False) -> dict:
        """What the fault layer did: ``{"faults": {"ssm.PutParameter.lose": n, ...}, "calls":
        {"function.ssm.PutParameter": n, ...}, "kills": n}``."""
        url = f"{self.endpoint}/_sim/faults" + ("?clear=1" if clear else "")
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())

    # --- instance refresh (sim/emulator/refresh.py) --------------------------------------------
    #
    # The emulator records each launch's configuration generation; the simulation maps the
    # generations a refresh brings to etcd binaries (`launch_bins`): the refresh's own to
    # `etcd_bin` at its start, the one before it (what a rollback goes back to) to the etcd the
    # group's instances ran then. An instance a refresh (or its rollback) launched boots with its
    # generation's binary; every other launch with `etcd_bin`, as before.

    def generations(self) -> dict:
        """``{"next", "current": {group: g}, "instances": {id: {"Generation", "Refresh"}}}``."""
        with urllib.request.urlopen(f"{self.endpoint}/_sim/generations", timeout=5) as r:
            return json.loads(r.read())

    def launch_bin(self, iid: str) -> str:
        """The etcd an instance boots with: its generation's if a refresh launched it."""
        launch = self.generations()["instances"].get(iid) or {}
        if launch.get("Refresh") and launch.get("Generation") in self.launch_bins:
            return self.launch_bins[launch["Generation"]]
        return self.etcd_bin

    def start_instance_refresh(self, **preferences) -> str:
        """StartInstanceRefresh of the group with these Preferences (``MinHealthyPercentage=100``,
        ...): its instances replaced by ones booting `etcd_bin`. The refresh's id."""
        gens = self.generations()
        ids = [i["InstanceId"] for i in self.group_instances()]
        with self.lock:
            running = [self.instances[i].etcd_bin for i in ids if i in self.instances and self.instances[i].etcd_bin]
        old = Counter(running).most_common(1)[0][0] if running else self.etcd_bin
        self.launch_bins[gens["current"].get(self.group, 0)] = old
        self.launch_bins[gens["next"]] = self.etcd_bin
        self.refresh_from = old
        r = self.asg.start_instance_refresh(AutoScalingGroupName=self.group, Preferences=preferences)
        return r["InstanceRefreshId"]

    def describe_instance_refresh(self, refresh_id: str) -> dict:
        r = self.asg.describe_instance_refreshes(AutoScalingGroupName=self.group, InstanceRefreshIds=[refresh_id])
        return r["InstanceRefreshes"][0]

    def cancel_instance_refresh(self) -> str:
        return self.asg.cancel_instance_refresh(AutoScalingGroupName=self.group)["InstanceRefreshId"]

    def rollback_instance_refresh(self) -> str:
        """The refresh rolled back: the group's configuration is the one before it again (its
        etcd: `etcd_bin` goes back too), the instances it launched replaced."""
        self.etcd_bin = self.refresh_from or self.etcd_bin
        return self.asg.rollback_instance_refresh(AutoScalingGroupName=self.group)["InstanceRefreshId"]

    def wait_instance_refresh(self, refresh_id: str, statuses: tuple[str, ...], timeout: float = 300) -> dict:
        """Polls the refresh until its status is one of `statuses`; its description."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.describe_instance_refresh(refresh_id)
            if found["Status"] in statuses:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"instance refresh {refresh_id} still {found['Status']} after "
                                     f"{timeout:.0f}s (wanted {statuses}): {found}")
            time.sleep(0.5)

    def create_group(self, name: str, desired: int):
        lt = f"{name}-lt"
        self.ec2.create_launch_template(LaunchTemplateName=lt, LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": "t3.small"})
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=name, LaunchTemplate={"LaunchTemplateName": lt},
            MinSize=0, MaxSize=20, DesiredCapacity=0, AvailabilityZones=self.zones)
        self.asg.put_lifecycle_hook(AutoScalingGroupName=name, LifecycleHookName=self.hooks[0],
                                    LifecycleTransition="autoscaling:EC2_INSTANCE_LAUNCHING",
                                    HeartbeatTimeout=self.hook_timeout, DefaultResult="ABANDON")
        self.asg.put_lifecycle_hook(AutoScalingGroupName=name, LifecycleHookName=self.hooks[1],
                                    LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
                                    HeartbeatTimeout=self.hook_timeout, DefaultResult="CONTINUE")
        if desired:
            self.scale(desired, group=name)

    def scale(self, desired: int, group: str | None = None):
        self.asg.set_desired_capacity(AutoScalingGroupName=group or self.group, DesiredCapacity=desired)

    def terminate(self, instance_id: str, decrement: bool = False):
        self.asg.terminate_instance_in_auto_scaling_group(InstanceId=instance_id,
                                                          ShouldDecrementDesiredCapacity=decrement)

    def detach(self, instance_id: str):
        """Take an instance out of the group with no hook and no event, and kill its etcd."""
        self.asg.detach_instances(AutoScalingGroupName=self.group, InstanceIds=[instance_id],
                                  ShouldDecrementDesiredCapacity=True)
        self.kill_instance(instance_id)

    def describe_group(self, group: str | None = None) -> dict:
        g = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group or self.group])
        return g["AutoScalingGroups"][0]

    def group_instances(self, group: str | None = None) -> list[dict]:
        return self.describe_group(group)["Instances"]

    def parameters(self) -> dict[str, str]:
        out = {}
        for page in self.ssm.get_paginator("get_parameters_by_path").paginate(Path="/", Recursive=True):
            for p in page["Parameters"]:
                out[p["Name"]] = p["Value"]
        return out
