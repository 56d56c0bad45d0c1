"""The nemesis (sim/nemesis.py) in `make test`: a fixed set of short seeds, each a seeded
schedule of group operations, member faults, function faults and AWS faults, judged as every
nemesis run is (convergence, the client history, no acknowledged write lost, no terminate hook
lapsed). The long search is `make nemesis`; a seed it finds failing becomes a case here."""

import pytest

from sim import etcd, nemesis
from sim.nemesis_run import Run, drawn, version_refused

# Two seeds whose 90 s schedules together cover every kind of operation (`python -m sim.nemesis --show`);
# 138 and 578 since the `slow` kind (a slow disk) changed every schedule (71 and 100 before the
# `refresh` kind, then 138 and 182).
SEEDS = [138, 578]


@pytest.mark.long(200)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_nemesis_run_finds_nothing(seed):
    found = nemesis.run(seed, 90)
    assert not found, f"seed {seed}: {found}; replay: {nemesis.replay_command(seed, 90)}"


def test_the_same_seed_gives_the_same_schedule():
    assert nemesis.schedule(5, 300) == nemesis.schedule(5, 300)
    assert nemesis.schedule(5, 300) != nemesis.schedule(6, 300)
    kinds = {op.kind for seed in range(1, 30) for op in nemesis.schedule(seed, 600)}
    assert kinds == set(nemesis.KINDS), kinds


def test_a_draw_rounded_up_to_one_names_the_last_candidate():
    """Seed 701 (600 s) draws a pause's victim at 1.0 (0.9995 and up round to it): the run broke
    with an IndexError at 515 s, never judged. Replay: ETCD_VERSION=3.6 make nemesis SEED=701
    SECONDS=600."""
    assert any(op.pick == 1.0 for op in nemesis.schedule(701, 600))
    assert drawn(["a", "b", "c"], 1.0) == "c"
    assert drawn(["a", "b", "c"], 0.0) == "a"
    assert drawn(["a", "b", "c"], 0.667) == "c"
    assert drawn(["a", "b", "c"], 0.5) == "b"


def test_the_template_moves_back_only_while_the_cluster_version_allows_it():
    """Seed 703 (3.6, 600 s) moved the template back to 3.6 while a cluster at 3.7 slept: no member
    answered, so the cluster version read as none and the move was let through. The wake then
    waited, as it must (`no-restorable-backup`: a 3.6 seed cannot restore the 3.7 final
    snapshot), for an operator who never came, and the run was judged not converged. Replay:
    ETCD_VERSION=3.6 make nemesis SEED=703 SECONDS=600."""
    assert any(op.kind == "version" and op.minor == "3.6" for op in nemesis.schedule(703, 600))
    assert version_refused("3.6", None, "3.7").startswith("skipped: the cluster version is unknown")
    assert version_refused("3.6", "3.7.0", "3.7") == "skipped: the cluster version is 3.7.0"
    assert version_refused("3.6", "3.6.0", "3.7") == ""  # mid-upgrade: back is still allowed
    assert version_refused("3.7", None, "3.7") == ""  # forward (or level) at any time
    assert version_refused("3.7", None, "3.6") == ""


class _Asleep:
    """A simulation whose cluster, at 3.7, is asleep: no member answers to say its version."""

    def __init__(self):
        self.etcd_bin = etcd.binary("3.7")

    def cluster_version(self):
        return None


def test_seed_703s_move_back_is_skipped_while_the_cluster_sleeps():
    """The run's own `version` operation of seed 703, against a sleeping 3.7 cluster: skipped,
    and new instances still boot 3.7 (before: "launches run etcd 3.6.17")."""
    run = Run(_Asleep(), 703, [], log=lambda _: None)
    op = next(op for op in nemesis.schedule(703, 600) if op.kind == "version" and op.minor == "3.6")
    assert run.op_version(op).startswith("skipped: the cluster version is unknown")
    assert run.sim.etcd_bin == etcd.binary("3.7")
