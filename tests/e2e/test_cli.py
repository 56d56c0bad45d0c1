"""The operator CLI against the simulation: every subcommand, JSON parsed, `plan` agreeing with
what the function then does, and --stack finding the settings from the group's tags."""

import json
import os
import time

from conftest import wait_for
from sim import etcd
from sim.world import Chaos, scheduled_event


def _json(sim, *args, **kw):
    r = sim.cli(*args, **kw)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_status_shows_every_instance_member_and_the_record(simulation):
    sim = simulation()
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    # Convergence is seen as the last launch completes; the step after it (with TLS, switching
    # authentication on) may not have run yet, so the plan is idle a moment later, not at once.
    def idle() -> dict | None:
        s = _json(sim, "status", "--json")
        return s if s["plan"]["step"] == "idle" else None

    s = wait_for("the plan to be idle once converged", 60, idle)
    ids = sorted(i["InstanceId"] for i in sim.group_instances())
    assert sorted(r["instance"] for r in s["rows"]) == ids
    assert sorted(r["role"] for r in s["rows"]) == ["leader", "voter", "voter"]
    assert all(r["healthy"] and r["started"] and r["config_published"] for r in s["rows"]), s
    # Versions: each member's own (its status), each instance's declared one (its tag), and the
    # cluster version.
    exact = etcd.EXACT[os.environ.get("ETCD_VERSION") or etcd.DEFAULT_VERSION]
    assert all(r["db_size"] > 0 and r["version"] == exact == r["declared"] for r in s["rows"]), s
    assert s["cluster_version"] == f"{etcd.minor()}.0", s
    assert s["cluster_record"]["served"] and int(s["cluster_record"]["cluster_id"], 16) == sim.cluster_id
    assert s["alarms"] == []
    text = sim.cli("status").stdout
    for i in ids:
        assert i in text
    assert "leader" in text and "cluster record:" in text and "next: nothing to do" in text
    assert f"cluster version: {etcd.minor()}" in text and f"{exact} / {exact}" in text, text


def test_plan_says_what_the_function_then_does_and_replay_changes_nothing(simulation, tmp_path):
    # No events delivered and no schedule: only this test invokes the function.
    sim = simulation(chaos=Chaos(drop=1.0), schedule_every=3600, writer=False)
    sim.scale(1)
    deadline = time.monotonic() + 30
    while len(sim.instances) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    (seed,) = (i["InstanceId"] for i in sim.group_instances())
    plan = _json(sim, "plan", "--json")
    assert plan["step"] == "create-cluster" and plan["instance"] == seed, plan
    assert "rule 1" in plan["why"]

    event = tmp_path / "scheduled.json"
    event.write_text(json.dumps(scheduled_event()))
    before = sim.parameters()
    r = sim.cli("replay", str(event))
    assert r.returncode == 0, r.stderr
    assert f"create cluster record seeded by {seed}" in r.stdout, r.stdout
    assert sim.parameters() == before, "a dry run changes nothing"

    inv = sim.function.invoke(scheduled_event(), timeout=60)
    assert inv.outcome == "ok", inv.body
    assert inv.body["steps"][0].startswith(f"create-cluster {seed}"), inv.body
    # The seed starts; the next plan notes that the cluster served, and so does the function.
    deadline = time.monotonic() + 30
    while sim.member_list() is None:
        assert time.monotonic() < deadline, "the seed did not start"
        time.sleep(0.2)
    plan = _json(sim, "plan", "--json")
    assert plan["step"] == "mark-served", plan
    inv = sim.function.invoke(scheduled_event(), timeout=60)
    assert inv.body["steps"][0].startswith(f"mark-served {seed}"), inv.body


def test_stack_settings_come_from_the_groups_tags(simulation):
    sim = simulation(writer=False)
    sim.scale(1)
    sim.wait_converged(1, label="bootstrap")
    env = sim.function.env
    tags = {"aws:cloudformation:stack-name": "prod-etcd"}
    for var in ("LAUNCH_HOOK_NAME", "TERMINATE_HOOK_NAME", "PARAMETER_PREFIX", "ADDRESS_SOURCE", "TLS"):
        if var in env:
            tags[f"etcd-asg-lifecycle:{var}"] = env[var]
    sim.asg.create_or_update_tags(Tags=[
        {"ResourceId": sim.group, "ResourceType": "auto-scaling-group", "Key": k, "Value": v,
         "PropagateAtLaunch": False} for k, v in tags.items()])
    # Only AWS's settings in the environment: the rest comes from the stack.
    aws_only = {k: v for k, v in env.items() if k.startswith("AWS_") or k == "PATH"}
    import os
    import subprocess
    binary = os.path.join(os.path.dirname(sim.binary), "etcd-asg")
    r = subprocess.run([binary, "--stack", "prod-etcd", "status", "--json"], env=aws_only,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert [row["role"] for row in s["rows"]] == ["leader"], s
    r = subprocess.run([binary, "--stack", "no-such-stack", "status"], env=aws_only,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "no-such-stack" in r.stderr, r.stderr
