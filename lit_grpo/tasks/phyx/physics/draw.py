"""Drawing primitives for the physics diagrams (PIL): canvas, labelled arrows, dashed lines, angle arcs.

Labels use PIL's built-in font only (the same pixels on every machine), which has no Greek letters:
diagrams write ``ohm``, ``uC``, ``wavelength`` instead of Ω, μC, λ (the problem text keeps the symbols).
"""

from __future__ import annotations

import functools
import math

from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT = 360, 270
INK, GREY, BLUE, RED, ORANGE = (20, 20, 20), (120, 120, 120), (30, 70, 200), (200, 30, 30), (230, 120, 0)
Point = tuple[float, float]


@functools.lru_cache(maxsize=8)
def font(size: int = 14) -> ImageFont.ImageFont:
    """PIL's built-in scalable font (FreeType), or its bitmap font when FreeType is missing."""
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # pragma: no cover - Pillow without FreeType
        return ImageFont.load_default()


def canvas(width: int = WIDTH, height: int = HEIGHT) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    img = Image.new("RGB", (width, height), (255, 255, 255))
    return img, ImageDraw.Draw(img)


def text(d: ImageDraw.ImageDraw, xy: Point, label: str, size: int = 14, fill=INK, anchor: str = "mm") -> None:
    """``label`` centred on ``xy`` (``anchor`` as in PIL: ``mm`` middle, ``lm`` left-middle, ...)."""
    d.text(xy, label, fill=fill, font=font(size), anchor=anchor)


def arrow(d: ImageDraw.ImageDraw, a: Point, b: Point, fill=INK, width: int = 2, head: float = 9) -> None:
    """A line from ``a`` to ``b`` with a filled head at ``b``."""
    d.line([a, b], fill=fill, width=width)
    ang = math.atan2(b[1] - a[1], b[0] - a[0])
    left = (b[0] - head * math.cos(ang - 0.4), b[1] - head * math.sin(ang - 0.4))
    right = (b[0] - head * math.cos(ang + 0.4), b[1] - head * math.sin(ang + 0.4))
    d.polygon([b, left, right], fill=fill)


def dimension(d: ImageDraw.ImageDraw, x0: float, x1: float, y: float, label: str, gap: float = 15) -> None:
    """A horizontal dimension line from ``x0`` to ``x1`` at ``y`` (heads at both ends) with ``label`` ``gap``
    pixels below its middle."""
    mid = (x0 + x1) / 2
    arrow(d, (mid, y), (x1, y), width=1, head=7)
    arrow(d, (mid, y), (x0, y), width=1, head=7)
    text(d, (mid, y + gap), label)


def dashed(d: ImageDraw.ImageDraw, a: Point, b: Point, fill=GREY, dash: float = 6, width: int = 1) -> None:
    length = math.dist(a, b)
    n = max(1, int(length // dash))
    for k in range(0, n, 2):
        t0, t1 = k / n, min((k + 1) / n, 1.0)
        d.line([(a[0] + (b[0] - a[0]) * t0, a[1] + (b[1] - a[1]) * t0),
                (a[0] + (b[0] - a[0]) * t1, a[1] + (b[1] - a[1]) * t1)], fill=fill, width=width)


def arc(d: ImageDraw.ImageDraw, centre: Point, radius: float, start_deg: float, end_deg: float, fill=INK) -> None:
    """Arc from ``start_deg`` to ``end_deg``, degrees clockwise from +x in image coordinates (y down)."""
    x, y = centre
    d.arc([x - radius, y - radius, x + radius, y + radius], start_deg, end_deg, fill=fill, width=2)


def polar(origin: Point, length: float, angle_deg: float) -> Point:
    """The point ``length`` away from ``origin`` at ``angle_deg`` counter-clockwise from +x (y up on screen)."""
    a = math.radians(angle_deg)
    return origin[0] + length * math.cos(a), origin[1] - length * math.sin(a)


def resistor(d: ImageDraw.ImageDraw, a: Point, b: Point, label: str, horizontal: bool = True) -> None:
    """A zig-zag resistor between ``a`` and ``b`` (axis-aligned) with its label beside it."""
    (x0, y0), (x1, y1) = a, b
    n, amp = 6, 7
    pts = [a]
    for k in range(1, n + 1):
        t = (k - 0.5) / n
        off = amp if k % 2 else -amp
        pts.append((x0 + (x1 - x0) * t, y0 + off) if horizontal else (x0 + off, y0 + (y1 - y0) * t))
    pts.append(b)
    d.line(pts, fill=INK, width=2)
    if label:
        mid = ((x0 + x1) / 2, (y0 + y1) / 2)
        text(d, (mid[0], mid[1] - 18) if horizontal else (mid[0] + 14, mid[1]), label,
             anchor="mm" if horizontal else "lm")


def wavy(d: ImageDraw.ImageDraw, a: Point, b: Point, fill=ORANGE, waves: int = 5, amp: float = 5) -> None:
    """A wavy arrow (a photon) from ``a`` to ``b``."""
    length, ang = math.dist(a, b), math.atan2(b[1] - a[1], b[0] - a[0])
    pts = []
    for k in range(61):
        t = k / 60
        s, off = t * (length - 10), amp * math.sin(2 * math.pi * waves * t)
        pts.append((a[0] + s * math.cos(ang) - off * math.sin(ang), a[1] + s * math.sin(ang) + off * math.cos(ang)))
    d.line(pts, fill=fill, width=2)
    arrow(d, pts[-1], b, fill=fill)
