"""Backups and recovery on real etcd, moto's S3 and the real binary: snapshots in the bucket,
every member lost at once with no hook, and the cluster back with its data and no operator."""

import hashlib
import json
import os
import re
import time

import pytest

from conftest import app_certificate, invocation_outcomes, wait_for
from sim import etcd




@pytest.mark.v37
@pytest.mark.long(100)
def test_every_member_lost_at_once_comes_back_from_the_latest_backup(simulation, apps):
    """A cluster whose every member is lost at once comes back from its latest backup.

    Long: one scenario, step by step; each step's assertions depend on the state the
    previous left.
    """
    sim = simulation(backups=True, function_env={"BACKUP_INTERVAL_MINUTES": "1"})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    old_record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    # An application (npm etcd3 through the load balancer) watching its keys from a revision,
    # and putting and reading one every half second, throughout.
    follower = apps(sim, "follow", app_certificate(sim), "app", "/app/")
    follower.wait_event("running", 30)
    sim.history_certs()  # the recorder's etcd user, in the backup
    url = sim.running_client_urls()[0]
    for n in range(50):
        etcd.put(url, f"/before/{n:03d}", f"value {n}", timeout=5)
    revision = int(etcd.status(url)["header"]["revision"])
    # The next scheduled snapshot holds them (the interval is a minute).
    backup = wait_for("a backup at the revision of the writes", 150,
                       lambda: next((b for b in reversed(sim.backups()) if b["revision"] >= revision), None))
    data = sim.s3.get_object(Bucket=sim.backup_bucket, Key=backup["key"])["Body"].read()
    assert hashlib.sha256(data).hexdigest() == backup["sha256"] and len(data) == backup["size"]
    # Writes go on after the snapshot: these are what the restore may lack. The client history
    # is recorded through the loss and the restore, which it is told of (a declared cut).
    sim.start_writer(history_through_restore=True)
    time.sleep(3)
    lost_at = time.time()
    # The highest revision a client can have seen: the writer's last acknowledged write's.
    seen = max(int(etcd.status(u)["header"]["revision"]) for u in sim.running_client_urls())
    # Every member lost at once, no hook (an AZ outage); the group launches three new ones.
    for i in sim.group_instances():
        sim.detach(i["InstanceId"])
    sim.writer.stop()
    sim.cluster_id = None  # a restore founds a new cluster (id) from the old data
    sim.scale(3)
    sim.wait_converged(3, label="restored from the backup", timeout=240)
    restored_at = time.time()
    url = sim.running_client_urls()[0]
    found = etcd.keys_with_prefix(url, "/before/")
    assert found == {f"/before/{n:03d}" for n in range(50)}, sorted(found)[:5]
    # Revisions only move forward where the restore tool can bump them (etcdutl 3.5.10+): the
    # snapshot's plus 10^9, marked compacted, so a watch resumed from a revision a client saw
    # before the loss is told "compacted" (and re-lists) instead of silently missing writes.
    now_revision = int(etcd.status(url)["header"]["revision"])
    boot_logs = "".join(open(f"{inst.data_dir}/boot.log").read() for inst in sim.instances.values()
                        if os.path.exists(f"{inst.data_dir}/boot.log"))
    if not etcd.version_of(sim.etcd_bin).startswith("3.4."):
        assert now_revision >= backup["revision"] + 1_000_000_000 > seen, (now_revision, backup, seen)
        # etcdctl ends a canceled watch at once (exit 5).
        watch = sim.etcdctl(url, "watch", "--rev", str(seen), "/before/", "--prefix", timeout=30)
        assert "required revision has been compacted" in watch.stdout + watch.stderr, watch
        assert "revision moved 1000000000 forward, marked compacted" in boot_logs
    else:
        # etcd 3.4.23's etcdctl cannot: the revision restarts at the snapshot's (README).
        assert now_revision < seen, (now_revision, seen)
        assert "revision NOT moved forward" in boot_logs
    # The application reconnected through the same endpoint by itself and works again. Its watch,
    # resumed from the revision after its last event: where the restore moved the revision
    # forward, etcd ends it (compacted) and the application re-lists and watches again; on 3.4
    # nothing tells it that the revisions it resumes from were reused.
    wait_for("the application's round trips after the restore", 60,
             lambda: [e for e in follower.events("round") if e["ok"] and e["t"] > restored_at])
    bumped = not etcd.version_of(sim.etcd_bin).startswith("3.4.")
    if bumped:
        wait_for("the application's watch ended and re-listed", 90, lambda: follower.events("relisted"))
    else:
        wait_for("the application's watch back", 90,
                 lambda: [e for e in follower.events("watch connected") if e["t"] > restored_at])
    time.sleep(2)
    followed = follower.finish(30)
    after = [r for r in followed["rounds"] if r["ok"] and r["t"] > restored_at]
    seen = {revision for _, revision in followed["seen"]}
    print(f"application: {len(followed['rounds'])} round trips, {len(after)} after the restore; watch "
          f"errors: {followed['watchErrors']}; re-listed at {followed['relisted']}")
    if bumped:
        assert followed["watchErrors"] and followed["relisted"], followed
        assert after[0]["revision"] > backup["revision"] + 1_000_000_000
        # Watching again from the listing, it sees what was written after.
        assert [r for r in after if r["revision"] > followed["relisted"][0]] and \
            all(r["revision"] in seen for r in after if r["revision"] > followed["relisted"][0])
    else:
        # No signal at all: revisions reused after the restore reach the watch or not depending on
        # when the library last reconnected (the README's "What a restore changes").
        assert followed["watchErrors"] == []
        before_loss = max(r["revision"] for r in followed["rounds"] if r["ok"] and r["t"] < lost_at)
        reused = [r["revision"] for r in after if r["revision"] <= before_loss]
        print(f"3.4: {len(reused)} writes after the restore reused revisions seen before it; the watch "
              f"saw {len([r for r in reused if r in seen])} of them")
        assert reused, "the revision went backwards"
    record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert record["restored_from"]["snapshot"]["key"] == backup["key"], record
    assert record["restored_from"]["previous_token"] == old_record["token"]
    assert record["token"] != old_record["token"] and record["state"] == "served"
    # The RPO: acknowledged writes the restore lacks, all of them after the snapshot was taken.
    lacked = sim.writer.lost()
    kept = len(sim.writer.acked) - len(lacked)
    print(f"restore lacked {len(lacked)} of {len(sim.writer.acked)} acknowledged writes; snapshot age at "
          f"loss {lost_at - backup['taken_at']:.0f}s")
    assert lacked == sim.writer.acked[kept:], "only the newest writes, after the snapshot, are lacking"
    # What clients saw, checked: linearizable on each side of the cut; the state just after it
    # the backup's; revisions forward; the writes acknowledged after the backup counted as lost.
    checked = sim.verify_history()
    (cut,) = checked["restores"]
    assert cut["revision"] == backup["revision"] and len(checked["clusters"]) == 2, checked
    print(f"history: the restore lost {cut['lost_acknowledged_writes']} acknowledged writes of the recorder")
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert "the cluster is lost for good: restoring it from a backup" in log and backup["key"] in log
    # No published config still asks for a restore.
    assert not any("ETCD_ASG_RESTORE_URL" in v for k, v in sim.parameters().items() if "/members/" in k)


@pytest.mark.long(45)
def test_a_partition_with_the_members_still_in_the_group_restores_nothing(simulation):
    sim = simulation(backups=True, writer=False)
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    (first, *_) = wait_for("the first backup", 60, sim.backups)
    # The CLI lists it, and a restore request names only a backup that exists.
    r = sim.cli("backups", "--json")
    assert r.returncode == 0, r.stderr
    assert first["key"] in [b["key"] for b in json.loads(r.stdout)]
    assert first["key"] in sim.cli("backups").stdout
    r = sim.cli("restore", "no/such/backup.db")
    assert r.returncode != 0 and "no/such/backup.db" in r.stderr, r.stderr
    r = sim.cli("restore", first["key"])
    assert r.returncode == 0 and "The cluster answers" in r.stdout, (r.stdout, r.stderr)
    assert sim.parameters()[f"{sim.prefix}/restore-request"] == first["key"]
    record = sim.parameters()[f"{sim.prefix}/cluster"]
    # Clients recorded through it (sim/history.py).
    sim.start_history()
    time.sleep(2)
    # Every etcd stops answering, but the instances stay in the group.
    for iid in list(sim.instances):
        sim.pause_instance(iid)
    try:
        time.sleep(12)  # a few scheduled runs
        assert sim.parameters()[f"{sim.prefix}/cluster"] == record
        steps = [s for _, b in invocation_outcomes(sim) if b for s in b.get("steps", [])]
        assert not any(s.startswith("restore") for s in steps), steps
    finally:
        for iid in list(sim.instances):
            sim.resume_instance(iid)
    # Healed: the same cluster, and what its clients saw through the pause is what etcd promises.
    time.sleep(3)
    checked = sim.verify_history()
    assert len(checked["clusters"]) == 1 and checked["longest_without_success_ms"] >= 10_000, checked


@pytest.mark.v37
@pytest.mark.long(60)
def test_a_majority_lost_for_good_comes_back_from_the_survivors_newer_data(simulation):
    # One backup early (the first is due at once), none after: the survivor holds newer data.
    sim = simulation(backups=True, function_env={"BACKUP_INTERVAL_MINUTES": "60"})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    old_record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    (first, *_) = wait_for("the first backup", 60, sim.backups)
    url = sim.running_client_urls()[0]
    for n in range(40):
        etcd.put(url, f"/after/{n:03d}", f"value {n}", timeout=5)
    sim.start_writer(history_through_restore=True)
    time.sleep(3)
    # The survivor: a follower that has applied everything the leader has (a write acknowledged
    # by the other two alone would be lacking; that is the RPO the writer reports).
    leader = sim.leader()
    survivor = next(i for i in sim.instances if i != leader and i in {g["InstanceId"] for g in sim.group_instances()})
    lost_at = time.time()
    for i in sim.group_instances():
        if i["InstanceId"] != survivor:
            sim.detach(i["InstanceId"])
    sim.writer.stop()
    survivor_revision = int(etcd.status(sim.client_url(survivor))["header"]["revision"])
    assert survivor_revision > first["revision"]
    sim.scale(3)
    # The survivor itself is replaced by a fresh instance of the new generation; until then its
    # etcd still answers for the old cluster.
    wait_for("the survivor replaced", 240,
             lambda: survivor not in {g["InstanceId"] for g in sim.group_instances()})
    # Its instance leaves the group a moment before the simulation stops its etcd: until then
    # that etcd would still answer for the old cluster.
    wait_for("the survivor's etcd stopped", 30, lambda: sim.instances[survivor].proc is None)
    sim.cluster_id = None  # the restore founded a new cluster (id)
    sim.wait_converged(3, label="restored from the survivor", timeout=180)
    record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert record["restored_from"]["previous_token"] == old_record["token"]
    # The survivor's snapshot (retention may prune it once the new generation has its own).
    restored = record["restored_from"]["snapshot"]["key"]
    # Its key names the revision and the release it was taken on.
    assert re.search(rf"-rev{survivor_revision:012d}-v{re.escape(etcd.version_of(sim.etcd_bin))}\.db$",
                     restored), (restored, survivor_revision)
    url = sim.running_client_urls()[0]
    assert etcd.keys_with_prefix(url, "/after/") == {f"/after/{n:03d}" for n in range(40)}
    lacked = sim.writer.lost()
    kept = len(sim.writer.acked) - len(lacked)
    print(f"restore from the survivor lacked {len(lacked)} of {len(sim.writer.acked)} acknowledged writes "
          f"(loss at {lost_at:.0f})")
    assert lacked == sim.writer.acked[kept:], "only the newest writes can be lacking"
    assert len(lacked) <= 5, lacked
    # The recorded history: the cut at the survivor's revision, nothing it held lost.
    checked = sim.verify_history()
    (cut,) = checked["restores"]
    assert cut["revision"] == survivor_revision and len(checked["clusters"]) == 2, checked
    print(f"history: the restore from the survivor lost {cut['lost_acknowledged_writes']} acknowledged writes")
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert "survived a restore" in log and f'"reason":"Survivor"' in log and restored in log


@pytest.mark.long(70)
def test_a_snapshot_that_cannot_finish_in_time_is_cut_off_and_membership_goes_on(simulation):
    # Every invocation's time is all deadline margin: a snapshot gets none of it (the path of a
    # database too large for the function's share of a CPU), while each invocation still applies
    # one membership step.
    sim = simulation(backups=True, writer=False,
                     function_env={"BACKUP_INTERVAL_MINUTES": "1", "DEADLINE_MARGIN_MS": "60000"})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap", timeout=240)
    # Megabytes to stream: more than one read of the snapshot.
    url = sim.running_client_urls()[0]
    for n in range(16):
        etcd.put(url, f"/big/{n:02d}", "z" * (256 * 1024), timeout=5)

    def log():
        with open(f"{sim.workdir}/function.log") as f:
            return f.read()

    wait_for("a snapshot cut off at its deadline", 60,
             lambda: "stopped before the invocation's deadline" in log())
    # A removal that wants a fresh snapshot goes on without it.
    leaving = sorted(i["InstanceId"] for i in sim.group_instances())[0]
    sim.terminate(leaving, decrement=True)
    sim.wait_converged(2, label="scale-in without the snapshot", timeout=180)
    text = log()
    # Cut off before etcd began to stream (its start is bounded too), or during the upload.
    assert "did not start streaming" in text or "backup upload aborted: nothing stored" in text
    emf = [json.loads(line) for line in text.splitlines() if '"_aws"' in line]
    assert any(m.get("BackupTimedOut") == 1 and m.get("BackupFailed") == 1 for m in emf)
    # Nothing half-stored: no multipart upload left open, no snapshot without its manifest (a
    # snapshot small enough to arrive before its first read could wait may still complete).
    assert sim.s3.list_multipart_uploads(Bucket=sim.backup_bucket).get("Uploads", []) == []
    keys = {o["Key"] for o in sim.s3.list_objects_v2(Bucket=sim.backup_bucket).get("Contents", [])}
    assert not [k for k in keys if k.endswith(".db") and f"{k}.json" not in keys], keys


def _lose_every_member(sim):
    """Every member lost at once, no hook (an AZ outage); the group launches three new ones."""
    for i in sim.group_instances():
        sim.detach(i["InstanceId"])
    sim.cluster_id = None  # a restore founds a new cluster (id)
    sim.scale(3)


@pytest.mark.long(180)
def test_a_manual_restore_is_used_once_and_never_replayed_on_a_later_loss(simulation):
    sim = simulation(backups=True, writer=False,
                     function_env={"RECOVERY": "manual", "BACKUP_INTERVAL_MINUTES": "1"})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    url = sim.running_client_urls()[0]
    etcd.put(url, "/generation", "one", timeout=5)
    revision = int(etcd.status(url)["header"]["revision"])
    first = wait_for("a backup of the first generation", 120,
                     lambda: next((b for b in reversed(sim.backups()) if b["revision"] >= revision), None))
    _lose_every_member(sim)
    # RECOVERY=manual: nothing is restored until asked.
    wait_for("the wait for a restore request", 120, lambda: any(
        (b or {}).get("waiting") == "await-restore-request" for _, b in invocation_outcomes(sim)))
    r = sim.cli("restore", first["key"])
    assert r.returncode == 0, r.stderr
    sim.wait_converged(3, label="restored as asked", timeout=240)
    url = sim.running_client_urls()[0]
    assert etcd.keys_with_prefix(url, "/generation") == {"/generation"}
    second_record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert second_record["restored_from"]["snapshot"]["key"] == first["key"]
    # The second generation writes, and is backed up.
    etcd.put(url, "/generation", "two", timeout=5)
    etcd.put(url, "/second/only", "x", timeout=5)
    second = wait_for("a backup of the second generation", 150, lambda: next(
        (b for b in reversed(sim.backups()) if f"/{second_record['token']}/" in b["key"]
         and b["revision"] >= int(etcd.status(url)["header"]["revision"])), None))
    # Weeks later, a second loss: the first request (still in the parameter store if nobody
    # deleted it) belongs to the first generation and is never applied again.
    outcomes_before = len(invocation_outcomes(sim))
    _lose_every_member(sim)
    wait_for("the wait for a new restore request", 120, lambda: any(
        (b or {}).get("waiting") == "await-restore-request" for _, b in invocation_outcomes(sim)[outcomes_before:]))
    time.sleep(8)  # a few scheduled runs: still nothing restored
    assert json.loads(sim.parameters()[f"{sim.prefix}/cluster"])["token"] == second_record["token"]
    steps = [s for _, b in invocation_outcomes(sim)[outcomes_before:] if b for s in b.get("steps", [])]
    assert not any(s.startswith("restore") for s in steps), steps
    # Asked again, it restores the second generation's data.
    r = sim.cli("restore", "latest")
    assert r.returncode == 0, r.stderr
    sim.wait_converged(3, label="restored the second time", timeout=240)
    url = sim.running_client_urls()[0]
    assert etcd.keys_with_prefix(url, "/second/") == {"/second/only"}
    third = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert third["restored_from"]["snapshot"]["key"] == second["key"]


@pytest.mark.v37
@pytest.mark.long(150)
def test_a_group_scaled_to_zero_sleeps_in_a_final_snapshot_and_wakes_with_every_acknowledged_write(simulation):
    # RECOVERY=manual: waking is no disaster, and waits for nobody. The periodic backups are an
    # hour apart: only the final snapshot can hold the writes of the last minutes.
    sim = simulation(backups=True, function_env={"BACKUP_INTERVAL_MINUTES": "60", "RECOVERY": "manual"})
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    wait_for("the first backup", 60, sim.backups)
    old_record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    # The member that leaves first leads. It hands leadership to the one that leaves last before
    # it goes: removed at once, a leader can leave a lone survivor that answers a linearizable
    # read from before the leader's last acknowledged write (the nemesis, seed 708: etcd's raft
    # answers a single voter's ReadIndex before it has committed an entry of its own term).
    first = _lead_with_the_first_to_leave(sim)
    # Writes go on through the scale-in, the sleep and the wake, the client history recorded
    # throughout (the wake a declared cut): the function fences writes (NOSPACE) before the
    # final snapshot, so none is acknowledged that the snapshot lacks. (Before the fence, each
    # hibernation lost the writes acknowledged after the snapshot.)
    sim.start_writer(history_through_restore=True)
    time.sleep(5)
    sim.scale(0)
    wait_for("the group at zero", 240, lambda: not sim.group_instances(), every=1)
    record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    sleeping = record.get("sleeping")
    assert sleeping and record["token"] == old_record["token"], record
    final = next(b for b in sim.backups() if b["key"] == sleeping["key"])
    assert final["revision"] == sleeping["revision"] and final["revision"] > 0, (final, sleeping)
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert "a final snapshot of member" in log and '"outcome":"asleep"' in log, "no final snapshot logged"
    # etcd's own log says it: the member made leader did not apply its own removal while it led
    # (each raft role change is logged). Removed at once, a leader always applies its removal.
    removals = _self_removals(sim)
    assert removals.get(first) != "leader", f"{first:x} was removed while it led: {removals}"
    # Asleep: the function says so, and changes nothing.
    time.sleep(6)
    assert json.loads(sim.parameters()[f"{sim.prefix}/cluster"]) == record
    with open(f"{sim.workdir}/function.log") as f:
        assert '"wait":"asleep"' in f.read(), "no asleep wait logged"
    # Woken: restored from exactly that snapshot, with no restore request.
    sim.cluster_id = None
    sim.scale(3)
    sim.wait_converged(3, label="woken from the final snapshot", timeout=240)
    woken = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert woken["restored_from"]["snapshot"]["key"] == sleeping["key"] and "sleeping" not in woken, woken
    assert f"{sim.prefix}/restore-request" not in sim.parameters()
    # Every acknowledged write is there, and the revision moved forward.
    sim.writer.stop()
    assert sim.writer.acked and sim.writer.lost() == []
    checked = sim.verify_history()
    (cut,) = checked["restores"]
    assert cut["revision"] == sleeping["revision"] and cut["lost_acknowledged_writes"] == 0, cut
    url = sim.running_client_urls()[0]
    assert int(etcd.status(url)["header"]["revision"]) >= sleeping["revision"] + 1_000_000_000
    # The fence travelled in the snapshot and is lifted: the woken cluster takes writes.
    wait_for("the woken cluster taking writes", 60, lambda: _put_ok(url))
    assert "writes fenced for the final snapshot" in open(f"{sim.workdir}/function.log").read()


@pytest.mark.long(120)
def test_a_last_voter_hung_at_hibernation_is_held_until_it_answers_and_keeps_every_write(simulation):
    """Scaled to zero with the last voter's etcd hung (paused: its disk intact, as a stuck disk
    or a frozen instance looks) before the final snapshot: nothing answers, and before, its hook
    lapsed and the only copy of the newest writes went with its disk. Held (heartbeated, named)
    until it answers; then the final snapshot, and woken, every acknowledged write."""
    hook = 20  # the hooks' timeout: without the hold the termination would lapse within it
    sim = simulation(backups=True, hook_timeout=hook,
                     function_env={"BACKUP_INTERVAL_MINUTES": "60", "RECOVERY": "manual"})
    sim.scale(1)
    sim.wait_converged(1, label="bootstrap")
    wait_for("the first backup", 60, sim.backups)
    sim.start_writer(history=False)
    time.sleep(3)
    [last] = [i["InstanceId"] for i in sim.group_instances()]
    sim.pause_instance(last)
    try:
        sim.scale(0)
        wait_for("the last voter's termination held", 60, lambda: [
            i["LifecycleState"] for i in sim.group_instances()] == ["Terminating:Wait"])
        time.sleep(2.5 * hook)
        assert [i["InstanceId"] for i in sim.group_instances()] == [last], sim.table()
        with open(f"{sim.workdir}/function.log") as f:
            held = [line for line in f if "terminate hook held while the cluster is unreachable" in line]
        assert any(last in line for line in held), "the held instance is not named"
    finally:
        sim.resume_instance(last)
    wait_for("the group at zero", 240, lambda: not sim.group_instances(), every=1)
    sim.writer.stop()
    record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert record.get("sleeping"), record
    sim.cluster_id = None
    sim.scale(1)
    sim.wait_converged(1, label="woken from the final snapshot", timeout=240)
    assert sim.writer.acked and sim.writer.lost() == []


@pytest.mark.long(150)
def test_a_rollback_after_a_total_loss_waits_for_the_freshest_backup_and_restores_once_fixed(simulation):
    """A cluster rolled from 3.6 to 3.7 loses every instance; the group relaunches from a template
    rolled back to 3.6. Restoring the older 3.6 backup would drop every write since: the function
    waits, naming the 3.7 backup. The operator puts the template back on 3.7 and terminates the
    waiting instance, which never held data: let go at once, and the 3.7 instance restores the
    freshest backup with no hand on a lifecycle action.

    Long: one scenario, step by step; each step's assertions depend on the state the previous left."""
    v36, v37 = etcd.binary("3.6"), etcd.binary("3.7")
    sim = simulation(backups=True, writer=False, etcd_bin=v36,
                     function_env={"BACKUP_INTERVAL_MINUTES": "1"})
    sim.scale(1)
    sim.wait_converged(1, label="bootstrap on 3.6")
    url = sim.running_client_urls()[0]
    etcd.put(url, "/on/3.6", "x", timeout=5)
    wait_for("a backup on 3.6", 150, lambda: [b for b in sim.backups() if "-v3.6." in b["key"]])
    # Rolled to 3.7: the replacement joins before the last voter leaves.
    sim.etcd_bin = v37
    [old] = [i["InstanceId"] for i in sim.group_instances()]
    sim.terminate(old)
    wait_for("the 3.7 member alone", 240, lambda: old not in {i["InstanceId"] for i in sim.group_instances()}
             and (sim.cluster_version() or "").startswith("3.7."))
    sim.wait_converged(1, label="rolled to 3.7")
    url = sim.running_client_urls()[0]
    for n in range(20):
        etcd.put(url, f"/on/3.7/{n:02d}", "x", timeout=5)
    revision = int(etcd.status(url)["header"]["revision"])
    fresh = wait_for("a 3.7 backup of the writes", 150, lambda: next(
        (b for b in reversed(sim.backups()) if "-v3.7." in b["key"] and b["revision"] >= revision), None))
    record = sim.parameters()[f"{sim.prefix}/cluster"]
    # Every instance lost; the template rolled back to 3.6.
    for i in sim.group_instances():
        sim.detach(i["InstanceId"])
    sim.etcd_bin = v36
    sim.cluster_id = None
    sim.scale(1)
    try:
        wait_for("the 3.6 seed held, the freshest backup named", 90, lambda: any(
            ((b or {}).get("waiting") or "").startswith("no-restorable-backup") for _, b in invocation_outcomes(sim)))
    except AssertionError as e:
        with open(f"{sim.workdir}/function.log") as f:
            raise AssertionError(f"{e}\n{sim.table()}\n{f.read()[-6000:]}") from None
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert fresh["key"] in log and "needs etcd 3.7" in log, "the wait does not name the backup and its release"
    time.sleep(8)
    assert sim.parameters()[f"{sim.prefix}/cluster"] == record, "restored an older backup on a guess"
    # The operator's fix: the template back on 3.7, the waiting instance terminated.
    sim.etcd_bin = v37
    [waiting] = [i["InstanceId"] for i in sim.group_instances()]
    sim.terminate(waiting)
    sim.wait_converged(1, label="restored from the freshest backup", timeout=240)
    assert waiting not in {i["InstanceId"] for i in sim.group_instances()}
    url = sim.running_client_urls()[0]
    assert etcd.keys_with_prefix(url, "/on/3.7/") == {f"/on/3.7/{n:02d}" for n in range(20)}
    restored = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert restored["restored_from"]["snapshot"]["key"] == fresh["key"], restored


def _put_ok(url: str) -> bool:
    try:
        etcd.put(url, "/after/wake", "x", timeout=5)
        return True
    except etcd.EtcdError:
        return False


def _objects(sim) -> dict[str, str]:
    """Every object in the simulation's bucket: key → ETag."""
    out = {}
    for page in sim.s3.get_paginator("list_objects_v2").paginate(Bucket=sim.backup_bucket):
        out.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
    return out


def _lead_with_the_first_to_leave(sim) -> int:
    """Moves leadership to the member of the instance a scale to zero removes first (the oldest:
    its launch time, to the second, then its id, as the function orders them); its member id."""
    ids = [i["InstanceId"] for i in sim.group_instances()]
    described = sim.ec2.describe_instances(InstanceIds=ids)["Reservations"]
    launched = {i["InstanceId"]: int(i["LaunchTime"].timestamp()) for r in described for i in r["Instances"]}
    first = min(ids, key=lambda i: (launched[i], i))
    listed = wait_for("the member list", 30, sim.member_list)
    member = next(int(m["ID"]) for m in listed[1] if m.get("name") == first)
    leader = wait_for("a leader", 30, sim.leader)
    if leader != first:
        moved = sim.etcdctl(sim.client_url(leader), "move-leader", f"{member:x}")
        assert moved.returncode == 0, moved.stderr
        wait_for(f"{first} to lead", 30, lambda: sim.leader() == first)
    return member


def _self_removals(sim) -> dict[int, str]:
    """Each member whose etcd applied its own removal (member id → its raft role then, from the
    last role change its log names before it: "leader" or "follower")."""
    out = {}
    for iid in sim.instances:
        role = None
        try:
            with open(os.path.join(sim.workdir, iid, "boot.log")) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            if not line.startswith("{"):
                continue
            entry = json.loads(line)
            msg = entry.get("msg", "")
            if " became leader at term " in msg:
                role = "leader"
            elif re.search(r" became (follower|candidate|pre-candidate) at term ", msg):
                role = "follower"
            elif msg == "removed member" and entry.get("removed-remote-peer-id") == entry.get("local-member-id"):
                out[int(entry["local-member-id"], 16)] = role
                break
    return out


def _retained(sim) -> dict[str, str]:
    """The bucket's objects (as `_objects`) once retention has nothing left to delete in it:
    one backup per hour (the newest), none half-deleted; else empty."""
    objects = _objects(sim)
    hours = [b["taken_at"] // 3600 for b in sim.backups()]
    halves = [k for k in objects if k.endswith(".db") and f"{k}.json" not in objects]
    return objects if len(hours) == len(set(hours)) and not halves else {}


@pytest.mark.long(150)
def test_a_second_stack_starts_from_the_first_stacks_backup_and_leaves_the_first_untouched(simulation):
    """Long: one scenario, step by step; each step's assertions depend on the state the previous left."""
    # Two stacks of one account: each its own group, parameters and bucket, one S3 (the second
    # simulation's S3 is the first's). RECOVERY=manual on the second: the request decides.
    prod = simulation(backups=True, writer=False, function_env={"BACKUP_INTERVAL_MINUTES": "1"})
    prod.scale(3)
    prod.wait_converged(3, label="the first stack")
    url = prod.running_client_urls()[0]
    for n in range(20):
        etcd.put(url, f"/prod/{n:02d}", f"value {n}", timeout=5)
    revision = int(etcd.status(url)["header"]["revision"])
    backup = wait_for("a backup of the first stack at the writes' revision", 150,
                      lambda: next((b for b in reversed(prod.backups()) if b["revision"] >= revision), None))
    source = f"s3://{prod.backup_bucket}/{backup['key']}"
    prod_record = prod.parameters()[f"{prod.prefix}/cluster"]
    # The first stack's own retention first: the backup just seen makes the older ones of its
    # hour prunable, deleted in the function's next pass (manifest, then database).
    prod_objects = wait_for("the first stack's retention to settle", 60, lambda: _retained(prod))
    # A stack with START_FROM=empty (the default) would ignore the copy (its first launch starts
    # an empty cluster): refused, naming why, nothing copied.
    empty = simulation(backups=True, writer=False, s3_of=prod)
    r = empty.cli("restore", "--from", source)
    assert r.returncode != 0 and "START_FROM=empty" in r.stderr, r.stderr
    assert _objects(empty) == {} and f"{empty.prefix}/restore-request" not in empty.parameters()
    # START_FROM=backup: its instances launch and are held; no empty cluster is ever started.
    side = simulation(backups=True, writer=False, s3_of=prod,
                      function_env={"RECOVERY": "manual", "START_FROM": "backup"})
    side.scale(3)
    wait_for("the second stack holding its launches for a backup", 60, lambda: any(
        (b or {}).get("waiting") == "await-first-restore" for _, b in invocation_outcomes(side)))
    assert _objects(side) == {} and f"{side.prefix}/cluster" not in side.parameters()
    # Refused, naming the bad value, changing nothing: not an S3 URL, no backup there, a copy
    # whose bytes are not what the manifest says, a snapshot etcd's trailer does not match.
    snapshot = prod.s3.get_object(Bucket=prod.backup_bucket, Key=backup["key"])["Body"].read()
    manifest = json.loads(prod.s3.get_object(Bucket=prod.backup_bucket, Key=f"{backup['key']}.json")["Body"].read())
    prod.s3.create_bucket(Bucket="etcd-archive")
    flipped = snapshot[:100] + bytes([snapshot[100] ^ 0xFF]) + snapshot[101:]
    archive = backup["key"].replace(f"/{prod.group}/", "/archived/")
    prod.s3.put_object(Bucket="etcd-archive", Key=f"{archive}", Body=flipped)
    prod.s3.put_object(Bucket="etcd-archive", Key=f"{archive}.json", Body=json.dumps(manifest))
    lying = backup["key"].replace(f"/{prod.group}/", "/lying/")
    prod.s3.put_object(Bucket="etcd-archive", Key=lying, Body=snapshot)
    prod.s3.put_object(Bucket="etcd-archive", Key=f"{lying}.json", Body=json.dumps({**manifest, "sha256": "0" * 64}))
    for bad, says in [("https://example.com/x.db", "must start with s3://"),
                      (f"s3://{prod.backup_bucket}/{backup['key']}.missing", "not a backup's snapshot"),
                      (f"s3://{prod.backup_bucket}/{backup['key'].replace('.db', '0.db')}", "no readable manifest"),
                      (f"s3://etcd-archive/{archive}", "SHA-256"),
                      (f"s3://etcd-archive/{lying}", "its manifest says")]:
        r = side.cli("restore", "--from", bad)
        assert r.returncode != 0 and says in r.stderr, (bad, r.stderr)
        assert _objects(side) == {}, bad
    assert f"{side.prefix}/restore-request" not in side.parameters()
    # Copied with the operator's credentials, checked on the way; then the second stack's first
    # instance starts the cluster from it.
    r = side.cli("restore", "--from", source)
    assert r.returncode == 0 and "checksum verified" in r.stdout, r.stderr
    (copy,) = side.backups()
    assert copy["copied_from"] == source and copy["sha256"] == backup["sha256"], copy
    assert copy["key"].startswith(f"etcd-asg-lifecycle/{side.group}/"), copy
    # A second run changes nothing: it finds the copy, or, once the stack's first launch has
    # already started the cluster from it (the request is the function's to act on at once), it
    # is refused for the record; either way no second copy.
    again = side.cli("restore", "--from", source)
    assert again.returncode == 0 or "this stack has a cluster already" in again.stderr, again.stderr
    assert [b["key"] for b in side.backups()] == [copy["key"]]
    side.wait_converged(3, label="the second stack, from the first's backup", timeout=240)
    side_url = side.running_client_urls()[0]
    assert etcd.keys_with_prefix(side_url, "/prod/") == {f"/prod/{n:02d}" for n in range(20)}
    record = json.loads(side.parameters()[f"{side.prefix}/cluster"])
    assert record["restored_from"]["snapshot"]["key"] == copy["key"], record
    assert record["restored_from"]["copied_from"] == source, record
    assert side.cluster_id is not None and side.cluster_id != prod.cluster_id
    with open(f"{side.workdir}/function.log") as f:
        assert "restored from the backup the restore request names" in f.read()
    # Its own cluster: what it writes stays there; the first stack is as it was.
    etcd.put(side_url, "/side/only", "x", timeout=5)
    assert etcd.keys_with_prefix(url, "/side/") == set()
    assert etcd.keys_with_prefix(url, "/prod/") == {f"/prod/{n:02d}" for n in range(20)}
    assert prod.parameters()[f"{prod.prefix}/cluster"] == prod_record
    after = _objects(prod)
    assert all(after.get(k) == etag for k, etag in prod_objects.items()), "the first stack's backups changed"
    assert not [k for k in after if k.startswith(f"etcd-asg-lifecycle/{side.group}/")]
    # And the first stack refuses a backup from elsewhere: it has a cluster of its own.
    r = prod.cli("restore", "--from", f"s3://{side.backup_bucket}/{copy['key']}")
    assert r.returncode != 0 and "has a cluster already" in r.stderr, r.stderr
