"""Invariants of template.yaml that cfn-lint cannot see: what the design depends on."""

import json
from pathlib import Path

import pytest
from cfnlint.decode import decode

ROOT = Path(__file__).resolve().parents[2]
STACK = "prod"
GROUP = f"{STACK}-etcd"


@pytest.fixture(scope="module")
def template():
    t, errors = decode(str(ROOT / "template.yaml"))
    assert not errors, errors
    return t


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


def statements(t):
    for name, role in resources(t, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for s in policy["PolicyDocument"]["Statement"]:
                yield name, s
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
    # Instances read their own parameter and nothing else.
    role = template["Resources"]["InstanceRole"]["Properties"]["Policies"]
    (statement,) = [s for p in role for s in p["PolicyDocument"]["Statement"]]
    assert statement["Action"] == "ssm:GetParameter"
    assert statement["Resource"]["Fn::Sub"].endswith("/members/${!ec2:InstanceID}")


def test_user_data_runs_the_boot_script_byte_for_byte(template):
    (lt,) = resources(template, "AWS::EC2::LaunchTemplate").values()
    parts = lt["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    script = (ROOT / "boot" / "etcd-boot.sh").read_text()
    assert parts[-1] == script
    assert parts[0].startswith("#!/bin/bash\n")
    settings = "".join(resolve(p, template) if isinstance(p, dict) else p for p in parts[:-1])
    assert f"PARAMETER_PREFIX=/etcd-asg-lifecycle/{STACK}\n" in settings


def test_outputs_name_the_endpoint_the_prefix_and_the_function(template):
    assert {"ClientEndpoint", "ParameterPrefix", "FunctionName"} <= set(template["Outputs"])


def test_the_function_environment_uses_only_variables_the_function_reads(template):
    """A misspelt variable would silently fall back to its default."""
    import re

    source = (ROOT / "src" / "config.rs").read_text()
    table = source[source.index("pub const VARIABLES"):source.index("];", source.index("pub const VARIABLES"))]
    known = set(re.findall(r'\("([A-Z_]+)",', table))
    env = function(template)["Properties"]["Environment"]["Variables"]
    assert set(env) <= known, set(env) - known
    assert {"ASG_NAME", "LAUNCH_HOOK_NAME", "TERMINATE_HOOK_NAME"} <= set(env)
