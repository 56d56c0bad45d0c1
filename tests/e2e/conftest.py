"""End-to-end tests: real etcd, moto with lifecycle hooks, the real bootstrap binary."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.world import Simulation  # noqa: E402


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
