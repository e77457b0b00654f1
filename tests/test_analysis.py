"""Analysis helpers: panels, grouping and summaries against hand values, scoring a given completion."""

import math

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from lit_grpo.tasks.attention import analysis
from lit_grpo.data.sample import Sample
from lit_grpo.testing.zoo import build_vlm
from lit_grpo.families import ImageGrid
from lit_grpo.tasks.attention.heatmap import RAMP, ROW


def _sample(**kw):
    image = Image.new("RGB", (132, 88), "white")
    ImageDraw.Draw(image).rectangle([84, 8, 111, 35], fill=(30, 30, 200))
    fields = dict(id="s", images=[image], question="Which option?", options={"A": "A", "B": "B"}, answer="A")
    fields.update(kw)
    return Sample(**fields)


def test_image_panel_draws_the_map_on_its_box():
    """A grid covering the top-right quarter only: 4x uniform attention there, none elsewhere (fixed scale)."""
    image = _sample().images[0]
    grid = ImageGrid(torch.arange(4).view(2, 2), 0, (0.5, 0.0, 1.0, 0.5))  # top-right quarter only
    pic = analysis.image_panel(image, [torch.full((2, 2), 0.25)], [grid], side=264)
    assert pic.shape[0] == ROW + 176 and pic.shape[1] > 4 * 264 + 9  # label row, tiles, colour bar
    heat_tile = pic[ROW:, 264 + 3: 2 * 264 + 3]
    top_left, top_right = heat_tile[:80, :120], heat_tile[:80, 140:]
    np.testing.assert_allclose(top_left, np.broadcast_to(RAMP[0], top_left.shape), atol=1e-6)
    at_4x = RAMP[6] + (RAMP[7] - RAMP[6]) * (5 / 6 * 8 - 6)  # log2 4 = 2: (2 + 3) / 6 of a 1/8..8 scale
    np.testing.assert_allclose(top_right, np.broadcast_to(at_4x, top_right.shape), atol=1e-5)


def test_group_key_and_puzzle_rule():
    s = _sample(fields={"domain": "Optics"}, meta={"reasoning_type": ["Spatial Relation Reasoning", "Numerical Reasoning"],
                                       "explanation": "The arrow turns 90 degrees clockwise in each panel."})
    assert analysis.group_key("domain")(s) == "Optics"
    assert analysis.group_key("meta.reasoning_type")(s) == "Spatial Relation Reasoning+Numerical Reasoning"
    assert analysis.group_key(lambda x: x.id)(s) == "s"
    assert analysis.puzzle_rule(s) == "rotation"
    records = [{"id": "s", "asm": 0.5, "group": "Optics"}]
    assert [r["group"] for r in analysis.regroup(records, [s], "meta.reasoning_type")] == [
        "Spatial Relation Reasoning", "Numerical Reasoning"]
    assert analysis.puzzle_rule(_sample(meta={"explanation": "The colour repeats red, blue."})) == "colour"
    assert analysis.puzzle_rule(_sample()) == "other"


def test_summarize_hand_values():
    records = [{"id": 1, "group": "a", "asm": 0.2}, {"id": 2, "group": "a", "asm": 0.4},
               {"id": 3, "group": "b", "asm": 0.9}, {"id": 4, "group": "b", "asm": math.nan},
               {"id": 3, "group": "c", "asm": 0.9}]  # sample 3 in two groups: once in "all"
    out = analysis.summarize(records)
    assert list(out) == ["a", "b", "c", "all"]
    assert out["a"]["mean"] == pytest.approx(0.3) and out["a"]["n"] == 2
    assert out["a"]["sem"] == pytest.approx(math.sqrt(0.02) / math.sqrt(2))  # std (ddof 1) of .2, .4 = sqrt(.02)
    assert out["b"] == {"mean": 0.9, "sem": 0.0, "n": 1}
    assert out["all"]["mean"] == pytest.approx(0.5) and out["all"]["n"] == 3
    for r, fg in zip(records, [0.1, 0.3, 0.2, 0.4, 0.2]):
        r["foreground"] = fg
    uniform = analysis.summarize(records, key="foreground")  # the ASM uniform attention would get
    assert uniform["a"]["mean"] == pytest.approx(0.2) and uniform["all"]["n"] == 4
    assert uniform["b"] == pytest.approx({"mean": 0.3, "sem": math.sqrt(0.02) / math.sqrt(2), "n": 2})


def test_scoring_a_given_completion():
    model, processor = build_vlm("qwen2_vl")
    a = analysis.sample_attention(model, processor, _sample(), completion="the answer is A")
    assert "".join(a.tokens[:-1]) == "the answer is A" and a.tokens[-1] == "<|im_end|>"
    assert a.token_asm.shape == (len(a.tokens),) and 0 <= a.asm <= 1
    assert a.asm == pytest.approx(a.token_asm.mean().item(), abs=1e-6)
    assert a.heatmap().sum().item() == pytest.approx(1.0, abs=1e-5) and a.heatmap().shape == (88, 132)
    assert a.panel(token=0).shape[:2] == (ROW + 171, a.panel().shape[1]) and a.panel().shape[1] > 4 * 256 + 9
