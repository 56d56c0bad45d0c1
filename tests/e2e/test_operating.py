"""Operating on real etcd: NOSPACE recovered by the function, a defragmentation pass with the
writer running, and the EMF metric lines checked against the simulated cluster."""

import contextlib
import json
import time

import pytest

from conftest import wait_for
from sim import etcd

MIB = 1 << 20


def _statuses(sim):
    return [etcd.status(u, timeout=2) for u in sim.running_client_urls()]


def _alarms(sim):
    url = sim.running_client_urls()[0]
    return etcd.call(url, "/v3/maintenance/alarm", {"action": "GET"}, timeout=2).get("alarms", [])


def _emf_lines(sim):
    """The function's EMF lines: JSON objects with CloudWatch's `_aws` metadata."""
    out = []
    with open(f"{sim.workdir}/function.log") as f:
        for line in f:
            if '"_aws"' in line:
                obj = json.loads(line)
                if "_aws" in obj:
                    out.append(obj)
    return out


def _compact_with_snapshots_open(sim, url):
    """A client (kube-apiserver compacts every 5 minutes) compacts all history while a snapshot
    streams from every member; the streams end once each member has applied the compaction.
    Each member's (file, in use) a second after."""
    streams = [etcd.open_snapshot(u) for u in sim.running_client_urls()]
    try:
        revision = etcd.status(url, timeout=2)["header"]["revision"]
        etcd.call(url, "/v3/kv/compaction", {"revision": revision, "physical": True}, timeout=10)
        wait_for("the compaction on every member", 30,
                 lambda: all(_compacted(u) for u in sim.running_client_urls()))
        time.sleep(1)
    finally:
        for r in streams:
            r.close()
    time.sleep(1)
    return [(int(s["dbSize"]), int(s["dbSizeInUse"])) for s in _statuses(sim)]


def _compacted(url):
    """Whether the member at `url` has applied a compaction (its own answer: HashKV at revision
    2 is refused as compacted)."""
    try:
        etcd.call(url, "/v3/maintenance/hashkv", {"revision": "2"}, timeout=2)
        return False
    except etcd.EtcdError as e:
        return "compacted" in str(e)


def _steps(sim):
    return [s for i in sim.function.invocations if i.body for s in i.body.get("steps", [])]


@pytest.mark.v37
@pytest.mark.long(60)
def test_a_member_etcd_finds_corrupt_is_replaced_after_a_snapshot_and_its_alarm_disarmed(simulation):
    _a_corrupt_member_is_replaced(simulation, leader=False)


@pytest.mark.long(60)
def test_a_corrupt_leader_hands_over_before_it_is_replaced(simulation):
    """etcd's periodic check can raise CORRUPT against the leader itself; a replacement added
    under it would receive its data as the learner's raft snapshot: leadership moves first."""
    log = _a_corrupt_member_is_replaced(simulation, leader=True)
    handover = log.find("transfer-leadership member")
    assert 0 <= handover < log.find("replace-instance"), "the corrupt leader was replaced before it handed over"


def _a_corrupt_member_is_replaced(simulation, leader: bool) -> str:
    """CORRUPT raised against a follower (or the leader), as etcd's checks raise it: that member
    replaced, never snapshotted, its alarm disarmed, no acknowledged write lost. The log."""
    sim = simulation(backups=True)
    sim.start_writer()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    # etcd's corruption checks are on in every member's config, named as its release names them.
    config = sim.parameters()[f"{sim.prefix}/members/{sorted(sim.instances)[0]}"]
    assert ("ETCD_FEATURE_GATES=InitialCorruptCheck=true,CompactHashCheck=true" in config
            if etcd.minor() >= "3.6" else "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true" in config), config
    led_by = sim.leader_id()
    _, members = sim.member_list()
    victim = next(m for m in members if (int(m["ID"]) == led_by) == leader)
    victim_instance = victim["name"]
    url = sim.running_client_urls()[0]
    t0 = int(time.time()) - 1
    # What etcd's checks raise when a member's data differs from its peers': the cluster then
    # refuses every write until the alarm is gone.
    etcd.call(url, "/v3/maintenance/alarm",
              {"action": "ACTIVATE", "memberID": victim["ID"], "alarm": "CORRUPT"}, timeout=5)
    assert any(a.get("alarm") == "CORRUPT" for a in _alarms(sim))
    wait_for("the corrupt member replaced and its alarm disarmed", 240,
             lambda: victim_instance not in {i["InstanceId"] for i in sim.group_instances()}
             and not _alarms(sim) and not sim.problems(3))
    # The steps, as the function logged them (an invocation that failed after a step reports no
    # steps in its answer).
    with open(f"{sim.workdir}/function.log", errors="replace") as f:
        log = f.read()
    assert f"replace-instance {victim_instance} member" in log
    assert f"disarm-alarm member {int(victim['ID']):x}" in log
    # Snapshots (before the removal, when the last is not fresh) only of members etcd did not name.
    assert sim.backups()
    after = [b for b in sim.backups() if b["taken_at"] >= t0]
    assert all(int(b["member"], 16) != int(victim["ID"]) for b in after), after
    etcd.put(url if url in sim.running_client_urls() else sim.running_client_urls()[0], "/after-corrupt", "writable")
    sim.writer.stop()
    assert sim.writer.lost() == []
    return log


@pytest.mark.v37
def test_nospace_is_recovered_without_an_operator_and_no_latest_value_is_lost(simulation):
    _nospace_is_recovered(simulation, snapshots_open=False)


@pytest.mark.v37
def test_nospace_is_recovered_with_a_snapshot_streaming_across_the_compaction(simulation):
    """A snapshot streaming while the compaction commits (a backup, a client's) keeps the pages
    it frees pending in bbolt, and the member's in-use figure counts them until etcd commits
    again, which under NOSPACE may never come: the members still look full. Once on CI (etcd
    3.7): "the live data (14 MiB) fills the quota" for 4 minutes, of 2 MiB live, and the alarm
    never disarmed. (Whether a member's figure lands above 90 % of the quota with under 1 MiB
    free, which only the fix recovers, depends on bbolt's layout; the planner's and the
    reconciler's tests hold that case.)"""
    _nospace_is_recovered(simulation, snapshots_open=True)


def _nospace_is_recovered(simulation, snapshots_open: bool):
    sim = simulation(writer=False, function_env={"QUOTA_BACKEND_BYTES": str(16 * MIB)})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    url = sim.running_client_urls()[0]
    blob = "x" * (512 * 1024)
    latest = {}
    # With snapshots: no invocation until the client's compaction is done (the function would
    # compact first).
    with sim.function.lock if snapshots_open else contextlib.nullcontext():
        # A client rewrites four keys until the history fills the 16 MiB quota.
        for n in range(200):
            key = f"/fill/{n % 4}"
            try:
                etcd.put(url, key, f"{n}:{blob}", timeout=5)
                latest[key] = n
            except etcd.EtcdError as e:
                assert "database space exceeded" in str(e), e
                refused = (key, n)  # etcd may have applied the put that crossed the quota
                break
        else:
            raise AssertionError("the quota was never reached")
        assert any(a.get("alarm") == "NOSPACE" for a in _alarms(sim)), "NOSPACE raised"
        if snapshots_open:
            figures = _compact_with_snapshots_open(sim, url)
    if snapshots_open:
        # The precondition, etcd's: some member's in-use figure still counts the history the
        # compaction removed (2 MiB live), and stays so, nothing writing.
        print(f"(file, in use) after the compaction, the streams closed: {figures}")
        assert any(used >= 12 * MIB for _, used in figures), figures
    # The function compacts, defragments every member and disarms: writable again. (Seconds
    # alone; once not within 120 s on CI with four tests at a time, nothing then said why: a
    # failure now carries the function's last lines.)
    wait_for("the alarm to be disarmed", 240,
              lambda: any(s.startswith("disarm-alarm") for s in _steps(sim)) and not _alarms(sim))
    etcd.put(url, "/after", "writable")
    for key, n in latest.items():
        got = etcd.call(url, "/v3/kv/range", {"key": etcd.b64(key)})["kvs"][0]["value"]
        value = etcd.base64.b64decode(got).decode().split(":")[0]
        assert value == str(n) or (key, int(value)) == refused, (key, value, n)
    steps = _steps(sim)
    assert snapshots_open or any(s.startswith("compact") for s in steps), steps
    assert any(s.startswith("defragment") for s in steps), steps
    assert any(s.startswith("disarm-alarm") for s in steps), steps
    assert all(int(s["dbSize"]) < 16 * MIB for s in _statuses(sim))


@pytest.mark.v37
def test_a_defragmentation_pass_keeps_the_writer_going(simulation):
    sim = simulation(function_env={"DEFRAG_MIN_BYTES": str(2 * MIB), "DEFRAG_FREE_PERCENT": "50"})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    url = sim.running_client_urls()[0]
    blob = "y" * (256 * 1024)
    for n in range(40):  # 10 MiB of history on one key ...
        etcd.put(url, "/churn", f"{n}:{blob}", timeout=5)
    revision = int(etcd.status(url)["header"]["revision"])
    etcd.call(url, "/v3/kv/compaction", {"revision": str(revision), "physical": True}, timeout=10)
    # ... compacted away: every member's file is now mostly free space.
    sim.start_writer()
    writes_before = len(sim.writer.acked)
    began = time.monotonic()
    wait_for("three defragmentations", 120,
              lambda: sum(s.startswith("defragment") for s in _steps(sim)) >= 3)
    time.sleep(2)
    sim.writer.stop()
    assert len(sim.writer.acked) > writes_before
    assert sim.writer.lost() == []
    stall = sim.writer.longest_stall
    print(f"longest write stall over the defragmentation pass: {stall:.2f}s "
          f"({time.monotonic() - began:.1f}s)")
    assert stall < 2.0, stall
    assert all(int(s["dbSize"]) < 4 * MIB for s in _statuses(sim))
    # One member at a time, the leader after handing over: a transfer precedes the last one.
    steps = [s for s in _steps(sim) if s.startswith(("defragment", "transfer-leadership"))]
    assert steps[-1].startswith("defragment"), steps


def test_every_invocation_logs_metrics_that_match_the_cluster(simulation):
    sim = simulation(writer=False)
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    n = len(sim.function.invocations)
    wait_for("a scheduled run after convergence", 30, lambda: len(sim.function.invocations) > n + 1)
    lines = _emf_lines(sim)
    assert lines, "EMF lines on stdout"
    last = lines[-1]
    cw = last["_aws"]["CloudWatchMetrics"][0]
    assert cw["Namespace"] == "EtcdAsgLifecycle" and cw["Dimensions"] == [["ClusterName"]]
    assert last["ClusterName"] == sim.group
    declared = {m["Name"] for m in cw["Metrics"]}
    assert {"Members", "Voters", "HealthyVoters", "QuorumMargin", "DbSizeBytes"} <= declared
    statuses = _statuses(sim)
    assert (last["Members"], last["Voters"], last["Learners"]) == (3, 3, 0)
    assert (last["HealthyVoters"], last["QuorumMargin"], last["InstancesHeld"]) == (3, 1, 0)
    assert last["DbSizeBytes"] >= max(int(s["dbSize"]) for s in statuses) * 0.5
    assert last["NospaceAlarm"] == 0
    # Three voters over three zones: one zone's loss leaves two of a quorum of two.
    assert (last["Zones"], last["ZoneLossQuorumMargin"], last["ZoneRisk"]) == (3, 0, 0), last
    # Steps applied are counted by kind over the bootstrap.
    total = {}
    for line in lines:
        for k, v in line.items():
            if k.startswith("StepsApplied."):
                total[k] = total.get(k, 0) + v
    assert total.get("StepsApplied.add-learner") == 2 and total.get("StepsApplied.promote") == 2, total
    # A member down shows as a quorum margin of 0.
    victim = sorted(sim.instances)[0]
    sim.kill_instance(victim)
    n = len(sim.function.invocations)
    wait_for("a scheduled run after the loss", 30, lambda: len(sim.function.invocations) > n + 1)
    last = _emf_lines(sim)[-1]
    assert (last["HealthyVoters"], last["QuorumMargin"]) == (2, 0), last
