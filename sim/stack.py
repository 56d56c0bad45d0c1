"""The stack `sam deploy` would create, created in moto's CloudFormation.

`sam deploy` uploads the function's package (what `sam package` does: a zip of the built
`bootstrap` in S3, CodeUri rewritten to it) and hands the template to CloudFormation, whose
AWS::Serverless-2016-10-31 transform is the SAM translator (aws-sam-translator, the version
aws-sam-cli pins). Here: the same zip in moto's S3, the same translator run locally, and the
translated template given to moto's CreateStack by URL, with the parameters a deployment passes
(the template's defaults, plus a VPC and subnets made in moto).

moto's CloudFormation cannot create every resource type of the template: those are replaced by
stubs (STUBBED below, one place, with the reason for each) before CreateStack. Everything else is
created by moto for real (with the additions of sim/emulator/cfn_shims.py);
tests/e2e/test_deployed_stack.py describes each of them.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import boto3

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
REGION = "us-east-1"

# The template's resource types moto 5.2.1's CloudFormation has no model for (moto/cloudformation/
# parsing.py skips such a type with "No Moto CloudFormation support for ...", and a Ref or GetAtt of
# it then fails the stack), and that nothing in the stack reads: each is replaced by
# AWS::CloudFormation::WaitConditionHandle, which moto accepts and creates nothing for. The one
# other type moto lacks, AWS::CloudWatch::Alarm, is created for real by sim/emulator/cfn_shims.py (the
# dashboard names every alarm by its Arn, which a stub has not). tests/e2e/test_deployed_stack.py
# checks that each type here is still missing from plain moto's models, and every other type of
# the template is not.
STUBBED = {
    # TLS only: a Deny of every request made without TLS. The emulator speaks plain HTTP, so the
    # policy, applied, would refuse every request of the function and the instances (moto's S3
    # enforces bucket policies' Denies). tests/template/test_backups.py checks it.
    "AWS::S3::BucketPolicy": "moto has no CloudFormation model for it; here it would deny all (plain HTTP)",
    # The inline policies FunctionBackupPolicy, InstanceBackupPolicy, FunctionPkiPolicy and
    # InstancePkiPolicy (separate resources because the keys' policies name the roles). moto
    # server enforces no IAM policy, so they would change nothing here; tests/template's IAM
    # evaluator reads them (test_template.py statements(), used by test_tls.py and
    # test_sdk_operations.py).
    "AWS::IAM::RolePolicy": "moto has no CloudFormation model for it (it has AWS::IAM::Policy)",
    # The function's async retries and on-failure queue, which the SAM translator makes of
    # EventInvokeConfig. Nothing invokes the function through Lambda here: the simulation's
    # delivery retries a failed invocation twice itself (sim/delivery.py Delivery).
    "AWS::Lambda::EventInvokeConfig": "moto has no CloudFormation model for it",
}
STUB_TYPE = "AWS::CloudFormation::WaitConditionHandle"


@dataclass
class Network:
    vpc_id: str
    subnet_ids: list[str]


@dataclass
class Stack:
    """A created stack, as CloudFormation and the services describe it."""

    name: str
    stack_id: str
    status: str
    outputs: dict[str, str]
    resources: dict[str, dict]  # logical id -> list_stack_resources' summary
    stubbed: dict[str, str]  # logical id -> its type in the translated template
    template: dict  # the translated template, as given to CreateStack (stubs in)
    parameters: dict[str, str] = field(default_factory=dict)

    def physical_id(self, logical_id: str) -> str:
        return self.resources[logical_id]["PhysicalResourceId"]


def clients(endpoint: str) -> dict:
    kw = dict(endpoint_url=endpoint, region_name=REGION, aws_access_key_id="testing",
              aws_secret_access_key="testing")
    return {name: boto3.client(name, **kw) for name in
            ("cloudformation", "ec2", "s3", "lambda", "autoscaling", "iam", "kms", "logs", "sqs",
             "elbv2", "events", "cloudwatch")}


def create_network(ec2) -> Network:
    """A VPC with a private subnet in each of two AZs: the VpcId and SubnetIds a deployment gives."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{n}.0/24", AvailabilityZone=f"{REGION}{az}")
               ["Subnet"]["SubnetId"] for n, az in ((1, "a"), (2, "b"))]
    return Network(vpc, subnets)


def package(s3, bucket: str, binary: str) -> str:
    """What `sam package` does with the built function: a zip with an executable `bootstrap` at
    its root (what a provided.al2023 runtime runs), stored under the zip's MD5 (as sam's S3
    uploader names it); the CodeUri for the template. moto runs no code of a provided runtime (the
    simulation runs `binary` itself), so this `bootstrap` only execs `binary`: the debug build is
    close to a gigabyte, which would be copied into moto's memory for nothing."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        info = zipfile.ZipInfo("bootstrap")
        info.external_attr = 0o755 << 16  # executable, as Lambda runs it
        z.writestr(info, f'#!/bin/sh\nexec {binary} "$@"\n')
    body = buf.getvalue()
    key = hashlib.md5(body).hexdigest()
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    return f"s3://{bucket}/{key}"


def translate(code_uri: str, parameters: dict[str, object], template_path: Path = TEMPLATE) -> dict:
    """The template as CloudFormation's SAM transform makes it: aws-sam-translator, with the
    packaged CodeUri and the stack's parameters (a list parameter as a list)."""
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator
    from samtranslator.yaml_helper import yaml_parse

    sam = yaml_parse(Path(template_path).read_text())
    for resource in sam["Resources"].values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = code_uri
    translator = Translator(managed_policy_map=None, sam_parser=Parser(), plugins=[],
                            boto_session=boto3.Session(region_name=REGION, aws_access_key_id="testing",
                                                       aws_secret_access_key="testing"))
    # No AWS::Serverless resource names a managed policy by name (the roles are the template's
    # own), so the translator needs no map of them from IAM.
    return translator.translate(sam_template=sam, parameter_values=dict(parameters),
                                get_managed_policy_map=lambda: {})


def stub(template: dict) -> tuple[dict, dict[str, str]]:
    """The template with every resource of a STUBBED type replaced by a stub (its Condition and
    DependsOn kept); and which were replaced, with their type."""
    out = copy.deepcopy(template)
    stubbed = {}
    for logical_id, resource in out["Resources"].items():
        if resource["Type"] in STUBBED:
            stubbed[logical_id] = resource["Type"]
            out["Resources"][logical_id] = {
                "Type": STUB_TYPE, **{k: resource[k] for k in ("Condition", "DependsOn") if k in resource}}
    return out, stubbed


def deploy(endpoint: str, stack_name: str, binary: str, parameters: dict[str, str] | None = None) -> Stack:
    """`sam deploy` of template.yaml into the moto at `endpoint`: a network, the package, the
    translated template with its stubs, CreateStack; the stack once it is complete."""
    aws = clients(endpoint)
    network = create_network(aws["ec2"])
    artifacts = f"{stack_name}-artifacts"
    code_uri = package(aws["s3"], artifacts, binary)
    given = {"VpcId": network.vpc_id, "SubnetIds": ",".join(network.subnet_ids), **(parameters or {})}
    # The translator sees parameter values as CloudFormation hands them to the transform: a
    # List<...> as a list.
    typed = {k: (v.split(",") if k == "SubnetIds" else v) for k, v in given.items()}
    translated = translate(code_uri, typed)
    template, stubbed = stub(translated)
    cfn = aws["cloudformation"]
    # The template by its path-style URL in the package's bucket, as sam deploy passes it
    # (samcli/lib/deploy/deployer.py): a TemplateBody may hold only 51,200 bytes.
    key = f"{stack_name}.template"
    aws["s3"].put_object(Bucket=artifacts, Key=key, Body=json.dumps(template).encode())
    # The capabilities `sam deploy` passes for this template (roles of its own): CAPABILITY_IAM.
    stack_id = cfn.create_stack(
        StackName=stack_name, TemplateURL=f"https://s3.{REGION}.amazonaws.com/{artifacts}/{key}",
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in given.items()],
        Capabilities=["CAPABILITY_IAM"])["StackId"]
    described = cfn.describe_stacks(StackName=stack_id)["Stacks"][0]
    resources = {}
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack_id):
        for r in page["StackResourceSummaries"]:
            # moto lists a blank summary for each resource it made nothing for: the stubs, and
            # those whose Condition is false (CloudFormation lists neither).
            if r["LogicalResourceId"]:
                resources[r["LogicalResourceId"]] = r
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    return Stack(stack_name, stack_id, described["StackStatus"], outputs, resources, stubbed, template, given)


def function_of(stack: Stack) -> str:
    """The logical id of the stack's one Lambda function."""
    (name,) = [k for k, r in stack.template["Resources"].items() if r["Type"] == "AWS::Lambda::Function"]
    return name


def deployment(endpoint: str, stack: Stack):
    """What the created stack gives a simulation (sim.world.Deployment), read from the services:
    the function's environment as Lambda holds it, the group the stack made and its lifecycle
    hooks, the user data of the group's launch template."""
    from .world import Deployment

    aws = clients(endpoint)
    function = aws["lambda"].get_function_configuration(FunctionName=stack.physical_id(function_of(stack)))
    group_name = stack.physical_id(next(k for k, r in stack.template["Resources"].items()
                                        if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"))
    group = aws["autoscaling"].describe_auto_scaling_groups(AutoScalingGroupNames=[group_name])["AutoScalingGroups"][0]
    hooks = {h["LifecycleTransition"]: h["LifecycleHookName"] for h in
             aws["autoscaling"].describe_lifecycle_hooks(AutoScalingGroupName=group_name)["LifecycleHooks"]}
    template = group["LaunchTemplate"]
    version = aws["ec2"].describe_launch_template_versions(
        LaunchTemplateId=template["LaunchTemplateId"], Versions=[str(template["Version"])])["LaunchTemplateVersions"][0]
    user_data = base64.b64decode(version["LaunchTemplateData"]["UserData"]).decode()
    return Deployment(endpoint=endpoint, group=group_name,
                      hooks=(hooks["autoscaling:EC2_INSTANCE_LAUNCHING"], hooks["autoscaling:EC2_INSTANCE_TERMINATING"]),
                      function_env=dict(function["Environment"]["Variables"]), user_data=user_data)
