"""Auto Scaling's lifecycle, which moto stores but ignores (instances go straight to InService
and vanish at once on termination), following AWS's semantics (shared/reference/aws-lifecycle.md):

- With a launch hook, a new instance waits in ``Pending:Wait``; with a terminate hook, a leaving
  one waits in ``Terminating:Wait`` (scale-in, TerminateInstanceInAutoScalingGroup, ABANDON of a
  launch). Each wait gets a token and one EventBridge event, in exactly the shape of ``events/``.
- ``CompleteLifecycleAction`` (by token or instance id) and ``RecordLifecycleActionHeartbeat``
  answer like AWS, including ``ValidationError`` "No active Lifecycle Action found ..." for an
  action that is no longer held.
- A held action whose heartbeat timeout passes gets the hook's ``DefaultResult``.
- Each held action also ends at its global timeout, the lesser of 48 h and 100 heartbeat
  timeouts, whatever its heartbeats (``/_sim/lapsed`` marks it ``"Global": true``).
- ``PutLifecycleHook`` emits the hook's ``autoscaling:TEST_NOTIFICATION``.
- Desired capacity counts Pending and InService instances, so held instances are not replaced.
- ``SetInstanceHealth`` with ``HealthStatus=Unhealthy`` on an ``InService`` instance replaces it
  as AWS's health check would: the instance leaves through the terminate hook (``Terminating:Wait``,
  a token, one EventBridge event exactly like a scale-in termination) and a replacement launches
  at once through the launch hook, so desired capacity holds. Every call is recorded.
- ``DescribeLifecycleHooks`` is moto's own (it answers with the hooks stored above).

The records here (events, terminations, health calls, lapsed and ended holds) are what the
routes of routes.py drain. LOCK is the emulator's one lock: every request (routes.py) and the
timer (sim/moto_lifecycle.py) take it, so they never interleave.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timezone

from moto.autoscaling import models as asg
from moto.autoscaling import responses as asg_responses
from moto.autoscaling.exceptions import ValidationError
from moto.core.responses import EmptyResult

LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
ACTIVE = ("Pending", "Pending:Wait", "Pending:Proceed", "InService")

LOCK = threading.RLock()
# The simulation's one account and Region.
ACCOUNT, REGION = "123456789012", "us-east-1"
EVENTS: list[dict] = []
TERMINATED: list[str] = []
HEALTH: list[dict] = []
# Held actions whose heartbeat timeout passed (their hook's DefaultResult was applied).
LAPSED: list[dict] = []
# Every held action once it ended: when it began, its heartbeats, when and how it ended.
HOLDS: list[dict] = []
# The most a held action lasts (AWS: 48 h), lowered over /_sim/zones {"global_timeout_cap": s};
# and a factor on every global timeout ({"global_timeout_scale": f}: 0.004 makes 48 h 691 s).
GLOBAL_TIMEOUT_CAP = [48 * 3600]
GLOBAL_TIMEOUT_SCALE = [1.0]
# (group name, instance id) -> pending action
ACTIONS: dict[tuple[str, str], "Action"] = {}


class Action:
    def __init__(self, group, state, hook):
        self.group = group
        self.state = state
        self.hook = hook
        self.token = str(uuid.uuid4())
        self.deadline = time.monotonic() + hook.heartbeat_timeout
        # Its global timeout: "the lesser of 48 hours or 100 times the heartbeat timeout",
        # whatever the heartbeats (GLOBAL_TIMEOUT_CAP lowers the 48 h for a test):
        # https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_LifecycleHook.html
        self.global_deadline = time.monotonic() + GLOBAL_TIMEOUT_SCALE[0] * min(
            GLOBAL_TIMEOUT_CAP[0], 100 * hook.heartbeat_timeout)
        # For the simulation's record of holds (/_sim/holds): when it began, each heartbeat.
        self.started = time.time()
        self.beats: list[float] = []


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


DETAIL_TYPES = {
    LAUNCHING: "EC2 Instance-launch Lifecycle Action",
    TERMINATING: "EC2 Instance-terminate Lifecycle Action",
}


def _emit(group, transition, detail):
    """One EventBridge event of the group's, in the shape of events/."""
    EVENTS.append(
        {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": DETAIL_TYPES[transition],
            "source": "aws.autoscaling",
            "account": group.account_id,
            "time": _now(),
            "region": group.region,
            "resources": [group.arn],
            "detail": detail,
        }
    )


def _event(group, hook, instance_id, token):
    launching = hook.lifecycle_transition == LAUNCHING
    origin, destination = ("EC2", "AutoScalingGroup") if launching else ("AutoScalingGroup", "EC2")
    _emit(group, hook.lifecycle_transition, {
        "LifecycleActionToken": token,
        "AutoScalingGroupName": group.name,
        "LifecycleHookName": hook.name,
        "EC2InstanceId": instance_id,
        "LifecycleTransition": hook.lifecycle_transition,
        "Origin": origin,
        "Destination": destination,
    })


def _hook(group, transition):
    backend = group.autoscaling_backend
    for hook in backend.lifecycle_hooks.values():
        if hook.auto_scaling_group_name == group.name and hook.lifecycle_transition == transition:
            return hook
    return None


def hold(group, state, transition):
    hook = _hook(group, transition)
    if hook is None:
        return False
    action = Action(group, state, hook)
    ACTIONS[(group.name, state.instance.id)] = action
    state.lifecycle_state = "Pending:Wait" if transition == LAUNCHING else "Terminating:Wait"
    _event(group, hook, state.instance.id, action.token)
    return True


def begin_termination(group, state):
    ACTIONS.pop((group.name, state.instance.id), None)
    if not hold(group, state, TERMINATING):
        _finish_termination(group, state)


def _finish_termination(group, state):
    ACTIONS.pop((group.name, state.instance.id), None)
    state.lifecycle_state = "Terminated"
    group.instance_states = [s for s in group.instance_states if s is not state]
    group.autoscaling_backend.ec2_backend.terminate_instances([state.instance.id])
    TERMINATED.append(state.instance.id)


def _conclude(action, result, lapsed=False):
    """What AWS does when an action completes, with `result`, or times out."""
    group, state = action.group, action.state
    ACTIONS.pop((group.name, state.instance.id), None)
    HOLDS.append({"InstanceId": state.instance.id, "Hook": action.hook.name,
                  "HeartbeatTimeout": action.hook.heartbeat_timeout, "Started": action.started,
                  "Beats": action.beats, "Ended": time.time(), "Result": result, "Lapsed": lapsed})
    if action.hook.lifecycle_transition == LAUNCHING:
        if result == "CONTINUE":
            state.lifecycle_state = "InService"
        else:
            begin_termination(group, state)
            group.set_desired_capacity(group.desired_capacity)  # replace it
    else:
        _finish_termination(group, state)


def active_instances(self):
    return [s for s in self.instance_states if s.lifecycle_state in ACTIVE]


def terminate_instance(self, instance_id, should_decrement):
    for group in self.autoscaling_groups.values():
        for state in group.instance_states:
            if state.instance.id == instance_id:
                original_size = group.desired_capacity
                if should_decrement:
                    group.desired_capacity -= 1
                begin_termination(group, state)
                group.set_desired_capacity(group.desired_capacity)
                return asg.TerminateInstanceActivity(state.instance, original_size)
    raise ValidationError(f"Instance Id not found - No managed instance found for instance ID: {instance_id}")


moto_create_lifecycle_hook = asg.AutoScalingBackend.create_lifecycle_hook


def test_notification(group, transition):
    _emit(group, transition, {
        "AccountId": group.account_id,
        "AutoScalingGroupName": group.name,
        "Event": "autoscaling:TEST_NOTIFICATION",
        "LifecycleTransition": "autoscaling:TEST_NOTIFICATION",
        "RequestId": str(uuid.uuid4()),
        "Service": "AWS Auto Scaling",
        "Time": _now(),
    })


def create_lifecycle_hook(self, name, as_name, transition, timeout, result):
    hook = moto_create_lifecycle_hook(self, name, as_name, transition, timeout, result)
    group = self.autoscaling_groups.get(as_name)
    if group is not None:
        test_notification(group, transition)
    return hook


def _find_action(self):
    group_name = self._get_param("AutoScalingGroupName")
    hook_name = self._get_param("LifecycleHookName")
    token = self._get_param("LifecycleActionToken")
    instance_id = self._get_param("InstanceId")
    for (g, i), action in ACTIONS.items():
        if g != group_name or action.hook.name != hook_name:
            continue
        if (token and action.token == token) or (not token and instance_id == i):
            if instance_id and instance_id != i:
                continue
            return action
    if token:
        raise ValidationError(f"No active Lifecycle Action found with token {token}")
    raise ValidationError(f"No active Lifecycle Action found with instance ID {instance_id}")


REPLACING = ("ReplaceUnhealthy", "Launch", "Terminate")


def _replaces(group) -> bool:
    """Whether the group replaces Unhealthy instances: not while ReplaceUnhealthy, Launch or
    Terminate is suspended (https://docs.aws.amazon.com/autoscaling/ec2/userguide/as-suspend-resume-processes.html)."""
    suspended = {p["ProcessName"] for p in group.suspended_processes}
    return not suspended & set(REPLACING)


def _replace_unhealthy(group):
    """Auto Scaling's health check: every InService instance marked Unhealthy leaves through
    the terminate hook, and a replacement launches."""
    if not _replaces(group):
        return
    for state in [s for s in group.instance_states if s.health_status == "Unhealthy" and s.lifecycle_state == "InService"]:
        begin_termination(group, state)
        group.set_desired_capacity(group.desired_capacity)  # the replacement


def _set_instance_health(backend, instance_id, status):
    """What Auto Scaling does with a health status set from outside: an InService instance marked
    Unhealthy is replaced (terminated through the terminate hook, and a new one launched), unless
    the group's replacement processes are suspended; then once they are resumed."""
    for group in backend.autoscaling_groups.values():
        for state in group.instance_states:
            if state.instance.id != instance_id:
                continue
            state.health_status = status
            _replace_unhealthy(group)
            return
    raise ValidationError(f"Instance Id not found - No managed instance found for instance ID: {instance_id}")


def set_instance_health(self):
    instance_id = self._get_param("InstanceId")
    status = self._get_param("HealthStatus")
    respect = self._get_param("ShouldRespectGracePeriod")
    if status not in ("Healthy", "Unhealthy"):
        raise ValidationError("Valid instance health states are: [Healthy, Unhealthy]")
    call = {"InstanceId": instance_id, "HealthStatus": status, "ShouldRespectGracePeriod": respect,
            "sdk": "aws-sdk-rust" in self.headers.get("User-Agent", ""), "error": None}
    HEALTH.append(call)
    try:
        _set_instance_health(self.autoscaling_backend, instance_id, status)
    except ValidationError as e:
        call["error"] = e.message
        raise
    return EmptyResult()


def complete_lifecycle_action(self):
    result = self._get_param("LifecycleActionResult")
    if result not in ("CONTINUE", "ABANDON"):
        raise ValidationError(f"Invalid LifecycleActionResult: {result}")
    _conclude(_find_action(self), result)
    return EmptyResult()


def record_lifecycle_action_heartbeat(self):
    action = _find_action(self)
    action.deadline = time.monotonic() + action.hook.heartbeat_timeout
    action.beats.append(time.time())
    return EmptyResult()


_original_resume = asg.AutoScalingBackend.resume_processes


def resume_processes(self, group_name, scaling_processes):
    """Resumed: Unhealthy instances it kept are replaced now, at the next health check."""
    _original_resume(self, group_name, scaling_processes)
    _replace_unhealthy(self.autoscaling_groups[group_name])


def lapse_due():
    """Every held action past its heartbeat timeout or its global timeout gets its hook's
    DefaultResult (the timer's work; under LOCK)."""
    now = time.monotonic()
    for action in [a for a in ACTIONS.values() if min(a.deadline, a.global_deadline) <= now]:
        ended_globally = action.global_deadline <= now
        LAPSED.append({"InstanceId": action.state.instance.id, "Hook": action.hook.name,
                       "Result": action.hook.default_result, "Global": ended_globally})
        _conclude(action, action.hook.default_result, lapsed=True)


def install():
    asg.FakeAutoScalingGroup.active_instances = active_instances
    asg.AutoScalingBackend.terminate_instance = terminate_instance
    asg.AutoScalingBackend.resume_processes = resume_processes
    asg.AutoScalingBackend.create_lifecycle_hook = create_lifecycle_hook
    asg_responses.AutoScalingResponse.complete_lifecycle_action = complete_lifecycle_action
    asg_responses.AutoScalingResponse.set_instance_health = set_instance_health
    asg_responses.AutoScalingResponse.record_lifecycle_action_heartbeat = (
        record_lifecycle_action_heartbeat
    )
