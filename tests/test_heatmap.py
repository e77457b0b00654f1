"""Heat maps that do not overstate: multiples of uniform attention on a fixed log scale by default, a colour bar
with its units and ticks, a label on every tile (pixel checks against hand-computed colours)."""

import math

import numpy as np
import pytest
from PIL import Image, ImageDraw

from lit_grpo.tasks.attention import heatmap
from lit_grpo.tasks.attention.heatmap import RAMP, ROW, HeatScale, panel

VIRIDIS_MID = np.array([33, 145, 140]) / 255  # matplotlib's viridis at 0.5


def _near_uniform(kind: str, shape: tuple[int, int]) -> np.ndarray:
    """Three families of maps whose largest / smallest value is 1.013 (attention per pixel, unnormalised)."""
    y, x = shape
    if kind == "horizontal":
        return np.tile(np.linspace(1.0, 1.013, x), (y, 1))
    if kind == "hot_pixel":
        heat = np.ones(shape)
        heat[y // 3, x // 4] = 1.013
        return heat
    rng = np.random.default_rng(0)  # "noise": values drawn in [1, 1.013], both ends present
    heat = 1 + 0.013 * rng.random(shape)
    heat.flat[0], heat.flat[-1] = 1.0, 1.013
    return heat


def _tiles(pic: np.ndarray, x: int, y: int, gap: int = 3, title: bool = False) -> list[np.ndarray]:
    top = ROW * (2 if title else 1)
    return [pic[top:top + y, k * (x + gap):k * (x + gap) + x] for k in range(4)]


@pytest.mark.parametrize("kind", ["horizontal", "hot_pixel", "noise"])
@pytest.mark.parametrize("shape", [(40, 60), (33, 90)])
def test_near_uniform_attention_stays_mid_scale_on_the_fixed_scale(kind, shape):
    """max/min 1.013: on the default 1/8..8 log scale every pixel is within log2(1.013)/6 = 0.3 % of the
    middle (uniform) colour; per-image stretching spreads the same map over the whole ramp."""
    heat = _near_uniform(kind, shape)
    mask = np.zeros(shape, dtype=bool)
    image = Image.new("RGB", shape[::-1], "white")
    tile = _tiles(panel(image, heat, mask), shape[1], shape[0])[1]
    assert np.abs(tile - VIRIDIS_MID).max() < 0.01  # one colour, the middle of viridis
    stretched = _tiles(panel(image, heat, mask, HeatScale("image")), shape[1], shape[0])[1]
    colours = stretched.reshape(-1, 3)
    assert np.abs(colours - RAMP[0]).sum(1).min() < 1e-5 and np.abs(colours - RAMP[-1]).sum(1).min() < 1e-5


def test_fixed_scale_colours_are_multiples_of_uniform():
    """Attention only on the top-right quarter: 4x uniform there (log2 4 = 2 -> (2 + 3) / 6 = 5/6 of the way
    up a 1/8..8 scale), 0 elsewhere (the bottom colour); the overlay blends 0.7 x 5/6 of that colour."""
    heat = np.zeros((20, 40))
    heat[:10, 20:] = 1.0
    image = Image.new("RGB", (40, 20), (200, 100, 50))
    mask = np.zeros((20, 40), dtype=bool)
    mask[:5, :5] = True
    tiles = _tiles(panel(image, heat, mask), 40, 20)
    at_5_6 = RAMP[6] + (RAMP[7] - RAMP[6]) * (5 / 6 * 8 - 6)  # linear between viridis anchors 6 and 7
    np.testing.assert_allclose(tiles[1][:10, 20:], np.broadcast_to(at_5_6, (10, 20, 3)), atol=1e-6)
    np.testing.assert_allclose(tiles[1][10:, :20], np.broadcast_to(RAMP[0], (10, 20, 3)), atol=1e-6)
    np.testing.assert_allclose(tiles[0], np.asarray(image) / 255)
    w = 0.7 * 5 / 6
    np.testing.assert_allclose(tiles[2][0, 39], (1 - w) * np.array([200, 100, 50]) / 255 + w * at_5_6, atol=1e-6)
    np.testing.assert_allclose(tiles[2][19, 0], np.array([200, 100, 50]) / 255, atol=1e-6)  # weight 0 at the bottom
    assert (tiles[3][:5, :5] == 0).all() and (tiles[3][5:] == 1).all()  # foreground black


@pytest.mark.parametrize("limits,kind,ticks,labels", [
    ((0.125, 8.0), "fixed", [0.125, 0.25, 0.5, 1, 2, 4, 8], ["1/8", "1/4", "1/2", "1", "2", "4", "8"]),
    ((0.25, 4.0), "fixed", [0.25, 0.5, 1, 2, 4], ["1/4", "1/2", "1", "2", "4"]),
    ((0.3, 5.0), "fixed", [0.3, 0.5, 1, 2, 4, 5.0], ["0.3", "1/2", "1", "2", "4", "5"]),
    ((0.994, 1.01), "image", [0.994, math.sqrt(0.994 * 1.01), 1.01], ["0.994", "1", "1.01"]),
])
def test_colour_bar_ticks(limits, kind, ticks, labels):
    values = heatmap.tick_values(limits, kind)
    assert values == pytest.approx(ticks)
    assert [heatmap.tick_label(v) for v in values] == labels


def _bar_column(pic: np.ndarray, x: int, gap: int = 3) -> np.ndarray:
    """The colour bar's middle column below the label row, its coloured rows only (text is grey: R = G = B)."""
    column = pic[ROW:, 4 * (x + gap) + 2 + 6]
    return column[column.max(1) - column.min(1) > 0.1]


@pytest.mark.parametrize("scale", [HeatScale(), HeatScale("image"), HeatScale(vmin=0.5, vmax=2.0)])
@pytest.mark.parametrize("shape", [(30, 30), (120, 50), (256, 171)])
def test_every_panel_has_a_colour_bar_with_units_and_labels(scale, shape):
    y, x = shape
    heat = np.random.default_rng(1).random(shape) + 0.1
    pic = panel(Image.new("RGB", (x, y), "white"), heat, np.zeros(shape, bool), scale, title="step 3: ASM 0.5")
    assert pic.shape[0] == 2 * ROW + max(y, 80)  # title, labels, tiles (at least the bar's 80 px)
    bar = _bar_column(pic[ROW:], x)  # below the title row
    assert len(bar) > 40
    np.testing.assert_allclose(bar[0], RAMP[-1], atol=0.02)  # top: the scale's high end
    np.testing.assert_allclose(bar[-1], RAMP[0], atol=0.02)  # bottom: the low end
    luminance = bar.mean(1)
    assert luminance[0] > luminance[len(bar) // 2] > luminance[-1]
    # units written above the bar, tick values to its right (dark text pixels)
    bar_x = 4 * (x + 3)
    assert (pic[2 * ROW:2 * ROW + ROW, bar_x:] < 0.5).any(), "no 'x uniform' caption"
    assert (pic[2 * ROW + ROW:, bar_x + 20:] < 0.5).sum() > 30, "no tick labels"
    # each tile's label, drawn independently with the same font, is what the label row holds
    scale_note = "log scale" if scale.kind == "fixed" else "own range"
    for k, text in enumerate(["image", f"attention, {scale_note}", "overlay", "foreground (black)"]):
        cell = Image.new("RGB", (x, ROW), "white")
        ImageDraw.Draw(cell).text((1, 2), text, fill="black", font=heatmap.font())
        expected = np.asarray(cell, dtype=np.float32) / 255
        np.testing.assert_array_equal(pic[ROW:2 * ROW, k * (x + 3):k * (x + 3) + x], expected)
        assert (expected < 0.5).any()
    assert (pic[:ROW] < 0.5).any()  # the title


def test_heat_scale_rejects_bad_settings():
    with pytest.raises(ValueError, match="'fixed' or 'image'"):
        HeatScale("per_image")
    with pytest.raises(ValueError, match="0 < vmin < vmax"):
        HeatScale(vmin=2.0, vmax=1.0)
    with pytest.raises(ValueError, match="0 < vmin < vmax"):
        HeatScale(vmin=0.0)
