"""Mutual TLS (Tls=managed, the default): the parameter and the settings passed to the function,
the KMS key of the SecureStrings, who may read the CA and the member bundles (evaluated, not only
read), the members' ports, the load balancer passing TLS through with a health check on the plain
metrics port, and the outputs."""

import fnmatch
import re
from pathlib import Path

import pytest

from test_operations import depends_on, env, references
from test_template import STACK, function_defaults, render, resolve, resources, statements

ROOT = Path(__file__).resolve().parents[2]
REGION, ACCOUNT = "us-east-1", "123456789012"
PARAMETERS = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/etcd-asg-lifecycle/{STACK}"
CA = f"{PARAMETERS}/pki/ca"
TAG = "aws:ResourceTag/etcd-asg-instance-arn"
VIA_SSM = {"StringEquals": {"kms:ViaService": {"Fn::Sub": "ssm.${AWS::Region}.amazonaws.com"}}}
PKI_RESOURCES = {"PkiKey", "FunctionPkiPolicy", "InstancePkiPolicy"}
# src/config/tls.rs: MEMBER_CERT_DAYS 1..=3650.
CERT_DAYS = (1, 3650)
MANAGED = {"ManagedTls": True, "HasZone": True, "CreateBackupBucket": True, "WithSessionManager": True,
           "HasVolumeKey": False}
BUCKET = f"{STACK}-backups-bucket"


def instance_arn(instance):
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance}"


def bundle(instance, stack=STACK):
    return f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/etcd-asg-lifecycle/{stack}/tls/{instance}"


# --- a small IAM evaluator over the stack's role policies ----------------------------------------

def concrete(value):
    """A policy's Resource or condition value for this stack, account and Region: Fn::Sub text, a
    bucket's (BUCKET, the stack creating it), or a key's ARN (arn:<logical id>); None for what
    it cannot tell."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), list):
        text, variables = value["Fn::Sub"]
        for name, v in variables.items():
            if render(v, MANAGED) not in ({"Ref": "BackupBucket"}, {"Ref": "BackupBucketName"}):
                return None
            text = text.replace("${" + name + "}", BUCKET)
        return concrete({"Fn::Sub": text})
    if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), str):
        return (value["Fn::Sub"].replace("${AWS::Partition}", "aws").replace("${AWS::Region}", REGION)
                .replace("${AWS::AccountId}", ACCOUNT).replace("${AWS::StackName}", STACK))
    if isinstance(value, dict) and "Fn::GetAtt" in value and value["Fn::GetAtt"][1] == "Arn":
        return f"arn:{value['Fn::GetAtt'][0]}"
    return None


def as_list(value):
    return value if isinstance(value, list) else [value]


def condition_holds(condition, context):
    for operator, tests in (condition or {}).items():
        if_exists = operator.endswith("IfExists")
        operator = operator.removesuffix("IfExists")
        assert operator in ("StringEquals", "StringLike", "ArnEquals", "StringNotEquals"), \
            f"the evaluator knows no {operator}"
        negated = operator == "StringNotEquals"
        for key, want in tests.items():
            if key not in context:
                # A negated operator, or one ...IfExists, holds when the key is absent; any other
                # fails: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html
                if negated or if_exists:
                    continue
                return False
            wanted = []
            for w in as_list(want):
                w = concrete(w)
                # A policy variable with no value in the request matches nothing.
                for var in re.findall(r"\$\{([^}]+)\}", w):
                    if var not in context:
                        return False
                    w = w.replace("${" + var + "}", context[var])
                wanted.append(w)
            match = fnmatch.fnmatchcase if operator in ("StringLike", "ArnEquals") else str.__eq__
            found = any(match(context[key], w) for w in wanted)
            if found == negated:
                return False
    return True


def allowed(t, role, action, resource, context=None, extra=()):
    """IAM's answer for `role` (identity policies only, and `extra` statements attached to it):
    an explicit deny wins, else any allow."""
    context = context or {}
    verdicts = set()
    for name, s in [*statements(t), *((role, e) for e in extra)]:
        if name != role:
            continue
        if not any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in as_list(s["Action"])):
            continue
        patterns = [concrete(r) for r in as_list(s["Resource"])]
        if not any(p is not None and fnmatch.fnmatchcase(resource, p) for p in patterns):
            continue
        if condition_holds(s.get("Condition"), context):
            verdicts.add(s["Effect"])
    return "Deny" not in verdicts and "Allow" in verdicts


def instance_request(instance, tagged_for=None):
    context = {"ec2:SourceInstanceARN": instance_arn(instance)}
    if tagged_for is not None:
        context[TAG] = instance_arn(tagged_for)
    return context


# --- the parameter and the function's settings ---------------------------------------------------

def test_mutual_tls_is_the_default_and_reaches_the_function(template):
    p = template["Parameters"]["Tls"]
    assert (p["Type"], p["Default"], p["AllowedValues"]) == ("String", "managed", ["managed", "off"])
    assert template["Conditions"]["ManagedTls"] == {"Fn::Equals": [{"Ref": "Tls"}, "managed"]}
    variables = env(template)
    assert variables["TLS"] == {"Ref": "Tls"}
    # The function forces https with TLS=managed and refuses another scheme or files of its own.
    for var in ("ETCD_PEER_SCHEME", "ETCD_CLIENT_SCHEME"):
        assert variables.get(var, "https") == "https", var
    assert not {"ETCD_CA_FILE", "ETCD_CERT_FILE", "ETCD_KEY_FILE"} & set(variables)
    days = template["Parameters"]["MemberCertDays"]
    assert variables["MEMBER_CERT_DAYS"] == {"Ref": "MemberCertDays"}
    assert days["Type"] == "Number" and str(days["Default"]) == function_defaults()["MEMBER_CERT_DAYS"] == "90"
    assert CERT_DAYS[0] <= days["MinValue"] <= days["Default"] <= days["MaxValue"] <= CERT_DAYS[1]
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    assert {"Tls", "MemberCertDays"} <= {p for g in groups for p in g["Parameters"]}


@pytest.mark.parametrize("zone", [True, False])
def test_member_certificates_name_the_load_balancer_and_the_record(template, zone):
    """Clients reach members through the load balancer (TLS passes through), by its DNS name or
    the record's: every member certificate must name both."""
    value = render(env(template)["MEMBER_CERT_EXTRA_SANS"], {"HasZone": zone})
    if "Fn::GetAtt" in value:
        names = ["${" + ".".join(value["Fn::GetAtt"]) + "}"]
    else:
        names = value["Fn::Sub"].split(",")
    assert "${LoadBalancer.DNSName}" in names
    assert ("${RecordName}" in names) == zone
    assert len(names) == (2 if zone else 1)
    record = template["Resources"]["ClientRecord"]
    assert record["Properties"]["Name"] == {"Ref": "RecordName"} and record["Condition"] == "HasZone"
    (listener,) = resources(template, "AWS::ElasticLoadBalancingV2::Listener").values()
    assert listener["Properties"]["LoadBalancerArn"] == {"Ref": "LoadBalancer"}


def test_the_secure_strings_use_the_stacks_pki_key(template):
    key = template["Resources"]["PkiKey"]
    assert key["Type"] == "AWS::KMS::Key" and key["Condition"] == "ManagedTls"
    assert key["Properties"]["EnableKeyRotation"] is True
    assert env(template)["PKI_KMS_KEY_ID"] == {"Fn::If": ["ManagedTls", {"Ref": "PkiKey"}, {"Ref": "AWS::NoValue"}]}
    stmts = {s["Sid"]: s for s in key["Properties"]["KeyPolicy"]["Statement"]}
    assert len(stmts) == 3 and all(s["Effect"] == "Allow" for s in stmts.values())
    root = stmts["AccountAdministersAndDelegatesToIam"]
    assert root["Principal"] == {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}}
    assert (root["Action"], root["Resource"], "Condition" in root) == ("kms:*", "*", False), "no lock-out"
    function = stmts["FunctionKeepsTheCaAndIssuesBundlesThroughSsm"]
    assert function["Principal"] == {"AWS": {"Fn::GetAtt": ["FunctionRole", "Arn"]}}
    assert sorted(function["Action"]) == ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"]
    assert function["Condition"] == VIA_SSM
    instance = stmts["InstancesReadTheirBundleThroughSsm"]
    assert instance["Principal"] == {"AWS": {"Fn::GetAtt": ["InstanceRole", "Arn"]}}
    assert instance["Action"] == "kms:Decrypt", "instances only read"
    assert instance["Condition"]["StringEquals"] == VIA_SSM["StringEquals"]
    assert set(instance["Condition"]) == {"StringEquals", "StringLike"}  # the bundles' context: below
    # The key names the roles, so the roles' own policies do not name the key (a cycle).
    for role in ("FunctionRole", "InstanceRole"):
        assert "PkiKey" not in depends_on(template, role), role
    for name in ("FunctionPkiPolicy", "InstancePkiPolicy"):
        assert template["Resources"][name]["Condition"] == "ManagedTls"


# --- who may read and write the CA and the bundles -----------------------------------------------

def test_an_instance_reads_only_its_own_bundle_and_never_the_ca(template):
    get = lambda resource, context, action="ssm:GetParameter": allowed(
        template, "InstanceRole", action, resource, context)
    assert get(bundle("i-1"), instance_request("i-1", tagged_for="i-1"))
    assert not get(bundle("i-2"), instance_request("i-1", tagged_for="i-2")), "another instance's bundle"
    assert not get(bundle("i-1"), instance_request("i-1")), "a bundle not tagged (yet)"
    assert not get(bundle("i-1"), {TAG: instance_arn("i-1")}), "a caller that is no instance"
    assert not get(bundle("i-1", "prod2"), instance_request("i-1", tagged_for="i-1")), "another stack"
    # Its member config the same way (the mechanism the bundle reuses).
    assert get(f"{PARAMETERS}/members/i-1", instance_request("i-1", tagged_for="i-1"))
    # Never the CA: not even tagged for the instance, by no read action.
    for action in ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParameterHistory"):
        for resource in (CA, f"{PARAMETERS}/pki/next"):
            assert not get(resource, instance_request("i-1", tagged_for="i-1"), action), (action, resource)
    assert not get(f"{PARAMETERS}/pki", instance_request("i-1"), "ssm:GetParametersByPath")
    assert not get(f"{PARAMETERS}", instance_request("i-1"), "ssm:GetParametersByPath")
    # The deny is explicit, and no instance statement allows the pki path at all.
    denies = {s["Sid"]: s for role, s in statements(template) if role == "InstanceRole" and s["Effect"] == "Deny"}
    deny = denies["NeverReadTheClusterCa"]
    assert "ssm:GetParameter" in deny["Action"] and "Condition" not in deny
    allows = [concrete(r) for role, s in statements(template) if role == "InstanceRole" and s["Effect"] == "Allow"
              for r in as_list(s["Resource"])]
    assert not [p for p in allows if p and fnmatch.fnmatchcase(CA, p)]
    # Nothing writes for instances.
    for action in ("ssm:PutParameter", "ssm:DeleteParameter", "ssm:AddTagsToResource"):
        assert not allowed(template, "InstanceRole", action, bundle("i-1"), instance_request("i-1", "i-1")), action


# AmazonSSMManagedInstanceCore (SessionManager=on) allows ssm:GetParameter and GetParameters on *.
CORE = {"Effect": "Allow", "Action": ["ssm:GetParameter", "ssm:GetParameters"], "Resource": "*"}


@pytest.mark.parametrize("extra", [(), (CORE,), ({"Effect": "Allow", "Action": "ssm:*", "Resource": "*"},)])
def test_explicit_denies_isolate_instances_whatever_else_is_attached(template, extra):
    """With the SSM core policy (or any broader Allow) on the instance role, an instance still
    reads only what is tagged for it, never the CA or token key, and lists nothing."""
    def get(resource, context, action="ssm:GetParameter"):
        return allowed(template, "InstanceRole", action, resource, context, extra)

    for kind in ("tls", "members"):
        other = f"{PARAMETERS}/{kind}/i-2"
        for action in ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParameterHistory"):
            assert not get(other, instance_request("i-1", tagged_for="i-2"), action), (kind, action)
            assert not get(other, instance_request("i-1"), action), f"untagged {kind}: fails closed"
        assert get(f"{PARAMETERS}/{kind}/i-1", instance_request("i-1", tagged_for="i-1"))
    for secret in (CA, f"{PARAMETERS}/pki/token-key"):
        assert not get(secret, instance_request("i-1", tagged_for="i-1")), secret
    for path in (PARAMETERS, f"{PARAMETERS}/tls", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/etcd-asg-lifecycle",
                 f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/"):
        assert not get(path, instance_request("i-1"), "ssm:GetParametersByPath"), path
    if extra:
        # What the extra policy is for still works: a parameter outside the cluster's secrets.
        assert get(f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/aws/service/ami", instance_request("i-1"))


def test_the_ssm_core_policy_is_attached_only_with_session_manager(template):
    p = template["Parameters"]["SessionManager"]
    assert (p["Default"], p["AllowedValues"]) == ("on", ["on", "off"])
    assert template["Conditions"]["WithSessionManager"] == {"Fn::Equals": [{"Ref": "SessionManager"}, "on"]}
    arns = template["Resources"]["InstanceRole"]["Properties"]["ManagedPolicyArns"]
    assert arns == {"Fn::If": ["WithSessionManager",
                               [{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"}],
                               {"Ref": "AWS::NoValue"}]}


def test_instances_decrypt_only_what_parameter_store_decrypts_for_a_bundle(template):
    """kms:Decrypt on the PKI key, in the role's policy and the key's: only with the encryption
    context of a parameter under tls/, never pki/ (the CA, the token key)."""
    via = {"kms:ViaService": f"ssm.{REGION}.amazonaws.com"}
    decrypt = lambda parameter: allowed(template, "InstanceRole", "kms:Decrypt", "arn:PkiKey",
                                        {**via, "kms:EncryptionContext:PARAMETER_ARN": parameter})
    assert decrypt(bundle("i-1"))
    for parameter in (CA, f"{PARAMETERS}/pki/token-key", bundle("i-1", "prod2")):
        assert not decrypt(parameter), parameter
    assert not allowed(template, "InstanceRole", "kms:Decrypt", "arn:PkiKey", via), "no context: no decrypt"
    key = {s["Sid"]: s for s in template["Resources"]["PkiKey"]["Properties"]["KeyPolicy"]["Statement"]}
    context = key["InstancesReadTheirBundleThroughSsm"]["Condition"]["StringLike"]
    assert concrete(context["kms:EncryptionContext:PARAMETER_ARN"]) == f"{PARAMETERS}/tls/*"


def test_the_function_attaches_to_the_vpc_with_the_keys_each_eni_action_has(template):
    """CreateNetworkInterface's new network-interface carries no ec2:Vpc (the Service
    Authorization Reference lists none for it): requiring it there would fail the function's
    creation. Its subnet and security group, and every other ENI action, are held to the VPC
    (their requests carry the key)."""
    ec2 = f"arn:aws:ec2:{REGION}:{ACCOUNT}"
    eni, subnet = f"{ec2}:network-interface/eni-1", f"{ec2}:subnet/subnet-1"
    group = f"{ec2}:security-group/${{FunctionSecurityGroup}}"
    # VpcId is a template parameter: the evaluator resolves it like a variable.
    ours = {"ec2:Vpc": f"{ec2}:vpc/vpc-1", "VpcId": "vpc-1"}
    theirs = {"ec2:Vpc": f"{ec2}:vpc/vpc-2", "VpcId": "vpc-1"}
    fn = lambda action, resource, context: allowed(template, "FunctionRole", action, resource, context)
    assert fn("ec2:CreateNetworkInterface", eni, {"VpcId": "vpc-1"}), "the new interface: no ec2:Vpc in the request"
    for resource in (subnet, group):
        assert fn("ec2:CreateNetworkInterface", resource, ours), resource
        assert not fn("ec2:CreateNetworkInterface", resource, theirs), resource
    for action in ("ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"):
        assert fn(action, eni, ours), action
        assert not fn(action, eni, theirs), action
    assert "https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html" in \
        (ROOT / "template.yaml").read_text()


def test_the_function_reads_and_writes_the_ca_and_the_bundles(template):
    for resource in (CA, bundle("i-1")):
        for action in ("ssm:GetParameter", "ssm:PutParameter", "ssm:DeleteParameter", "ssm:AddTagsToResource"):
            assert allowed(template, "FunctionRole", action, resource), (action, resource)
    assert not allowed(template, "FunctionRole", "ssm:GetParameter", bundle("i-1", "prod2"))


def test_the_pki_key_is_used_only_through_ssm(template):
    ssm = {"kms:ViaService": f"ssm.{REGION}.amazonaws.com"}
    s3 = {"kms:ViaService": f"s3.{REGION}.amazonaws.com"}
    key = "arn:PkiKey"
    for action in ("kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"):
        assert allowed(template, "FunctionRole", action, key, ssm), action
        assert not allowed(template, "FunctionRole", action, key, s3), action
        assert not allowed(template, "FunctionRole", action, key), f"{action} called directly"
    bundle_context = {**ssm, "kms:EncryptionContext:PARAMETER_ARN": bundle("i-1")}
    assert allowed(template, "InstanceRole", "kms:Decrypt", key, bundle_context)
    for action in ("kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom"):
        assert not allowed(template, "InstanceRole", action, key, ssm), action
    assert not allowed(template, "InstanceRole", "kms:Decrypt", key), "called directly"
    assert not allowed(template, "InstanceRole", "kms:Decrypt", key, s3)
    assert not allowed(template, "InstanceRole", "kms:Decrypt", "arn:BackupKey", ssm), "the backup key via S3 only"
    # KMS statements name the key they are for.
    for role, s in statements(template):
        if any(a.startswith("kms:") for a in as_list(s["Action"])):
            assert s["Resource"] in ({"Fn::GetAtt": ["PkiKey", "Arn"]}, {"Fn::GetAtt": ["BackupKey", "Arn"]}), s


@pytest.mark.parametrize("managed", [True, False])
def test_tls_off_needs_none_of_the_pki_resources(template, managed):
    """With Tls off the stack creates no key or key policies, and nothing names them."""
    conditions = dict(MANAGED, ManagedTls=managed, HasRouteTables=True, HasAlarmTopic=True, SingleMember=False)
    t = template
    assert {n for n, r in t["Resources"].items() if r.get("Condition") == "ManagedTls"} == PKI_RESOURCES
    for name, r in t["Resources"].items():
        if r.get("Condition") == "ManagedTls" and not managed:
            continue
        named = references(render(r, conditions)) & PKI_RESOURCES
        assert managed or not named, (name, named)
    for name, o in t["Outputs"].items():
        if o.get("Condition") == "ManagedTls" and not managed:
            continue
        assert managed or not references(render(o, conditions)) & PKI_RESOURCES, name


# --- the network ---------------------------------------------------------------------------------

def ingress(t, group):
    rules = list(t["Resources"][group]["Properties"].get("SecurityGroupIngress", []))
    for r in resources(t, "AWS::EC2::SecurityGroupIngress").values():
        p = r["Properties"]
        if p["GroupId"] == {"Ref": group}:
            rules.append({k: v for k, v in p.items() if k != "GroupId"})
    return rules


def source(rule):
    if "CidrIp" in rule:
        return ("cidr", rule["CidrIp"]["Ref"] if isinstance(rule["CidrIp"], dict) else rule["CidrIp"])
    assert set(rule) & {"CidrIpv6", "SourcePrefixListId", "SourceSecurityGroupOwnerId"} == set(), rule
    return ("sg", rule["SourceSecurityGroupId"]["Ref"])


def sources(rules, port):
    return {source(r) for r in rules if r["IpProtocol"] == "-1" or r["FromPort"] <= port <= r["ToPort"]}


def test_members_take_clients_peers_and_metrics_only_from_whom_they_should(template):
    rules = ingress(template, "MemberSecurityGroup")
    assert all(r["IpProtocol"] == "tcp" and 2379 <= r["FromPort"] <= r["ToPort"] <= 2381 for r in rules), rules
    # Clients (TLS-only with Tls managed): the client CIDR, the load balancer, the function, peers.
    assert sources(rules, 2379) == {("cidr", "ClientCidr"), ("sg", "FunctionSecurityGroup"),
                                    ("sg", "LoadBalancerSecurityGroup"), ("sg", "MemberSecurityGroup")}
    assert sources(rules, 2380) == {("sg", "MemberSecurityGroup")}, "peers only"
    # Plain HTTP /health and /metrics: the load balancer's health checks, the members, and the
    # function (the peers' view of a member it cannot reach).
    assert sources(rules, 2381) == {("sg", "LoadBalancerSecurityGroup"), ("sg", "MemberSecurityGroup"),
                                    ("sg", "FunctionSecurityGroup")}
    (lb,) = ingress(template, "LoadBalancerSecurityGroup")
    assert (lb["IpProtocol"], lb["FromPort"], lb["ToPort"], source(lb)) == ("tcp", 2379, 2379, ("cidr", "ClientCidr"))


@pytest.mark.parametrize("managed", [True, False])
def test_the_load_balancer_passes_tls_through_and_checks_health_on_the_metrics_port(template, managed):
    (lb,) = resources(template, "AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    assert lb["Properties"]["Type"] == "network"
    (listener,) = resources(template, "AWS::ElasticLoadBalancingV2::Listener").values()
    p = listener["Properties"]
    assert (p["Protocol"], p["Port"]) == ("TCP", 2379), "TCP passthrough: members check client certificates"
    assert not {"Certificates", "SslPolicy", "AlpnPolicy"} & set(p)
    assert p["DefaultActions"] == [{"Type": "forward", "TargetGroupArn": {"Ref": "ClientTargetGroup"}}]
    tg = render(template["Resources"]["ClientTargetGroup"]["Properties"], {"ManagedTls": managed})
    assert (tg["Protocol"], tg["Port"]) == ("TCP", 2379)
    assert (tg["HealthCheckProtocol"], tg["HealthCheckPath"]) == ("HTTP", "/health")
    if managed:
        # 2379 asks for a client certificate the health check does not have.
        assert tg["HealthCheckPort"] == env(template)["ETCD_METRICS_PORT"] == "2381"
        assert function_defaults()["ETCD_METRICS_PORT"] == "2381"
    else:
        assert tg["HealthCheckPort"] == "2379", "plain HTTP on the client port"


# --- outputs and the boot script -----------------------------------------------------------------

@pytest.mark.parametrize("managed", [True, False])
def test_the_client_endpoint_is_https_with_managed_tls(template, managed):
    for zone, host in ((True, "${RecordName}"), (False, "${LoadBalancer.DNSName}")):
        value = render(template["Outputs"]["ClientEndpoint"]["Value"], {"ManagedTls": managed, "HasZone": zone})
        text, variables = value["Fn::Sub"]
        url = text.replace("${Scheme}", variables["Scheme"])
        host_value = variables["Host"]
        shown = "${RecordName}" if host_value == {"Ref": "RecordName"} else "${" + ".".join(host_value["Fn::GetAtt"]) + "}"
        assert url.replace("${Host}", shown) == f"{'https' if managed else 'http'}://{host}:2379"


def test_an_output_shows_how_to_get_a_client_certificate(template):
    out = template["Outputs"]["ClientCertCommand"]
    assert out["Condition"] == "ManagedTls"
    assert resolve(out["Value"], template) == f"etcd-asg --stack {STACK} client-cert <user> --prefix <prefix> --out <dir>"
    cli = (ROOT / "src" / "bin" / "etcd-asg.rs").read_text()
    assert "ClientCert {" in cli and "out: std::path::PathBuf" in cli, "the subcommand and its --out exist"


def test_the_boot_script_reads_the_bundle_the_policy_allows():
    script = (ROOT / "boot" / "etcd-boot.sh").read_text()
    assert 'name="$PARAMETER_PREFIX/tls/$INSTANCE_ID"' in script
    assert 'wait_for_parameter "$name" --with-decryption' in script
    assert "/pki/" not in script, "instances never touch the CA"


def test_the_mechanisms_are_documented_where_they_are_used():
    text = (ROOT / "template.yaml").read_text()
    for page in ("https://docs.aws.amazon.com/systems-manager/latest/userguide/sysman-paramstore-access.html",
                 "https://docs.aws.amazon.com/kms/latest/developerguide/conditions-kms.html#conditions-kms-via-service",
                 "https://docs.aws.amazon.com/systems-manager/latest/userguide/secure-string-parameter-kms-encryption.html",
                 "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html",
                 "https://docs.aws.amazon.com/elasticloadbalancing/latest/network/target-group-health-checks.html"):
        assert page in text, page
