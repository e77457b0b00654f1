"""Attention heat maps drawn so that they do not overstate: values in multiples of uniform attention, a
log colour scale fixed across images and checkpoints by default, a colour bar with its units and a label
on every panel. Pure numpy + PIL (no matplotlib), so the training callback can draw them.

Units: a map of attention shares per pixel ``a`` (summing to 1 over the image) is drawn as
``a * pixels``, its multiple of uniform attention: 1 everywhere for uniform attention, 4 where a pixel
gets four times its uniform share. The value does not depend on the image's resolution, so one scale
fits every image. Colours follow a log2 scale from ``vmin`` to ``vmax`` (values outside are clipped to
the ends); uniform attention is the middle of the default scale (1/8 to 8).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
from PIL import Image, ImageDraw, ImageFont

# matplotlib's viridis at 9 evenly spaced points (dark blue -> teal -> yellow), interpolated linearly.
RAMP = np.array([[68, 1, 84], [71, 45, 123], [59, 82, 139], [44, 114, 142], [33, 145, 140], [40, 174, 128],
                 [94, 201, 98], [173, 220, 48], [253, 231, 37]], dtype=np.float32) / 255
PANEL_LABELS = ("image", "attention", "overlay", "foreground (black)")
GAP_GREY = 0.8
_FONT_PX = 12
ROW = _FONT_PX + 6
"""Height of the title and label rows, px."""


@dataclasses.dataclass(frozen=True)
class HeatScale:
    """How multiples of uniform attention map to colours: a log2 scale from ``vmin`` to ``vmax``.

    ``kind="fixed"`` (default) uses ``vmin``/``vmax`` for every map, so a colour means the same multiple
    in every image and checkpoint (near-uniform attention stays near the middle colour).
    ``kind="image"`` stretches each map from its smallest positive to its largest value, showing the
    contrast of one map; its colour bar then carries that map's own numbers.
    """

    kind: str = "fixed"
    vmin: float = 0.125
    vmax: float = 8.0

    def __post_init__(self):
        if self.kind not in ("fixed", "image"):
            raise ValueError(f"heat scale kind must be 'fixed' or 'image', got {self.kind!r}")
        if not 0 < self.vmin < self.vmax:
            raise ValueError(f"heat scale needs 0 < vmin < vmax, got vmin={self.vmin}, vmax={self.vmax}")

    def limits(self, values: np.ndarray) -> tuple[float, float]:
        """``(lo, hi)`` of the colour scale for ``values`` (multiples of uniform)."""
        if self.kind == "fixed":
            return self.vmin, self.vmax
        positive = values[values > 0]
        if positive.size == 0:
            return self.vmin, self.vmax
        lo, hi = float(positive.min()), float(positive.max())
        return (lo, hi) if hi > lo * (1 + 1e-6) else (lo / 2, hi * 2)  # a constant map sits mid-scale

    def position(self, values: np.ndarray, limits: tuple[float, float]) -> np.ndarray:
        """Each value's place on the colour scale, in [0, 1] (log2; 0 and values below ``lo`` -> 0)."""
        lo, hi = limits
        with np.errstate(divide="ignore"):
            pos = (np.log2(np.maximum(values, 0)) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return np.clip(np.nan_to_num(pos, nan=0.0, neginf=0.0), 0.0, 1.0).astype(np.float32)


def uniform_multiples(heat: np.ndarray) -> np.ndarray:
    """Attention per pixel ``[Y, X]`` (any non-negative map) -> multiples of uniform attention: the map
    normalised to sum 1, times the number of pixels. A map of zeros stays zero."""
    h = np.asarray(heat, dtype=np.float64)
    total = h.sum()
    return (h / total * h.size).astype(np.float32) if total > 0 else np.zeros_like(h, dtype=np.float32)


def ramp(pos: np.ndarray) -> np.ndarray:
    """Scale positions in [0, 1] (any shape ``S``) -> RGB float32 ``[*S, 3]`` on :data:`RAMP`."""
    x = np.clip(np.asarray(pos, dtype=np.float32), 0, 1) * (len(RAMP) - 1)
    lo = np.clip(np.floor(x).astype(int), 0, len(RAMP) - 2)
    frac = (x - lo)[..., None]
    return (RAMP[lo] * (1 - frac) + RAMP[lo + 1] * frac).astype(np.float32)


def font(size: int = _FONT_PX) -> ImageFont.ImageFont:
    """Pillow's bundled font (no system fonts needed)."""
    return ImageFont.load_default(size=size)


def text_strip(width: int, items: list[tuple[int, int, str]], height: int = ROW, font_px: int = _FONT_PX
               ) -> np.ndarray:
    """A white strip ``[height, width, 3]``; each ``(x, w, text)`` is written in black from ``x``, cut at ``w`` px,
    in ``font_px`` px letters."""
    strip = Image.new("RGB", (width, height), "white")
    for x, w, text in items:
        cell = Image.new("RGB", (max(w, 1), height), "white")
        ImageDraw.Draw(cell).text((1, 2), text, fill="black", font=font(font_px))
        strip.paste(cell, (x, 0))
    return np.asarray(strip, dtype=np.float32) / 255


def tick_values(limits: tuple[float, float], kind: str) -> list[float]:
    """Colour-bar ticks: powers of two inside a fixed scale (and its ends), else the ends and their
    geometric middle."""
    lo, hi = limits
    if kind == "fixed":
        powers = [2.0 ** k for k in range(math.ceil(math.log2(lo) - 1e-9), math.floor(math.log2(hi) + 1e-9) + 1)]
        return sorted({lo, hi, *powers})
    return [lo, math.sqrt(lo * hi), hi]


def tick_label(value: float) -> str:
    """``0.125`` -> ``1/8``, ``4.0`` -> ``4``, other values with 3 significant digits."""
    frac = Fraction(value).limit_denominator(64)
    if abs(float(frac) - value) < 1e-9 and frac.numerator == 1 and frac.denominator > 1:
        return f"1/{frac.denominator}"
    return f"{value:.3g}"


def colour_bar(height: int, limits: tuple[float, float], kind: str = "fixed", bar: int = 12,
               font_px: int = _FONT_PX) -> np.ndarray:
    """A vertical colour bar ``[max(height, 80), W, 3]``: the ramp from ``lo`` (bottom) to ``hi`` (top) on the
    log scale, tick marks with their values, and the unit ``x uniform`` above, in ``font_px`` px letters."""
    height = max(height, 80)
    top, bottom = font_px + 8, height - 6
    labels = [(v, tick_label(v)) for v in tick_values(limits, kind)]
    every = math.ceil((font_px + 1) / ((bottom - top) / max(len(labels) - 1, 1)))  # no overlapping tick labels
    anchor = next((i for i, (v, _) in enumerate(labels) if v == 1), len(labels) - 1)  # uniform (1) stays labelled
    labels = [lab for i, lab in enumerate(labels) if (i - anchor) % every == 0]
    letters = font(font_px)
    width = bar + 10 + max(int(letters.getlength(t)) for _, t in labels) + 4
    width = max(width, int(letters.getlength("x uniform")) + 4)
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    draw.text((1, 2), "x uniform", fill="black", font=letters)
    span = bottom - top
    column = ramp(np.linspace(1, 0, span))  # top row = hi
    img.paste(Image.fromarray((np.repeat(column[:, None], bar, axis=1) * 255).round().astype(np.uint8)), (2, top))
    lo, hi = limits
    for v, text in labels:
        frac = (math.log2(v) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        y = round(bottom - 1 - frac * (span - 1))
        draw.line([(2 + bar, y), (2 + bar + 4, y)], fill="black")
        draw.text((2 + bar + 7, y - font_px // 2 - 1), text, fill="black", font=letters)
    return np.asarray(img, dtype=np.float32) / 255


def to_float(image: Image.Image) -> np.ndarray:
    """PIL image -> RGB float32 ``[Y, X, 3]`` in [0, 1]."""
    return np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0


def colorize(heat: np.ndarray, scale: HeatScale = HeatScale()) -> tuple[np.ndarray, tuple[float, float]]:
    """Attention per pixel ``[Y, X]`` -> (RGB float32 ``[Y, X, 3]`` in [0, 1], the scale's ``(lo, hi)`` in
    multiples of uniform)."""
    values = uniform_multiples(heat)
    limits = scale.limits(values)
    return ramp(scale.position(values, limits)), limits


def overlay(image: Image.Image, heat: np.ndarray, scale: HeatScale = HeatScale(), alpha: float = 0.7) -> np.ndarray:
    """The heat map blended over the image with weight ``alpha`` times the value's place on the scale (0 at
    ``lo``, ``alpha`` at ``hi``). Shape: heat ``[Y, X]`` (the image's size) -> float32 ``[Y, X, 3]``."""
    values = uniform_multiples(heat)
    limits = scale.limits(values)
    pos = scale.position(values, limits)[..., None]
    return ((1 - alpha * pos) * to_float(image) + alpha * pos * ramp(pos[..., 0])).astype(np.float32)


def panel(image: Image.Image, heat: np.ndarray, mask: np.ndarray, scale: HeatScale = HeatScale(),
          alpha: float = 0.7, gap: int = 3, title: str | None = None,
          labels: tuple[str, str, str, str] = PANEL_LABELS, columns: int = 4, font_px: int = _FONT_PX) -> np.ndarray:
    """``image | attention | overlay | foreground mask``, each tile labelled, with the colour bar on the right
    and an optional ``title`` line on top.

    Args:
        heat: ``[Y, X]`` attention per pixel of ``image`` (normalised here; drawn in multiples of uniform).
        mask: ``[Y, X]`` foreground mask (True = foreground, drawn black on white).
        columns: tiles per row: 4 (one row) or 2 (two rows, a squarer picture that a viewer shrinking it to a
            card's width shrinks less).
        font_px: height of the letters, px (rows are ``font_px + 6`` high).
    Returns:
        float32 ``[H, W, 3]`` in [0, 1] (HWC; log it with ``dataformats="HWC"``): a title row (with
        ``title``) and a label row, then the ``[Y, X]`` tiles separated by ``gap`` grey columns (with
        two rows, the second row's labels between them; white below them when the colour bar's 80-px minimum is
        taller), then the colour bar.
    """
    if columns not in (2, 4):
        raise ValueError(f"columns must be 2 or 4, got {columns}")
    colours, limits = colorize(heat, scale)
    m = np.repeat(np.asarray(mask, dtype=np.float32)[..., None], 3, axis=2)
    tiles = [to_float(image), colours, overlay(image, heat, scale, alpha), 1.0 - m]
    y, x = tiles[0].shape[:2]
    row = font_px + 6
    names = [labels[0], f"{labels[1]}, {'log scale' if scale.kind == 'fixed' else 'own range'}", *labels[2:]]
    height = y if columns == 4 else 2 * y + row  # the tiles (and, in two rows, the second row's labels)
    bar = colour_bar(height, limits, scale.kind, font_px=font_px)
    rows = bar.shape[0]
    width = columns * (x + gap)
    lines = []
    for first in range(0, 4, columns):
        if first:
            lines.append(text_strip(width, [(k * (x + gap), x, t) for k, t in enumerate(names[first:first + columns])],
                                    row, font_px))
        grey = np.full((y, gap, 3), GAP_GREY, dtype=np.float32)  # separates white tiles from each other
        lines.append(np.concatenate([p for t in tiles[first:first + columns] for p in (t, grey)], axis=1))
    tiles_area = np.concatenate(lines, axis=0)
    if rows > height:  # white below the tiles (grey gaps go on down)
        below = np.ones((rows - height, width, 3), np.float32)
        for k in range(columns):
            below[:, k * (x + gap) + x:(k + 1) * (x + gap)] = GAP_GREY
        tiles_area = np.concatenate([tiles_area, below], axis=0)
    body = np.concatenate([tiles_area, bar], axis=1)
    strips = [text_strip(body.shape[1], [(k * (x + gap), x, t) for k, t in enumerate(names[:columns])], row, font_px)]
    if title:
        strips.insert(0, text_strip(body.shape[1], [(0, body.shape[1], title)], row, font_px))
    return np.concatenate([*strips, body], axis=0)
