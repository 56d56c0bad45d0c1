"""Every file of events/ through the real binary behind the Lambda Runtime API."""

import json
from pathlib import Path

from sim.replay import GROUP, HOOKS, replay
from sim.world import ROOT, Simulation


def test_every_event_file_gets_its_outcome_from_the_real_binary():
    with Simulation(name=GROUP, hooks=HOOKS, writer=False, schedule_every=3600) as sim:
        before = sim.parameters()
        outcomes = {p.name: replay(sim, p) for p in sorted((ROOT / "events").glob("*.json"))}
        assert sim.parameters() == before, "no event changed anything"
        log_lines = Path(sim.workdir, "function.log").read_text().splitlines()
    for name, (outcome, body) in outcomes.items():
        if name == "rejected-malformed.json":
            # Not JSON: the runtime library refuses it before the handler.
            assert outcome == "error" and "Deserialize" in body["errorType"], body
            continue
        assert outcome == "ok", (name, body)
        if name.startswith("rejected-"):
            assert body["outcome"] == "rejected", (name, body)
        elif name in ("launch.json", "terminate.json"):
            # AWS's sample instance is not in the group: an unknown instance changes nothing.
            assert body["outcome"] == "rejected" and body["field"] == "EC2InstanceId", body
        elif name == "scheduled.json":
            assert body["outcome"] == "reconciled" and body["steps"] == [], body
        else:
            assert body["outcome"] == "acknowledged", (name, body)
    # A hostile value cannot forge a log line: every line is one JSON object.
    for line in log_lines:
        record = json.loads(line)
        assert record.get("fields", {}).get("msg") != "forged", line
