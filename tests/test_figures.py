"""Figures scaled to their data with their uncertainty: the validation-curves figure (the first TensorBoard card),
the attention overlay in two rows with letters a TensorBoard card can show, the prompt images of the completions."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from lit_grpo.curves import curve_images, curve_panels, curve_plot, y_limits
from lit_grpo.tasks.attention.heatmap import panel

ROWS = [  # five validations of a run that learns: sampled accuracy 0.72 -> 0.90, greedy flat at 1.0
    {"step": s, "val/sampled/reward/binary": v, "val/sampled/reward/binary_se": e, "val/greedy/reward/binary": 1.0,
     "val/greedy/reward/binary_se": 0.0, "val/greedy/completion_length": 20.0 + s / 10,
     "val/greedy/completion_length_se": 1.0, "val/greedy/reward/open_accuracy/judge/calls": 3.0}
    for s, v, e in [(0, 0.72, 0.02), (50, 0.80, 0.02), (100, 0.84, 0.02), (150, 0.86, 0.02), (200, 0.90, 0.03)]]


def test_y_limits_span_the_points_and_their_errors():
    # 0.72 - 0.02 = 0.70 to 0.90 + 0.03 = 0.93; 8 % of the 0.23 span (0.0184) on each side
    assert y_limits([0.72, 0.9], [0.02, 0.03]) == pytest.approx((0.6816, 0.9484))
    assert y_limits([1.0, 1.0], [0.0, 0.0]) == pytest.approx((0.95, 1.05))  # flat: +- 5 % of the value
    assert y_limits([0.0], [0.0]) == pytest.approx((-0.05, 0.05))
    assert y_limits([float("nan"), 0.5], [0.1, 0.1]) == pytest.approx((0.384, 0.616))  # NaN points left out


def test_curve_panels_read_accuracy_then_rewards_then_length_without_judge_statistics():
    keys = ["val/greedy/completion_length", "val/sampled/reward/binary", "val/greedy/reward", "val/greedy/accuracy",
            "val/sampled/reward", "val/greedy/reward/binary", "val/greedy/reward/open_accuracy/judge/calls"]
    assert curve_panels(keys) == {
        "accuracy": {"greedy": "val/greedy/accuracy"},
        "reward": {"greedy": "val/greedy/reward", "sampled": "val/sampled/reward"},
        "reward/binary": {"greedy": "val/greedy/reward/binary", "sampled": "val/sampled/reward/binary"},
        "completion_length": {"greedy": "val/greedy/completion_length"}}


def test_each_curve_is_scaled_to_its_data_and_draws_every_point_with_its_error_bar():
    panels = curve_panels([k for k in ROWS[0] if k != "step" and not k.endswith("_se")])
    binary = curve_plot(ROWS, "reward/binary", panels["reward/binary"]).axes[0]
    length = curve_plot(ROWS, "completion_length", panels["completion_length"]).axes[0]
    assert binary.get_title() == "val reward/binary (mean ± SE)"
    # greedy 1.0 +- 0 and sampled 0.72 - 0.02 .. 0.90 + 0.03: not a fixed 0-1 axis, nothing cropped
    assert binary.get_ylim() == pytest.approx(y_limits([1.0] * 5 + [0.72, 0.8, 0.84, 0.86, 0.9],
                                                       [0.0] * 5 + [0.02, 0.02, 0.02, 0.02, 0.03]))
    assert length.get_ylim() == pytest.approx(y_limits([20, 25, 30, 35, 40], [1.0] * 5))
    lines = {c.get_label(): c.lines[0] for c in binary.containers}  # each mode's error-bar container
    assert set(lines) == {"greedy", "sampled"}
    assert list(lines["sampled"].get_ydata()) == [0.72, 0.80, 0.84, 0.86, 0.90]  # the points, unsmoothed
    assert list(lines["sampled"].get_xdata()) == [0, 50, 100, 150, 200]
    images = curve_images(ROWS)  # one card each, in reading order; no judge statistics
    assert list(images) == ["eval_curves/1_reward/binary", "eval_curves/2_completion_length"]
    image = images["eval_curves/1_reward/binary"]
    assert image.dtype == np.uint8 and image.shape == (216, 345, 3)  # 4.8 x 3.0 inches at 72 dpi


def test_overlay_in_two_rows_has_letters_a_card_can_show():
    """2 x 2 tiles of 384 x 288 px, letters 24 px (rows 30 px): title, labels, tiles, the second row's labels, tiles;
    about 860 px wide, so a 400-px TensorBoard card shows the letters at about 11 px."""
    y, x = 288, 384
    heat = np.random.default_rng(0).random((y, x)) + 0.1
    pic = panel(Image.new("RGB", (x, y), "white"), heat, np.zeros((y, x), bool), title="step 3: ASM 0.5",
                columns=2, font_px=24)
    assert pic.shape[0] == 30 + 30 + 2 * y + 30  # title, labels; two rows of tiles with the second's labels between
    assert 2 * (x + 3) < pic.shape[1] < 2 * (x + 3) + 120  # two tiles a row, then the colour bar
    second_labels = pic[60 + y:60 + y + 30, :2 * (x + 3)]
    assert (second_labels < 0.5).any() and (second_labels == 1.0).mean() > 0.9  # black letters on white
    with pytest.raises(ValueError, match="columns must be 2 or 4"):
        panel(Image.new("RGB", (x, y), "white"), heat, np.zeros((y, x), bool), columns=3)


def test_the_prompt_images_are_shown_side_by_side_at_a_readable_size():
    from lit_grpo.callbacks import side_by_side

    small = [Image.new("RGB", (84, 64), "red"), Image.new("RGB", (42, 64), "blue")]
    row = side_by_side(small, 384)  # 84 + 4 + 42 = 130 px wide, enlarged x 384 / 130 with nearest neighbours
    assert row.shape == (round(64 * 384 / 130), 384, 3)
    assert set(map(tuple, row.reshape(-1, 3))) == {(255, 0, 0), (255, 255, 255), (0, 0, 255)}  # no blurred colours
    large = side_by_side([Image.new("RGB", (1000, 500), "red")], 384)
    assert large.shape == (192, 384, 3)


def test_two_checkpoints_compare_with_standard_errors_and_a_paired_difference():
    """Samples 1-3 in group "a", 4 in "b"; A = 0.10, 0.20, 0.30, 0.40; B = 0.14, 0.22, 0.37, 0.41.
    Group a: A mean 0.2, SE std([.1, .2, .3]) / sqrt(3) = 0.1 / 1.7321 = 0.057735; B mean 0.243333;
    paired differences 0.04, 0.02, 0.07: mean 0.043333, SE std = 0.025166 / 1.7321 = 0.014530."""
    from lit_grpo.tasks.attention.analysis import checkpoint_table

    groups = ["a", "a", "a", "b"]
    table = checkpoint_table({
        "A": [{"id": i, "group": g, "asm": v} for i, (g, v) in enumerate(zip(groups, [0.10, 0.20, 0.30, 0.40]))],
        "B": [{"id": i, "group": g, "asm": v} for i, (g, v) in enumerate(zip(groups, [0.14, 0.22, 0.37, 0.41]))]})
    assert list(table) == ["a", "b", "all"]
    a = table["a"]
    assert (a["A"], a["A_sem"], a["B"]) == pytest.approx((0.2, 0.057735, 0.243333), abs=1e-6)
    assert (a["diff"], a["diff_sem"], a["n"]) == pytest.approx((0.043333, 0.014530, 3), abs=1e-6)
    assert (table["b"]["diff"], table["b"]["diff_sem"]) == pytest.approx((0.01, 0.0))  # one sample: no spread


@pytest.mark.parametrize("steps,ticks", [((0,), [0]), ((20,), [20]), ((0, 1, 2), [0, 1, 2]),
                                         ((0, 50, 100, 150, 200), [0, 25, 50, 75, 100, 125, 150, 175, 200])])
def test_the_step_axis_shows_whole_steps_even_for_one_validation(steps, ticks):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = [{"step": s, "val/greedy/reward": 0.7, "val/greedy/reward_se": 0.03} for s in steps]
    fig = curve_plot(rows, "reward", {"greedy": "val/greedy/reward"})
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    assert lo < min(steps) and max(steps) < hi
    assert [t for t in ax.get_xticks() if lo <= t <= hi] == ticks
