"""The stack `sam deploy` would create, created in moto's CloudFormation (sim/stack.py), and the
real binary run with what that stack actually has: its function's environment, its group, hooks
and tags, its parameter prefix and bucket, its launch template's user data on every instance."""

import json
import os
import subprocess
import sys
import urllib.request

from sim import stack as deployed
from sim.faults import S3_OPERATIONS
from sim.world import ADDRESS_TAG, default_binary

STACK = "etcd-stack"
# What the simulation changes in the function's environment, and why. Everything else is the
# environment Lambda holds for the stack's function (GetFunctionConfiguration).
OVERRIDES = {
    # moto's instances have private IPs of a VPC that exists nowhere here: each instance's etcd
    # listens on the loopback address the simulation tags it with (sim/instances.py _boot).
    "ADDRESS_SOURCE": f"tag:{ADDRESS_TAG}",
    # Lambda sets it from the function's LoggingConfig (LogFormat: JSON), which moto does not keep.
    "AWS_LAMBDA_LOG_FORMAT": "JSON",
}
# Set by the simulation whatever the stack says: what Lambda's runtime gives every function
# (credentials, region) plus the emulator's endpoint; and the names members' certificates carry
# besides the stack's load balancer (peers connect from 127.0.0.1 on loopback, clients through the
# simulation's balancer address): appended to the stack's MEMBER_CERT_EXTRA_SANS, not replacing it.
SIMULATION = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
              "PATH", "MEMBER_CERT_EXTRA_SANS"}
SETTING_TAG = "etcd-asg-lifecycle:"


def _aws(moto):
    return deployed.clients(moto)


def _sdk_calls(moto) -> set[str]:
    """The actions the Rust SDK (the function, the CLI) called since the last look, as moto counted
    them (sim/emulator/routes.py); S3's are left out (the stubbed RolePolicy has them:
    tests/template/test_sdk_operations.py checks them)."""
    with urllib.request.urlopen(f"{moto}/_sim/requests", timeout=5) as r:
        return {action for action in json.loads(r.read()) if action.isalnum() and action not in S3_OPERATIONS}


def _allowed_actions(aws, role) -> set[str]:
    """The actions the Allow statements of a created role's own policies name."""
    actions = set()
    for name in aws["iam"].list_role_policies(RoleName=role)["PolicyNames"]:
        document = aws["iam"].get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        for statement in document["Statement"]:
            if statement["Effect"] == "Allow":
                named = statement["Action"]
                actions |= {named} if isinstance(named, str) else set(named)
    return actions


def _described(aws, stack, logical_id, resource):
    """What the service that owns the resource says about it (raises, or is empty, if absent)."""
    pid = resource["PhysicalResourceId"]
    props = stack.template["Resources"][logical_id].get("Properties", {})
    kind = resource["ResourceType"]
    if kind == "AWS::EC2::SecurityGroup":
        return aws["ec2"].describe_security_groups(GroupIds=[pid])["SecurityGroups"]
    if kind == "AWS::EC2::SecurityGroupIngress":  # no id of its own: the rule on its group
        group = stack.physical_id(props["GroupId"]["Ref"])
        source = stack.physical_id(props["SourceSecurityGroupId"]["Ref"])
        (sg,) = aws["ec2"].describe_security_groups(GroupIds=[group])["SecurityGroups"]
        return [p for p in sg["IpPermissions"] if p.get("FromPort") == props["FromPort"]
                and p.get("ToPort") == props["ToPort"]
                and any(u["GroupId"] == source for u in p.get("UserIdGroupPairs", []))]
    if kind == "AWS::ElasticLoadBalancingV2::LoadBalancer":
        return [lb for lb in aws["elbv2"].describe_load_balancers(LoadBalancerArns=[pid])["LoadBalancers"]
                if lb["Type"] == props.get("Type", "application")]
    if kind == "AWS::ElasticLoadBalancingV2::TargetGroup":
        return aws["elbv2"].describe_target_groups(TargetGroupArns=[pid])["TargetGroups"]
    if kind == "AWS::ElasticLoadBalancingV2::Listener":
        return aws["elbv2"].describe_listeners(ListenerArns=[pid])["Listeners"]
    if kind == "AWS::KMS::Key":
        return aws["kms"].describe_key(KeyId=pid)["KeyMetadata"]
    if kind == "AWS::S3::Bucket":
        return aws["s3"].head_bucket(Bucket=pid)
    if kind == "AWS::IAM::Role":
        return aws["iam"].get_role(RoleName=pid)["Role"]
    if kind == "AWS::IAM::InstanceProfile":
        return aws["iam"].get_instance_profile(InstanceProfileName=pid)["InstanceProfile"]["Roles"]
    if kind == "AWS::EC2::LaunchTemplate":
        return aws["ec2"].describe_launch_templates(LaunchTemplateIds=[pid])["LaunchTemplates"]
    if kind == "AWS::AutoScaling::AutoScalingGroup":
        return aws["autoscaling"].describe_auto_scaling_groups(AutoScalingGroupNames=[pid])["AutoScalingGroups"]
    if kind == "AWS::Logs::LogGroup":
        return [g for g in aws["logs"].describe_log_groups(logGroupNamePrefix=pid)["logGroups"]
                if g["logGroupName"] == pid]
    if kind == "AWS::SQS::Queue":
        return aws["sqs"].get_queue_attributes(QueueUrl=pid, AttributeNames=["QueueArn"])["Attributes"]
    if kind == "AWS::CloudWatch::Alarm":
        return aws["cloudwatch"].describe_alarms(AlarmNames=[pid])["MetricAlarms"]
    if kind == "AWS::CloudWatch::Dashboard":
        return aws["cloudwatch"].get_dashboard(DashboardName=pid)["DashboardBody"]
    if kind == "AWS::Lambda::Function":
        return aws["lambda"].get_function(FunctionName=pid)["Configuration"]
    if kind == "AWS::Lambda::Permission":  # no id of its own: the statement in the function's policy
        function = stack.physical_id(props["FunctionName"]["Ref"])
        rule = aws["events"].describe_rule(Name=stack.physical_id(props["SourceArn"]["Fn::GetAtt"][0]))["Arn"]
        policy = json.loads(aws["lambda"].get_policy(FunctionName=function)["Policy"])
        return [s for s in policy["Statement"] if s["Principal"] == {"Service": props["Principal"]}
                and s.get("Condition", {}).get("ArnLike", {}).get("AWS:SourceArn") == rule]
    if kind == "AWS::Events::Rule":
        return aws["events"].describe_rule(Name=pid)
    raise AssertionError(f"{logical_id}: no way to describe a {kind}: add one here")


def test_the_stack_is_created_and_every_resource_but_the_stubs_exists(moto):
    stack = deployed.deploy(moto, STACK, default_binary())
    assert stack.status == "CREATE_COMPLETE"
    # CloudFormation takes a template of at most 1 MB from S3 (its quotas page).
    assert len(json.dumps(stack.template)) < 1_000_000
    # The stubs are exactly the template's resources of the STUBBED types...
    translated = deployed.translate("s3://b/k", {"VpcId": "vpc-1", "SubnetIds": ["subnet-1"]})
    assert stack.stubbed == {k: r["Type"] for k, r in translated["Resources"].items() if r["Type"] in deployed.STUBBED}
    assert set(stack.stubbed.values()) == set(deployed.STUBBED), "a STUBBED type the template no longer has"
    # ...each a type moto 5.2.1 has no model for, while it has every other type of the template
    # but the one the lifecycle extension supplies (asked of plain moto, in a process of its own).
    models = set(json.loads(subprocess.run(
        [sys.executable, "-c", "import json; from moto.cloudformation.parsing import get_model_map; "
                               "print(json.dumps(sorted(get_model_map())))"],
        capture_output=True, text=True, check=True).stdout))
    assert not models & set(deployed.STUBBED), "moto can create these now: take them out of STUBBED"
    types = {r["Type"] for r in translated["Resources"].values()}
    assert types - models - set(deployed.STUBBED) == {"AWS::CloudWatch::Alarm"}  # sim/emulator/cfn_shims.py MetricAlarm
    # The CAPABILITY_IAM that deploy() passes, like `sam deploy --guided`, is enough: CloudFormation
    # asks CAPABILITY_NAMED_IAM for IAM resources given names of their own (moto asks nothing).
    names = {"RoleName", "InstanceProfileName", "ManagedPolicyName", "GroupName", "UserName"}
    assert not [k for k, r in translated["Resources"].items() if r["Type"] in
                ("AWS::IAM::Role", "AWS::IAM::InstanceProfile", "AWS::IAM::ManagedPolicy")
                and names & set(r.get("Properties", {}))]
    # Every DependsOn names a resource of the template: CloudFormation refuses one that does not,
    # moto skips it (the group's names the translator's rule resources, MembershipFunction<Event>).
    for logical_id, r in translated["Resources"].items():
        depends = r.get("DependsOn", [])
        assert set([depends] if isinstance(depends, str) else depends) <= set(translated["Resources"]), logical_id
    # Every other resource is created (all but those whose Condition is false with the defaults)...
    conditional = {k for k, r in stack.template["Resources"].items() if "Condition" in r}
    expected = set(stack.template["Resources"]) - set(stack.stubbed)
    assert expected - set(stack.resources) <= conditional
    assert {"Group", "MembershipFunction", "LaunchTemplate", "FunctionRole", "BackupBucket", "PkiKey",
            "LoadBalancer", "ClientListener", "Dashboard"} <= set(stack.resources)
    # ...and its service describes it.
    aws = _aws(moto)
    for logical_id, resource in stack.resources.items():
        assert resource["ResourceStatus"] == "CREATE_COMPLETE", resource
        assert _described(aws, stack, logical_id, resource), f"{logical_id} ({resource['ResourceType']}) not found"
    # What the function needs from its configuration, as created.
    function = aws["lambda"].get_function(FunctionName=stack.outputs["FunctionName"])
    assert function["Concurrency"]["ReservedConcurrentExecutions"] == 1
    assert function["Configuration"]["Handler"] == "bootstrap"
    assert function["Configuration"]["Runtime"] == "provided.al2023"
    targets = {t["Arn"] for rule in ("MembershipFunctionLifecycleEvents", "MembershipFunctionReconcileSchedule")
               for t in aws["events"].list_targets_by_rule(Rule=stack.physical_id(rule))["Targets"]}
    assert targets == {function["Configuration"]["FunctionArn"]}
    pattern = json.loads(aws["events"].describe_rule(Name=stack.physical_id("MembershipFunctionLifecycleEvents"))
                         ["EventPattern"])
    assert pattern["detail"]["AutoScalingGroupName"] == [stack.outputs["GroupName"]]
    schedule = aws["events"].describe_rule(Name=stack.physical_id("MembershipFunctionReconcileSchedule"))
    assert schedule["ScheduleExpression"] == "rate(1 minute)"


def test_the_created_stack_bootstraps_a_cluster_and_scales_it(moto, simulation):
    stack = deployed.deploy(moto, STACK, default_binary())
    assert stack.status == "CREATE_COMPLETE"
    d = deployed.deployment(moto, stack)
    aws = _aws(moto)
    # What the stack has: names agree across its outputs, the function, the group and its tags.
    assert (d.group, d.prefix, d.bucket) == (stack.outputs["GroupName"], stack.outputs["ParameterPrefix"],
                                             stack.outputs["BackupBucket"])
    assert d.function_env["ASG_NAME"] == d.group
    assert (d.function_env["LAUNCH_HOOK_NAME"], d.function_env["TERMINATE_HOOK_NAME"]) == d.hooks
    # Lambda takes at most 4 KB of environment variables, names and values together (its quotas
    # page); the values here are the created ones (generated names, the load balancer's DNS name).
    assert sum(len(k) + len(v) for k, v in d.function_env.items()) < 4096
    # ...and refuses its reserved names (_HANDLER, AWS_REGION, AWS_LAMBDA_*, LAMBDA_TASK_ROOT, ...):
    # https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html
    assert not [k for k in d.function_env if k.startswith(("_", "AWS_", "LAMBDA_"))]
    assert f"export PARAMETER_PREFIX={d.prefix}\n" in d.user_data
    (group,) = aws["autoscaling"].describe_auto_scaling_groups(AutoScalingGroupNames=[d.group])["AutoScalingGroups"]
    tags = {t["Key"][len(SETTING_TAG):]: t["Value"] for t in group["Tags"] if t["Key"].startswith(SETTING_TAG)}
    assert tags and tags == {k: d.function_env[k] for k in tags}, "the group's tags are the function's settings"
    # The stack created its group with three instances, each held by the launch hook.
    assert sorted(i["LifecycleState"] for i in group["Instances"]) == ["Pending:Wait"] * 3

    sim = simulation(deployment=d, function_env=OVERRIDES)
    changed = {k for k, v in sim.function.env.items() if d.function_env.get(k) != v}
    assert changed == set(OVERRIDES) | SIMULATION, "every change to the stack's environment is listed"
    assert sim.function.env["MEMBER_CERT_EXTRA_SANS"].startswith(d.function_env["MEMBER_CERT_EXTRA_SANS"] + ",")
    sim.wait_converged(3, label="bootstrap")
    sim.start_writer()
    function_calls = _sdk_calls(moto)

    # The operator CLI finds the settings by the stack's name alone (the group's tags). The one tag
    # changed is the one the function's environment changes, for the same reason.
    aws["autoscaling"].create_or_update_tags(Tags=[{
        "ResourceId": d.group, "ResourceType": "auto-scaling-group", "Key": f"{SETTING_TAG}ADDRESS_SOURCE",
        "Value": OVERRIDES["ADDRESS_SOURCE"], "PropagateAtLaunch": False}])
    aws_only = {k: v for k, v in sim.function.env.items() if k.startswith("AWS_") and k != "AWS_LAMBDA_LOG_FORMAT"}
    cli = os.path.join(os.path.dirname(sim.binary), "etcd-asg")
    function_calls |= _sdk_calls(moto)
    r = subprocess.run([cli, "--stack", STACK, "status", "--json"], env={**aws_only, "PATH": os.environ["PATH"]},
                       capture_output=True, text=True, timeout=60)
    _sdk_calls(moto)  # the CLI's (an operator's credentials, not the function's role)
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert sorted(row["instance"] for row in status["rows"]) == sorted(i["InstanceId"] for i in sim.group_instances())
    assert sorted(row["role"] for row in status["rows"]) == ["leader", "voter", "voter"], status
    assert status["cluster_record"]["served"] and int(status["cluster_record"]["cluster_id"], 16) == sim.cluster_id

    # Scaled out to the group's MaxSize, then back to ClusterSize (a member removed).
    assert group["MaxSize"] == 4 and group["MinSize"] == 3
    sim.scale(4)
    sim.wait_converged(4, label="scale out")
    sim.scale(3)
    sim.wait_converged(3, label="scale in")
    sim.writer.stop()
    assert sim.writer.acked and not sim.writer.lost()
    # Every action the function called (and the simulation's one `client-cert` at its start) is one
    # the created role's own policy names (resources and conditions:
    # tests/template/test_sdk_operations.py; S3's are in a stubbed RolePolicy).
    function_calls |= _sdk_calls(moto)
    allowed = {a.split(":", 1)[1] for a in _allowed_actions(aws, stack.physical_id("FunctionRole"))}
    assert {"CompleteLifecycleAction", "PutParameter", "DescribeInstances"} <= function_calls
    assert function_calls <= allowed, f"called but not in FunctionRole: {sorted(function_calls - allowed)}"
    # EventBridge gives the function every lifecycle event of the group through the created rule
    # (its pattern as moto's EventBridge matches one), and none of another group's.
    from moto.events.models import EventPattern

    rule = EventPattern.load(aws["events"].describe_rule(
        Name=stack.physical_id("MembershipFunctionLifecycleEvents"))["EventPattern"])
    held = [e for e in sim.events_seen if "EC2InstanceId" in e["detail"]]
    assert len(held) >= 5 and all(rule.matches_event(e) for e in held)  # 4 launches, 1 termination
    another = json.loads(json.dumps(held[0]))
    another["detail"]["AutoScalingGroupName"] = "another-group"
    assert not rule.matches_event(another)
    # The function's backups are in the stack's bucket, under the stack's BACKUP_PREFIX.
    assert sim.backups() and all(b["key"].startswith(d.function_env["BACKUP_PREFIX"] + "/") for b in sim.backups())
