"""Analysis helpers: panels, grouping and summaries against hand values, scoring a given completion."""

import math

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from lit_grpo import analysis
from lit_grpo.data.sample import Sample
from lit_grpo.embedded.zoo import build_vlm
from lit_grpo.families import ImageGrid


def _sample(**kw):
    image = Image.new("RGB", (132, 88), "white")
    ImageDraw.Draw(image).rectangle([84, 8, 111, 35], fill=(30, 30, 200))
    fields = dict(id="s", images=[image], question="Which option?", options={"A": "A", "B": "B"}, answer="A")
    fields.update(kw)
    return Sample(**fields)


def test_panel_tiles_are_image_heat_overlay_and_mask():
    image = Image.new("RGB", (4, 2), "white")
    image.putpixel((0, 0), (0, 0, 0))
    heat = np.array([[0.0, 1, 2, 3], [0, 0, 0, 0]])
    mask = np.zeros((2, 4), dtype=bool)
    mask[0, 0] = True
    pic = analysis.panel(image, heat, mask, gap=1)
    assert pic.shape == (2, 4 * 4 + 3, 3) and pic.dtype == np.float32 and 0 <= pic.min() and pic.max() <= 1
    np.testing.assert_allclose(pic[:, :4], np.asarray(image) / 255)
    assert (pic[:, 4] == 1).all()  # white gap
    np.testing.assert_allclose(pic[0, 8], [253 / 255, 231 / 255, 37 / 255], atol=1e-6)  # hottest pixel: ramp top
    np.testing.assert_allclose(pic[1, 5], [68 / 255, 1 / 255, 84 / 255], atol=1e-6)  # coldest: ramp bottom
    np.testing.assert_allclose(pic[1, 10:14], np.ones((4, 3)))  # overlay: weight 0 where attention is lowest
    assert (pic[0, 15] == 0).all() and (pic[0, 16:19] == 1).all()  # mask tile: foreground black


def test_image_panel_draws_the_map_on_its_box():
    image = _sample().images[0]
    grid = ImageGrid(torch.arange(4).view(2, 2), 0, (0.5, 0.0, 1.0, 0.5))  # top-right quarter only
    pic = analysis.image_panel(image, [torch.full((2, 2), 0.25)], [grid], side=264)
    assert pic.shape == (176, 4 * 264 + 9, 3)
    heat_tile = pic[:, 264 + 3: 2 * 264 + 3]
    top_left, top_right = heat_tile[:80, :120], heat_tile[:80, 140:]
    assert np.allclose(top_left, top_left[0, 0]) and np.allclose(top_right, top_right[0, 0])
    assert not np.allclose(top_left[0, 0], top_right[0, 0])


def test_group_key_and_puzzle_rule():
    s = _sample(domain="Optics", meta={"reasoning_type": ["Spatial Relation Reasoning", "Numerical Reasoning"],
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


def test_scoring_a_given_completion():
    model, processor = build_vlm("qwen2_vl")
    a = analysis.sample_attention(model, processor, _sample(), completion="the answer is A")
    assert "".join(a.tokens[:-1]) == "the answer is A" and a.tokens[-1] == "<|im_end|>"
    assert a.token_asm.shape == (len(a.tokens),) and 0 <= a.asm <= 1
    assert a.asm == pytest.approx(a.token_asm.mean().item(), abs=1e-6)
    assert a.heatmap().sum().item() == pytest.approx(1.0, abs=1e-5) and a.heatmap().shape == (88, 132)
    assert a.panel(token=0).shape == (171, 4 * 256 + 9, 3)
