"""The upgrade chain: a cluster born on etcd 3.4.23 and rolled, member by member with the writer
on, to 3.5, 3.6 and 3.7, through etcd's floors. A 3.6 instance launched while a member runs
3.5.30 (below 3.5.32, etcd's floor for leaving 3.5) is held by the version gate until every
member is at or above the floor; a 3.5 instance launched after the cluster reached 3.6 is refused
(its launch abandoned). It needs every version, so it runs once, in the 3.7 pass (`v37`).

etcd 3.4 answers `/health` (the load balancer's check) with a v2 QGET through raft, which etcd 3.6
cannot replay (it panics: "detected disallowed v2 WAL", etcd-io/etcd#20809): a 3.6 member can
join only once every member's raft log has been compacted past the 3.4 era, i.e. after a raft
snapshot taken 5000 entries (etcd's catch-up entries) later. The function sets every member's
--snapshot-count (SNAPSHOT_COUNT, 10000 by default, etcd 3.6's); here 100, and 5200 entries are
written once no 3.4 member is left, so that the chain does not wait for 15000."""

import re
import time

import pytest

from conftest import wait_for
from sim import etcd


pytestmark = [pytest.mark.v37, pytest.mark.long(420)]


def _cluster_version_reaches(sim, minor: str, timeout: float = 60):
    # The leader raises the cluster version once every member runs the new minor (it checks every
    # few seconds).
    deadline = time.monotonic() + timeout
    while not (sim.cluster_version() or "").startswith(minor + ".") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert (sim.cluster_version() or "").startswith(minor + "."), (minor, sim.cluster_version())


def _roll(sim, etcd_bin: str, label: str, members: int = 3):
    """Every instance of the group replaced, one at a time, by one booting `etcd_bin`."""
    sim.etcd_bin = etcd_bin
    for n, iid in enumerate(sorted(i["InstanceId"] for i in sim.group_instances()), 1):
        sim.terminate(iid, decrement=False)
        sim.wait_converged(members, label=f"{label} {n}", timeout=180)
    live = {i["InstanceId"] for i in sim.group_instances()}
    assert {sim.instances[i].etcd_bin for i in live} == {etcd_bin}


def _versions(sim, iid: str) -> dict | None:
    try:
        return etcd.versions(sim.client_url(iid), timeout=5)
    except etcd.EtcdError:
        return None  # a TLS handshake cut off on a loaded machine: asked again


def _invocations_since(sim, n: int) -> list:
    return sim.function.invocations[n:]


def _log(sim) -> str:
    with open(f"{sim.workdir}/function.log", errors="replace") as f:
        return f.read()


def _gated(sim) -> dict[str, str]:
    """instance -> the last reason the function gave for holding it by the version gate."""
    out = {}
    for line in _log(sim).splitlines():
        if "launch held by the version gate" in line:
            m = re.search(r'"instance":"(i-[0-9a-f]+)".*?"why":"([^"]*)"', line) or \
                re.search(r'instance=(i-[0-9a-f]+).*?why=(.*?)(?: [a-z_]+=|$)', line)
            if m:
                out[m.group(1)] = m.group(2)
    return out


def test_a_cluster_born_on_3_4_rolls_to_3_7_through_etcds_floors(simulation):
    """A cluster born on etcd 3.4 rolls to 3.7 through each of etcd's floors.

    Long: one scenario, step by step; each step's assertions depend on the state the
    previous left.
    """
    v34, v3530, v35, v36, v37 = (etcd.binary(v) for v in ("3.4", "3.5.30", "3.5", "3.6", "3.7"))
    # Authentication off: etcd supports no rolling upgrade from 3.4 with it on (the 3.5 upgrade
    # guide; etcd #11943), and the function refuses 3.5 into 3.4 with it on
    # (versions::auth_admission) and turns it on only once 3.4 is gone (auth_may_turn_on).
    sim = simulation(etcd_bin=v34, function_env={"SNAPSHOT_COUNT": "100", "ETCD_AUTH": "off"})
    # The writer from the start; the client history from 3.5.30 on: etcd 3.4.23 answers a
    # requested progress notification out of order with the watch's events (etcd issue 15220,
    # https://github.com/etcd-io/etcd/issues/15220; fixed in 3.4.24 and 3.5.8 by
    # https://github.com/etcd-io/etcd/pull/15237), which the checker rightly rejects.
    sim.start_writer(history=False)
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap on 3.4")
    assert sim.cluster_version().startswith("3.4."), sim.cluster_version()

    # 3.4 -> 3.5.30: etcd sets no floor for leaving 3.4.
    _roll(sim, v3530, "to 3.5.30")
    _cluster_version_reaches(sim, "3.5")
    sim.start_history()
    # No 3.4 member is left to propose QGETs: 5200 entries, and every raft log sheds them.
    conn = etcd.Connection(sim.client_endpoint)
    for n in range(5200):
        for attempt in range(5):
            try:
                conn.put(f"/compact-past-v2/{n % 50}", str(n), timeout=5)
                break
            except etcd.EtcdError:
                time.sleep(0.2)
        else:
            pytest.fail(f"put {n} kept failing")
    conn.close()

    # A 3.6 instance while every member runs 3.5.30: held at its launch by the gate.
    sim.etcd_bin = v36
    sim.scale(4)
    deadline = time.monotonic() + 60
    new = []
    while time.monotonic() < deadline:
        new = [i for i in sim.group_instances()
               if getattr(sim.instances.get(i["InstanceId"]), "etcd_bin", None) == v36]
        if new and "launch held by the version gate" in _log(sim) and new[0]["InstanceId"] in _gated(sim):
            break
        time.sleep(0.5)
    assert new and new[0]["InstanceId"] in _gated(sim), f"no version gate reported:\n{sim.table()}"
    [new] = new
    # Held (the gate is a wait, with heartbeats), never added: etcd's floor is not met.
    time.sleep(5)
    [new] = [i for i in sim.group_instances() if i["InstanceId"] == new["InstanceId"]]
    assert new["LifecycleState"] == "Pending:Wait", new
    _, listed = sim.member_list()
    assert len(listed) == 3 and all(m.get("name") != new["InstanceId"] for m in listed), listed
    # The function names the members below the floor, their version, and the floor.
    held = _gated(sim)[new["InstanceId"]]
    assert "3.5.30" in held and "3.5.32" in held, held

    # Rolling the three 3.5.30 members to 3.5.36 opens the gate: the 3.6 instance joins last.
    sim.etcd_bin = v35
    for n, iid in enumerate(sorted(i for i, s in sim.instances.items() if s.etcd_bin == v3530 and
                                   i in {g["InstanceId"] for g in sim.group_instances()}), 1):
        sim.terminate(iid, decrement=False)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            _, listed = sim.member_list() or (0, [])
            names = {m.get("name") for m in listed}
            if iid not in names and len([m for m in listed if m.get("name")]) >= 3:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"3.5.30 member {iid} not replaced: {sim.table()}")
    sim.wait_converged(4, label="3.6 joins once every member is at the floor", timeout=180)
    assert new["InstanceId"] in {m.get("name") for m in sim.member_list()[1]}

    # Back to three, then every member on 3.6.
    sim.scale(3)
    sim.wait_converged(3, label="scale in to 3", timeout=120)
    _roll(sim, v36, "to 3.6")
    _cluster_version_reaches(sim, "3.6")

    # A 3.5 instance launched now (a launch template rolled back) is refused, never joined.
    sim.etcd_bin = v35
    before = len(sim.function.invocations)
    sim.scale(4)
    deadline = time.monotonic() + 90
    refused = []
    while not refused and time.monotonic() < deadline:
        refused = [s for inv in _invocations_since(sim, before) for s in (inv.body or {}).get("steps", [])
                   if "refuse-launch" in str(s)]
        time.sleep(0.5)
    assert refused, "no launch of a 3.5 instance was refused"
    sim.etcd_bin = v36  # the template fixed: the group's next launch joins
    sim.wait_converged(4, label="a 3.6 instance after the refusal", timeout=180)
    assert all(m.get("name") and sim.instances[m["name"]].etcd_bin == v36 for m in sim.member_list()[1])
    sim.scale(3)
    sim.wait_converged(3, label="scale in to 3 again", timeout=120)

    # 3.6.17 is above 3.6.11, etcd's floor for leaving 3.6: on to 3.7 with no wait.
    _roll(sim, v37, "to 3.7")
    _cluster_version_reaches(sim, "3.7")
    for iid in {i["InstanceId"] for i in sim.group_instances()}:
        seen = wait_for(f"{iid}'s /version", 30, lambda: _versions(sim, iid))
        assert seen["etcdserver"] == etcd.EXACT["3.7"], (iid, seen)

    sim.writer.stop()
    assert len(sim.writer.acked) > 100, "the writer made progress throughout"
    assert sim.writer.lost() == []
    assert sim.problems() == []  # includes: one cluster id throughout
    assert all(i.outcome == "ok" for i in sim.function.invocations), [
        (i.outcome, i.body) for i in sim.function.invocations if i.outcome != "ok"
    ]
