"""Invariants of template.yaml that cfn-lint cannot see: what the design depends on."""

import json
import re
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
STACK = "prod"
GROUP = f"{STACK}-etcd"


def resolve(value, t):
    """The few intrinsics the checks need, for a stack named STACK."""
    if isinstance(value, dict) and len(value) == 1:
        (fn, arg), = value.items()
        if fn == "Fn::Sub":
            text = arg if isinstance(arg, str) else arg[0]
            return text.replace("${AWS::StackName}", STACK)
        if fn == "Fn::FindInMap":
            m, k1, k2 = arg
            return t["Mappings"][m][k1][k2]
        if fn == "Ref" and arg == "AWS::StackName":
            return STACK
    if isinstance(value, list):
        return [resolve(v, t) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, t) for k, v in value.items()}
    return value


def render(value, conditions):
    """The template as CloudFormation sees it for these condition values: Fn::If taken, and
    AWS::NoValue dropped."""
    if isinstance(value, dict):
        if set(value) == {"Fn::If"}:
            name, yes, no = value["Fn::If"]
            return render(yes if conditions[name] else no, conditions)
        out = {k: render(v, conditions) for k, v in value.items()}
        return {k: v for k, v in out.items() if v != {"Ref": "AWS::NoValue"}}
    if isinstance(value, list):
        return [render(v, conditions) for v in value if render(v, conditions) != {"Ref": "AWS::NoValue"}]
    return value


def resources(t, kind):
    return {n: r for n, r in t["Resources"].items() if r["Type"] == kind}


def function(t):
    (f,) = resources(t, "AWS::Serverless::Function").values()
    return f


def hooks(t):
    (g,) = resources(t, "AWS::AutoScaling::AutoScalingGroup").values()
    return {h["LifecycleTransition"]: resolve(h, t) for h in g["Properties"]["LifecycleHookSpecificationList"]}


def test_hooks_hold_launches_with_abandon_and_terminations_with_continue(template):
    h = hooks(template)
    launch = h["autoscaling:EC2_INSTANCE_LAUNCHING"]
    terminate = h["autoscaling:EC2_INSTANCE_TERMINATING"]
    assert launch["DefaultResult"] == "ABANDON"
    assert terminate["DefaultResult"] == "CONTINUE"
    for hook in (launch, terminate):
        assert 30 <= hook["HeartbeatTimeout"] <= 7200, hook
    env = resolve(function(template)["Properties"]["Environment"]["Variables"], template)
    assert env["LAUNCH_HOOK_NAME"] == launch["LifecycleHookName"]
    assert env["TERMINATE_HOOK_NAME"] == terminate["LifecycleHookName"]
    assert env["ASG_NAME"] == GROUP
    # A learner must be given up on before its launch hook would time out on its own.
    assert int(env["LEARNER_START_TIMEOUT_SECS"]) < launch["HeartbeatTimeout"]


def test_a_held_action_lasts_the_most_auto_scaling_allows(template):
    """Each action ends at its global timeout, the smaller of 48 h and 100 heartbeat timeouts,
    whatever its heartbeats (API_LifecycleHook): the hooks' timeouts make it 48 h, so a
    termination held for quorum outlasts a night (at 300 s it ended after 8 h 20 min)."""
    for hook in hooks(template).values():
        global_timeout = min(48 * 3600, 100 * hook["HeartbeatTimeout"])
        assert global_timeout == 48 * 3600, hook
        assert global_timeout > 100 * 300


def matches(pattern, event):
    """EventBridge's exact-value matching, which is all the rule uses."""
    for key, want in pattern.items():
        if key not in event:
            return False
        if isinstance(want, dict):
            if not isinstance(event[key], dict) or not matches(want, event[key]):
                return False
        elif event[key] not in want:
            return False
    return True


def event(name, group):
    e = json.loads((ROOT / "events" / name).read_text())
    e["detail"]["AutoScalingGroupName"] = group
    return e


def test_the_rule_takes_this_groups_lifecycle_events_only(template):
    events = function(template)["Properties"]["Events"]
    (rule,) = [e for e in events.values() if e["Type"] == "EventBridgeRule"]
    pattern = resolve(rule["Properties"]["Pattern"], template)
    for name in ("launch.json", "terminate.json"):
        assert matches(pattern, event(name, GROUP)), name
        assert not matches(pattern, event(name, "someone-elses-asg")), name
    assert not matches(pattern, json.loads((ROOT / "events/scheduled.json").read_text()))
    (schedule,) = [e for e in events.values() if e["Type"] == "Schedule"]
    assert schedule["Properties"]["Schedule"].startswith("rate(")


def test_the_function_is_serialized_in_the_vpc_with_retries_and_a_failure_destination(template):
    f = function(template)
    p = f["Properties"]
    assert f["Metadata"]["BuildMethod"] == "rust-cargolambda"
    assert (p["Runtime"], p["Handler"], p["Architectures"]) == ("provided.al2023", "bootstrap", ["arm64"])
    assert p["ReservedConcurrentExecutions"] == 1
    assert p["VpcConfig"]["SubnetIds"] and p["VpcConfig"]["SecurityGroupIds"]
    invoke = p["EventInvokeConfig"]
    assert invoke["MaximumRetryAttempts"] == 2
    assert invoke["DestinationConfig"]["OnFailure"]["Type"] == "SQS"
    env = p["Environment"]["Variables"]
    assert p["Timeout"] > int(env["WAIT_BUDGET_SECS"]) + 30, "a join fits in one invocation"
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    queue = invoke["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"][0]
    assert any(a["Properties"]["Dimensions"][0]["Value"] == {"Fn::GetAtt": [queue, "QueueName"]} for a in alarms)


READ_PREFIXES = ("Describe", "Get", "List")


def conditional_statements(statements):
    """A policy's statements, one kept under a condition (Fn::If with AWS::NoValue) included."""
    for s in statements:
        if "Fn::If" in s:
            _, s, otherwise = s["Fn::If"]
            assert otherwise == {"Ref": "AWS::NoValue"}, otherwise
        yield s


def statements(t):
    """Every statement of the stack's roles: inline, and in AWS::IAM::RolePolicy resources."""
    for name, role in resources(t, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for s in conditional_statements(policy["PolicyDocument"]["Statement"]):
                yield name, s
    for policy in resources(t, "AWS::IAM::RolePolicy").values():
        role = policy["Properties"]["RoleName"]["Ref"]
        assert t["Resources"][role]["Type"] == "AWS::IAM::Role"
        for s in conditional_statements(policy["Properties"]["PolicyDocument"]["Statement"]):
            yield role, s
    for name, f in resources(t, "AWS::Serverless::Function").items():
        assert "Policies" not in f["Properties"], "function policies live in its own role"
        assert "Role" in f["Properties"], "no SAM-generated role with managed policies"


def test_no_write_action_on_a_bare_wildcard(template):
    seen = 0
    for role, s in statements(template):
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        res = s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]
        seen += 1
        if "*" in res:
            writes = [a for a in actions if not a.split(":", 1)[1].startswith(READ_PREFIXES)]
            assert not writes, f"{role}: {writes} on *"
    assert seen >= 5


def test_lifecycle_actions_and_parameter_writes_are_scoped(template):
    by_action = {}
    for _, s in statements(template):
        for a in s["Action"] if isinstance(s["Action"], list) else [s["Action"]]:
            by_action.setdefault(a, []).append(json.dumps(s["Resource"]))
    assert all(f"autoScalingGroupName/${{AWS::StackName}}-etcd" in r for r in by_action["autoscaling:CompleteLifecycleAction"])
    for action in ("ssm:PutParameter", "ssm:DeleteParameter"):
        assert all("parameter/etcd-asg-lifecycle/${AWS::StackName}/*" in r for r in by_action[action]), action
    assert all("parameter/etcd-asg-lifecycle/${AWS::StackName}/*" in r for r in by_action["ssm:AddTagsToResource"])


GROUP_ARN = ("arn:${AWS::Partition}:autoscaling:${AWS::Region}:${AWS::AccountId}:autoScalingGroup:*:"
             "autoScalingGroupName/${AWS::StackName}-etcd")


def function_statements(t):
    return [s for role, s in statements(t) if role == "FunctionRole"]


def test_instances_read_only_the_member_parameter_tagged_with_their_own_arn(template):
    """Instance-profile requests carry ec2:SourceInstanceARN; the function tags each member
    parameter (and TLS bundle) with its instance's ARN. ${ec2:InstanceID} is not set for SSM
    requests. The one other inline statement denies the cluster's CA (test_tls.py)."""
    role = template["Resources"]["InstanceRole"]["Properties"]["Policies"]
    inline = [s for p in role for s in p["PolicyDocument"]["Statement"]]
    (statement,) = [s for s in inline if s["Effect"] == "Allow"]
    assert [s["Sid"] for s in inline if s["Effect"] != "Allow"] == [
        "NeverAnotherInstancesParameters", "NeverListParameters", "NeverReadTheClusterCa"]
    assert statement["Action"] == "ssm:GetParameter"
    assert [r["Fn::Sub"].rsplit(":parameter/", 1)[1] for r in statement["Resource"]] == [
        "etcd-asg-lifecycle/${AWS::StackName}/members/*", "etcd-asg-lifecycle/${AWS::StackName}/tls/*"]
    # aws:ResourceTag, the key the Service Authorization Reference lists for GetParameter.
    assert statement["Condition"] == {
        "StringEquals": {"aws:ResourceTag/etcd-asg-instance-arn": "${ec2:SourceInstanceARN}"}}
    assert "ec2:InstanceID" not in json.dumps(template["Resources"]["InstanceRole"])
    # The mechanism is documented where it is used.
    text = (ROOT / "template.yaml").read_text()
    for page in ("https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-keys.html",
                 "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html",
                 "https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssystemsmanager.html"):
        assert page in text, page


def test_the_function_may_tag_parameters_mark_its_own_instances_unhealthy_and_read_the_hooks(template):
    by_action = {}
    for s in function_statements(template):
        assert s["Effect"] == "Allow"
        for a in s["Action"] if isinstance(s["Action"], list) else [s["Action"]]:
            by_action.setdefault(a, []).append(s)
    (tag,) = by_action["ssm:AddTagsToResource"]
    assert tag["Resource"]["Fn::Sub"].endswith(":parameter/etcd-asg-lifecycle/${AWS::StackName}/*")
    (health,) = by_action["autoscaling:SetInstanceHealth"]
    assert health["Resource"] == {"Fn::Sub": GROUP_ARN}, "scoped to this group"
    (hooks,) = by_action["autoscaling:DescribeLifecycleHooks"]
    assert hooks["Resource"] == "*", "Describe* has no resource-level permissions"
    assert "Condition" not in tag and "Condition" not in health


def test_the_function_replaces_members_whose_etcd_stays_down(template):
    env = function(template)["Properties"]["Environment"]["Variables"]
    assert int(env["UNHEALTHY_REPLACE_SECS"]) >= 120, "longer than a restart, a reboot or a slow start"


def test_replacements_launch_before_they_terminate(template):
    (g,) = resources(template, "AWS::AutoScaling::AutoScalingGroup").values()
    policy = g["Properties"]["InstanceMaintenancePolicy"]
    assert policy["MinHealthyPercentage"] == 100, "never below desired capacity while replacing"
    assert 100 < policy["MaxHealthyPercentage"] <= 200, "room to launch the replacement first"
    # Room above desired capacity for the one replacement, whatever the size.
    props = g["Properties"]
    assert props["MinSize"] == props["DesiredCapacity"] == {"Ref": "ClusterSize"}
    sizes = template["Mappings"]["GroupMaxSize"]
    assert {int(k) for k in sizes} == set(template["Parameters"]["ClusterSize"]["AllowedValues"])
    assert all(v["Max"] == int(k) + 1 for k, v in sizes.items())
    assert props["MaxSize"] == {"Fn::FindInMap": ["GroupMaxSize", {"Ref": "ClusterSize"}, "Max"]}


def test_the_root_volume_is_encrypted(template):
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    data = lt["Properties"]["LaunchTemplateData"]
    (root,) = [m for m in data["BlockDeviceMappings"] if m["DeviceName"] == "/dev/xvda"]
    assert root["Ebs"]["Encrypted"] is True
    assert "/dev/xvda" in template["Parameters"]["ImageId"]["Description"], "the AMI's root device is named"


def test_etcd_is_installed_only_with_the_sha256_the_stack_passes(template):
    import re

    p = template["Parameters"]["EtcdSha256"]
    assert re.fullmatch(p["AllowedPattern"], p["Default"]) and len(p["Default"]) == 64
    assert re.fullmatch(p["AllowedPattern"], "A" * 64) and not re.fullmatch(p["AllowedPattern"], "a" * 63)
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    parts = lt["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    assert {"Fn::Sub": "export ETCD_SHA256=${EtcdSha256}\n"} in parts
    script = (ROOT / "boot" / "etcd-boot.sh").read_text()
    assert "ETCD_SHA256:?" in script and "REFUSING to install etcd" in script
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    assert any("EtcdSha256" in g["Parameters"] for g in groups)


def test_user_data_runs_the_boot_script_less_its_comments(template, tmp_path):
    """tools/sync_template.py drops comment lines (EC2's 16 KiB): every command line is kept, in
    order, and the result is still valid bash."""
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    parts = lt["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    embedded = parts[-1]
    assert parts[0].startswith("#!/bin/bash\n") and embedded.startswith("#!/bin/bash\n")
    source = (ROOT / "boot" / "etcd-boot.sh").read_text()
    commands = [line for line in source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    kept = [line for line in embedded.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert kept == commands
    assert len(embedded) < len(source) * 3 // 4, "the comments are gone"
    script = tmp_path / "user-data.sh"
    script.write_text(embedded)
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    settings = "".join(resolve(p, template) if isinstance(p, dict) else p for p in parts[:-1])
    assert f"PARAMETER_PREFIX=/etcd-asg-lifecycle/{STACK}\n" in settings


def test_outputs_name_the_endpoint_the_prefix_and_the_function(template):
    assert {"ClientEndpoint", "ParameterPrefix", "FunctionName"} <= set(template["Outputs"])


def function_defaults() -> dict[str, str]:
    """Each variable the function reads, with its default: src/config/vars.rs, where each is
    written once (`Var::new("NAME", "default", "doc")`)."""
    import re

    source = (ROOT / "src" / "config" / "vars.rs").read_text()
    found = dict(re.findall(r'Var::new\(\s*"([A-Z_]+)",\s*"([^"]*)"', source))
    assert len(found) > 30, found  # the reader still finds them
    return found


def test_the_function_environment_uses_only_variables_the_function_reads(template):
    """A misspelt variable would silently fall back to its default."""
    known = set(function_defaults())
    env = function(template)["Properties"]["Environment"]["Variables"]
    assert set(env) <= known, set(env) - known
    assert {"ASG_NAME", "LAUNCH_HOOK_NAME", "TERMINATE_HOOK_NAME"} <= set(env)


def test_the_user_data_fits_ec2s_16_kib_limit_with_the_longest_parameter_values(template):
    """EC2 takes at most 16 KiB of user data before base64; the boot script grows."""
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    parts = lt["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    params = template["Parameters"]
    longest = {
        "EtcdDownloadUrl": "h" * params["EtcdDownloadUrl"]["MaxLength"],
        "EtcdSha256": "0" * 64,
        "AWS::StackName": "s" * 128,  # CloudFormation's limit on a stack name
        "AWS::Region": "ap-southeast-5x",
    }
    rendered = ""
    for p in parts:
        text = p if isinstance(p, str) else p["Fn::Sub"]
        for name, value in longest.items():
            text = text.replace("${" + name + "}", value)
        assert "${" not in text or isinstance(p, str), text
        rendered += text
    assert len(rendered.encode()) <= 16 * 1024, len(rendered.encode())


def test_instance_types_are_arm64_and_the_download_url_is_bounded(template):
    import re

    p = template["Parameters"]
    pattern = re.compile(p["InstanceType"]["AllowedPattern"])
    for good in ("t4g.small", "m7g.large", "c6gn.xlarge", "r8gd.2xlarge", "x2gd.medium", "a1.large",
                 "im4gn.large", "is4gen.large", "c8g.48xlarge"):
        assert pattern.match(good), good
    for x86 in ("t3.small", "m5.large", "c6i.xlarge", "g4dn.xlarge", "r7iz.large", "m7a.large", "p4d.24xlarge"):
        assert not pattern.match(x86), x86
    assert pattern.match(p["InstanceType"]["Default"])
    url = p["EtcdDownloadUrl"]
    assert url["MaxLength"] <= 1024 and len(url["Default"]) <= url["MaxLength"]
    assert re.match(url["AllowedPattern"], url["Default"])
    assert not re.match(url["AllowedPattern"], "http://example.com/etcd.tar.gz")


def test_sam_build_runs_without_a_prompt_for_the_beta_build_method(template):
    """rust-cargolambda is a SAM beta feature: without it enabled, `sam build` asks, and stalls
    where nobody answers."""
    import tomllib

    methods = {f["Metadata"]["BuildMethod"] for f in resources(template, "AWS::Serverless::Function").values()}
    assert methods == {"rust-cargolambda"}
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    assert config["default"]["build"]["parameters"]["beta_features"] is True


# The function's CPU-seconds per GiB backed up, as `make bench` measured it (docs/figures.md).
BACKUP_CPU_S_PER_GIB = 8.0
# Lambda gives one vCPU at 1,769 MB, and CPU in proportion below:
# https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html
MB_PER_VCPU = 1769


def test_the_function_can_back_up_the_largest_database_in_half_its_timeout(template):
    """A snapshot gets half of what is left of its invocation; with 128 MB (1/14 of a vCPU) the
    default 2 GiB quota alone needed more than the whole timeout."""
    props = function(template)["Properties"]
    largest_gib = template["Parameters"]["QuotaBackendBytes"]["MaxValue"] / 2**30
    needed_mb = MB_PER_VCPU * BACKUP_CPU_S_PER_GIB * largest_gib / (props["Timeout"] / 2)
    # A quarter more for a slower CPU than the bench's (Graviton, not this x86 machine).
    assert props["MemorySize"] >= 1.25 * needed_mb, (props["MemorySize"], needed_mb)
    assert props["MemorySize"] <= 2048, "more than a snapshot needs costs for nothing"


def test_the_members_volumes_take_the_key_given_else_the_accounts_default(template):
    """VolumeKmsKeyId: the launch template's volume encrypted with it, or with the account's
    default EBS key when empty (a customer managed default must let the Auto Scaling
    service-linked role use it: docs/deploy.md)."""
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    (mapping,) = lt["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"]
    for has_key, want in ((True, {"Ref": "VolumeKmsKeyId"}), (False, None)):
        ebs = render(mapping["Ebs"], {"HasVolumeKey": has_key})
        assert ebs["Encrypted"] is True
        assert ebs.get("KmsKeyId") == want, ebs
    assert template["Conditions"]["HasVolumeKey"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "VolumeKmsKeyId"}, ""]}]}
    pattern = re.compile(template["Parameters"]["VolumeKmsKeyId"]["AllowedPattern"])
    assert pattern.match("") and pattern.match("arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab")
    assert not pattern.match("alias/mine") and not pattern.match("arn:aws:kms:us-east-1:1:key/x")
