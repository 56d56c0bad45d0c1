"""Backups to S3 and restores (issue 8): the bucket, its key and policies, the gateway endpoint,
what the function and the instances may do, the settings passed to the function, and the alarm on
the age of the newest backup."""

import fnmatch
import json
import re
from pathlib import Path

import pytest

from test_operations import TOPIC_ACTION, alarm, cluster_dimension, dashboard_body, depends_on, env, references
from test_template import STACK, function_defaults, render, resolve, resources, statements

ROOT = Path(__file__).resolve().parents[2]
PREFIX = f"etcd-asg-lifecycle/{STACK}"
BUCKET_NAME = {"Fn::If": ["CreateBackupBucket", {"Ref": "BackupBucket"}, {"Ref": "BackupBucketName"}]}
VIA_S3 = {"StringEquals": {"kms:ViaService": {"Fn::Sub": "s3.${AWS::Region}.amazonaws.com"}}}
TAG_KEY = "etcd-asg-instance-arn"
# src/config/backup.rs accepts BACKUP_INTERVAL_MINUTES 1..=1440, BACKUP_HOURLY_DAYS 1..=365,
# BACKUP_DAILY_DAYS 1..=3650: every value a parameter allows must start the function.
RUST_RANGES = {"BackupIntervalMinutes": (1, 1440), "BackupHourlyDays": (1, 365), "BackupDailyDays": (1, 3650)}
CONDITIONAL = {"BackupKey", "BackupBucket", "BackupBucketPolicy"}


def bucket_arn(value, bucket):
    """A policy Resource of `!Sub [text, {Bucket: ...}]` for a stack named STACK and a bucket."""
    text, variables = value["Fn::Sub"]
    assert variables == {"Bucket": BUCKET_NAME}, "the created bucket, or BackupBucketName"
    return text.replace("${AWS::Partition}", "aws").replace("${AWS::StackName}", STACK).replace("${Bucket}", bucket)


def policy_statements(t, name):
    return t["Resources"][name]["Properties"]["PolicyDocument"]["Statement"]


def by_sid(stmts):
    out = {}
    for s in stmts:
        if "Fn::If" in s:
            cond, s, otherwise = s["Fn::If"]
            assert cond == "CreateBackupBucket" and otherwise == {"Ref": "AWS::NoValue"}
        out[s["Sid"]] = s
    return out


def test_the_bucket_is_encrypted_with_the_stacks_key_versioned_private_and_kept(template):
    r = template["Resources"]
    bucket, key = r["BackupBucket"], r["BackupKey"]
    for res in (bucket, key):
        assert res["Condition"] == "CreateBackupBucket"
        # Backups exist for the day the cluster or the stack is gone; the key goes with them.
        assert res["DeletionPolicy"] == res["UpdateReplacePolicy"] == "Retain"
    p = bucket["Properties"]
    (rule,) = p["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms",
                                                     "KMSMasterKeyID": {"Fn::GetAtt": ["BackupKey", "Arn"]}}
    assert rule["BucketKeyEnabled"] is True
    assert p["VersioningConfiguration"] == {"Status": "Enabled"}
    assert p["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    assert p["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    rules = {x["Id"]: x for x in p["LifecycleConfiguration"]["Rules"]}
    assert all(x["Status"] == "Enabled" and "Prefix" not in x and "Filter" not in x for x in rules.values())
    assert rules["abort-incomplete-uploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert rules["expire-noncurrent-versions"]["NoncurrentVersionExpiration"]["NoncurrentDays"] == 30
    assert rules["remove-expired-delete-markers"]["ExpiredObjectDeleteMarker"] is True
    # Nothing expires a current snapshot: retention is the function's (hourly/daily), not S3's.
    assert not any("ExpirationInDays" in x or "ExpirationDate" in x for x in rules.values())
    assert key["Properties"]["EnableKeyRotation"] is True


def test_the_bucket_policy_denies_everything_over_plain_http(template):
    p = template["Resources"]["BackupBucketPolicy"]
    assert p["Condition"] == "CreateBackupBucket"
    assert p["Properties"]["Bucket"] == {"Ref": "BackupBucket"}
    (deny,) = policy_statements(template, "BackupBucketPolicy")
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", "*", "s3:*")
    assert deny["Resource"] == [{"Fn::GetAtt": ["BackupBucket", "Arn"]}, {"Fn::Sub": "${BackupBucket.Arn}/*"}]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_the_key_policy_keeps_the_account_in_charge_and_lets_the_roles_use_it_only_through_s3(template):
    stmts = {s["Sid"]: s for s in template["Resources"]["BackupKey"]["Properties"]["KeyPolicy"]["Statement"]}
    root = stmts["AccountAdministersAndDelegatesToIam"]
    assert root["Principal"] == {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}}
    assert (root["Action"], root["Resource"], "Condition" in root) == ("kms:*", "*", False), "no lock-out"
    function = stmts["FunctionWritesAndReadsBackupsThroughS3"]
    assert function["Principal"] == {"AWS": {"Fn::GetAtt": ["FunctionRole", "Arn"]}}
    assert sorted(function["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert function["Condition"] == VIA_S3
    instance = stmts["InstancesReadTheirSnapshotThroughS3"]
    assert instance["Principal"] == {"AWS": {"Fn::GetAtt": ["InstanceRole", "Arn"]}}
    assert instance["Action"] == "kms:Decrypt", "instances only read"
    assert instance["Condition"] == VIA_S3
    assert all(s["Effect"] == "Allow" for s in stmts.values()) and len(stmts) == 3


def test_the_function_writes_prunes_and_tags_only_under_its_prefix(template):
    stmts = by_sid(policy_statements(template, "FunctionBackupPolicy"))
    assert template["Resources"]["FunctionBackupPolicy"]["Properties"]["RoleName"] == {"Ref": "FunctionRole"}
    objects = stmts["WritePruneAndTagBackups"]
    assert sorted(objects["Action"]) == sorted(["s3:PutObject", "s3:GetObject", "s3:DeleteObject",
                                                "s3:AbortMultipartUpload", "s3:PutObjectTagging"])
    assert "Condition" not in objects
    pattern = bucket_arn(objects["Resource"], "b")
    assert pattern == f"arn:aws:s3:::b/{PREFIX}/*"
    allowed = lambda key: fnmatch.fnmatchcase(f"arn:aws:s3:::b/{key}", pattern)
    assert allowed(f"{PREFIX}/tok-1/20240101T000000Z-rev42.db")
    assert allowed(f"{PREFIX}/tok-1/20240101T000000Z-rev42.db.json")
    assert not allowed(f"{PREFIX}2/tok/x.db"), "another stack whose name starts the same"
    assert not allowed("other/x.db") and not allowed("x.db")
    listing = stmts["ListBackups"]
    assert listing["Action"] == "s3:ListBucket"
    assert bucket_arn(listing["Resource"], "b") == "arn:aws:s3:::b"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": {"Fn::Sub": "etcd-asg-lifecycle/${AWS::StackName}/*"}}}
    kms = stmts["UseTheBackupKeyThroughS3"]
    assert sorted(kms["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"], "a multipart upload needs both"
    assert kms["Resource"] == {"Fn::GetAtt": ["BackupKey", "Arn"]} and kms["Condition"] == VIA_S3
    # All the S3 the stack's roles may do: never a permanent delete (s3:DeleteObjectVersion), so a
    # pruned snapshot stays 30 days as a noncurrent version; nothing on the bucket itself.
    actions = {a for _, s in statements(template) for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert {a for a in actions if a.startswith("s3:")} == {
        "s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:PutObjectTagging",
        "s3:ListBucket"}


def test_an_instance_reads_only_the_snapshot_tagged_with_its_own_arn(template):
    stmts = by_sid(policy_statements(template, "InstanceBackupPolicy"))
    assert template["Resources"]["InstanceBackupPolicy"]["Properties"]["RoleName"] == {"Ref": "InstanceRole"}
    assert set(stmts) == {"ReadTheSnapshotTaggedForThisInstance", "DecryptTheSnapshotThroughS3"}
    read = stmts["ReadTheSnapshotTaggedForThisInstance"]
    assert read["Action"] == "s3:GetObject"
    assert bucket_arn(read["Resource"], "b") == f"arn:aws:s3:::b/{PREFIX}/*"
    # Literally the policy variable (no !Sub, which would take ${...} for its own).
    assert read["Condition"] == {"StringEquals": {f"s3:ExistingObjectTag/{TAG_KEY}": "${ec2:SourceInstanceARN}"}}
    # The same tag key as the member parameters the instance reads.
    ssm = [s for role, s in statements(template) if role == "InstanceRole" and s["Action"] == "ssm:GetParameter"]
    (ssm,) = ssm
    assert ssm["Condition"]["StringEquals"] == {f"aws:ResourceTag/{TAG_KEY}": "${ec2:SourceInstanceARN}"}
    kms = stmts["DecryptTheSnapshotThroughS3"]
    assert kms["Action"] == "kms:Decrypt" and kms["Condition"] == VIA_S3
    # Nothing else about S3 for instances: no list, no write.
    s3 = [s for role, s in statements(template) if role == "InstanceRole" and "s3:" in json.dumps(s["Action"])]
    assert s3 == [read]


@pytest.mark.parametrize("create", [True, False])
def test_an_existing_bucket_needs_none_of_the_conditional_resources(template, create):
    """With BackupBucketName set, nothing names the bucket, key or bucket policy the stack then
    does not create (CloudFormation would refuse the template)."""
    conditions = {"CreateBackupBucket": create, "HasRouteTables": True, "HasZone": True, "HasAlarmTopic": True,
                  "SingleMember": False, "ManagedTls": True, "WithSessionManager": True, "HasVolumeKey": True}
    t = template
    for name, r in t["Resources"].items():
        if r.get("Condition") == "CreateBackupBucket" and not create:
            continue
        named = references(render(r, conditions)) & set(t["Resources"])
        if not create:
            assert not named & CONDITIONAL, (name, named & CONDITIONAL)
    for name, o in t["Outputs"].items():
        named = references(render(o, conditions)) & set(t["Resources"])
        assert create or not named & CONDITIONAL, name
    assert {n for n, r in t["Resources"].items() if r.get("Condition") == "CreateBackupBucket"} == CONDITIONAL
    assert t["Conditions"]["CreateBackupBucket"] == {"Fn::Equals": [{"Ref": "BackupBucketName"}, ""]}


def test_the_bucket_parameters_and_settings_reach_the_function(template):
    params = template["Parameters"]
    name = params["BackupBucketName"]
    assert name["Default"] == ""
    pattern = name["AllowedPattern"]
    for ok in ("", "my-backups", "a.b-c.123"):
        assert re.fullmatch(pattern, ok), ok
    for bad in ("My-Bucket", "ab", "-ab", "a" * 64, "s3://b", "b/prefix"):
        assert not re.fullmatch(pattern, bad), bad
    variables = env(template)
    assert variables["BACKUP_BUCKET"] == BUCKET_NAME
    # The key prefix is the parameter prefix without its leading '/', the function's own default.
    assert resolve(variables["BACKUP_PREFIX"], template) == PREFIX
    assert "/" + resolve(variables["BACKUP_PREFIX"], template) == resolve(variables["PARAMETER_PREFIX"], template)
    for var, param in (("BACKUP_INTERVAL_MINUTES", "BackupIntervalMinutes"), ("BACKUP_HOURLY_DAYS", "BackupHourlyDays"),
                       ("BACKUP_DAILY_DAYS", "BackupDailyDays"), ("RECOVERY", "Recovery")):
        assert variables[var] == {"Ref": param}, var
    # Defaults are the function's (src/config/vars.rs); the ranges within what it accepts.
    defaults = function_defaults()
    for var, param in (("BACKUP_INTERVAL_MINUTES", "BackupIntervalMinutes"), ("BACKUP_HOURLY_DAYS", "BackupHourlyDays"),
                       ("BACKUP_DAILY_DAYS", "BackupDailyDays"), ("RECOVERY", "Recovery")):
        assert str(params[param]["Default"]) == defaults.get(var), f"{param} vs {var} in src/config/vars.rs"
    for param, (low, high) in RUST_RANGES.items():
        p = params[param]
        assert p["Type"] == "Number" and low <= p["MinValue"] <= p["Default"] <= p["MaxValue"] <= high, param
    assert (params["BackupIntervalMinutes"]["MinValue"], params["BackupIntervalMinutes"]["MaxValue"]) == (5, 1440)
    assert params["Recovery"]["AllowedValues"] == ["auto", "manual"]
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = {p for g in groups for p in g["Parameters"]}
    assert {"BackupBucketName", "BackupIntervalMinutes", "BackupHourlyDays", "BackupDailyDays", "Recovery",
            "RouteTableIds"} <= grouped


def test_the_function_starts_only_once_it_may_write_backups(template):
    f = template["Resources"]["MembershipFunction"]
    assert f["DependsOn"] == "FunctionBackupPolicy"
    # The key names the roles, so the roles' own policies do not name the key or the bucket.
    for role in ("FunctionRole", "InstanceRole"):
        assert not {"BackupKey", "BackupBucket"} & depends_on(template, role), role


def test_outputs_name_the_bucket_its_prefix_and_the_roles_to_grant(template):
    outputs = template["Outputs"]
    assert outputs["BackupBucket"]["Value"] == BUCKET_NAME
    assert resolve(outputs["BackupPrefix"]["Value"], template) == PREFIX + "/"
    assert outputs["FunctionRoleArn"]["Value"] == {"Fn::GetAtt": ["FunctionRole", "Arn"]}
    assert outputs["InstanceRoleArn"]["Value"] == {"Fn::GetAtt": ["InstanceRole", "Arn"]}


def test_an_s3_gateway_endpoint_is_added_to_the_route_tables_given(template):
    p = template["Parameters"]["RouteTableIds"]
    assert (p["Type"], p["Default"]) == ("CommaDelimitedList", "")
    assert template["Conditions"]["HasRouteTables"] == {
        "Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "RouteTableIds"}]}, ""]}]}
    (name, endpoint), = resources(template, "AWS::EC2::VPCEndpoint").items()
    assert endpoint["Condition"] == "HasRouteTables"
    props = endpoint["Properties"]
    assert props["VpcEndpointType"] == "Gateway"
    assert props["ServiceName"] == {"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"}
    assert props["VpcId"] == {"Ref": "VpcId"} and props["RouteTableIds"] == {"Ref": "RouteTableIds"}
    assert "PolicyDocument" not in props, "it carries every S3 request of those subnets, not only backups"


def test_the_backup_age_alarm_fires_past_two_intervals_and_when_no_backup_exists(template):
    p = alarm(template, "BackupAgeAlarm")
    (stat,) = [m for m in p["Metrics"] if "MetricStat" in m]
    (expr,) = [m for m in p["Metrics"] if "Expression" in m]
    assert stat["ReturnData"] is False and expr["ReturnData"] is True
    m = stat["MetricStat"]["Metric"]
    assert (m["Namespace"], m["MetricName"]) == ("EtcdAsgLifecycle", "SecondsSinceLastBackup")
    cluster_dimension(template, m["Dimensions"])
    assert stat["MetricStat"]["Stat"] == "Maximum"
    text = expr["Expression"]["Fn::Sub"]
    assert (p["ComparisonOperator"], p["Threshold"]) == ("GreaterThanThreshold", 2)
    # Age in seconds against 2 x interval x 60, for the intervals the parameter allows.
    for minutes in (5, 15, 1440):
        value = lambda age: eval(text.replace("${BackupIntervalMinutes}", str(minutes)), {}, {stat["Id"]: age})
        assert not value(2 * minutes * 60) > p["Threshold"]
        assert value(2 * minutes * 60 + 1) > p["Threshold"]
    # No backup of the current cluster for 15 minutes is a breach too (see the template).
    assert p["TreatMissingData"] == "breaching"
    assert stat["MetricStat"]["Period"] * p["EvaluationPeriods"] == 900 and p["DatapointsToAlarm"] == 3
    assert p["AlarmActions"] == TOPIC_ACTION and p["AlarmDescription"]


def test_the_dashboard_shows_the_backup_age_against_the_alarm_line(template):
    body, seen = dashboard_body(template)
    (widget,) = [w for w in body["widgets"] if w["type"] == "metric"
                 and any(m[:2] == ["EtcdAsgLifecycle", "SecondsSinceLastBackup"] for m in w["properties"]["metrics"])]
    metrics = widget["properties"]["metrics"]
    (age,) = [m for m in metrics if m[:2] == ["EtcdAsgLifecycle", "SecondsSinceLastBackup"]]
    assert age[2:4] == ["ClusterName", STACK] and age[4]["stat"] == "Maximum"
    exprs = {e["id"]: e["expression"] for m in metrics if isinstance(m[0], dict) for e in m}
    # The same expression as the alarm's, with the same line.
    p = alarm(template, "BackupAgeAlarm")
    (alarm_expr,) = [m["Expression"]["Fn::Sub"] for m in p["Metrics"] if "Expression" in m]
    assert exprs["intervals"] == alarm_expr.replace("${BackupIntervalMinutes}", "15")
    (line,) = widget["properties"]["annotations"]["horizontal"]
    assert line["value"] == p["Threshold"]
    assert {"BackupIntervalMinutes", "BackupHourlyDays", "BackupDailyDays", "Recovery"} <= seen


def test_the_mechanisms_are_documented_where_they_are_used():
    text = (ROOT / "template.yaml").read_text()
    for page in ("https://docs.aws.amazon.com/AmazonS3/latest/userguide/tagging-and-policies.html",
                 "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html",
                 "https://repost.aws/knowledge-center/s3-bucket-policy-for-config-rule",
                 "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucket-key.html",
                 "https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html",
                 "https://docs.aws.amazon.com/kms/latest/developerguide/conditions-kms.html"):
        assert page in text, page


def test_the_boot_script_and_the_template_agree_on_the_restore():
    """The restore lines the function publishes are the ones the boot script takes out."""
    script = (ROOT / "boot" / "etcd-boot.sh").read_text()
    for line in ("ETCD_ASG_RESTORE_URL=", "ETCD_ASG_RESTORE_SHA256="):
        assert f"s/^{line}//p" in script, line
    assert "grep -v '^ETCD_ASG_'" in script, "no ETCD_ASG_* line reaches etcd"
