"""Adoption on real etcd, the emulated AWS and the real binary (docs/adopting.md): a cluster that
ran before the stack, outside any group, taken over by the group's instances with its clients
writing and watching throughout (their history checked), its cluster id and every key kept."""

import json
import os
import subprocess
import time

import pytest

from conftest import invocation_outcomes, wait_for
from sim import etcd, history
from sim.outside import OutsideCluster


@pytest.fixture
def outside():
    made = []

    def make(n: int = 3, **kw) -> OutsideCluster:
        c = OutsideCluster(n, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def _waits(sim, name: str) -> list[dict]:
    return [b for _, b in invocation_outcomes(sim) if ((b or {}).get("waiting") or "").startswith(name)]


def _adoption_over(sim) -> dict:
    """The record once the adoption is over. The step that says so (`mark-served`) follows the
    last old member's removal, in the same invocation or the next one: the member set converges
    a moment before the record does, so a read right after convergence may still say adopting."""
    def record() -> dict:
        return json.loads(sim.parameters()[f"{sim.prefix}/cluster"])

    wait_for("the record to say the adoption is over", 60, lambda: "adopting" not in record())
    return record()


@pytest.mark.long(150)
@pytest.mark.parametrize("crash_after", ["adopt", "remove-member"])
def test_a_running_cluster_is_adopted_with_its_id_its_keys_and_every_acknowledged_write(simulation, outside, tmp_path,
                                                                                     crash_after):
    old = outside(3)
    for n in range(20):
        etcd.put(old.url(1), f"/old/{n:02d}", f"value {n}", timeout=5)
    cluster_id = old.cluster_id()
    # Clients of the old cluster, writing and watching throughout; they know the stack's
    # endpoint too and fail over to it as the old members leave (clientv3's balancer).
    sim = simulation(tls=False, writer=False, crash_once_after=crash_after,
                     function_env={"ADOPT_ENDPOINTS": old.endpoints()})
    rec = history.Recording(str(tmp_path), f"{old.endpoints()},{sim.client_endpoint}", rate=50)
    rec.wait_ready()
    sim.scale(3)
    sim.wait_converged(3, label="adopted", timeout=300)
    # The same cluster: its id, its keys; the old members are gone (removed, their etcd exited).
    assert sim.cluster_id == cluster_id
    url = sim.running_client_urls()[0]
    assert etcd.keys_with_prefix(url, "/old/") == {f"/old/{n:02d}" for n in range(20)}
    assert etcd.keys_with_prefix(sim.client_endpoint, "/old/") == {f"/old/{n:02d}" for n in range(20)}
    record = _adoption_over(sim)
    assert record["cluster_id"] == cluster_id and record["state"] == "served", record
    wait_for("the old members' etcd to exit once removed", 60,
             lambda: not any(old.running(k) for k in (1, 2, 3)))
    # The function was killed right after the step named, and the next invocation went on.
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert f'"message":"failpoint: aborting","step":"{crash_after}"' in log, "the failpoint never fired"
    # Every acknowledged write there, linearizable, watches neither skipping nor repeating.
    summary = history.verified(rec.stop(), [], label=f"adopt-{crash_after}")
    history.note(summary, etcd.version_of(sim.etcd_bin))
    assert summary["ops"] > 100, summary
    assert not _waits(sim, "adoption-refused")
    # A member of the group leads: the adopted leader handed over before it left.
    assert '"outcome":"transferred"' in log


@pytest.mark.long(150)
def test_adoption_is_refused_for_a_learner_a_member_down_and_authentication_changing_nothing(simulation, outside,
                                                                                          tmp_path):
    old = outside(3)
    etcd.put(old.url(1), "/old/key", "kept", timeout=5)
    # A learner added and never started (etcd takes no add before its members have been
    # connected a few seconds: retried), and a member stopped.
    wait_for("a learner added", 60, lambda: old.etcdctl(
        "member", "add", "extra", "--learner", "--peer-urls", "http://127.0.0.9:2380").returncode == 0)
    (learner,) = [m for m in json.loads(old.etcdctl("member", "list", "-w", "json").stdout)["members"]
                  if m.get("isLearner")]
    old.stop(3)
    sim = simulation(tls=False, writer=False, function_env={"ADOPT_ENDPOINTS": old.endpoints()})
    sim.scale(3)

    def refused_for(what: str):
        wait_for(f"an adoption refused: {what}", 60, lambda: what in open(f"{sim.workdir}/function.log").read())
        time.sleep(6)  # more invocations: still nothing changed
        assert f"{sim.prefix}/cluster" not in sim.parameters()
        assert all(i["LifecycleState"] == "Pending:Wait" for i in sim.group_instances())

    refused_for("is a learner")
    assert len(json.loads(old.etcdctl("member", "list", "-w", "json").stdout)["members"]) == 4
    # The learner removed: refused for the member that does not answer.
    removed = old.etcdctl("member", "remove", f"{learner['ID']:x}")
    assert removed.returncode == 0, removed.stderr
    refused_for("does not answer: every member must be healthy")
    assert "old-3" in open(f"{sim.workdir}/function.log").read()
    # Authentication on, and root's password not stored: refused, also once old-3 is back.
    root = ["--user", "root:adopt-test"]
    for args in (["user", "add", "root", "--new-user-password", "adopt-test"], ["auth", "enable"]):
        r = old.etcdctl(*args)
        assert r.returncode == 0, r.stderr
    refused_for("authentication is on, and the function cannot act as its root")
    old.start(3)
    time.sleep(6)
    assert f"{sim.prefix}/cluster" not in sim.parameters()
    assert len(json.loads(old.etcdctl(*root, "member", "list", "-w", "json").stdout)["members"]) == 3
    # A wrong password stored: refused, saying so (never showing it).
    (tmp_path / "wrong").write_text("not-the-password\n")
    r = sim.cli("adopt-secrets", "--root-password-file", str(tmp_path / "wrong"))
    assert r.returncode == 0, r.stderr
    refused_for("refused root's password")
    assert "not-the-password" not in open(f"{sim.workdir}/function.log").read()
    # Root's password stored (a plain-HTTP cluster with authentication on): adopted.
    (tmp_path / "password").write_text("adopt-test\n")
    r = sim.cli("adopt-secrets", "--root-password-file", str(tmp_path / "password"))
    assert r.returncode == 0, r.stderr
    # Adopted: the group's three instances are the members (the simulation's own reads name no
    # user over plain HTTP: etcdctl as root, with the password, reads instead).
    def members() -> set[str]:
        r = sim.etcdctl(sim.client_endpoint, *root, "member", "list", "-w", "json")
        return {u for m in json.loads(r.stdout)["members"] for u in m.get("clientURLs", [])} if r.returncode == 0 else set()

    wait_for("the group's instances alone the members", 300,
             lambda: members() and members() == set(sim.running_client_urls())
             and "adopting" not in json.loads(sim.parameters().get(f"{sim.prefix}/cluster", "{}")))
    r = sim.etcdctl(sim.client_endpoint, *root, "get", "/old/key", "--print-value-only")
    assert r.returncode == 0 and r.stdout.strip() == "kept", r
    assert "adopt-test" not in open(f"{sim.workdir}/function.log").read()


@pytest.mark.v37
@pytest.mark.long(150)
def test_a_cluster_with_its_own_ca_and_authentication_is_adopted_with_its_clients(simulation, outside, tmp_path):
    password = "outside-root-password"
    old = outside(3, tls=True, root_password=password)
    for n in range(20):
        r = old.put(f"/old/{n:02d}", f"value {n}")
        assert r.returncode == 0, r.stderr
    cluster_id = old.cluster_id()
    # Its clients: a user of its own, with a certificate of its CA naming it (gRPC).
    history_cert = old.grant("history", "/history/")
    (tmp_path / "password").write_text(f"{password}\n")

    def adopt_secrets(sim):
        # What the operator does before the function's first invocation (docs/adopting.md).
        r = sim.cli("adopt-secrets", "--ca-cert", old.ca.cert_file, "--ca-key", old.ca.key_file,
                    "--root-password-file", str(tmp_path / "password"))
        assert r.returncode == 0, r.stderr
        assert "imported the CA" in r.stdout, r.stdout

    sim = simulation(tls=True, writer=False, crash_once_after="adopt", before_function=adopt_secrets,
                     function_env={"ADOPT_ENDPOINTS": old.endpoints()})
    # The adopted CA is the stack's: the members it adds present certificates of it.
    kept = json.loads(sim.ssm.get_parameter(Name=f"{sim.prefix}/pki/ca", WithDecryption=True)["Parameter"]["Value"])
    assert kept["cert_pem"].strip() == open(old.ca.cert_file).read().strip()
    stored = sim.ssm.get_parameter(Name=f"{sim.prefix}/pki/adopted-root-password")["Parameter"]
    assert stored["Type"] == "SecureString", stored["Type"]
    # etcd's default simple tokens on the old members, beside the JWTs of the members the stack
    # adds: refused (a password login at a new member would give the old ones a predictable
    # token), the instances held and nothing written.
    sim.scale(3)
    wait_for("the adoption refused for simple tokens", 60,
             lambda: "hands out etcd's simple tokens" in open(f"{sim.workdir}/function.log").read())
    time.sleep(6)
    assert f"{sim.prefix}/cluster" not in sim.parameters()
    assert all(i["LifecycleState"] == "Pending:Wait" for i in sim.group_instances())
    assert len(json.loads(old.etcdctl("member", "list", "-w", "json").stdout)["members"]) == 3
    # The operator's fix (docs/adopting.md): the old members restarted with JWTs, one at a time.
    old.use_jwt()
    rec = history.Recording(str(tmp_path), f"{old.endpoints()},{sim.client_endpoint}", rate=50,
                            certs=(old.ca.cert_file, *history_cert))
    rec.wait_ready()
    sim.wait_converged(3, label="adopted", timeout=300)
    assert sim.cluster_id == cluster_id
    assert etcd.keys_with_prefix(sim.client_endpoint, "/old/") == {f"/old/{n:02d}" for n in range(20)}
    record = _adoption_over(sim)
    assert record["cluster_id"] == cluster_id, record
    wait_for("the old members' etcd to exit once removed", 60,
             lambda: not any(old.running(k) for k in (1, 2, 3)))
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert '"message":"failpoint: aborting","step":"adopt"' in log, "the failpoint never fired"
    assert "logged in as root with the adopted cluster's password" in log
    assert password not in log
    summary = history.verified(rec.stop(), [], label="adopt-tls-auth")
    history.note(summary, etcd.version_of(sim.etcd_bin))
    assert summary["ops"] > 100, summary
    # Its clients go on through the stack's endpoint with what they had: the old CA's
    # certificate naming their user, and root's password.
    ctl = [os.path.join(os.path.dirname(sim.etcd_bin), "etcdctl"), "--endpoints", sim.client_endpoint,
           "--command-timeout", "5s", "--cacert", old.ca.cert_file]
    as_history = [*ctl, "--cert", history_cert[0], "--key", history_cert[1]]
    for args in (["put", "/history/after", "adopted"], ["get", "/history/after", "--print-value-only"]):
        r = subprocess.run([*as_history, *args], capture_output=True, text=True, timeout=30, env={})
        assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "adopted"
    refused = subprocess.run([*as_history, "get", "/old/00"], capture_output=True, text=True, timeout=30, env={})
    assert refused.returncode != 0 and "permission denied" in refused.stderr, refused
    # A password login needs a client certificate too (the members demand one): one naming no
    # user (the simulation's), so that root is who the password says.
    c = sim.credentials
    as_root = [*ctl, "--cert", c.cert, "--key", c.key, "--user", f"root:{password}"]
    r = subprocess.run([*as_root, "get", "/old/00", "--print-value-only"], capture_output=True, text=True,
                       timeout=30, env={})
    assert r.returncode == 0 and r.stdout.strip() == "value 0", r
    # Refused only for the tokens, before and during the switch: simple ones, or, while a member
    # restarts, one whose kind could not be read.
    refusals = [line for line in log.splitlines() if "adoption refused, nothing changed" in line]
    assert any("hands out etcd's simple tokens" in line for line in refusals), refusals
    assert all("hands out etcd's simple tokens" in line or "kind of authentication token could not be read"
               in line for line in refusals), refusals


def test_an_adoption_whose_quota_is_below_the_clusters_database_is_refused_changing_nothing(simulation, outside):
    """#38: a learner whose quota is below the adopted cluster's database raises NOSPACE for the
    whole cluster at its first applied write (seen: a 26 MB cluster, a 16 MiB quota). Refused
    before any member joins, naming both sizes; the team's cluster untouched."""
    old = outside(3)
    blob = "x" * (512 * 1024)
    for n in range(40):  # about 20 MiB, through the gateway (an argument that long is refused)
        etcd.put(old.url(1), f"/big/{n:02d}", blob, timeout=10)
    sim = simulation(tls=False, writer=False,
                     function_env={"ADOPT_ENDPOINTS": old.endpoints(), "QUOTA_BACKEND_BYTES": str(16 << 20)})
    sim.scale(3)
    wait_for("the adoption refused for the quota", 60,
             lambda: "has a database of" in open(f"{sim.workdir}/function.log").read())
    time.sleep(6)  # more invocations: still nothing changed
    log = open(f"{sim.workdir}/function.log").read()
    assert "16 MiB" in log and "QUOTA_BACKEND_BYTES" in log
    assert f"{sim.prefix}/cluster" not in sim.parameters()
    assert all(i["LifecycleState"] == "Pending:Wait" for i in sim.group_instances())
    assert len(json.loads(old.etcdctl("member", "list", "-w", "json").stdout)["members"]) == 3
    alarms = old.etcdctl("alarm", "list")
    assert alarms.returncode == 0 and alarms.stdout.strip() == "", alarms
    assert old.put("/after/refusal", "writable").returncode == 0


@pytest.mark.long(150)
def test_a_tls_cluster_without_authentication_keeps_its_clients_after_the_adoption(simulation, outside):
    """#38: a team's cluster with mutual TLS from its own CA and authentication off (the CA is
    the access control), its application using a certificate whose common name is no etcd user.
    Before, the function switched authentication on once it converged (EtcdAuth defaults on) and
    every put answered "permission denied". An adoption never changes the cluster's
    authentication without an explicit ETCD_AUTH=on."""
    old = outside(3, tls=True)
    etcd_put = old.put("/app/before", "kept")
    assert etcd_put.returncode == 0, etcd_put.stderr
    app = old.ca.issue("app", "app")  # no etcd user is called `app`

    def adopt_secrets(sim):
        r = sim.cli("adopt-secrets", "--ca-cert", old.ca.cert_file, "--ca-key", old.ca.key_file)
        assert r.returncode == 0, r.stderr

    sim = simulation(tls=True, writer=False, before_function=adopt_secrets,
                     function_env={"ADOPT_ENDPOINTS": old.endpoints()})
    sim.scale(3)
    sim.wait_converged(3, label="adopted", timeout=300)
    _adoption_over(sim)
    time.sleep(20)  # idle invocations: where authentication used to be turned on
    record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert record.get("adopted_auth") is False, record
    ctl = [os.path.join(os.path.dirname(sim.etcd_bin), "etcdctl"), "--endpoints", sim.client_endpoint,
           "--command-timeout", "5s", "--cacert", old.ca.cert_file, "--cert", app[0], "--key", app[1]]
    for args in (["put", "/app/after", "adopted"], ["get", "/app/before", "--print-value-only"]):
        r = subprocess.run([*ctl, *args], capture_output=True, text=True, timeout=30, env={})
        assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "kept"
    assert "etcd authentication on" not in open(f"{sim.workdir}/function.log").read()
