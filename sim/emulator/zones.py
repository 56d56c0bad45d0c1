"""Availability Zones, which moto leaves to chance: each new instance goes to the group's zone
with the fewest instances (never an impaired one: its launches fail, the group launches
elsewhere); scale-in takes the oldest instance of the zone with the most, as the default
termination policy does. AZRebalance (launch before terminate) runs one step on request
(``POST /_sim/zones {"rebalance": group}``, routes.py); its terminate half on the timer.
"""

from __future__ import annotations

from moto.autoscaling import models as asg

from . import lifecycle

# Zones whose launches fail (an outage: the group launches elsewhere), set over /_sim/zones.
ZONES_IMPAIRED: set[str] = set()
LAUNCH_FAILURES: list[dict] = []
# Rebalances under way: their new instance, and the zone an instance leaves once it serves.
REBALANCING: list[dict] = []

_original_replace = asg.FakeAutoScalingGroup.replace_autoscaling_group_instances


def _zone(state) -> str:
    """An instance's zone (moto keeps its EC2 placement, whose `zone` it is)."""
    return getattr(state.availability_zone, "zone", state.availability_zone)


def zone_counts(group):
    """Active instances per zone of the group, in the group's order of zones."""
    counts = {z: 0 for z in group.availability_zones}
    for s in group.active_instances():
        counts[_zone(s)] = counts.get(_zone(s), 0) + 1
    return counts


def replace_autoscaling_group_instances(self, count_needed, propagated_tags):
    """Each new instance in the zone with the fewest, as Auto Scaling balances a group across its
    zones; never in an impaired zone (its launches fail, the group launches elsewhere)."""
    zones = self.availability_zones
    try:
        for _ in range(count_needed):
            counts = zone_counts(self)
            usable = [z for z in zones if z not in ZONES_IMPAIRED]
            if not usable:
                LAUNCH_FAILURES.append({"group": self.name, "why": "every zone impaired"})
                break
            zone = min(usable, key=lambda z: (counts.get(z, 0), zones.index(z)))
            self.availability_zones = [zone]
            before = set(id(s) for s in self.instance_states)
            _original_replace(self, 1, propagated_tags)
            for state in self.instance_states:
                if id(state) not in before:
                    lifecycle.hold(self, state, lifecycle.LAUNCHING)
    finally:
        self.availability_zones = zones


def set_desired_capacity(self, new_capacity):
    self.desired_capacity = self.min_size if new_capacity is None else new_capacity
    active = self.active_instances()
    delta = (self.desired_capacity or 0) - len(active)
    if delta > 0:
        self.replace_autoscaling_group_instances(delta, self.get_propagated_tags())
    elif delta < 0:
        # Auto Scaling's default termination policy: from the zone with the most instances,
        # then the oldest (here: the first launched).
        for _ in range(-delta):
            candidates = [s for s in self.active_instances() if not s.protected_from_scale_in]
            if not candidates:
                break
            counts = zone_counts(self)
            state = max(candidates, key=lambda s: (counts.get(_zone(s), 0), -candidates.index(s)))
            lifecycle.begin_termination(self, state)
    if self.name in self.autoscaling_backend.autoscaling_groups:
        self.autoscaling_backend.update_attached_elbs(self.name)
        self.autoscaling_backend.update_attached_target_groups(self.name)


def rebalance(group_name):
    """AZRebalance, launch before terminate: one instance launched in the zone with the fewest
    (desired capacity one over), and once it is in service, the oldest of the zone with the most
    terminated (desired back), as Auto Scaling rights an imbalance after a zone's outage
    (https://docs.aws.amazon.com/autoscaling/ec2/userguide/auto-scaling-benefits.html). Nothing
    when the zones are within one of each other."""
    backend = asg.autoscaling_backends[lifecycle.ACCOUNT][lifecycle.REGION]
    group = backend.autoscaling_groups[group_name]
    counts = {z: n for z, n in zone_counts(group).items() if z not in ZONES_IMPAIRED}
    if not counts or max(counts.values()) - min(counts.values()) <= 1:
        return None
    before = {s.instance.id for s in group.instance_states}
    group.desired_capacity += 1
    group.replace_autoscaling_group_instances(1, group.get_propagated_tags())
    new = [s for s in group.instance_states if s.instance.id not in before]
    if not new:
        group.desired_capacity -= 1
        return None
    largest = max(counts, key=lambda z: counts[z])
    REBALANCING.append({"group": group, "new": new[0], "zone": largest})
    return new[0].instance.id


def rebalance_step():
    """The terminate half of each rebalance whose new instance is in service."""
    for r in [r for r in REBALANCING if r["new"].lifecycle_state == "InService"]:
        REBALANCING.remove(r)
        group = r["group"]
        old = [s for s in group.active_instances() if _zone(s) == r["zone"] and s is not r["new"]]
        if old:
            group.desired_capacity -= 1
            lifecycle.begin_termination(group, old[0])
        else:
            group.desired_capacity -= 1
            group.set_desired_capacity(group.desired_capacity)


def install():
    asg.FakeAutoScalingGroup.replace_autoscaling_group_instances = replace_autoscaling_group_instances
    asg.FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity
