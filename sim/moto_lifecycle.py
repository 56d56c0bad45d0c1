"""moto server with the Auto Scaling lifecycle that moto lacks.

moto stores lifecycle hooks but ignores them: instances go straight to InService and vanish at
once on termination. This launcher extends moto's backend classes before serving them, following
AWS's semantics (shared/reference/aws-lifecycle.md):

- With a launch hook, a new instance waits in ``Pending:Wait``; with a terminate hook, a leaving
  one waits in ``Terminating:Wait`` (scale-in, TerminateInstanceInAutoScalingGroup, ABANDON of a
  launch). Each wait gets a token and one EventBridge event, in exactly the shape of ``events/``.
- ``CompleteLifecycleAction`` (by token or instance id) and ``RecordLifecycleActionHeartbeat``
  answer like AWS, including ``ValidationError`` "No active Lifecycle Action found ..." for an
  action that is no longer held.
- A held action whose heartbeat timeout passes gets the hook's ``DefaultResult``.
- ``PutLifecycleHook`` emits the hook's ``autoscaling:TEST_NOTIFICATION``.
- Desired capacity counts Pending and InService instances, so held instances are not replaced.
- ``SetInstanceHealth`` with ``HealthStatus=Unhealthy`` on an ``InService`` instance replaces it
  as AWS's health check would: the instance leaves through the terminate hook (``Terminating:Wait``,
  a token, one EventBridge event exactly like a scale-in termination) and a replacement launches
  at once through the launch hook, so desired capacity holds. Every call is recorded.
- ``DescribeLifecycleHooks`` is moto's own (it answers with the hooks stored above).

- Availability Zones: each new instance goes to the group's zone with the fewest instances (never
  an impaired one: its launches fail, the group launches elsewhere); scale-in takes the oldest
  instance of the zone with the most, as the default termination policy does. AZRebalance (launch
  before terminate) runs one step on request (``POST /_sim/zones {"rebalance": group}``).
- Each held action also ends at its global timeout, the lesser of 48 h and 100 heartbeat
  timeouts, whatever its heartbeats (``/_sim/lapsed`` marks it ``"Global": true``).

Not emulated: warm pools (DescribeWarmPool answers; nothing else of them), instance refresh,
health checks of their own (EC2 status checks, ELB: only ``SetInstanceHealth`` marks an instance
unhealthy; ``ShouldRespectGracePeriod`` is recorded but ignored, and the replacement happens at
once, not at the next health check), the instance maintenance policy (a replacement always
launches while the old instance is held, whatever the policy), suspended processes beyond what
``SuspendProcesses`` records and ``ReplaceUnhealthy`` (below), cooldowns.

Extra routes, for the simulation only (EventBridge does not exist here):
  GET /_sim/events      drain the EventBridge events produced so far (JSON list)
  GET /_sim/terminated  drain the ids of instances whose termination finished (JSON list)
  GET /_sim/requests    drain the count of API calls made by the Rust SDK (the function), by action
  GET /_sim/request-log drain the same calls one by one: [[epoch seconds, action], ...]
  GET /_sim/health      drain the SetInstanceHealth calls so far (JSON list of
                        {"InstanceId", "HealthStatus", "ShouldRespectGracePeriod", "sdk", "error"})
  GET /_sim/lapsed      drain the held actions whose heartbeat timeout passed (JSON list of
                        {"InstanceId", "Hook", "Result", "Global"}: the hook's DefaultResult
                        applied; Global: at the action's global timeout)
  POST /_sim/zones      zones whose launches fail, one AZRebalance step, the global timeout's cap
  GET /_sim/launch-failures drain the launches no zone could take
  GET /_sim/holds       drain the held actions that ended: {"InstanceId", "Hook", "HeartbeatTimeout",
                        "Started", "Beats" (each heartbeat's epoch seconds), "Ended", "Result", "Lapsed"}
  GET/POST /_sim/faults the fault layer in front of all of it (sim/faults.py)

CloudFormation (sim/stack.py creates the stack of template.yaml here): what moto's models of the
template's resources leave out, done as AWS documents it:

- ``AWS::AutoScaling::AutoScalingGroup``: the hooks of ``LifecycleHookSpecificationList`` are in
  place before the group's first instances launch (moto ignores the list), and the group carries
  the tags CloudFormation adds to every resource it tags, ``aws:cloudformation:stack-name``,
  ``aws:cloudformation:stack-id`` and ``aws:cloudformation:logical-id``, propagated at launch
  (moto adds them to EC2 resources only; ``etcd-asg --stack`` finds the group by the first).
- A ``Number`` parameter is a string wherever the template uses it (moto makes it an int, and then
  ``Fn::FindInMap`` with it finds no key of a mapping).
- ``AWS::CloudWatch::Alarm``, which moto has no model for: made with moto's PutMetricAlarm (the
  dashboard names every alarm by its ``Arn``, which a stub could not give).
- ``AWS::KMS::Key``'s ``KeyPolicy`` and the ``Policies`` of ``AWS::IAM::Role`` kept as the JSON
  text their APIs carry (moto keeps the template's objects: then every KMS call that reads the
  key's policy fails, DescribeKey first, and GetRolePolicy answers with Python's repr of one).
- ``AWS::ElasticLoadBalancingV2::LoadBalancer``: its ``Type`` (moto always makes an application
  load balancer, which then refuses the template's TCP listener).

Types moto has no model for at all are replaced by stubs before CreateStack (sim/stack.py STUBBED).

Every request is served under one lock, so the timer thread and requests never interleave.
S3's CompleteMultipartUpload answer gets S3's root element name (moto's differs; the Rust SDK
checks it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timezone

from moto.autoscaling import models as asg
from moto.autoscaling import responses as asg_responses
from moto.autoscaling.exceptions import ValidationError
from moto.cloudformation import parsing as cfn_parsing
from moto.cloudwatch import models as cloudwatch
from moto.core.common_models import CloudFormationModel
from moto.core.responses import EmptyResult
from moto.elbv2 import models as elbv2
from moto.iam import models as iam
from moto.kms import models as kms
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sim import faults  # noqa: E402

LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
ACTIVE = ("Pending", "Pending:Wait", "Pending:Proceed", "InService")

LOCK = threading.RLock()
# The simulation's one account and Region.
ACCOUNT, REGION = "123456789012", "us-east-1"
# The fault layer's state (sim/faults.py): rules set by tests over /_sim/faults.
FAULTS = faults.Faults()
EVENTS: list[dict] = []
TERMINATED: list[str] = []
SDK_REQUESTS: Counter = Counter()
SDK_LOG: list = []
HEALTH: list[dict] = []
# Held actions whose heartbeat timeout passed (their hook's DefaultResult was applied).
LAPSED: list[dict] = []
# Every held action once it ended: when it began, its heartbeats, when and how it ended.
HOLDS: list[dict] = []
# Zones whose launches fail (an outage: the group launches elsewhere), set over /_sim/zones.
ZONES_IMPAIRED: set[str] = set()
LAUNCH_FAILURES: list[dict] = []
# Rebalances under way: their new instance, and the zone an instance leaves once it serves.
REBALANCING: list[dict] = []
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


def _hold(group, state, transition):
    hook = _hook(group, transition)
    if hook is None:
        return False
    action = Action(group, state, hook)
    ACTIONS[(group.name, state.instance.id)] = action
    state.lifecycle_state = "Pending:Wait" if transition == LAUNCHING else "Terminating:Wait"
    _event(group, hook, state.instance.id, action.token)
    return True


def _begin_termination(group, state):
    ACTIONS.pop((group.name, state.instance.id), None)
    if not _hold(group, state, TERMINATING):
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
            _begin_termination(group, state)
            group.set_desired_capacity(group.desired_capacity)  # replace it
    else:
        _finish_termination(group, state)


# --- patched model behaviour ------------------------------------------------------------------

_original_replace = asg.FakeAutoScalingGroup.replace_autoscaling_group_instances


def _zone(state) -> str:
    """An instance's zone (moto keeps its EC2 placement, whose `zone` it is)."""
    return getattr(state.availability_zone, "zone", state.availability_zone)


def _zone_counts(group):
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
            counts = _zone_counts(self)
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
                    _hold(self, state, LAUNCHING)
    finally:
        self.availability_zones = zones


def active_instances(self):
    return [s for s in self.instance_states if s.lifecycle_state in ACTIVE]


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
            counts = _zone_counts(self)
            state = max(candidates, key=lambda s: (counts.get(_zone(s), 0), -candidates.index(s)))
            _begin_termination(self, state)
    if self.name in self.autoscaling_backend.autoscaling_groups:
        self.autoscaling_backend.update_attached_elbs(self.name)
        self.autoscaling_backend.update_attached_target_groups(self.name)


def terminate_instance(self, instance_id, should_decrement):
    for group in self.autoscaling_groups.values():
        for state in group.instance_states:
            if state.instance.id == instance_id:
                original_size = group.desired_capacity
                if should_decrement:
                    group.desired_capacity -= 1
                _begin_termination(group, state)
                group.set_desired_capacity(group.desired_capacity)
                return asg.TerminateInstanceActivity(state.instance, original_size)
    raise ValidationError(f"Instance Id not found - No managed instance found for instance ID: {instance_id}")


_original_create_hook = asg.AutoScalingBackend.create_lifecycle_hook


def _test_notification(group, transition):
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
    hook = _original_create_hook(self, name, as_name, transition, timeout, result)
    group = self.autoscaling_groups.get(as_name)
    if group is not None:
        _test_notification(group, transition)
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
        _begin_termination(group, state)
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


# --- CloudFormation ----------------------------------------------------------------------------

_original_group_from_cfn = asg.FakeAutoScalingGroup.create_from_cloudformation_json.__func__


def group_from_cloudformation(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
    """AWS::AutoScaling::AutoScalingGroup with its LifecycleHookSpecificationList ("one or more
    lifecycle hooks to add to the Auto Scaling group before instances are launched",
    CreateAutoScalingGroup's LifecycleHookSpecificationList), and the tags "CloudFormation adds
    [...] to all Auto Scaling groups and associated instances":
    https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CreateAutoScalingGroup.html
    https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-autoscaling-autoscalinggroup-tagproperty.html"""
    properties = cloudformation_json["Properties"]
    backend = asg.autoscaling_backends[account_id][region_name]
    # Before the group exists: the instances its desired capacity launches are held at once.
    specs = properties.get("LifecycleHookSpecificationList", [])
    for spec in specs:
        _original_create_hook(backend, spec["LifecycleHookName"], resource_name, spec["LifecycleTransition"],
                              int(spec.get("HeartbeatTimeout", 3600)), spec.get("DefaultResult", "ABANDON"))
    stack_id = kwargs.get("StackId", "")
    stack_name = stack_id.split(":stack/", 1)[-1].split("/", 1)[0]
    if stack_name:
        properties["Tags"] = list(properties.get("Tags", [])) + [
            {"Key": "aws:cloudformation:stack-name", "Value": stack_name, "PropagateAtLaunch": True},
            {"Key": "aws:cloudformation:stack-id", "Value": stack_id, "PropagateAtLaunch": True},
            {"Key": "aws:cloudformation:logical-id", "Value": kwargs.get("LogicalId", ""), "PropagateAtLaunch": True},
        ]
    group = _original_group_from_cfn(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
    for spec in specs:  # each new hook's test notification, as for PutLifecycleHook above
        _test_notification(group, spec["LifecycleTransition"])
    return group


_original_load_parameters = cfn_parsing.ResourceMap.load_parameters


def load_parameters(self):
    """Number parameters as strings: "when you use the parameter elsewhere in your template (for
    example, by using the Ref intrinsic function), the parameter value becomes a string":
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/parameters-section-structure.html"""
    _original_load_parameters(self)
    for name, slot in self._template.get("Parameters", {}).items():
        value = self.resolved_parameters.get(name)
        if slot.get("Type") == "Number" and value is not None:
            self.resolved_parameters[name] = str(value)
        elif slot.get("Type") == "List<Number>" and value is not None:
            self.resolved_parameters[name] = [str(v) for v in value]
    self._parsed_resources.update(self.resolved_parameters)


_original_key_from_cfn = kms.Key.create_from_cloudformation_json.__func__


def key_from_cloudformation(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
    """AWS::KMS::Key: the template gives KeyPolicy as a JSON object; CreateKey and GetKeyPolicy
    carry it as a string (https://docs.aws.amazon.com/kms/latest/APIReference/API_CreateKey.html)."""
    properties = cloudformation_json["Properties"]
    if isinstance(properties.get("KeyPolicy"), dict):
        properties["KeyPolicy"] = json.dumps(properties["KeyPolicy"])
    return _original_key_from_cfn(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)


_original_role_from_cfn = iam.Role.create_from_cloudformation_json.__func__


def role_from_cloudformation(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
    """AWS::IAM::Role: each of its Policies' PolicyDocument as the JSON text PutRolePolicy takes
    (https://docs.aws.amazon.com/IAM/latest/APIReference/API_PutRolePolicy.html)."""
    for policy in cloudformation_json["Properties"].get("Policies", []):
        if isinstance(policy.get("PolicyDocument"), dict):
            policy["PolicyDocument"] = json.dumps(policy["PolicyDocument"])
    return _original_role_from_cfn(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)


def load_balancer_from_cloudformation(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
    """AWS::ElasticLoadBalancingV2::LoadBalancer of its Type (application, network or gateway;
    application when absent):
    https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-elasticloadbalancingv2-loadbalancer.html"""
    properties = cloudformation_json["Properties"]
    backend = elbv2.elbv2_backends[account_id][region_name]
    return backend.create_load_balancer(resource_name, properties.get("SecurityGroups"), properties.get("Subnets"),
                                        scheme=properties.get("Scheme", "internet-facing"),
                                        loadbalancer_type=properties.get("Type", "application"))


class MetricAlarm(CloudFormationModel):
    """AWS::CloudWatch::Alarm, as PutMetricAlarm of the same properties (a metric, or metric math
    in ``Metrics``); Ref is the alarm's name, GetAtt Arn its ARN:
    https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudwatch-alarm.html"""

    # moto files every model under the service its module names (moto.<service>....).
    __module__ = "moto.cloudwatch.sim_models"

    def __init__(self, alarm):
        self.alarm = alarm

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudWatch::Alarm"

    @staticmethod
    def cloudformation_name_type():
        return "AlarmName"

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        p = cloudformation_json["Properties"]
        queries = None
        if "Metrics" in p:
            queries = []
            for q in p["Metrics"]:
                stat = q.get("MetricStat")
                metric_stat = None
                if stat:
                    m = stat["Metric"]
                    metric_stat = cloudwatch.MetricStat(
                        metric=cloudwatch.Metric(metric_name=m["MetricName"], namespace=m.get("Namespace"),
                                                 dimensions=[cloudwatch.Dimension(d["Name"], d["Value"])
                                                             for d in m.get("Dimensions", [])]),
                        period=stat.get("Period"), stat=stat.get("Stat"), unit=stat.get("Unit"))
                queries.append(cloudwatch.MetricDataQuery(
                    query_id=q["Id"], label=q.get("Label"), period=q.get("Period"), return_data=q.get("ReturnData"),
                    expression=q.get("Expression"), metric_stat=metric_stat))
        backend = cloudwatch.cloudwatch_backends[account_id][region_name]
        return cls(backend.put_metric_alarm(
            name=resource_name, namespace=p.get("Namespace"), metric_name=p.get("MetricName"),
            metric_data_queries=queries, comparison_operator=p["ComparisonOperator"],
            evaluation_periods=int(p["EvaluationPeriods"]), datapoints_to_alarm=p.get("DatapointsToAlarm"),
            period=p.get("Period"), threshold=float(p["Threshold"]), statistic=p.get("Statistic"),
            description=p.get("AlarmDescription"), dimensions=p.get("Dimensions", []),
            alarm_actions=p.get("AlarmActions", []), ok_actions=p.get("OKActions", []),
            treat_missing_data=p.get("TreatMissingData")))

    @property
    def physical_resource_id(self):
        return self.alarm.name

    @classmethod
    def has_cfn_attr(cls, attr):
        return attr == "Arn"

    def get_cfn_attribute(self, attribute_name):
        if attribute_name == "Arn":
            return self.alarm.alarm_arn
        from moto.cloudformation.exceptions import UnformattedGetAttTemplateException
        raise UnformattedGetAttTemplateException()


_original_resume = asg.AutoScalingBackend.resume_processes


def resume_processes(self, group_name, scaling_processes):
    """Resumed: Unhealthy instances it kept are replaced now, at the next health check."""
    _original_resume(self, group_name, scaling_processes)
    _replace_unhealthy(self.autoscaling_groups[group_name])


def install():
    cfn_parsing.get_model_list.cache_clear()  # MetricAlarm among the models
    cfn_parsing.get_model_map.cache_clear()
    cfn_parsing.get_name_type_map.cache_clear()
    asg.FakeAutoScalingGroup.create_from_cloudformation_json = classmethod(group_from_cloudformation)
    elbv2.FakeLoadBalancer.create_from_cloudformation_json = classmethod(load_balancer_from_cloudformation)
    cfn_parsing.ResourceMap.load_parameters = load_parameters
    kms.Key.create_from_cloudformation_json = classmethod(key_from_cloudformation)
    iam.Role.create_from_cloudformation_json = classmethod(role_from_cloudformation)
    asg.FakeAutoScalingGroup.replace_autoscaling_group_instances = replace_autoscaling_group_instances
    asg.FakeAutoScalingGroup.active_instances = active_instances
    asg.FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity
    asg.AutoScalingBackend.terminate_instance = terminate_instance
    asg.AutoScalingBackend.resume_processes = resume_processes
    asg.AutoScalingBackend.create_lifecycle_hook = create_lifecycle_hook
    asg_responses.AutoScalingResponse.complete_lifecycle_action = complete_lifecycle_action
    asg_responses.AutoScalingResponse.set_instance_health = set_instance_health
    asg_responses.AutoScalingResponse.record_lifecycle_action_heartbeat = (
        record_lifecycle_action_heartbeat
    )


def _timeouts(stop: threading.Event):
    while not stop.wait(0.2):
        with LOCK:
            now = time.monotonic()
            for action in [a for a in ACTIONS.values() if min(a.deadline, a.global_deadline) <= now]:
                ended_globally = action.global_deadline <= now
                LAPSED.append({"InstanceId": action.state.instance.id, "Hook": action.hook.name,
                               "Result": action.hook.default_result, "Global": ended_globally})
                _conclude(action, action.hook.default_result, lapsed=True)
            _rebalance_step()


def rebalance(group_name):
    """AZRebalance, launch before terminate: one instance launched in the zone with the fewest
    (desired capacity one over), and once it is in service, the oldest of the zone with the most
    terminated (desired back), as Auto Scaling rights an imbalance after a zone's outage
    (https://docs.aws.amazon.com/autoscaling/ec2/userguide/auto-scaling-benefits.html). Nothing
    when the zones are within one of each other."""
    backend = asg.autoscaling_backends[ACCOUNT][REGION]
    group = backend.autoscaling_groups[group_name]
    counts = {z: n for z, n in _zone_counts(group).items() if z not in ZONES_IMPAIRED}
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


def _rebalance_step():
    """The terminate half of each rebalance whose new instance is in service."""
    for r in [r for r in REBALANCING if r["new"].lifecycle_state == "InService"]:
        REBALANCING.remove(r)
        group = r["group"]
        old = [s for s in group.active_instances() if _zone(s) == r["zone"] and s is not r["new"]]
        if old:
            group.desired_capacity -= 1
            _begin_termination(group, old[0])
        else:
            group.desired_capacity -= 1
            group.set_desired_capacity(group.desired_capacity)


def _count_sdk_request(environ):
    """Counts the function's own calls (the Rust SDK's), apart from the simulation's (boto3)."""
    if "aws-sdk-rust" not in environ.get("HTTP_USER_AGENT", ""):
        return
    op = environ.get("sim.operation")
    action = op[1] if op else faults.operation(environ)[1]
    SDK_REQUESTS[action] += 1
    SDK_LOG.append([time.time(), action])


FEEDS = {"/_sim/events": lambda: EVENTS, "/_sim/terminated": lambda: TERMINATED, "/_sim/health": lambda: HEALTH,
         "/_sim/lapsed": lambda: LAPSED, "/_sim/request-log": lambda: SDK_LOG, "/_sim/holds": lambda: HOLDS,
         "/_sim/launch-failures": lambda: LAUNCH_FAILURES}


def _zones_route(environ, start_response):
    """POST /_sim/zones: {"impaired": [zone, ...]} (launches there fail), {"rebalance": group}
    (one AZRebalance step), {"global_timeout_cap": seconds}. Answers the group's zone counts
    for {"group": name}."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    spec = json.loads(environ["wsgi.input"].read(length) or b"{}")
    out = {}
    with LOCK:
        if "impaired" in spec:
            ZONES_IMPAIRED.clear()
            ZONES_IMPAIRED.update(spec["impaired"])
        if "global_timeout_cap" in spec:
            GLOBAL_TIMEOUT_CAP[0] = float(spec["global_timeout_cap"])
        if "global_timeout_scale" in spec:
            GLOBAL_TIMEOUT_SCALE[0] = float(spec["global_timeout_scale"])
        if "rebalance" in spec:
            out["launched"] = rebalance(spec["rebalance"])
        name = spec.get("group") or spec.get("rebalance")
        if name:
            group = asg.autoscaling_backends[ACCOUNT][REGION].autoscaling_groups[name]
            out["zones"] = _zone_counts(group)
        out["impaired"] = sorted(ZONES_IMPAIRED)
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(out).encode()]


def serve(inner, environ, start_response):
    """moto (or a feed of the simulation's), one request at a time under the lock."""
    path = environ.get("PATH_INFO", "")
    if path == "/_sim/zones":
        return _zones_route(environ, start_response)
    if path in FEEDS or path == "/_sim/requests":
        with LOCK:
            if path == "/_sim/requests":
                body = json.dumps(dict(SDK_REQUESTS)).encode()
                SDK_REQUESTS.clear()
            else:
                feed = FEEDS[path]()
                body = json.dumps(feed).encode()
                feed.clear()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    with LOCK:
        _count_sdk_request(environ)
        if environ.get("REQUEST_METHOD") == "POST" and "uploadId=" in environ.get("QUERY_STRING", ""):
            return _complete_multipart_fixed(inner, environ, start_response)
        return list(inner(environ, start_response))


def _launched_at(instance_id):
    """When EC2 launched the instance (UTC), or None if it does not know it."""
    from moto.ec2.models import ec2_backends
    with LOCK:
        instance = ec2_backends[ACCOUNT][REGION].get_instance_by_id(instance_id)
        at = getattr(instance, "launch_time", None)
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00"))
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return at


def app_with_lock(inner):
    """moto behind the fault layer (sim/faults.py), which does nothing until a test asks."""
    return faults.layer(inner, FAULTS, _launched_at, serve)


def _complete_multipart_fixed(inner, environ, start_response):
    """moto 5.2.1 answers CompleteMultipartUpload with the root element
    ``CompleteMultipartUploadResponse``; S3 (and the Rust SDK, which checks) uses
    ``CompleteMultipartUploadResult``. boto3 does not look at the root's name."""
    captured = {}

    def capture(status, headers, exc_info=None):
        captured["status"], captured["headers"] = status, headers

    body = b"".join(inner(environ, capture))
    body = body.replace(b"CompleteMultipartUploadResponse", b"CompleteMultipartUploadResult")
    headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
    headers.append(("Content-Length", str(len(body))))
    start_response(captured["status"], headers)
    return [body]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    args = parser.parse_args(argv)
    install()
    server = make_server(args.host, args.port, app_with_lock(DomainDispatcherApplication(create_backend_app)), threaded=True)
    port = server.server_port
    os.environ["MOTO_PORT"] = str(port)
    stop = threading.Event()
    threading.Thread(target=_timeouts, args=(stop,), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: (stop.set(), threading.Thread(target=server.shutdown).start()))
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)
    print(f"moto with lifecycle hooks on http://{args.host}:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
