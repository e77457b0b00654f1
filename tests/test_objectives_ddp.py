"""Micro-batching and the number of ranks do not change any objective's update, except the three that are a mean
per micro-batch by definition (as in TRL): ``bnpo`` and the entropy bonus (a mean of micro-batch token means; on
two ranks, each rank's micro-batches count) and ``top_entropy_quantile`` (its threshold is taken over the
micro-batch at the same index on every rank). Every variant runs in ``tests/objectives_ddp.py`` on 1 process and on
2 gloo processes (DDP's gradient average), with micro-batches of 1, 2, 4 completions and all at once."""

import json
import sys
from pathlib import Path

import pytest
import torch
from launch import run_together

SCRIPT = Path(__file__).with_name("objectives_ddp.py")
PER_MICRO_BATCH = {"bnpo", "entropy-bonus", "top-entropy"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("objectives_ddp")
    run_together([[sys.executable, str(SCRIPT), str(world), str(root / f"w{world}.json")] for world in (1, 2)],
                 timeout=600)  # at once: 1 process and 2 ranks, each with its own port
    return {world: json.loads((root / f"w{world}.json").read_text()) for world in (1, 2)}


def _grad(runs, world, name, micro):
    return torch.tensor(runs[world][f"{name}/m{micro}"]["grad"])


def _loss(runs, world, name, micro):
    return sum(runs[world][f"{name}/m{micro}"]["loss"])


@pytest.mark.slow
def test_every_other_variant_is_independent_of_micro_batches_and_ranks(runs):
    names = {k.split("/")[0] for k in runs[1]} - PER_MICRO_BATCH
    assert len(names) == 15
    for name in sorted(names):
        ref = _grad(runs, 1, name, 0)
        assert ref.abs().max() > 1e-3, name  # a real gradient
        for world, micro in [(1, 1), (1, 2), (1, 4), (2, 0), (2, 1), (2, 2)]:
            torch.testing.assert_close(_grad(runs, world, name, micro), ref, atol=1e-6, rtol=0, msg=name)
            assert _loss(runs, world, name, micro) == pytest.approx(_loss(runs, 1, name, 0), abs=1e-6), name


@pytest.mark.slow
def test_per_micro_batch_variants_depend_only_on_the_partition(runs):
    """The same partition into micro-batches gives the same update whatever the ranks: 2 ranks of 4 rows = 1 rank
    with micro-batches of 4, and so on; another partition changes it (so the test can tell)."""
    for name in ("bnpo", "entropy-bonus"):
        for two, one in [(0, 4), (1, 1), (2, 2)]:
            torch.testing.assert_close(_grad(runs, 2, name, two), _grad(runs, 1, name, one), atol=1e-6, rtol=0)
        assert (_grad(runs, 1, name, 0) - _grad(runs, 1, name, 4)).abs().max() > 1e-5, name
    # top_entropy_quantile: micro-batch k's threshold spans micro-batch k of every rank
    torch.testing.assert_close(_grad(runs, 2, "top-entropy", 0), _grad(runs, 1, "top-entropy", 0), atol=1e-6, rtol=0)
    assert (_grad(runs, 1, "top-entropy", 0) - _grad(runs, 1, "top-entropy", 1)).abs().max() > 1e-4
