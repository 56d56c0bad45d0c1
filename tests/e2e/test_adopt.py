"""Adoption on real etcd, the emulated AWS and the real binary (docs/adopting.md): a cluster that
ran before the stack, outside any group, taken over by the group's instances with its clients
writing and watching throughout (their history checked), its cluster id and every key kept."""

import json
import time

import pytest

from conftest import invocation_outcomes, wait_for
from sim import etcd, history
from sim.outside import OutsideCluster


@pytest.fixture
def outside():
    made = []

    def make(n: int = 3) -> OutsideCluster:
        c = OutsideCluster(n)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def _waits(sim, name: str) -> list[dict]:
    return [b for _, b in invocation_outcomes(sim) if ((b or {}).get("waiting") or "").startswith(name)]


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
    record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert record["cluster_id"] == cluster_id and "adopting" not in record, record
    assert record["state"] == "served", record
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
def test_adoption_is_refused_for_a_learner_a_member_down_and_authentication_changing_nothing(simulation, outside):
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
    # Authentication on (adopting with credentials is not built): refused, also once old-3 is back.
    root = ["--user", "root:adopt-test"]
    for args in (["user", "add", "root", "--new-user-password", "adopt-test"], ["auth", "enable"]):
        r = old.etcdctl(*args)
        assert r.returncode == 0, r.stderr
    refused_for("authentication is on")
    old.start(3)
    time.sleep(6)
    assert f"{sim.prefix}/cluster" not in sim.parameters()
    assert len(json.loads(old.etcdctl(*root, "member", "list", "-w", "json").stdout)["members"]) == 3
    # Authentication off: adopted.
    r = old.etcdctl(*root, "auth", "disable")
    assert r.returncode == 0, r.stderr
    sim.wait_converged(3, label="adopted once fit", timeout=300)
    assert etcd.keys_with_prefix(sim.client_endpoint, "/old/") == {"/old/key"}
