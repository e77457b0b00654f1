"""Two gloo processes give the same advantages, update and logged figures as one process over the same prompts,
and each rank draws from its own random stream (seed + rank), which a checkpoint keeps."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("ddp_equivalence.py")


def _run(world, out, model, data):
    out.mkdir()
    subprocess.run([sys.executable, str(SCRIPT), str(world), str(out), model, data], check=True, timeout=600,
                   cwd=Path(__file__).parents[1])
    records = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    assert len(records) == world
    merged = {}
    for r in records:
        for k, (i, a, t) in enumerate(zip(r["ids"], r["advantages"], r["total"])):
            merged[(i, k % 8)] = (a, t)
    return merged, records, torch.load(out / "params.pt")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir, puzzles_path):
    """The step with one process and with two, run once for this module's tests."""
    root = tmp_path_factory.mktemp("ddp")
    return {world: _run(world, root / f"w{world}", tiny_model_dir, puzzles_path) for world in (1, 2)}


@pytest.mark.slow
def test_two_rank_ddp_equals_one_process(runs):
    (one, records1, params1), (two, records2, params2) = runs[1], runs[2]
    assert set(one) == set(two) and len(one) == 32
    for key in one:
        assert two[key][1] == pytest.approx(one[key][1])  # rewards
        assert two[key][0] == pytest.approx(one[key][0], abs=1e-5)  # batch-scaled advantages
    assert any(abs(a) > 0.1 for a, _ in one.values())
    for name, p in params1.items():
        torch.testing.assert_close(params2[name], p, atol=1e-5, rtol=1e-4)
    # every train/ figure is over all ranks' completions: each rank logs the one-process value
    logged = records1[0]["logged"]
    for key in ("train/reward/ddp_test_length", "train/rollout/completion_length/mean",
                "train/rollout/completion_length/max", "train/rollout/completion_length/frac_truncated",
                "train/update/entropy", "train/update/kl", "train/update/clip_ratio", "train/update/loss",
                "train/reward_std", "train/rollout/advantage/std"):
        assert key in logged
    assert 0 < logged["train/rollout/completion_length/frac_truncated"] < 1 and logged["train/update/kl"] > 0
    assert logged["train/update/clip_ratio"] > 0
    for record in records2:
        assert set(record["logged"]) == set(logged)
        for key, value in logged.items():
            if key != "train/rollout/completions_per_second":
                assert record["logged"][key] == pytest.approx(value, abs=1e-5, rel=1e-4), key


@pytest.mark.slow
def test_each_rank_samples_from_its_own_stream(runs):
    """Ranks draw different numbers, from seed + rank (seed 0 here), and a checkpoint resumes each rank's own
    stream; a single process keeps the seed's stream."""
    records = runs[2][1]
    assert [r["seed"] for r in records] == [0, 1] and runs[1][1][0]["seed"] == 0
    assert records[0]["draws"] != records[1]["draws"]
    for r in records:
        before, after = r["resume"]
        assert before == after
    assert records[0]["resume"][0] != records[1]["resume"][0]
