"""Embedded physics problems in the PhyX form, generated offline and deterministically by seed.

Twelve problem types, two per PhyX domain (``PROBLEMS``): inclined plane, projectile (Mechanics);
circuit, field lines (Electromagnetism); heat engine, calorimetry (Thermodynamics); standing wave,
Doppler (Wave/Acoustics); thin lens, refraction (Optics); photoelectric effect, decay (Modern
Physics), the ``phyx`` style. Each item has a rendered diagram that carries values the simplified description leaves
out, a numeric answer with its unit, four options whose three distractors come from named mistakes
(wrong formula, unit prefix, sign), a subfield (principle) and reasoning-type labels. Like the real
data, a few items carry a JPEG under a ``.png`` name or a trailing space in the correct option.
The ``readable`` style (:mod:`~lit_grpo.tasks.phyx.physics.readable`) is
the learnable set of the physics demo: six types whose answer a small model can read off the diagram.
:func:`write_physics` writes the default-parquet or raw-JSONL PhyX layout, read back through
:func:`~lit_grpo.tasks.phyx.reader.read_phyx` in MCQ or open-ended form.
"""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any, Callable

from lit_grpo.tasks.phyx.physics import classical, modern  # noqa: F401  (register the problem types)
from lit_grpo.tasks.phyx.physics.base import PROBLEMS, Problem, phyx_row
from lit_grpo.tasks.phyx.physics.readable import READABLE, readable_item
from lit_grpo.tasks.phyx.writer import write_phyx

__all__ = ["PROBLEMS", "READABLE", "STYLES", "Problem", "make_item", "generate_items", "write_physics"]

STYLES = ("phyx", "readable")
"""``phyx``: the twelve PhyX-like types (values printed in the figure, options shuffled, real-data quirks);
``readable``: six types whose answer a small model can read off the figure, options in increasing order
of value, with a ``solution`` (:mod:`lit_grpo.tasks.phyx.physics.readable`)."""

QUIRK_RATE = 1 / 16
"""Share of items with a JPEG image (still named ``.png`` in the raw layout) and, independently, of
items whose correct option ends in a space (175 of PhyX's 3,000 OE answers do)."""


def _encode(problem: Problem, jpeg: bool) -> bytes:
    buf = io.BytesIO()
    problem.image.save(buf, format="JPEG" if jpeg else "PNG", **({"quality": 90} if jpeg else {}))
    return buf.getvalue()


def make_item(index: int, seed: int = 0, types: list[str] | None = None) -> dict[str, Any]:
    """Item ``index`` (default-layout schema, see :mod:`lit_grpo.tasks.phyx.writer`): types cycle in order,
    so every domain appears equally often; everything else follows from ``(seed, index)``."""
    names = types or PROBLEMS.names()
    rng = random.Random(seed * 1_000_003 + index)
    problem = PROBLEMS.get(names[index % len(names)])(rng)
    texts = [problem.answer] + problem.distractors
    if rng.random() < QUIRK_RATE:
        texts[0] += " "
    order = list(range(4))
    rng.shuffle(order)
    labels = "ABCD"
    image = _encode(problem, jpeg=rng.random() < QUIRK_RATE)  # after the shuffle: the rng's order as before
    return phyx_row(problem, index, [f"{labels[k]}: {texts[j]}" for k, j in enumerate(order)],
                    labels[order.index(0)], image)


def _readable(index: int, seed: int, types: list[str] | None) -> dict[str, Any]:
    item = readable_item(index, seed, types)
    buf = io.BytesIO()
    item["image"].save(buf, format="PNG")
    return {**item, "image": buf.getvalue()}


def generate_items(num: int, seed: int = 0, types: list[str] | None = None, style: str = "phyx",
                   progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """``num`` items for ``seed`` (the same arguments always give the same items, images included) in
    ``style`` (:data:`STYLES`); ``types`` restricts the problem types (names of that style's registry);
    ``progress(count)`` is told how many are made."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    make = make_item if style == "phyx" else _readable
    items = []
    for i in range(num):
        items.append(make(i, seed, types))
        if progress is not None:
            progress(i + 1)
    return items


def write_physics(path: str | Path, num: int = 256, seed: int = 0, types: list[str] | None = None,
                  layout: str | None = None, style: str = "phyx", progress: Callable[[int], None] | None = None) -> Path:
    """Write ``num`` generated items of ``style`` to ``path``: ``layout`` ``default`` (parquet) or ``raw``
    (JSONL with ``images/`` beside it); ``None`` picks it from the suffix (``.jsonl`` -> raw, else default)."""
    layout = layout or ("raw" if Path(path).suffix == ".jsonl" else "default")
    return write_phyx(generate_items(num, seed, types, style, progress), path, layout=layout)
