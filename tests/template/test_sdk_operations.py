"""Every AWS operation the function calls is allowed by the function's role: the SDK calls are
read from the adapters' source (src/adapters/), each mapped to the IAM action AWS authorizes it
as, and evaluated against FunctionRole's statements for this stack's resources."""

import re
from pathlib import Path

import pytest

from test_template import GROUP, STACK
from test_tls import ACCOUNT, BUCKET, REGION, allowed

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ROOT / "src" / "adapters"
# The SDK clients the adapters hold, by the name of their field or argument, and their service.
CLIENTS = {"autoscaling": "autoscaling", "ec2": "ec2", "ssm": "ssm", "s3": "s3"}
# Operations AWS authorizes as another action (Service Authorization Reference, Amazon S3:
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html, and
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html#mpuAndPermissions).
AUTHORIZED_AS = {
    "s3:ListObjectsV2": "s3:ListBucket",
    "s3:CreateMultipartUpload": "s3:PutObject",
    "s3:UploadPart": "s3:PutObject",
    "s3:CompleteMultipartUpload": "s3:PutObject",
    # "You must have READ access to the object" (s3:GetObject): HeadObject's own page,
    # https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html
    "s3:HeadObject": "s3:GetObject",
}
PARAMETERS = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/etcd-asg-lifecycle/{STACK}"
GROUP_ARN = (f"arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:"
             f"0d6c2e4a-1111-2222-3333-444455556666:autoScalingGroupName/{GROUP}")
OBJECT = f"arn:aws:s3:::{BUCKET}/etcd-asg-lifecycle/{STACK}/backups/token/00000000001-rev1.db"
# What each action is called on, as the function calls it (and the request's condition keys).
REQUESTS = {
    "autoscaling:DescribeAutoScalingGroups": ("*", {}),
    "autoscaling:DescribeLifecycleHooks": ("*", {}),
    "autoscaling:DescribeWarmPool": ("*", {}),
    "ec2:DescribeInstances": ("*", {}),
    "autoscaling:CompleteLifecycleAction": (GROUP_ARN, {}),
    "autoscaling:RecordLifecycleActionHeartbeat": (GROUP_ARN, {}),
    "autoscaling:SetInstanceHealth": (GROUP_ARN, {}),
    "ssm:GetParameter": (f"{PARAMETERS}/cluster", {}),
    "ssm:GetParametersByPath": (PARAMETERS, {}),
    "ssm:PutParameter": (f"{PARAMETERS}/members/i-0123456789abcdef0", {}),
    "ssm:DeleteParameter": (f"{PARAMETERS}/down/i-0123456789abcdef0", {}),
    "ssm:DeleteParameters": (f"{PARAMETERS}/tls/i-0123456789abcdef0", {}),
    "ssm:AddTagsToResource": (f"{PARAMETERS}/tls/i-0123456789abcdef0", {}),
    "s3:ListBucket": (f"arn:aws:s3:::{BUCKET}", {"s3:prefix": f"etcd-asg-lifecycle/{STACK}/"}),
    "s3:PutObject": (OBJECT, {}),
    "s3:GetObject": (OBJECT, {}),
    "s3:DeleteObject": (OBJECT, {}),
    "s3:AbortMultipartUpload": (OBJECT, {}),
    "s3:PutObjectTagging": (OBJECT, {}),
}


def camel(snake):
    return "".join(part.capitalize() for part in snake.split("_"))


def sdk_operations():
    """(file, service:Operation) of every SDK call in the adapters: `<client>.<operation>()`,
    possibly across lines, as the AWS SDK for Rust's fluent builders are written."""
    calls = re.compile(r"\b(" + "|".join(CLIENTS) + r")\s*\.\s*([a-z0-9_]+)\(\)")
    found = []
    for path in sorted(ADAPTERS.glob("*.rs")):
        text = path.read_text()
        ops = [(path.name, f"{CLIENTS[c]}:{camel(op)}") for c, op in calls.findall(text) if op != "clone"]
        # Every request the file sends is one of them: a call written some other way would be
        # missed, so the counts must agree.
        sent = len(re.findall(r"\.send\(\)", text)) if "aws_sdk_" in text or "ByteStream" in text else 0
        assert len(ops) == sent, f"{path.name}: {len(ops)} SDK calls found, {sent} .send(): {ops}"
        found += ops
    return found


def test_the_adapters_calls_are_found():
    ops = {op for _, op in sdk_operations()}
    # A sample the function cannot work without, so that a broken reader fails here.
    assert {"autoscaling:CompleteLifecycleAction", "ssm:PutParameter", "s3:UploadPart"} <= ops, ops


@pytest.mark.parametrize("where,operation", sorted(set(sdk_operations())))
def test_every_sdk_operation_is_allowed_by_the_functions_role(template, where, operation):
    action = AUTHORIZED_AS.get(operation, operation)
    assert action in REQUESTS, (f"{where} calls {operation}: add what it is called on to REQUESTS "
                                f"and a statement allowing {action} to FunctionRole")
    resource, context = REQUESTS[action]
    assert allowed(template, "FunctionRole", action, resource, context), \
        f"{where} calls {operation}; FunctionRole does not allow {action} on {resource}"
