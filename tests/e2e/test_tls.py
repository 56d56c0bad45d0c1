"""Mutual TLS on real etcd, moto and the real binary (TLS=managed, the simulation's default):
members refuse whoever lacks one of the cluster's certificates, keys stay secret, and
certificates renew by replacing members one at a time."""

import json
import os
import ssl
import stat
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import wait_for
from sim import etcd


@pytest.mark.v37
def test_members_refuse_plain_http_and_tls_without_a_client_certificate(simulation):
    """Members refuse plain HTTP and TLS without a client certificate.

    Long: one scenario, step by step; each step's assertions depend on the state the
    previous left.
    """
    sim = simulation(writer=False)
    assert sim.tls, "TLS is the simulation's default"
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    iid = next(iter(sim.instances))
    url = sim.client_url(iid)
    assert url.startswith("https://")
    etcd.put(url, "/tls/ok", "yes", timeout=5)  # with the CLI-issued client certificate
    address = sim.instances[iid].address
    ca = f"{sim.client_cert_dir}/ca.crt"
    # TLS without a client certificate: the handshake is refused.
    anonymous = ssl.create_default_context(cafile=ca)
    with pytest.raises(OSError):
        urllib.request.urlopen(urllib.request.Request(f"{url}/v3/maintenance/status", data=b"{}"),
                               timeout=3, context=anonymous).read()
    # Plain HTTP on the client port: no API.
    try:
        urllib.request.urlopen(urllib.request.Request(f"http://{address}:2379/v3/maintenance/status",
                                                      data=b"{}"), timeout=3).read()
        raise AssertionError("plain HTTP answered on the client port")
    except OSError:
        pass
    # The metrics listener answers health checks in plain HTTP (the load balancer's). etcd's
    # /health is a linearizable read: on a loaded machine just after authentication turned on it
    # answered 503 once (3.7), so it is asked until healthy.
    def healthy():
        try:
            with urllib.request.urlopen(f"http://{address}:2381/health", timeout=3) as r:
                return r.status == 200
        except urllib.error.HTTPError:
            return False

    wait_for("the plain /health to answer 200", 20, healthy)
    # The member's key: a SecureString, written 0600 on its instance, never in the function's log.
    p = sim.ssm.get_parameter(Name=f"{sim.prefix}/tls/{iid}", WithDecryption=True)["Parameter"]
    assert p["Type"] == "SecureString"
    key_file = f"{sim.instances[iid].data_dir}/pki/member.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    with open(key_file) as f:
        key = f.read().strip()
    assert key in p["Value"]
    body = key.splitlines()[1]
    with open(f"{sim.workdir}/function.log") as f:
        assert body not in f.read()
    ca_param = sim.ssm.get_parameter(Name=f"{sim.prefix}/pki/ca", WithDecryption=True)["Parameter"]
    assert ca_param["Type"] == "SecureString"
    # etcd's authentication is on: the simulation's writes above carried root tokens; a client
    # certificate for a user of one prefix, from the CLI, reaches that prefix and nothing else.
    def function_log() -> str:
        with open(f"{sim.workdir}/function.log") as f:
            return f.read()

    wait_for("authentication on", 60, lambda: "etcd authentication on" in function_log())
    refused = sim.cli("client-cert", "app", "--out", f"{sim.workdir}/app")
    assert refused.returncode != 0 and "--prefix" in refused.stderr, refused.stderr
    assert not os.path.exists(f"{sim.workdir}/app/app.key"), "nothing issued on a refusal"
    r = sim.cli("client-cert", "app", "--prefix", "/app/", "--read-only", "--out", f"{sim.workdir}/app")
    assert r.returncode == 0, r.stderr
    assert 'may read keys starting with "/app/"' in r.stdout, r.stdout
    etcd.put(url, "/app/setting", "on", timeout=5)
    etcd.put(url, "/billing/secret", "x", timeout=5)
    d = f"{sim.workdir}/app"

    def app(*args: str) -> subprocess.CompletedProcess:
        ctl = os.path.join(os.path.dirname(sim.etcd_bin), "etcdctl")
        return subprocess.run([ctl, "--endpoints", url, "--cacert", f"{d}/ca.crt", "--cert", f"{d}/app.crt",
                               "--key", f"{d}/app.key", "--command-timeout", "5s", *args],
                              capture_output=True, text=True, timeout=30, env={"ETCDCTL_API": "3"})

    got = app("get", "/app/setting", "--print-value-only")
    assert got.returncode == 0 and got.stdout.strip() == "on", got.stderr
    for args in (("get", "/billing/secret"), ("put", "/app/setting", "off"),
                 ("member", "add", "x", "--peer-urls", "https://127.0.0.1:1", "--learner"),
                 ("snapshot", "save", f"{d}/stolen.db"), ("auth", "disable")):
        denied = app(*args)
        assert denied.returncode != 0 and "permission denied" in denied.stderr + denied.stdout, (args, denied)
    # A gateway user (curl, HTTP clients): a fresh password, written 0600 and never printed, and a
    # certificate without a common name; it logs in through the gateway and reaches its prefix.
    r = sim.cli("client-cert", "gw", "--prefix", "/gw/", "--password", "--out", f"{sim.workdir}/gw")
    assert r.returncode == 0, r.stderr
    g = f"{sim.workdir}/gw"
    with open(f"{g}/gw.password") as f:
        password = f.read()
    assert len(password) == 32 and password not in r.stdout + r.stderr
    assert stat.S_IMODE(os.stat(f"{g}/gw.password").st_mode) == 0o600
    assert "/v3/auth/authenticate" in r.stdout, r.stdout
    tls = ssl.create_default_context(cafile=f"{g}/ca.crt")
    tls.load_cert_chain(f"{g}/gw.crt", f"{g}/gw.key")

    def gateway(path: str, body: dict, token: str | None = None) -> tuple[int, dict]:
        headers = {"Content-Type": "application/json", **({"Authorization": token} if token else {})}
        req = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=5, context=tls) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    code, login = gateway("/v3/auth/authenticate", {"name": "gw", "password": password})
    assert code == 200 and login.get("token"), login
    token = login["token"]
    assert gateway("/v3/kv/put", {"key": etcd.b64("/gw/x"), "value": etcd.b64("1")}, token)[0] == 200
    code, got = gateway("/v3/kv/range", {"key": etcd.b64("/gw/x")}, token)
    assert code == 200 and got["kvs"][0]["value"] == etcd.b64("1"), got
    code, denied = gateway("/v3/kv/put", {"key": etcd.b64("/billing/x"), "value": etcd.b64("1")}, token)
    assert code != 200 and "permission denied" in json.dumps(denied), denied
    code, wrong = gateway("/v3/auth/authenticate", {"name": "gw", "password": password[::-1]})
    assert code != 200 and "authentication failed" in json.dumps(wrong), wrong
    with open(f"{sim.workdir}/function.log") as f:
        assert password not in f.read()

    # Leases expire with authentication on: etcd's leader revokes an expired lease as root with a
    # token its own provider signs, which a verify-only key cannot (etcd-io/etcd#14616); members
    # hold the cluster's token key. The lease is granted over gRPC as root (the CLI's certificate).
    def root(*args: str) -> subprocess.CompletedProcess:
        return sim.etcdctl(url, *args)

    granted = root("lease", "grant", "3")
    assert granted.returncode == 0, granted.stderr
    lease = granted.stdout.split()[1]  # "lease 694d... granted with TTL(3s)"
    put = root("put", "--lease", lease, "/app/leased", "x")
    assert put.returncode == 0, put.stderr
    assert root("get", "/app/leased", "--print-value-only").stdout.strip() == "x"
    wait_for("the leased key gone with its lease", 20,
             lambda: root("get", "/app/leased", "--print-value-only").stdout.strip() == "")
    ttl = root("lease", "timetolive", lease)
    assert ttl.returncode == 0 and "already expired" in ttl.stdout, ttl.stdout + ttl.stderr
    # A removed member's key material goes with its config.
    sim.scale(2)
    sim.wait_converged(2, label="scale in")
    gone = next(i for i in sim.instances if i not in {g["InstanceId"] for g in sim.group_instances()})
    names = sim.parameters()
    assert f"{sim.prefix}/tls/{gone}" not in names and f"{sim.prefix}/certs/{gone}" not in names


@pytest.mark.long(110)
def test_certificates_renew_by_replacing_members_one_at_a_time_with_no_write_lost(simulation):
    life = 120
    sim = simulation(function_env={"MEMBER_CERT_SECS": str(life)})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    originals = {g["InstanceId"] for g in sim.group_instances()}
    sim.start_writer()
    # Each is replaced once less than a third of its life is left (after ~80 s), one at a time.
    wait_for("every original member replaced", 420,
             lambda: not originals & {g["InstanceId"] for g in sim.group_instances()})
    sim.wait_converged(3, label="rotated", timeout=120)
    time.sleep(1)
    sim.writer.stop()
    lost = sim.writer.lost()
    print(f"rotation: {len(sim.writer.acked)} acknowledged writes, {len(lost)} lost, longest stall "
          f"{sim.writer.longest_stall:.1f}s")
    assert not lost, lost[:10]
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert log.count("member certificate past two thirds of its life") >= 3



@pytest.mark.long(100)
def test_a_cluster_of_one_renews_its_certificate_by_replacement_with_no_write_lost(simulation):
    """A single voter's certificate is rotated too: its termination is held until the
    replacement is a voter (the last-voter hold), whatever order the group takes."""
    life = 120
    sim = simulation(function_env={"MEMBER_CERT_SECS": str(life)})
    sim.scale(1)
    sim.wait_converged(1, label="bootstrap")
    (original,) = {g["InstanceId"] for g in sim.group_instances()}
    sim.start_writer()
    wait_for("the only member replaced", 300, lambda: original not in {g["InstanceId"] for g in sim.group_instances()})
    sim.wait_converged(1, label="rotated", timeout=120)
    time.sleep(1)
    sim.writer.stop()
    lost = sim.writer.lost()
    print(f"single-member rotation: {len(sim.writer.acked)} acknowledged writes, {len(lost)} lost")
    assert not lost, lost[:10]
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert "member certificate past two thirds of its life" in log
