"""A rolling upgrade: a cluster of etcd 3.4 members replaced one at a time by instances that boot
etcd 3.5, with the writer running throughout. It needs both versions, so it runs once, whatever
ETCD_VERSION says (`make e2e-upgrade`; the per-version passes leave it out)."""

import time

from sim import etcd


def test_a_3_4_cluster_replaced_member_by_member_with_3_5_loses_nothing_and_ends_at_3_5(simulation):
    old, new = etcd.binary("3.4"), etcd.binary("3.5")
    sim = simulation(etcd_bin=old)
    sim.start_writer()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap on 3.4")
    assert sim.cluster_version().startswith("3.4."), sim.cluster_version()

    sim.etcd_bin = new  # every instance that boots from now on runs 3.5
    originals = sorted(i["InstanceId"] for i in sim.group_instances())
    for n, iid in enumerate(originals, 1):
        sim.terminate(iid, decrement=False)
        sim.wait_converged(3, label=f"upgrade {n}/{len(originals)}", timeout=180)
    members = {i["InstanceId"] for i in sim.group_instances()}
    assert not members & set(originals), "every 3.4 member was replaced"
    assert {sim.instances[i].etcd_bin for i in members} == {new}

    # The leader raises the cluster version once every member runs 3.5 (it checks every few seconds).
    deadline = time.monotonic() + 60
    while not (sim.cluster_version() or "").startswith("3.5.") and time.monotonic() < deadline:
        time.sleep(0.5)
    for iid in members:
        seen = etcd.versions(sim.client_url(iid))
        assert seen["etcdserver"].startswith("3.5."), (iid, seen)
        assert seen["etcdcluster"].startswith("3.5."), (iid, seen)

    sim.writer.stop()
    assert len(sim.writer.acked) > 100, "the writer made progress throughout"
    assert sim.writer.lost() == []
    assert sim.problems() == []  # includes: one cluster id throughout
    assert all(i.outcome == "ok" for i in sim.function.invocations), [
        (i.outcome, i.body) for i in sim.function.invocations if i.outcome != "ok"
    ]
