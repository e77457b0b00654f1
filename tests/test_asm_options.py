"""The ASM's two choices, each an option with today's as default: which image tokens count for a multi-crop image
(``attention.grid``: base grid, high-resolution tiles, both) and which attention row scores a completion
(``attention.row``: each generated token's own row, or the final token's row), on hand-built attention rows."""

import pytest
import torch

from lit_grpo.tasks.attention.meter import (AttentionConfig, AttentionMeter, GridWeights, completion_asm, grid_maps,
                                           token_scores, token_weights)
from lit_grpo.families import ImageGrid, family_for
from lit_grpo.policy import PolicyConfig, load_policy
from lit_grpo.rollout import encode_prompts, model_inputs
from test_attention import SQUARE, W, H, _painted, _rollout


def test_row_weights_by_hand():
    valid = torch.tensor([[True, True, True, False], [False, False, False, False], [True, False, False, False]])
    torch.testing.assert_close(token_weights(valid), torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0], [0] * 4, [1, 0, 0, 0]]))
    assert token_weights(valid, "final").tolist() == [[0.0, 0.0, 1.0, 0.0], [0.0] * 4, [1.0, 0.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="row must be one of"):
        token_weights(valid, "last")
    with pytest.raises(ValueError, match=r"AttentionConfig.row: must be one of own, final \(got mean\)"):
        AttentionConfig(row="mean")
    with pytest.raises(ValueError, match=r"AttentionConfig.grid: must be one of base, tiles, all or null \(got tile\)"):
        AttentionConfig(grid="tile")
    assert AttentionConfig().row == "own" and AttentionConfig().grid is None  # today's choices are the defaults


def test_completion_asm_by_hand():
    """``own`` is the mean over the valid tokens taken as sum / count: three tokens scoring 0.1 give float32 0.1
    exactly (summing 0.1 x 1/3 three times gives 0.10000000894, a last-bit change that trains another policy over
    120 steps at weight 100); ``final`` is the last valid token's score; no valid token gives NaN."""
    scores = torch.tensor([[0.1, 0.1, 0.1, 0.9], [0.2, 0.4, 0.6, 0.8], [0.5, 0.5, 0.5, 0.5]])
    valid = torch.tensor([[True, True, True, False], [True, True, False, False], [False] * 4])
    own = completion_asm(scores, valid)
    assert own[0].item() == torch.tensor(0.1).item()  # bit for bit
    assert own[0].item() != (scores[0] * token_weights(valid)[0]).sum().item()  # the other order differs here
    torch.testing.assert_close(own[1], torch.tensor(0.3))
    assert torch.isnan(own[2])
    final = completion_asm(scores, valid, "final")
    assert final[:2].tolist() == [torch.tensor(0.1).item(), torch.tensor(0.4).item()] and torch.isnan(final[2])
    with pytest.raises(ValueError, match="row must be one of"):
        completion_asm(scores, valid, "last")


def test_grid_choice_by_hand():
    """A 4 x 4 image whose left half is foreground; a base grid 2 x 2 and a tile grid 4 x 4 over the whole image.
    Attention: 0.3 on base cell (0, 0), 0.1 on base cell (0, 1), 0.6 on tile cell (0, 0). Bilinear 2 -> 4 along x
    puts base column 0's mass on pixel columns 1, .75, .25, 0 (of 2): foreground share 1.75 / 2 = 0.875; column 1:
    0.25 / 2 = 0.125; a tile cell is one pixel (foreground: 1). ASM: base (0.3 x 0.875 + 0.1 x 0.125) / 0.4 =
    0.6875; tiles 1.0; both (0.2625 + 0.0125 + 0.6) / 1.0 = 0.875."""
    base = ImageGrid(torch.arange(4).view(2, 2), 0)
    tiles = ImageGrid(torch.arange(4, 20).view(4, 4), 0)
    row = torch.zeros(1, 20)
    row[0, 0], row[0, 1], row[0, 4] = 0.3, 0.1, 0.6
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[:, :2] = True

    def asm(grids):
        return token_scores(grid_maps(row, grids), [GridWeights.of(tuple(g.positions.shape), g.box, mask)
                                                    for g in grids]).item()

    assert asm([base]) == pytest.approx(0.6875) and asm([tiles]) == pytest.approx(1.0)
    assert asm([base, tiles]) == pytest.approx(0.875)


def test_each_grid_choice_reads_its_own_tokens_of_a_multi_crop_image(zoo_dir):
    """LLaVA-NeXT anyres: ``base`` is one grid over the whole image, ``tiles`` the high-resolution grids, ``all``
    both; attention put only on tile cells that lie wholly in the foreground (the left two thirds of the image)
    scores 0 with the base grid (no image attention there), 1 with the tiles, and 1 with both (the base grid has
    no share of the mass)."""
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next")))
    image = _painted(SQUARE)
    enc = encode_prompts(processor, [[{"role": "user", "content": [{"type": "image"}, {"type": "text",
                                                                                        "text": "where"}]}]], [[image]])
    got = {g: family_for(model, processor, g).image_grids(enc, [[image.size]])[0] for g in ("base", "tiles", "all")}
    assert len(got["base"]) == 1 and got["base"][0].box == (0.0, 0.0, 1.0, 1.0)
    assert len(got["tiles"]) >= 1 and len(got["all"]) == 1 + len(got["tiles"])
    assert family_for(model, processor).grid == "base"  # today's default
    mask = torch.zeros(H, W, dtype=torch.bool)
    mask[:, :2 * W // 3] = True
    row = torch.zeros(1, enc["input_ids"].shape[1])
    for g in got["tiles"]:  # one unit of attention on every tile cell wholly in the foreground
        weights = GridWeights.of(tuple(g.positions.shape), g.box, mask)
        inside = (weights.foreground / weights.total.clamp_min(1e-30)) > 0.999
        row[0, g.positions[inside]] = 1.0
    assert row.sum() > 0

    def asm(grids):
        return token_scores(grid_maps(row, grids), [GridWeights.of(tuple(g.positions.shape), g.box, mask)
                                                    for g in grids]).item()

    assert asm(got["base"]) == 0.0 and asm(got["tiles"]) == pytest.approx(1.0) and asm(got["all"]) == pytest.approx(1.0)


def test_final_row_scores_a_completion_by_its_last_token_alone(zoo_dir):
    """The meter with ``row: final`` gives each completion the score its last valid token gets with ``row: own``
    (which averages all of them), and its map is that token's normalised attention."""
    model, processor = load_policy(PolicyConfig(name_or_path=zoo_dir("llava_next")))
    images = [_painted(SQUARE), _painted(size=(60, 100))]
    ro = _rollout(model, processor, images)
    flat = [[im] for im in images for _ in range(2)]
    out = {}
    for row in ("own", "final"):
        meter = AttentionMeter(model, processor, AttentionConfig(row=row))
        with torch.no_grad(), meter.capture(model, ro) as cap:
            model(**model_inputs(ro), use_cache=False)
        out[row] = meter.score(cap, ro, flat, keep_tokens=True)
    own, final = out["own"], out["final"]
    for n in range(4):
        tokens = own.token_asm[n]
        assert own.asm[n].item() == pytest.approx(tokens.mean().item(), abs=1e-6)
        assert final.asm[n].item() == pytest.approx(tokens[-1].item(), abs=1e-6)
        last = [m[-1] for m in own.token_maps[n]]
        total = sum(m.sum() for m in last)
        for got, want in zip(final.maps[n], last):
            torch.testing.assert_close(got, want / total, atol=1e-6, rtol=0)
    assert not torch.allclose(own.asm, final.asm)  # the choice moves the score
