"""Validation curves drawn as figures that read the same whatever a viewer's settings: one figure per curve
(accuracy, the total reward, each reward, completion length), each evaluation mode (greedy, sampled) a line of its
points with their standard errors as bars, the y axis spanning the data and its error bars (no fixed 0-1 range,
no smoothing, no outlier cropping). TensorBoard smooths and crops its scalar charts by its own sliders, which a
run cannot set: a curve of five validations drawn there can look flat or bent; this figure is the same image in
every viewer.
"""

from __future__ import annotations

import math

import numpy as np

from lit_grpo.loggers import curve_order, is_curve

PANEL_INCHES = (4.8, 3.0)
"""Size of one figure: at 72 dpi 346 x 216 px, about the width of a TensorBoard Time Series card, so the card
shows it nearly at full size (letters about 11 px)."""
FONT_SIZE = 13


def curve_panels(keys: list[str]) -> dict[str, dict[str, str]]:
    """``val/<mode>/<name>`` keys (mean keys, not ``_se``) -> ``{name: {mode: key}}`` in reading order (accuracy,
    the total reward, each reward, completion length, the rest; :func:`lit_grpo.loggers.curve_order`), without a
    judge's call statistics."""
    panels: dict[str, dict[str, str]] = {}
    for key in sorted(filter(is_curve, keys), key=curve_order):
        _, mode, name = key.split("/", 2)
        panels.setdefault(name, {})[mode] = key
    return panels


def y_limits(values: list[float], errors: list[float], pad: float = 0.08) -> tuple[float, float]:
    """The span of ``value +- error`` over the finite points, widened by ``pad`` of it on each side (a flat curve
    gets +- 0.05 of its value, or +- 0.05)."""
    lows = [v - e for v, e in zip(values, errors) if math.isfinite(v)]
    highs = [v + e for v, e in zip(values, errors) if math.isfinite(v)]
    if not lows:
        return 0.0, 1.0
    lo, hi = min(lows), max(highs)
    if hi - lo < 1e-9:
        half = 0.05 * abs(lo) or 0.05
        return lo - half, hi + half
    return lo - pad * (hi - lo), hi + pad * (hi - lo)


def curve_images(rows: list[dict[str, float]], prefix: str = "eval_curves") -> dict[str, np.ndarray]:
    """One HWC uint8 image per curve of ``rows`` (each ``{"step": s, "<key>": mean, "<key>_se": se, ...}``, as
    :class:`lit_grpo.callbacks.EvalSummary` keeps them), tagged ``<prefix>/<rank>_<name>`` (``eval_curves/1_reward``,
    ``eval_curves/2_reward/binary``...): the rank keeps TensorBoard's name order the reading order."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    keys = sorted({k for r in rows for k in r if k != "step" and not k.endswith("_se")})
    images = {}
    for rank, (name, modes) in enumerate(curve_panels(keys).items(), 1):
        canvas = FigureCanvasAgg(curve_plot(rows, name, modes))
        canvas.draw()
        images[f"{prefix}/{rank}_{name}"] = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    return images


def curve_plot(rows: list[dict[str, float]], name: str, modes: dict[str, str]):
    """The matplotlib ``Figure`` of one curve: each mode (``{mode: key}``) a line of its points with their standard
    errors as bars, the y axis spanning them (:func:`y_limits`)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=PANEL_INCHES, dpi=72)
    ax = fig.subplots()
    values, errors, all_steps = [], [], []
    for mode, key in modes.items():
        points = [(r["step"], r[key], r.get(key + "_se", 0.0)) for r in rows if key in r]
        steps, means, ses = zip(*points) if points else ((), (), ())
        ax.errorbar(steps, means, yerr=ses, marker="o", markersize=4, capsize=3, linewidth=1.5, label=mode)
        values += means
        errors += ses
        all_steps += steps
    ax.set_ylim(*y_limits(values, errors))
    if all_steps:  # whole steps only, also for a run with one validation (matplotlib would tick -0.04 ... 0.04)
        lo, hi = min(all_steps), max(all_steps)
        pad = max(0.5, 0.05 * (hi - lo))
        ax.set_xlim(lo - pad, hi + pad)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_title(f"val {name} (mean ± SE)", fontsize=FONT_SIZE)
    ax.set_xlabel("step", fontsize=FONT_SIZE - 2)
    ax.tick_params(labelsize=FONT_SIZE - 2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=FONT_SIZE - 2, loc="best")
    fig.tight_layout()
    return fig
