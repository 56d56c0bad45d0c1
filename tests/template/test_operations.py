"""Operating the stack: alarms and the dashboard over the function's metrics, the maintenance
settings passed to the function, the group tags the operator CLI reads, and the build of the one
function binary."""

import json
import re
from pathlib import Path

import pytest

from test_template import STACK, function, function_defaults, render, resolve, resources

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "EtcdAsgLifecycle"
TOPIC_ACTION = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
# src/config/topology.rs: QUOTA_BACKEND_BYTES from 16 MiB to MAX_QUOTA_BACKEND_BYTES (8 GiB).
QUOTA_MIN, QUOTA_MAX = 16 << 20, 8 << 30


def env(t):
    return function(t)["Properties"]["Environment"]["Variables"]


def alarm(t, name):
    a = t["Resources"][name]
    assert a["Type"] == "AWS::CloudWatch::Alarm", name
    return a["Properties"]


def cluster_dimension(t, dimensions):
    """The one ClusterName dimension, checked to be the function's CLUSTER_NAME."""
    assert [d["Name"] for d in dimensions] == ["ClusterName"]
    value = dimensions[0]["Value"]
    assert value == env(t)["CLUSTER_NAME"], "the same intrinsic as the function's CLUSTER_NAME"
    assert resolve(value, t) == STACK
    return value


# Logical id -> (metric, statistic, period, evaluation periods, datapoints to alarm, comparison,
# threshold, treat missing data).
METRIC_ALARMS = {
    "QuorumMarginAlarm": ("QuorumMargin", "Minimum", 60, 2, 2, "LessThanThreshold",
                          {"Fn::If": ["SingleMember", 0, 1]}, "missing"),
    "TerminationHeldAlarm": ("HeldForQuorum", "Maximum", 60, 10, 10, "GreaterThanOrEqualToThreshold",
                             1, "notBreaching"),
    "NospaceRaisedAlarm": ("NospaceAlarm", "Maximum", 60, 1, None, "GreaterThanOrEqualToThreshold",
                           1, "notBreaching"),
    # No quorum, and a voter's instance held at termination for 5 minutes.
    "HeldWhileUnreachableAlarm": ("HeldWhileUnreachable", "Maximum", 60, 5, 5, "GreaterThanOrEqualToThreshold", 1,
                                  "notBreaching"),
    # A voter down for the function alone (its peers connected to it) for 10 minutes.
    "MemberUnreachableFromFunctionAlarm": ("MemberUnreachableFromFunction", "Maximum", 60, 10, 10,
                                           "GreaterThanOrEqualToThreshold", 1, "notBreaching"),
    # The store or snapshots failing in every invocation for 15 minutes.
    "BackupFailingAlarm": ("BackupFailed", "Sum", 300, 3, 3, "GreaterThanOrEqualToThreshold", 1, "notBreaching"),
    # A year ahead of the CA's end (TLS=managed).
    "CaExpiringAlarm": ("CaDaysLeft", "Minimum", 3600, 1, None, "LessThanThreshold", 365, "notBreaching"),
}


@pytest.mark.parametrize("name", sorted(METRIC_ALARMS))
def test_each_alarm_watches_its_metric_of_this_cluster_and_notifies_the_topic(template, name):
    metric, stat, period, periods, datapoints, comparison, threshold, missing = METRIC_ALARMS[name]
    p = alarm(template, name)
    assert (p["Namespace"], p["MetricName"]) == (NAMESPACE, metric)
    cluster_dimension(template, p["Dimensions"])
    assert (p["Statistic"], p["Period"], p["EvaluationPeriods"]) == (stat, period, periods)
    assert p.get("DatapointsToAlarm") == datapoints
    assert (p["ComparisonOperator"], p["Threshold"]) == (comparison, threshold)
    assert p["TreatMissingData"] == missing
    assert p["AlarmActions"] == TOPIC_ACTION
    assert p["AlarmDescription"]


def test_the_quorum_alarm_fires_below_a_margin_of_one_except_for_a_single_member(template):
    """A single member always has margin 0 (quorum 1 of 1): there it alarms on loss (-1) only."""
    assert template["Conditions"]["SingleMember"] == {"Fn::Equals": [{"Ref": "ClusterSize"}, "1"]}
    p = alarm(template, "QuorumMarginAlarm")
    below = lambda margin, threshold: margin < threshold  # LessThanThreshold
    for size, threshold in (("1", 0), ("3", 1), ("5", 1), ("7", 1)):
        assert p["Threshold"]["Fn::If"][1 if size == "1" else 2] == threshold
        assert below(-1, threshold), "a lost quorum always alarms"
        assert below(0, threshold) == (size != "1"), "no failure to spare alarms, but for one member"
        assert not below(1, threshold)


def test_the_database_alarm_compares_the_largest_file_with_80_percent_of_the_quota(template):
    p = alarm(template, "DatabaseNearQuotaAlarm")
    assert "MetricName" not in p and "Namespace" not in p, "a metric math alarm"
    stats = [m for m in p["Metrics"] if "MetricStat" in m]
    exprs = [m for m in p["Metrics"] if "Expression" in m]
    assert len(stats) == 1 and len(exprs) == 1
    (stat,), (expr,) = stats, exprs
    assert stat["ReturnData"] is False and expr["ReturnData"] is True
    m = stat["MetricStat"]["Metric"]
    assert (m["Namespace"], m["MetricName"]) == (NAMESPACE, "DbSizeBytes")
    cluster_dimension(template, m["Dimensions"])
    assert stat["MetricStat"]["Stat"] == "Maximum"
    text = expr["Expression"]["Fn::Sub"]
    assert "${QuotaBackendBytes}" in text
    assert (p["ComparisonOperator"], p["Threshold"]) == ("GreaterThanThreshold", 80)
    assert p["TreatMissingData"] == "notBreaching"
    assert p["AlarmActions"] == TOPIC_ACTION
    # What the expression computes, for a few quotas the parameter allows.
    for quota in (QUOTA_MIN, 2 << 30, QUOTA_MAX):
        value = lambda size: eval(text.replace("${QuotaBackendBytes}", str(quota)), {}, {stat["Id"]: size})
        assert value(quota * 8 // 10 + 1) > p["Threshold"]
        assert not value(quota * 8 // 10) > p["Threshold"]


def test_the_member_certificate_alarm_fires_below_a_sixth_of_their_life(template):
    p = alarm(template, "MemberCertExpiringAlarm")
    (stat,) = [m for m in p["Metrics"] if "MetricStat" in m]
    (expr,) = [m for m in p["Metrics"] if "Expression" in m]
    m = stat["MetricStat"]["Metric"]
    assert (m["Namespace"], m["MetricName"]) == (NAMESPACE, "MemberCertDaysLeft")
    cluster_dimension(template, m["Dimensions"])
    assert stat["MetricStat"]["Stat"] == "Minimum" and expr["ReturnData"] is True
    assert (p["ComparisonOperator"], p["Threshold"], p["TreatMissingData"]) == ("LessThanThreshold", 1, "notBreaching")
    text = expr["Expression"]["Fn::Sub"]
    for days in (1, 90, 3650):
        value = lambda left: eval(text.replace("${MemberCertDays}", str(days)), {}, {stat["Id"]: left})
        # Rotation starts at a third; the alarm only below a sixth.
        assert not value(days / 3) < p["Threshold"] and not value(days / 6) < p["Threshold"]
        assert value(days / 6 - 0.01) < p["Threshold"]
    assert p["AlarmActions"] == TOPIC_ACTION


def test_the_failed_invocations_alarm_notifies_of_each_failure_not_only_the_first(template):
    """Two invocations failing an hour apart, nothing in between, the queue never read (it keeps
    messages 14 days): the alarm goes to ALARM twice. The alarm's metric, as SQS reports it per
    period: NumberOfMessagesSent what was sent in it, ApproximateNumberOfMessagesVisible what the
    queue holds."""
    p = alarm(template, "FailedInvocationsAlarm")
    queue = template["Resources"]["FailedInvocations"]["Properties"]
    assert p["Namespace"] == "AWS/SQS"
    assert p["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["FailedInvocations", "QueueName"]}}]
    assert int(queue["MessageRetentionPeriod"]) == 14 * 86_400
    periods = 3600 * 3 // p["Period"]
    failed_in = {1: 1, 3600 // p["Period"] + 1: 1}  # period -> messages sent
    held = 0
    states = []
    for n in range(periods):
        sent = failed_in.get(n, 0)
        held += sent
        value = {"NumberOfMessagesSent": sent, "ApproximateNumberOfMessagesVisible": held}[p["MetricName"]]
        breaching = {"GreaterThanThreshold": value > p["Threshold"],
                     "GreaterThanOrEqualToThreshold": value >= p["Threshold"]}[p["ComparisonOperator"]]
        states.append("ALARM" if breaching else "OK")
    transitions = sum(1 for a, b in zip(["OK"] + states, states) if a == "OK" and b == "ALARM")
    assert transitions == 2, (p["MetricName"], states)
    assert p["Statistic"] == "Sum" and p["EvaluationPeriods"] == 1
    assert p["TreatMissingData"] == "notBreaching", "no message sent in a period: no datapoint, OK"


def test_every_alarm_notifies_the_optional_topic(template):
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    assert set(METRIC_ALARMS) | {"DatabaseNearQuotaAlarm", "FailedInvocationsAlarm"} <= set(alarms)
    for name, a in alarms.items():
        assert a["Properties"]["AlarmActions"] == TOPIC_ACTION, name


def dashboard_body(t):
    """The dashboard's JSON with every ${...} replaced, after checking each names something real."""
    (d,) = resources(t, "AWS::CloudWatch::Dashboard").values()
    text = d["Properties"]["DashboardBody"]["Fn::Sub"]
    assert isinstance(text, str), "plain !Sub: every variable is a parameter, resource or attribute"
    values = {"AWS::StackName": STACK, "AWS::Region": "us-east-1", "QuotaBackendBytes": "2147483648",
              "MembershipFunction": f"{STACK}-membership", "FailedInvocations.QueueName": "failed-q",
              "BackupIntervalMinutes": "15", "BackupHourlyDays": "7", "BackupDailyDays": "90",
              "Recovery": "auto"}
    seen = set()

    def substitute(match):
        name = match.group(1)
        seen.add(name)
        resource, _, attribute = name.partition(".")
        if name in values:
            return values[name]
        assert resource in t["Resources"] and attribute == "Arn", name
        return f"arn:aws:cloudwatch:us-east-1:123456789012:alarm:{resource}"

    body = json.loads(re.sub(r"\$\{([^}!]+)\}", substitute, text))
    return body, seen


def test_the_dashboard_shows_the_cluster_the_steps_and_the_function(template):
    body, seen = dashboard_body(template)
    widgets = body["widgets"]
    for w in widgets:
        assert {"type", "x", "y", "width", "height", "properties"} <= set(w), w
        assert 0 <= w["x"] and w["x"] + w["width"] <= 24
        if w["type"] == "metric":
            assert w["properties"]["region"] == "us-east-1"
    metrics = [m for w in widgets if w["type"] == "metric" for m in w["properties"]["metrics"]]
    plain = [m for m in metrics if isinstance(m[0], str)]
    ours = {m[1] for m in plain if m[0] == NAMESPACE}
    assert {"Members", "Voters", "Learners", "HealthyVoters", "QuorumMargin", "InstancesHeld",
            "TerminationsHeld", "HeldForQuorum", "OldestLaunchHoldSeconds", "DbSizeBytes",
            "DbSizeInUseBytes", "NospaceAlarm", "LiveDataOverQuota", "SecondsSinceLastBackup"} <= ours
    for m in plain:
        if m[0] == NAMESPACE:
            assert m[2:4] == ["ClusterName", STACK], m
    lambda_metrics = {m[1] for m in plain if m[0] == "AWS/Lambda" and m[2:4] == ["FunctionName", f"{STACK}-membership"]}
    assert {"Errors", "Duration", "Invocations", "Throttles"} <= lambda_metrics
    (duration,) = [w for w in widgets if any(m[:2] == ["AWS/Lambda", "Duration"] for m in w["properties"].get("metrics", []))]
    (line,) = duration["properties"]["annotations"]["horizontal"]
    assert line["value"] == function(template)["Properties"]["Timeout"] * 1000, "the function's timeout"
    searches = [e["expression"] for m in metrics if isinstance(m[0], dict) for e in m
                if isinstance(e, dict) and e.get("expression", "").startswith("SEARCH(")]
    for kind in ("StepsApplied", "Refusals", "Errors"):
        (search,) = [s for s in searches if f"MetricName={kind}'" in s]
        assert search.startswith(f"SEARCH('{{{NAMESPACE},ClusterName}} ClusterName=\"{STACK}\" "), search
    # The alarm widget lists every alarm of the stack.
    (status,) = [w for w in widgets if w["type"] == "alarm"]
    listed = {a.rsplit(":", 1)[1] for a in status["properties"]["alarms"]}
    assert listed == set(resources(template, "AWS::CloudWatch::Alarm"))
    assert "QuotaBackendBytes" in seen, "the quota line follows the parameter"


@pytest.mark.parametrize("managed_tls", [True, False])
def test_the_group_tags_carry_the_functions_settings_for_the_cli(template, managed_tls):
    """`etcd-asg --stack NAME` finds the group by aws:cloudformation:stack-name and reads these.
    With Tls managed it also needs TLS (https, client-cert), the PKI key, ETCD_AUTH (client-cert
    asks for --prefix), and the settings that shape member configs and certificate renewals;
    START_FROM, for `plan` in a new stack."""
    cli_vars = ("LAUNCH_HOOK_NAME", "TERMINATE_HOOK_NAME", "CLUSTER_NAME", "PARAMETER_PREFIX",
                "ADDRESS_SOURCE", "ETCD_PEER_SCHEME", "ETCD_PEER_PORT", "ETCD_CLIENT_SCHEME",
                "ETCD_CLIENT_PORT", "BACKUP_BUCKET", "BACKUP_PREFIX", "TLS", "MEMBER_CERT_DAYS",
                "PKI_KMS_KEY_ID", "ETCD_METRICS_PORT", "ETCD_AUTH",
                # `plan` in a new stack: whether it waits for a backup or starts empty.
                "START_FROM", "ADOPT_ENDPOINTS")
    conditions = {"ManagedTls": managed_tls, "CreateBackupBucket": True, "HasZone": True}
    (group,) = resources(template, "AWS::AutoScaling::AutoScalingGroup").values()
    tags = {t["Key"]: t for t in render(group["Properties"]["Tags"], conditions)}
    ours = {k.split(":", 1)[1]: t for k, t in tags.items() if k.startswith("etcd-asg-lifecycle:")}
    variables = render(env(template), conditions)
    assert set(ours) == {v for v in cli_vars if v in variables}
    assert {"LAUNCH_HOOK_NAME", "TERMINATE_HOOK_NAME", "CLUSTER_NAME", "PARAMETER_PREFIX", "BACKUP_BUCKET",
            "BACKUP_PREFIX", "TLS", "MEMBER_CERT_DAYS", "ETCD_METRICS_PORT"} <= set(ours)
    assert ("PKI_KMS_KEY_ID" in ours) == managed_tls
    for var, tag in ours.items():
        assert tag["Value"] == variables[var], f"{var}: the same intrinsic or value as the function's"
        assert tag["PropagateAtLaunch"] is False, var
    # The group depends on the function's rule and schedule, so a tag naming the function, or
    # anything that depends on the group, would close a cycle. A resource that does not (the
    # backup bucket, the PKI key) may be named, and no attribute is.
    text = json.dumps([t["Value"] for t in ours.values()])
    assert '"Fn::GetAtt"' not in text
    refs = re.findall(r'"Ref": "([^"]+)"', text) + re.findall(r"\$\{([^}]+)\}", text)
    named = {r for r in refs if not r.startswith("AWS::") and r not in template["Parameters"]}
    assert named == ({"BackupBucket", "PkiKey"} if managed_tls else {"BackupBucket"}), named
    (group_name,) = resources(template, "AWS::AutoScaling::AutoScalingGroup")
    for r in named:
        assert group_name not in depends_on(template, r), f"{r} depends on the group: a cycle"


def references(value):
    """The resources and parameters a piece of template names: Ref, GetAtt, ${...} of Sub."""
    found = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "Ref":
                found.add(v)
            elif k == "Fn::GetAtt":
                found.add(v[0] if isinstance(v, list) else v.split(".")[0])
            elif k == "Fn::Sub":
                text = v if isinstance(v, str) else v[0]
                found |= {n.split(".")[0] for n in re.findall(r"\$\{([^}!]+)\}", text)}
                if not isinstance(v, str):
                    found |= references(v[1])
            else:
                found |= references(v)
    elif isinstance(value, list):
        for v in value:
            found |= references(v)
    return found


def depends_on(t, name, seen=None):
    """Every resource `name` depends on, directly or not (references and DependsOn)."""
    seen = set() if seen is None else seen
    r = t["Resources"][name]
    direct = references(r.get("Properties", {})) | set(
        [r["DependsOn"]] if isinstance(r.get("DependsOn"), str) else r.get("DependsOn", []))
    for d in direct & set(t["Resources"]):
        if d not in seen:
            seen.add(d)
            depends_on(t, d, seen)
    return seen


def test_sam_builds_only_the_function_binary(template):
    """The package also has the etcd-asg CLI; rust-cargolambda builds `--bin` this one only."""
    f = function(template)
    assert f["Metadata"]["BuildMethod"] == "rust-cargolambda"
    assert f["Metadata"]["BuildProperties"] == {"Binary": "bootstrap"}
    assert f["Properties"]["Handler"] == "bootstrap"
    text = (ROOT / "template.yaml").read_text()
    assert "https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/building-rust.html" in text
    cargo = (ROOT / "Cargo.toml").read_text()
    assert re.search(r'\[\[bin\]\]\s*name = "bootstrap"', cargo), "the binary SAM builds exists"


def rust_accepts_retention(value):
    """src/config/topology.rs `retention`: digits then '', 'h', 'm' or 's'; a minute to 366 days."""
    v = value.strip()
    digits = re.match(r"[0-9]*", v).group()
    unit = v[len(digits):]
    if not digits or unit not in ("", "h", "m", "s"):
        return False
    seconds = int(digits) * {"": 3600, "h": 3600, "m": 60, "s": 1}[unit]
    return 60 <= seconds <= 366 * 86400


def test_the_maintenance_parameters_reach_the_function(template):
    params = template["Parameters"]
    variables = env(template)
    assert variables["AUTO_COMPACTION_RETENTION"] == {"Ref": "AutoCompactionRetention"}
    assert variables["QUOTA_BACKEND_BYTES"] == {"Ref": "QuotaBackendBytes"}
    # Defaults are the function's own (src/config/vars.rs).
    defaults = function_defaults()
    assert str(params["AutoCompactionRetention"]["Default"]) == defaults["AUTO_COMPACTION_RETENTION"]
    assert str(params["QuotaBackendBytes"]["Default"]) == defaults["QUOTA_BACKEND_BYTES"]
    quota = params["QuotaBackendBytes"]
    assert quota["Type"] == "Number"
    assert (quota["MinValue"], quota["MaxValue"]) == (QUOTA_MIN, QUOTA_MAX)
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = {p for g in groups for p in g["Parameters"]}
    assert {"AutoCompactionRetention", "QuotaBackendBytes"} <= grouped


def test_the_retention_pattern_allows_exactly_what_the_function_accepts(template):
    """Every value the pattern allows starts the function; every value the function accepts,
    written without leading zeros, is allowed."""
    pattern = template["Parameters"]["AutoCompactionRetention"]["AllowedPattern"]
    allowed = lambda v: re.fullmatch(pattern, v) is not None
    candidates = [f"{n}{u}" for u in ("", "h") for n in range(0, 9000)]
    candidates += [f"{n}m" for n in range(0, 530_000)]
    candidates += [f"{n}s" for n in [*range(0, 100_000), *range(31_600_000, 31_650_000), 99_999_999]]
    wrong = [v for v in candidates if allowed(v) != rust_accepts_retention(v)]
    assert not wrong, wrong[:10]
    for v in ("", "h", "1d", "1.5h", "-1h", " 1h", "1H", "01h", "1h30m", "59s", "8785h", "527041m"):
        assert not allowed(v), v
    assert allowed(template["Parameters"]["AutoCompactionRetention"]["Default"])


def test_outputs_name_the_dashboard_and_the_status_command(template):
    outputs = template["Outputs"]
    assert outputs["DashboardName"]["Value"] == {"Ref": "Dashboard"}
    assert resolve(outputs["StatusCommand"]["Value"], template) == f"etcd-asg status --stack {STACK}"
    (d,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    assert resolve(d["Properties"]["DashboardName"], template) == f"{STACK}-etcd"


def test_every_metric_the_stack_watches_is_one_the_function_emits(template):
    """A renamed metric would leave an alarm or a graph silently without data."""
    source = (ROOT / "src" / "metrics.rs").read_text()
    everything = "".join(f.read_text() for f in (ROOT / "src").rglob("*.rs"))
    watched = {p["MetricName"] for p in map(lambda n: alarm(template, n), METRIC_ALARMS)}
    watched |= {m["MetricStat"]["Metric"]["MetricName"]
                for a in resources(template, "AWS::CloudWatch::Alarm").values()
                for m in a["Properties"].get("Metrics", []) if "MetricStat" in m
                and m["MetricStat"]["Metric"]["Namespace"] == NAMESPACE}
    assert {"DbSizeBytes", "SecondsSinceLastBackup"} <= watched
    body, _ = dashboard_body(template)
    watched |= {m[1] for w in body["widgets"] if w["type"] == "metric"
                for m in w["properties"]["metrics"] if isinstance(m[0], str) and m[0] == NAMESPACE}
    for name in sorted(watched):
        assert f'"{name}"' in source, f"src/metrics.rs does not emit {name}"
    assert f'NAMESPACE: &str = "{NAMESPACE}"' in source
    for prefix in ("StepsApplied", "Refusals", "Errors"):
        assert f'"{prefix}.{{' in everything, f"no metric is named {prefix}.<kind>"
