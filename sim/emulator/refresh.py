"""Instance refresh, which moto does not have (it only lists ``InstanceRefresh`` among the
processes SuspendProcesses takes), as AWS documents it
(https://docs.aws.amazon.com/autoscaling/ec2/userguide/asg-instance-refresh.html, the API's
StartInstanceRefresh, DescribeInstanceRefreshes, CancelInstanceRefresh, RollbackInstanceRefresh):

- ``StartInstanceRefresh`` (Strategy ``Rolling``) with ``Preferences``: ``MinHealthyPercentage``
  (0-100, default 90), ``MaxHealthyPercentage`` (100-200, default 100; at most 100 above the
  minimum), ``InstanceWarmup`` (default: the group's health check grace period),
  ``CheckpointPercentages`` and ``CheckpointDelay`` (default 3600 s once checkpoints are given;
  a delay without checkpoints is refused), ``AutoRollback``. ``SkipMatching`` is accepted and
  echoed but matches nothing: the emulator does not see the simulation's configuration (its etcd
  binary), and every refresh here brings a new one. A second refresh while one runs:
  ``InstanceRefreshInProgress``.
- Progress on the emulator's timer: the instances active at the start are the old ones. Each step
  keeps at least MinHealthyPercentage of the desired capacity healthy (rounded up), where an
  instance launched since the start counts only once it is InService, Healthy and its warmup has
  passed since it entered InService; it launches up to MaxHealthyPercentage of the desired
  capacity (rounded down) first, and terminates old instances as far as the minimum allows. When
  neither is possible and nothing is under way, one old instance is terminated (AWS: a minimum of
  100 % replaces one instance at a time). Launches go through the launch hook (``Pending:Wait``)
  and terminations through the terminate hook (``Terminating:Wait``), exactly as scale events do
  (lifecycle.py, zones.py): the function completes them. While launched replacements are above
  the desired capacity, the group's own capacity arithmetic counts them in (nothing scales them
  in); the desired capacity itself never changes.
- Checkpoints: the refresh replaces no more than a checkpoint's share of the old instances, and
  once that share is updated (replaced by a warmed-up instance) it waits ``CheckpointDelay``
  (status InProgress, the reason naming the checkpoint). No checkpoint event is emitted.
- ``CancelInstanceRefresh``: ``Cancelling`` until the launches and terminations it started are
  done (the function completes them), then ``Cancelled``. At any end the group settles at its
  desired capacity: instances above it scaled in by the default termination policy (through the
  terminate hook), a missing one launched.
- ``RollbackInstanceRefresh`` (or ``AutoRollback`` on failure): the group's configuration goes
  back to the one before the refresh and every instance launched since the refresh started is
  replaced by the same rules, ``RollbackInProgress`` then ``RollbackSuccessful``.
- A refresh fails (``Failed``) when its launches keep leaving before they serve (abandoned) or
  its group is deleted.

Configurations are **generations**: every launch records the group's current generation (0 until
a refresh); a refresh gives the group a new one, a rollback the one before it. ``GET
/_sim/generations`` (routes.py) answers ``{"next": the generation the next refresh gets,
"current": {group: generation}, "instances": {id: {"Generation": g, "Refresh": id or null}}}``;
the simulation maps a generation to an etcd binary (sim/aws_side.py).
"""

from __future__ import annotations

import math
import time
import uuid
from datetime import datetime, timezone

from moto.autoscaling import models as asg
from moto.autoscaling import responses as asg_responses
from moto.autoscaling.exceptions import AutoscalingClientError, ValidationError
from moto.core.responses import ActionResult

from . import lifecycle, zones

RUNNING = ("Pending", "InProgress", "Cancelling", "RollbackInProgress")
# group name -> its refreshes, newest first
REFRESHES: dict[str, list["Refresh"]] = {}
GENERATION = {"next": 1}
# group name -> the generation its launches get
CURRENT: dict[str, int] = {}
# instance id -> {"Generation": g, "Refresh": the refresh that launched it, or None}
LAUNCHES: dict[str, dict] = {}


class InstanceRefreshInProgress(AutoscalingClientError):
    code = "InstanceRefreshInProgress"


class ActiveInstanceRefreshNotFound(AutoscalingClientError):
    code = "ActiveInstanceRefreshNotFound"


def _listed(value) -> list:
    """A list parameter, as moto's parsing gives it (a list, or {"member": [...]})."""
    if isinstance(value, dict):
        value = value.get("member", list(value.values()))
    return list(value or [])


def _preferences(raw: dict | None, group) -> dict:
    """The preferences with AWS's defaults, refused as AWS refuses them."""
    raw = dict(raw or {})
    low = int(raw.get("MinHealthyPercentage", 90))
    high = int(raw.get("MaxHealthyPercentage", 100))
    if not 0 <= low <= 100:
        raise ValidationError("MinHealthyPercentage must be between 0 and 100")
    if not 100 <= high <= 200:
        raise ValidationError("MaxHealthyPercentage must be between 100 and 200")
    if high - low > 100:
        raise ValidationError("The difference between MaxHealthyPercentage and MinHealthyPercentage "
                              "cannot be greater than 100")
    checkpoints = [int(c) for c in _listed(raw.get("CheckpointPercentages"))]
    if "CheckpointDelay" in raw and not checkpoints:
        raise ValidationError("CheckpointDelay requires CheckpointPercentages")
    if checkpoints != sorted(set(checkpoints)) or any(not 1 <= c <= 100 for c in checkpoints):
        raise ValidationError("CheckpointPercentages must be unique, ascending, from 1 to 100")
    warmup = raw.get("InstanceWarmup")
    if warmup is None:
        warmup = getattr(group, "health_check_grace_period", 0) or 0
    out = {"MinHealthyPercentage": low, "MaxHealthyPercentage": high, "InstanceWarmup": int(warmup),
           "SkipMatching": bool(raw.get("SkipMatching", False)),
           "AutoRollback": bool(raw.get("AutoRollback", False))}
    if checkpoints:
        out["CheckpointPercentages"] = checkpoints
        out["CheckpointDelay"] = int(raw.get("CheckpointDelay", 3600))
    return out


class Pass:
    """One pass of replacements: the refresh's, or its rollback's."""

    def __init__(self, group, targets, checkpoints):
        self.initial = {s.instance.id for s in group.active_instances()}
        self.targets = {s.instance.id for s in targets}
        self.total = len(self.targets)
        self.launched: set[str] = set()
        self.terminating: set[str] = set()
        self.in_service_at: dict[str, float] = {}  # launched since the pass began: first seen InService
        self.checkpoints = list(checkpoints)
        self.paused_until: float | None = None
        self.failed_launches = 0
        self.updated = 0
        self.started = datetime.now(timezone.utc)


class Refresh:
    def __init__(self, group, preferences: dict):
        self.id = str(uuid.uuid4())
        self.group_name = group.name
        self.status, self.reason = "Pending", None
        self.start, self.end = datetime.now(timezone.utc), None
        self.prefs = preferences
        self.generation = GENERATION["next"]
        GENERATION["next"] += 1
        self.previous = CURRENT.get(group.name, 0)
        CURRENT[group.name] = self.generation
        self.forward = Pass(group, group.active_instances(), preferences.get("CheckpointPercentages", []))
        self.rollback: Pass | None = None
        self.rollback_reason: str | None = None

    @property
    def current(self) -> Pass:
        return self.rollback or self.forward

    def describe(self) -> dict:
        out = {"InstanceRefreshId": self.id, "AutoScalingGroupName": self.group_name, "Status": self.status,
               "StartTime": self.start, "Strategy": "Rolling", "Preferences": dict(self.prefs)}
        out.update(_progress(self.forward))
        out["ProgressDetails"] = {"LivePoolProgress": _progress(self.forward)}
        if self.reason:
            out["StatusReason"] = self.reason
        if self.end:
            out["EndTime"] = self.end
        if self.rollback:
            done = _progress(self.rollback)
            out["RollbackDetails"] = {
                "RollbackReason": self.rollback_reason, "RollbackStartTime": self.rollback.started,
                "PercentageCompleteOnRollback": done["PercentageComplete"],
                "InstancesToUpdateOnRollback": done["InstancesToUpdate"],
                "ProgressDetailsOnRollback": {"LivePoolProgress": done}}
        return out


def _progress(p: Pass) -> dict:
    if not p.total:
        return {"PercentageComplete": 100, "InstancesToUpdate": 0}
    return {"PercentageComplete": int(100 * p.updated / p.total), "InstancesToUpdate": p.total - p.updated}


def _backend():
    return asg.autoscaling_backends[lifecycle.ACCOUNT][lifecycle.REGION]


def running(group_name: str) -> Refresh | None:
    for r in REFRESHES.get(group_name, []):
        if r.status in RUNNING:
            return r
    return None


# --- the replacements, one step per timer tick ----------------------------------------------------


def _ready(r: Refresh, p: Pass, state, now: float) -> bool:
    """In service and healthy; launched since the pass began: also warmed up."""
    if state.lifecycle_state != "InService" or state.health_status != "Healthy":
        return False
    iid = state.instance.id
    if iid in p.initial:
        return True
    since = p.in_service_at.get(iid)
    return since is not None and now - since >= r.prefs["InstanceWarmup"]


def _observe(p: Pass, group, now: float):
    """When launches entered InService; launches that left before serving; terminations done."""
    active = {s.instance.id: s for s in group.active_instances()}
    for iid, s in active.items():
        if iid not in p.initial and s.lifecycle_state == "InService":
            p.in_service_at.setdefault(iid, now)
    for iid in [i for i in p.launched if i not in active and i not in p.in_service_at]:
        p.launched.discard(iid)
        p.failed_launches += 1
    present = {s.instance.id for s in group.instance_states}
    p.terminating &= present


def _counts(r: Refresh, p: Pass, group, now: float) -> dict:
    active = group.active_instances()
    old = [s for s in active if s.instance.id in p.targets]
    new = [s for s in active if s.instance.id not in p.initial]
    ready = [s for s in active if _ready(r, p, s, now)]
    ready_new = [s for s in new if s in ready]
    p.updated = max(0, min(p.total - len(old), len(ready_new)))
    busy = bool(p.terminating) or len(ready_new) < len(new)
    return {"active": active, "old": old, "new": new, "ready": ready, "busy": busy}


def _cap(p: Pass) -> int:
    """How many of the old instances this pass may have replaced before its next checkpoint."""
    if not p.checkpoints:
        return p.total
    return math.ceil(p.checkpoints[0] * p.total / 100)


def _launch(r: Refresh, p: Pass, group, n: int):
    before = {s.instance.id for s in group.instance_states}
    group.replace_autoscaling_group_instances(n, group.get_propagated_tags())
    for s in group.instance_states:
        if s.instance.id not in before:
            p.launched.add(s.instance.id)
            LAUNCHES.setdefault(s.instance.id, {})["Refresh"] = r.id


def _terminate(p: Pass, group, old: list, n: int):
    """`n` old instances through the terminate hook: from the zone with the most, then the oldest."""
    for _ in range(n):
        candidates = [s for s in old if s.instance.id not in p.terminating]
        if not candidates:
            return
        counts = zones.zone_counts(group)
        state = max(candidates, key=lambda s: (counts.get(zones._zone(s), 0), -candidates.index(s)))
        p.terminating.add(state.instance.id)
        lifecycle.begin_termination(group, state)


def _replace(r: Refresh, p: Pass, group, c: dict):
    """One batch: launches up to the maximum, terminations down to the minimum, within the
    checkpoint; one at a time when the percentages leave no room."""
    desired = group.desired_capacity or 0
    low = math.ceil(desired * r.prefs["MinHealthyPercentage"] / 100)
    high = max(desired, math.floor(desired * r.prefs["MaxHealthyPercentage"] / 100))
    cap = _cap(p)
    active, old, new = c["active"], c["old"], c["new"]
    launch = min(high - len(active), desired - len(new), cap - len(new))
    terminate = min(len(c["ready"]) - low, len(old), cap - (p.total - len(old)))
    if launch <= 0 and terminate <= 0 and not c["busy"] and old and cap > p.total - len(old):
        terminate = 1
    if launch > 0:
        _launch(r, p, group, launch)
    if terminate > 0:
        _terminate(p, group, old, terminate)


def _finish(r: Refresh, status: str, reason: str | None = None, group=None):
    """The end; the group settled at its desired capacity (replacements launched above it, say
    when it was scaled in meanwhile, scaled in through the terminate hook; a missing one launched)."""
    r.status, r.reason, r.end = status, reason, datetime.now(timezone.utc)
    if group is not None:
        group.set_desired_capacity(group.desired_capacity)


def _in_flight(p: Pass, group) -> bool:
    pending = {s.instance.id for s in group.instance_states if s.lifecycle_state.startswith("Pending")}
    return bool(p.terminating) or bool(p.launched & pending)


def _cancelled(r: Refresh, group):
    """Cancelling: once what it started is done, Cancelled, and the group back to its desired
    capacity (launched replacements above it scaled in, through the terminate hook; an old
    instance terminated before its replacement launched replaced)."""
    if _in_flight(r.current, group):
        return
    _finish(r, "Cancelled", "Instance refresh cancelled: instances already replaced were kept.", group)


def _pause_at_checkpoint(r: Refresh, p: Pass, now: float) -> bool:
    """Waiting at a checkpoint (True), or past it."""
    if p.paused_until is not None:
        if now < p.paused_until:
            return True
        p.paused_until, r.reason = None, None
        p.checkpoints.pop(0)
    if p.checkpoints and p.checkpoints[0] < 100 and p.updated >= _cap(p):
        delay = r.prefs["CheckpointDelay"]
        p.paused_until = now + delay
        r.reason = (f"Waiting at checkpoint {p.checkpoints[0]}%: {p.updated} of {p.total} instances "
                    f"replaced; the checkpoint delay of {delay} seconds must pass before continuing.")
        return True
    return False


def _step(r: Refresh, now: float):
    """One refresh one step further: Pending to InProgress, a cancel or a failure concluded,
    the end, a checkpoint's wait, or a batch of replacements."""
    group = _backend().autoscaling_groups.get(r.group_name)
    if group is None:
        _finish(r, "Failed", "The Auto Scaling group was deleted.")
        return
    if r.status == "Pending":
        r.status = "InProgress"
    p = r.current
    _observe(p, group, now)
    c = _counts(r, p, group, now)
    if r.status == "Cancelling":
        _cancelled(r, group)
        return
    if p.failed_launches >= max(3, 2 * p.total):
        reason = f"{p.failed_launches} launched instances left before they were in service."
        if r.rollback is None and r.prefs["AutoRollback"]:
            _start_rollback(r, group, reason)
        else:
            _finish(r, "RollbackFailed" if r.rollback else "Failed", reason, group)
        return
    if not c["old"] and not c["busy"]:
        p.updated = p.total
        _finish(r, "RollbackSuccessful" if r.rollback else "Successful", None, group)
        return
    if _pause_at_checkpoint(r, p, now):
        return
    suspended = {s["ProcessName"] for s in group.suspended_processes}
    if "InstanceRefresh" in suspended:
        return
    _replace(r, p, group, c)


def step():
    """Every running refresh one step further (the timer's work; under LOCK)."""
    now = time.monotonic()
    for refreshes in list(REFRESHES.values()):
        for r in [r for r in refreshes if r.status in RUNNING]:
            _step(r, now)


def _start_rollback(r: Refresh, group, reason: str):
    """The group's configuration back to the one before the refresh, and every instance
    launched since it started replaced."""
    CURRENT[group.name] = r.previous
    targets = [s for s in group.active_instances()
               if LAUNCHES.get(s.instance.id, {}).get("Generation") == r.generation]
    r.rollback = Pass(group, targets, [])
    r.rollback.terminating = set(r.forward.terminating)
    r.rollback_reason = reason
    r.status, r.reason = "RollbackInProgress", None


# --- moto's classes extended ----------------------------------------------------------------------

_inner_replace = None
_inner_set_desired = None


def replace_autoscaling_group_instances(self, count_needed, propagated_tags):
    """Every launch records the group's current generation."""
    before = {s.instance.id for s in self.instance_states}
    _inner_replace(self, count_needed, propagated_tags)
    for s in self.instance_states:
        if s.instance.id not in before:
            LAUNCHES[s.instance.id] = {"Generation": CURRENT.get(self.name, 0), "Refresh": None}


def _surplus(r: Refresh, group) -> int:
    """Replacements a refresh launched above the desired capacity, still covering old ones."""
    p = r.current
    active = group.active_instances()
    launched = [s for s in active if s.instance.id in p.launched]
    old = [s for s in active if s.instance.id in p.targets]
    return max(0, min(len(launched), len(old), len(active) - (group.desired_capacity or 0)))


def set_desired_capacity(self, new_capacity):
    """While a refresh runs, its launched replacements above the desired capacity are not scaled in."""
    r = running(self.name)
    surplus = _surplus(r, self) if r is not None else 0
    if not surplus:
        return _inner_set_desired(self, new_capacity)
    target = self.min_size if new_capacity is None else new_capacity
    _inner_set_desired(self, target + surplus)
    self.desired_capacity = target


def _group(self):
    name = self._get_param("AutoScalingGroupName")
    group = self.autoscaling_backend.autoscaling_groups.get(name)
    if group is None:
        raise ValidationError(f"AutoScalingGroup name not found - AutoScalingGroup '{name}' not found")
    return group


def start_instance_refresh(self):
    group = _group(self)
    strategy = self._get_param("Strategy") or "Rolling"
    if strategy != "Rolling":
        raise ValidationError(f"Unsupported strategy: {strategy}")
    if running(group.name) is not None:
        raise InstanceRefreshInProgress("An Instance Refresh is already in progress and blocks the "
                                        "execution of this Instance Refresh.")
    r = Refresh(group, _preferences(self._get_param("Preferences"), group))
    REFRESHES.setdefault(group.name, []).insert(0, r)
    return ActionResult({"InstanceRefreshId": r.id})


def describe_instance_refreshes(self):
    group = _group(self)
    ids = _listed(self._get_param("InstanceRefreshIds"))
    found = [r.describe() for r in REFRESHES.get(group.name, []) if not ids or r.id in ids]
    limit = int(self._get_param("MaxRecords") or 50)
    return ActionResult({"InstanceRefreshes": found[:limit]})


def _not_found(group):
    return ActiveInstanceRefreshNotFound(f"No in progress or pending Instance Refresh found for Auto "
                                         f"Scaling group {group.name}")


def cancel_instance_refresh(self):
    group = _group(self)
    r = running(group.name)
    if r is None or r.status not in ("Pending", "InProgress"):
        raise _not_found(group)
    r.status, r.reason = "Cancelling", "Cancelling: the launches and terminations under way finish."
    return ActionResult({"InstanceRefreshId": r.id})


def rollback_instance_refresh(self):
    group = _group(self)
    r = running(group.name)
    if r is None or r.status not in ("Pending", "InProgress"):
        raise _not_found(group)
    _start_rollback(r, group, "Rollback requested (RollbackInstanceRefresh).")
    return ActionResult({"InstanceRefreshId": r.id})


def generations() -> dict:
    """What /_sim/generations answers (under LOCK)."""
    return {"next": GENERATION["next"], "current": dict(CURRENT), "instances": LAUNCHES}


def install():
    """After zones.install: launches record their generation around zones' placement."""
    global _inner_replace, _inner_set_desired
    _inner_replace = asg.FakeAutoScalingGroup.replace_autoscaling_group_instances
    _inner_set_desired = asg.FakeAutoScalingGroup.set_desired_capacity
    asg.FakeAutoScalingGroup.replace_autoscaling_group_instances = replace_autoscaling_group_instances
    asg.FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity
    responses = asg_responses.AutoScalingResponse
    responses.start_instance_refresh = start_instance_refresh
    responses.describe_instance_refreshes = describe_instance_refreshes
    responses.cancel_instance_refresh = cancel_instance_refresh
    responses.rollback_instance_refresh = rollback_instance_refresh
