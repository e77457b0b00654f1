"""Embedded visual logic puzzles in the VisualSphinx form, generated offline and deterministically.

One composite image per puzzle: a row of panels that follow a rule (count, colour, size, rotation,
position), a ``?`` panel, and below it labelled options A-D. The text asks which option fills the
question mark; the gold is a letter; the rule is written to ``explanation``. :func:`write_puzzles`
writes a parquet in the VisualSphinx schema (``id``, ``images``, ``problem``, ``choice``, ``answer``,
``explanation``, ``has_duplicate``, ``reasonableness``, ``readability``, ``accuracy``; the RL-20K
layout) so the demo reads it through the same loader as the real dataset.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import random
from pathlib import Path
from typing import Callable

from PIL import Image, ImageDraw

COLOURS = {"red": (220, 40, 40), "green": (40, 160, 60), "blue": (40, 80, 220), "yellow": (230, 190, 0),
           "purple": (140, 60, 180), "black": (20, 20, 20)}
SHAPES = ("circle", "square", "triangle")
RULES = ("count", "colour", "size", "rotation", "position", "red_count")
PROBLEM = "<image>Which option fills the question mark so that the panels follow the same rule?"


@dataclasses.dataclass
class PuzzleConfig:
    """What the generator draws."""

    rules: list[str] = dataclasses.field(default_factory=lambda: list(RULES))
    """Rules to draw from, uniformly (subset of count, colour, size, rotation, position)."""
    num_panels: int = 4
    """Panels in the sequence row, the ``?`` panel included."""
    num_options: int = 4
    """Labelled options (4 -> A-D, 10 -> A-J)."""
    panel_size: int = 28
    """Side of one panel in pixels."""
    fixed_option_order: bool = False
    """List the options in the natural order of the varied attribute (``red_count``: A=0 ... D=3 red
    shapes) instead of shuffling them: the mapping from answer to letter is then fixed."""


@dataclasses.dataclass
class _State:
    shape: str
    colour: str
    count: int = 1
    size: float = 0.6
    angle: int = 0
    pos: int = 0
    slots: tuple = ()


def _draw_shape(d: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, fill, angle: int = 0) -> None:
    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
        return
    corners = 4 if shape == "square" else 3
    start = (45 if shape == "square" else -90) + angle
    pts = [(cx + r * math.cos(math.radians(start + k * 360 / corners)),
            cy + r * math.sin(math.radians(start + k * 360 / corners))) for k in range(corners)]
    d.polygon(pts, fill=fill)


def _draw_arrow(d: ImageDraw.ImageDraw, cx: float, cy: float, r: float, fill, angle: int) -> None:
    a = math.radians(angle - 90)
    tip = (cx + r * math.cos(a), cy + r * math.sin(a))
    tail = (cx - r * math.cos(a), cy - r * math.sin(a))
    d.line([tail, tip], fill=fill, width=max(2, int(r / 3)))
    for side in (-1, 1):
        b = a + math.pi + side * 0.6
        d.line([tip, (tip[0] + 0.6 * r * math.cos(b), tip[1] + 0.6 * r * math.sin(b))], fill=fill, width=max(2, int(r / 3)))


def _draw_panel(img: Image.Image, x: int, y: int, size: int, st: _State | None, rule: str) -> None:
    d = ImageDraw.Draw(img)
    d.rectangle([x, y, x + size - 1, y + size - 1], outline=(90, 90, 90))
    if st is None:
        d.text((x + size / 2 - 3, y + size / 2 - 6), "?", fill=(0, 0, 0))
        return
    fill, c = COLOURS[st.colour], size / 2
    if st.slots:  # 2 x 2 slots, each (shape, colour)
        for k, (shape, colour) in enumerate(st.slots):
            _draw_shape(d, shape, x + size * (0.27 + 0.46 * (k % 2)), y + size * (0.27 + 0.46 * (k // 2)),
                        0.18 * size, COLOURS[colour])
        return
    if rule == "rotation":
        _draw_arrow(d, x + c, y + c, 0.38 * size, fill, st.angle)
    elif rule == "position":
        q = size / 4
        px, py = [(q, q), (3 * q, q), (3 * q, 3 * q), (q, 3 * q)][st.pos]
        _draw_shape(d, st.shape, x + px, y + py, 0.18 * size, fill)
    elif rule == "count":
        cols = math.ceil(math.sqrt(st.count))
        step = size / (cols + 1)
        for k in range(st.count):
            _draw_shape(d, st.shape, x + step * (k % cols + 1), y + step * (k // cols + 1), 0.3 * step, fill)
    else:
        _draw_shape(d, st.shape, x + c, y + c, st.size * c * 0.8, fill)


def _sequence(rule: str, rng: random.Random, n: int) -> tuple[list[_State], list[_State], str]:
    """States of the ``n`` panels (last one is the answer), distractor states, and the rule text."""
    base = _State(shape=rng.choice(SHAPES), colour=rng.choice(list(COLOURS)))
    mk = lambda **kw: dataclasses.replace(base, **kw)  # noqa: E731
    if rule == "count":
        start = rng.randint(1, 2)
        seq = [mk(count=start + i) for i in range(n)]
        wrong = [mk(count=v) for v in range(1, 10) if v != start + n - 1]
        text = f"The number of {base.shape}s increases by one in each panel, so the missing panel has {start + n - 1}."
    elif rule == "colour":
        period = rng.choice([2, 3])
        cycle = rng.sample(list(COLOURS), period)
        seq = [mk(colour=cycle[i % period]) for i in range(n)]
        wrong = [mk(colour=c) for c in COLOURS if c != cycle[(n - 1) % period]]
        text = f"The colour repeats {', '.join(cycle)}, so the missing {base.shape} is {cycle[(n - 1) % period]}."
    elif rule == "size":
        sizes = [0.3 + 0.7 * i / (n - 1) for i in range(n)]
        seq = [mk(size=s) for s in sizes]
        wrong = [mk(size=s) for s in (0.15, 0.3, 0.45, 0.6, 0.75) if abs(s - sizes[-1]) > 0.1]
        text = f"The {base.shape} grows in each panel, so the missing panel has the largest {base.shape}."
    elif rule == "rotation":
        step = rng.choice([45, 90])
        start = rng.choice(range(0, 360, 45))
        seq = [mk(angle=(start + i * step) % 360) for i in range(n)]
        wrong = [mk(angle=a) for a in range(0, 360, 45) if a != seq[-1].angle]
        text = f"The arrow turns {step} degrees clockwise in each panel, so the missing arrow points at {seq[-1].angle} degrees."
    elif rule == "position":
        start = rng.randint(0, 3)
        seq = [mk(pos=(start + i) % 4) for i in range(n)]
        wrong = [mk(pos=p) for p in range(4) if p != seq[-1].pos]
        wrong += [mk(pos=seq[-1].pos, colour=c) for c in COLOURS if c != base.colour][:3]
        text = f"The {base.shape} moves one corner clockwise in each panel, so it ends in corner {seq[-1].pos + 1}."
    elif rule == "red_count":
        reds = rng.randint(0, 3)
        seq = [mk(count=reds, slots=_red_slots(rng, reds)) for _ in range(n)]
        wrong = [mk(count=v, slots=_red_slots(rng, v)) for v in range(4) if v != reds]
        text = f"Each panel has {reds} red shape{'s' if reds != 1 else ''}, so the missing panel has {reds}."
    else:
        raise ValueError(f"unknown puzzle rule {rule!r}; rules: {', '.join(RULES)}")
    return seq, wrong, text


def _red_slots(rng: random.Random, reds: int) -> tuple:
    """Four (shape, colour) slots of which exactly ``reds`` are red, the rest green or blue."""
    red_at = set(rng.sample(range(4), reds))
    return tuple((rng.choice(SHAPES), "red" if k in red_at else rng.choice(["green", "blue"])) for k in range(4))


def _order_key(st: _State) -> tuple:
    return (st.count, st.size, st.angle, st.pos, list(COLOURS).index(st.colour))


def make_puzzle(index: int, seed: int, cfg: PuzzleConfig) -> dict:
    """One puzzle row in the VisualSphinx schema; the same ``(index, seed, cfg)`` gives the same row."""
    rng = random.Random(f"{seed}-{index}")
    rule = rng.choice(cfg.rules)
    seq, wrong, text = _sequence(rule, rng, cfg.num_panels)
    labels = "ABCDEFGHIJ"[: cfg.num_options]
    distractors = rng.sample(wrong, min(len(wrong), cfg.num_options - 1))
    while len(distractors) < cfg.num_options - 1:  # few distinct wrong states: vary the colour too
        distractors.append(dataclasses.replace(rng.choice(wrong), colour=rng.choice(list(COLOURS))))
    gold = rng.randrange(cfg.num_options)
    options = distractors[:gold] + [seq[-1]] + distractors[gold:]
    if cfg.fixed_option_order:
        options = sorted(options, key=_order_key)
        gold = options.index(seq[-1])
    p, gap = cfg.panel_size, 4
    per_row = max(cfg.num_panels, min(cfg.num_options, 5))
    rows_opt = math.ceil(cfg.num_options / per_row)
    img = Image.new("RGB", (gap + per_row * (p + gap), gap + (1 + rows_opt) * (p + gap + 10)), "white")
    for i, st in enumerate(seq):
        _draw_panel(img, gap + i * (p + gap), gap, p, None if i == len(seq) - 1 else st, rule)
    d = ImageDraw.Draw(img)
    for k, st in enumerate(options):
        x = gap + (k % per_row) * (p + gap)
        y = gap + (1 + k // per_row) * (p + gap + 10) + 10
        d.text((x + p / 2 - 3, y - 11), labels[k], fill=(0, 0, 0))
        _draw_panel(img, x, y, p, st, rule)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return {
        "id": f"embedded-{seed}-{index:06d}",
        "images": [{"bytes": buf.getvalue(), "path": None}],
        "problem": PROBLEM,
        "choice": json.dumps({lab: lab for lab in labels}),
        "answer": labels[gold],
        "explanation": text,
        "has_duplicate": False,
        "reasonableness": 5,
        "readability": 5,
        "accuracy": 1.0,
    }


def write_puzzles(path: str | Path, num: int, seed: int = 0, cfg: PuzzleConfig | None = None,
                  progress: Callable[[int], None] | None = None) -> Path:
    """Write ``num`` puzzles as one parquet file in the VisualSphinx schema (HF ``datasets`` features);
    ``progress(count)`` is told how many are made."""
    import datasets

    cfg = cfg or PuzzleConfig()
    rows = []
    for i in range(num):
        rows.append(make_puzzle(i, seed, cfg))
        if progress is not None:
            progress(i + 1)
    features = datasets.Features({
        "id": datasets.Value("string"),
        "images": datasets.List(datasets.Image()),
        "problem": datasets.Value("string"),
        "choice": datasets.Value("string"),
        "answer": datasets.Value("string"),
        "explanation": datasets.Value("string"),
        "has_duplicate": datasets.Value("bool"),
        "reasonableness": datasets.Value("int32"),
        "readability": datasets.Value("int32"),
        "accuracy": datasets.Value("float32"),
    })
    ds = datasets.Dataset.from_list(rows, features=features)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(path))
    return path
