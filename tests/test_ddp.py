"""Two gloo processes give the same advantages, loss and update as one process over the same prompts."""

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
    return merged, [r["loss"] for r in records], torch.load(out / "params.pt")


@pytest.mark.slow
def test_two_rank_ddp_equals_one_process(tmp_path, tiny_model_dir, puzzles_path):
    one, loss1, params1 = _run(1, tmp_path / "w1", tiny_model_dir, puzzles_path)
    two, loss2, params2 = _run(2, tmp_path / "w2", tiny_model_dir, puzzles_path)
    assert set(one) == set(two) and len(one) == 32
    for key in one:
        assert two[key][1] == pytest.approx(one[key][1])  # rewards
        assert two[key][0] == pytest.approx(one[key][0], abs=1e-5)  # batch-scaled advantages
    assert any(abs(a) > 0.1 for a, _ in one.values())
    # each rank logs its own share of the step's loss; the shares add up to the one-process loss
    assert sum(loss2) / 2 == pytest.approx(loss1[0], abs=1e-5)
    for name, p in params1.items():
        torch.testing.assert_close(params2[name], p, atol=1e-5, rtol=1e-4)
