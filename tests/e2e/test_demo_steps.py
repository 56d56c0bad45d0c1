"""Each step of `make demo`, in order, on one cluster that a writer keeps busy throughout.

After every step the simulation's convergence check holds: one cluster id throughout, the member
set equals the group's live instances, no learner left, every lifecycle action completed, one
published config per instance, the cluster record in place.
"""

import pytest

from sim import scenario
from sim.world import Simulation

# One simulation for the whole module, its steps in order: on one worker (`--dist loadgroup`).
pytestmark = [pytest.mark.xdist_group("demo-steps"), pytest.mark.long(80), pytest.mark.v37]
TITLES = [t for t, _ in scenario.DEMO]


@pytest.fixture(scope="module")
def sim():
    s = Simulation(name="etcd-demo-steps")
    s.steps_run = []  # the steps begun on this simulation, in order
    s.start()
    s.start_writer()
    yield s
    s.close()


@pytest.mark.parametrize("title,step", scenario.DEMO, ids=TITLES)
def test_step_converges(sim, title, step):
    # Each step builds on the ones before it, on this simulation: a step that finds others
    # missing was sent to another worker (or ran out of order), and would fail confusingly.
    earlier = TITLES[: TITLES.index(title)]
    assert sim.steps_run == earlier, f"the demo steps before {title!r} did not run on this worker"
    sim.steps_run.append(title)
    step(sim)
    assert sim.problems() == []


def test_no_acknowledged_write_was_lost_and_the_cluster_id_never_changed(sim):
    assert sim.steps_run == TITLES, "every step ran, in order, on this simulation"
    sim.writer.stop()
    assert len(sim.writer.acked) > 100, "the writer made progress throughout"
    assert sim.writer.lost() == []
    assert sim.problems() == []  # includes: the cluster id is the first one seen
    assert all(i.outcome == "ok" for i in sim.function.invocations), [
        (i.outcome, i.body) for i in sim.function.invocations if i.outcome != "ok"
    ]
