"""CloudFormation (sim/stack.py creates the stack of template.yaml here): what moto's models of the
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
"""

from __future__ import annotations

import json

from moto.autoscaling import models as asg
from moto.cloudformation import parsing as cfn_parsing
from moto.cloudwatch import models as cloudwatch
from moto.core.common_models import CloudFormationModel
from moto.elbv2 import models as elbv2
from moto.iam import models as iam
from moto.kms import models as kms

from . import lifecycle

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
        lifecycle.moto_create_lifecycle_hook(backend, spec["LifecycleHookName"], resource_name, spec["LifecycleTransition"],
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
    for spec in specs:  # each new hook's test notification, as for PutLifecycleHook (lifecycle.py)
        lifecycle.test_notification(group, spec["LifecycleTransition"])
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


def install():
    cfn_parsing.get_model_list.cache_clear()  # MetricAlarm among the models
    cfn_parsing.get_model_map.cache_clear()
    cfn_parsing.get_name_type_map.cache_clear()
    asg.FakeAutoScalingGroup.create_from_cloudformation_json = classmethod(group_from_cloudformation)
    elbv2.FakeLoadBalancer.create_from_cloudformation_json = classmethod(load_balancer_from_cloudformation)
    cfn_parsing.ResourceMap.load_parameters = load_parameters
    kms.Key.create_from_cloudformation_json = classmethod(key_from_cloudformation)
    iam.Role.create_from_cloudformation_json = classmethod(role_from_cloudformation)
