"""End-to-end tests: real etcd, moto with lifecycle hooks, the real bootstrap binary."""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim import procs  # noqa: E402
from sim.world import ROOT, Simulation  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "long(seconds): a test that takes about this long; run first")
    config.addinivalue_line("markers", "v37: also run on etcd 3.7 (`make e2e-3.7`): joins, removals, restores, "
                            "authentication, maintenance, the upgrade chain")


def pytest_collection_modifyitems(items):
    """The longest tests first (`long(seconds)`, longest to shortest), the rest in their order:
    xdist hands tests to workers in this order, so the suite does not end waiting on one long test
    started last. (A stable sort: the demo steps keep theirs.)"""
    def seconds(item):
        mark = item.get_closest_marker("long")
        return mark.args[0] if mark and mark.args else 0

    items.sort(key=lambda item: -seconds(item))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries each of its simulations' last log lines of the function:
    a failure on CI, where the work directories are gone, can then be read."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for sim in getattr(item, "simulations", []):
            report.sections.append((f"the function's last lines ({sim.group})", function_tail(sim)))


QUIET = {"lifecycle heartbeat", "lifecycle hook test notification acknowledged"}


def function_tail(sim, lines: int = 40) -> str:
    """The function's last `lines` log lines, one short line each (no spans, no step details)."""
    try:
        with open(os.path.join(sim.workdir, "function.log")) as f:
            raw = f.readlines()
    except OSError as e:
        return f"no function log: {e}"
    out = []
    for line in raw:
        try:
            entry = json.loads(line)
            fields = dict(entry["fields"])
        except (ValueError, KeyError, TypeError):
            continue  # a metrics (EMF) line, or not the function's JSON
        message = fields.pop("message", "")
        if message in QUIET:
            continue
        fields.pop("detail", None)
        rest = " ".join(f"{k}={v}" for k, v in fields.items())
        out.append(f"{entry.get('level', '?')} {message} {rest}"[:300])
    return "\n".join(out[-lines:])


@pytest.fixture
def simulation(request):
    """Makes simulations and stops every process they started, whatever the test did."""
    made = []
    request.node.simulations = made

    def make(**kw):
        # Instances run the AWS CLI through one warm process (sim/warm_aws.py); the demo steps
        # (test_demo_steps.py) run it as EC2 does, a fresh process each call.
        kw.setdefault("warm_aws", True)
        sim = Simulation(name=f"etcd-e2e-{len(made)}", **kw)
        made.append(sim)
        sim.start()
        return sim

    yield make
    # Every snapshot a simulation takes is etcd's own, whole: its revision must read from it.
    unread = [line for sim in made for line in sim.snapshot_revisions_unread()]
    for sim in made:
        sim.close()
    if unread:
        pytest.fail("a snapshot's own revision was not read from it:\n" + "\n".join(unread[:5]))


def invocation_outcomes(sim):
    """(outcome, response body) of every invocation so far."""
    return [(i.outcome, i.body) for i in sim.function.invocations]


CLIENT_APP = ROOT / "tests" / "clients" / "app.js"


class App:
    """One run of tests/clients/app.js (the npm etcd3 client library) against a simulation's load
    balancer: what it printed, one JSON object a line."""

    def __init__(self, sim, command: str, certs: str, user: str, prefix: str, *extra: str):
        if not (CLIENT_APP.parent / "node_modules" / "etcd3").is_dir():
            raise RuntimeError("the client library is not installed: make client-tools")
        n = len([f for f in os.listdir(sim.workdir) if f.startswith("app-")])
        self.log = os.path.join(sim.workdir, f"app-{n}-{command}.log")
        self.stop_file = f"{self.log}.stop"
        self.proc = procs.spawn(["node", str(CLIENT_APP), command, "--endpoint", sim.client_endpoint,
                                 "--certs", certs, "--user", user, "--prefix", prefix,
                                 "--stop", self.stop_file, *extra],
                                {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, self.log)

    def lines(self) -> list[dict]:
        out = []
        with open(self.log) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # the library's own warnings
        return out

    def events(self, name: str) -> list[dict]:
        return [line for line in self.lines() if line.get("event") == name]

    def wait_event(self, name: str, timeout: float) -> dict:
        def seen():
            found = self.events(name)
            if not found and self.proc.poll() is not None:
                raise AssertionError(f"{CLIENT_APP.name} ended ({self.proc.returncode}) before {name!r}: "
                                     f"{open(self.log).read()[-2000:]}")
            return found[0] if found else None
        return wait_for(f"the client's {name!r}", timeout, seen)

    def finish(self, timeout: float = 60) -> dict:
        """Asks it to stop (its --stop file) and returns its summary."""
        open(self.stop_file, "w").close()
        try:
            self.proc.wait(timeout)
        except Exception:
            procs.stop(self.proc, kill=True)
            raise
        found = [line["summary"] for line in self.lines() if "summary" in line]
        assert self.proc.returncode == 0 and found, open(self.log).read()[-2000:]
        return found[-1]

    def kill(self):
        procs.stop(self.proc, kill=True)


@pytest.fixture
def apps():
    """Starts tests/clients/app.js runs (App) and kills whichever still run at the end."""
    started = []

    def start(*args):
        app = App(*args)
        started.append(app)
        return app

    yield start
    for app in started:
        app.kill()


def app_certificate(sim, user: str = "app", prefix: str = "/app/") -> str:
    """A client certificate for `user`, limited to `prefix`, from the operator CLI: its folder."""
    out = os.path.join(sim.workdir, f"certs-{user}")
    r = sim.cli("client-cert", user, "--prefix", prefix, "--out", out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture
def moto():
    """moto with the lifecycle extension alone (no function, no etcd): its endpoint URL."""
    workdir = tempfile.mkdtemp(prefix="moto-")
    port_file = os.path.join(workdir, "port")
    proc = procs.spawn([sys.executable, str(ROOT / "sim" / "moto_lifecycle.py"), "--port-file", port_file],
                       dict(os.environ), os.path.join(workdir, "moto.log"))
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file):
            assert proc.poll() is None and time.monotonic() < deadline, "moto did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{open(port_file).read().strip()}"
    finally:
        procs.stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def wait_for(what, timeout, check, every=0.3):
    """Polls `check` until it returns something true; that is the result. Fails after `timeout`."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
