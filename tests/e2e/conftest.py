"""End-to-end tests: real etcd, moto with lifecycle hooks, the real bootstrap binary."""

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


@pytest.fixture
def simulation():
    """Makes simulations and stops every process they started, whatever the test did."""
    made = []

    def make(**kw):
        sim = Simulation(name=f"etcd-e2e-{len(made)}", **kw)
        made.append(sim)
        sim.start()
        return sim

    yield make
    for sim in made:
        sim.close()


def invocation_outcomes(sim):
    """(outcome, response body) of every invocation so far."""
    return [(i.outcome, i.body) for i in sim.function.invocations]


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
