"""Compound faults on real etcd: a termination while another member is down, a seed that never
boots, a cluster of one replaced, a function whose hook is missing."""

import json
import time

import pytest
from botocore.exceptions import ClientError

from conftest import invocation_outcomes, wait_for
from sim import etcd


def _member_names(sim) -> set[str]:
    listed = sim.member_list()
    return {m.get("name", "") for m in listed[1]} if listed else set()




def _delete_bucket(sim):
    """Empties the backup bucket and deletes it. The function may be storing a snapshot meanwhile
    (BucketNotEmpty): again, until the bucket is gone."""
    bucket = sim.backup_bucket
    for _ in range(50):
        for u in sim.s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            sim.s3.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
        for b in sim.s3.list_objects_v2(Bucket=bucket).get("Contents", []):
            sim.s3.delete_object(Bucket=bucket, Key=b["Key"])
        try:
            sim.s3.delete_bucket(Bucket=bucket)
            return
        except ClientError as e:
            if e.response["Error"]["Code"] != "BucketNotEmpty":
                raise
        time.sleep(0.2)
    raise AssertionError(f"{bucket} never stayed empty long enough to delete")


@pytest.mark.long(55)
@pytest.mark.parametrize("store", ["no backups", "the bucket deleted"])
def test_a_termination_while_another_member_is_down_is_held_until_the_dead_member_is_replaced(
        simulation, store):
    # Hooks that lapse after 20 s without a heartbeat: a hold must keep beating, whatever fails.
    if store == "no backups":
        sim = simulation(function_env={"UNHEALTHY_REPLACE_SECS": "12"}, hook_timeout=20)
    else:
        sim = simulation(function_env={"UNHEALTHY_REPLACE_SECS": "30", "BACKUP_INTERVAL_MINUTES": "1"},
                         backups=True, hook_timeout=20)
    sim.start_writer()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    if store == "the bucket deleted":
        # The first backup is taken; then the bucket goes (a person, a policy): every later
        # listing and snapshot fails while the termination is held.
        wait_for("the first backup", 60, sim.backups)
        _delete_bucket(sim)
    first, dead, leaving = sorted(i["InstanceId"] for i in sim.group_instances())
    # dead's etcd dies on an instance that stays in service; then leaving is scaled in.
    sim.kill_instance(dead)
    sim.terminate(leaving, decrement=True)

    def held():
        for _, body in invocation_outcomes(sim):
            for h in (body or {}).get("held_for_quorum", []):
                if h["instance"] == leaving:
                    return h
        return None

    hold = wait_for("the quorum guard to hold the termination", 60, held)
    assert hold["blocking"], hold
    # Held, not removed: removing a live member with another down would have lost quorum.
    assert leaving in _member_names(sim)
    state = {i["InstanceId"]: i["LifecycleState"] for i in sim.group_instances()}
    assert state[leaving] == "Terminating:Wait", state
    # The dead member's instance is replaced after UNHEALTHY_REPLACE_SECS; its removal unblocks
    # the held termination; the replacement joins.
    sim.wait_converged(2, label="dead member replaced, termination released", timeout=180)
    ids = {i["InstanceId"] for i in sim.group_instances()}
    assert first in ids and dead not in ids and leaving not in ids, ids
    marked = [h["InstanceId"] for h in sim.drain("health")]
    assert dead in marked, marked
    # No hook lapsed into its default result: the held termination was heartbeated throughout.
    assert sim.drain("lapsed") == []
    if store == "the bucket deleted":
        with open(f"{sim.workdir}/function.log") as f:
            log = f.read()
        # Whichever came first: a listing, or the scheduled snapshot's upload (after which
        # backups wait two minutes without listing).
        assert "the backup store cannot be listed" in log or "backup store or snapshot failed" in log
    sim.writer.stop()
    assert sim.writer.lost() == []
    assert all(o == "ok" for o, _ in invocation_outcomes(sim)), [
        b for o, b in invocation_outcomes(sim) if o != "ok"]


def test_a_seed_that_never_boots_is_abandoned_and_another_seeds_the_cluster(simulation):
    sim = simulation(function_env={"LEARNER_START_TIMEOUT_SECS": "10"})
    # The first instance is the seed, and it never boots (a broken AMI, a failed download).
    sim.dead_on_arrival = 1
    sim.scale(1)
    sim.wait_converged(1, label="re-seeded bootstrap", timeout=120)
    (dead,) = sim.never_booted
    record = json.loads(sim.parameters()[f"{sim.prefix}/cluster"])
    assert record["seed"] != dead, record
    assert record["state"] == "served" and record["cluster_id"] == sim.cluster_id, record
    # One decision per record: the dead seed's record was replaced (by the current one), and the
    # current one served; neither can ever be decided otherwise.
    params = sim.parameters()
    decided = {k.rsplit("/", 1)[1]: v for k, v in params.items() if k.startswith(f"{sim.prefix}/decided/")}
    (replaced,) = [v for k, v in decided.items() if k.startswith(f"{dead}-")]
    assert json.loads(replaced)["seed"] == record["seed"], replaced
    assert decided[f"{record['seed']}-{record['created_at']}"] == "served", decided
    sim.start_history()
    sim.scale(3)
    sim.wait_converged(3, label="grown from the new seed")
    sim.verify_history()


def test_a_cluster_of_one_keeps_its_data_through_a_replacement(simulation):
    sim = simulation()
    sim.scale(1)
    sim.wait_converged(1, label="one member")
    (old,) = (i["InstanceId"] for i in sim.group_instances())
    etcd.put(sim.client_url(old), "/kept", "through the replacement")
    sim.start_history()
    # Launch before terminate, as the template's instance maintenance policy has it.
    sim.scale(2)
    sim.terminate(old, decrement=True)
    sim.wait_converged(1, label="replaced", timeout=120)
    (new,) = (i["InstanceId"] for i in sim.group_instances())
    assert new != old
    assert etcd.keys_with_prefix(sim.client_url(new), "/kept") == {"/kept"}
    sim.verify_history()
    # The old member was held (not removed, not released) while the new one joined.
    with open(f"{sim.workdir}/function.log") as f:
        log = f.read()
    assert "LastVoterHeld" in log and old in log


def test_a_missing_hook_fails_every_invocation_naming_it(simulation):
    # The cold start makes no AWS call: each environment's first invocation checks the hooks,
    # and fails (Fatal.Config, naming the variable and its value) until the group has them.
    sim = simulation(writer=False, tls=False,
                     function_env={"TERMINATE_HOOK_NAME": "not-a-hook-of-the-group"})
    sim.scale(1)
    failed = wait_for("a failed invocation", 30,
                      lambda: [i for i in sim.function.invocations if i.outcome == "error"])
    body = failed[0].body
    assert body["errorType"] == "Fatal.Config", body
    assert "TERMINATE_HOOK_NAME" in body["errorMessage"], body
    assert "not-a-hook-of-the-group" in body["errorMessage"], body
    # Nothing was done meanwhile: no cluster record, the instance still held at launch.
    assert not any(k.endswith("/cluster") for k in sim.parameters()), sim.parameters()
    assert all(i["LifecycleState"] == "Pending:Wait" for i in sim.group_instances())
