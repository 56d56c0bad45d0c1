"""Third-party scanners on the stack: parliament (duo-labs) on every IAM policy the stack
writes, resolved for one account, Region and stack as CloudFormation would. A finding fails the
test unless it is listed below with the reason it does not apply."""

import json
import re

from parliament import analyze_policy_string

from test_template import render, resources

REGION, ACCOUNT, STACK = "us-east-1", "123456789012", "prod"
CONDITIONS = {"ManagedTls": True, "HasZone": True, "CreateBackupBucket": True, "WithSessionManager": True,
              "HasRouteTables": True, "HasAlarmTopic": True, "SingleMember": False, "HasVolumeKey": False}
# What Fn::GetAtt ... .Arn and Ref give for the resources the policies name.
ATTRIBUTES = {
    "FunctionLogGroup": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/{STACK}-membership:*",
    "FailedInvocations": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{STACK}-FailedInvocations-1",
    "PkiKey": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/11111111-1111-1111-1111-111111111111",
    "BackupKey": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/22222222-2222-2222-2222-222222222222",
    "FunctionRole": f"arn:aws:iam::{ACCOUNT}:role/{STACK}-FunctionRole-1",
    "InstanceRole": f"arn:aws:iam::{ACCOUNT}:role/{STACK}-InstanceRole-1",
}
REFS = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::StackName": STACK,
        "VpcId": "vpc-1", "FunctionSecurityGroup": "sg-1", "Group": f"{STACK}-etcd",
        "BackupBucket": f"{STACK}-backups", "BackupBucketName": f"{STACK}-backups"}
# Findings that do not apply, with why. (None today.)
ACCEPTED: dict[tuple[str, str], str] = {}


def resolve(value):
    """Fn::Sub, Fn::GetAtt and Ref as CloudFormation resolves them; policy variables such as
    ${ec2:SourceInstanceARN} stay."""
    if isinstance(value, list):
        return [resolve(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "Fn::Sub" in value:
        text, local = (value["Fn::Sub"], {}) if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"]
        names = {**REFS, **{k: resolve(v) for k, v in local.items()}}
        return re.sub(r"\$\{([^}!]+)\}", lambda m: names.get(m.group(1), m.group(0))
                      if ":" not in m.group(1) or m.group(1).startswith("AWS::") else m.group(0), text)
    if "Fn::GetAtt" in value:
        name, attribute = value["Fn::GetAtt"]
        assert attribute == "Arn", value
        return ATTRIBUTES[name]
    if "Ref" in value:
        return REFS.get(value["Ref"], value["Ref"])
    return {k: resolve(v) for k, v in value.items()}


def policies(t):
    for name, role in resources(t, "AWS::IAM::Role").items():
        for p in role["Properties"].get("Policies", []):
            yield f"{name}/{p['PolicyName']}", p["PolicyDocument"]
    for name, p in resources(t, "AWS::IAM::RolePolicy").items():
        yield name, p["Properties"]["PolicyDocument"]


def test_parliament_finds_nothing_in_the_stacks_iam_policies(template):
    found, seen = [], 0
    for name, doc in policies(template):
        text = json.dumps(resolve(render(doc, CONDITIONS)))
        assert "Fn::" not in text and '"Ref"' not in text, (name, text)
        seen += 1
        for f in analyze_policy_string(text).findings:
            if (name, f.issue) not in ACCEPTED:
                found.append((name, f.issue, f.detail))
    assert seen >= 6, seen
    assert not found, json.dumps(found, indent=1, default=str)
    assert all(len(why) > 20 for why in ACCEPTED.values()), "every accepted finding says why"


def test_every_check_checkov_skips_is_named_in_the_template_with_its_reason(template):
    """`make template-check` runs checkov (its own venv): a check either passes or is skipped
    here, on the resource, with why."""
    skips = {(name, s["id"]): s.get("comment", "")
             for name, r in template["Resources"].items()
             for s in r.get("Metadata", {}).get("checkov", {}).get("skip", [])}
    assert skips, "the template names the checks it skips"
    for (name, check), why in skips.items():
        assert re.fullmatch(r"CKV_AWS_\d+", check), (name, check)
        assert len(why) > 40, f"{name} skips {check} without a reason"
