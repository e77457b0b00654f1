"""The physics problem record, the registry of problem types, number formatting and option building."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Callable

from PIL import Image

from lit_grpo.registry import Registry

G = 9.8  # m/s^2, as PhyX problems use


@dataclasses.dataclass
class Problem:
    """One generated problem before it becomes a PhyX row.

    ``description`` states every given value; ``simplified`` drops the values the diagram shows (as
    PhyX's de-redundant text does); ``answer`` is the correct option text and ``distractors`` the three
    wrong ones, each the result of a named mistake (``mistakes``).
    """

    domain: str
    subfield: str
    reasoning: list[str]
    description: str
    simplified: str
    question: str
    answer: str
    distractors: list[str]
    mistakes: list[str]
    image: Image.Image
    caption: str
    solution: str = ""
    """A short worked reasoning (the readable set's SFT reference); empty for the PhyX-like types."""


ProblemFn = Callable[[random.Random], Problem]
PROBLEMS: Registry[ProblemFn] = Registry("physics problem type")
"""Problem type name -> ``fn(rng) -> Problem``."""


def fmt_num(x: float, sig: int = 3) -> str:
    """``sig`` significant figures: ``7.50``, ``0.0123``, ``1234``; outside 0.01-9999 as ``1.80 \\times 10^{5}``."""
    if x == 0 or not math.isfinite(x):
        return "0"
    e = math.floor(math.log10(abs(x)))
    if -2 <= e < 4:
        return f"{x:.{max(sig - 1 - e, 0)}f}"
    m = x / 10 ** e
    if round(abs(m), sig - 1) >= 10:
        m, e = m / 10, e + 1
    return f"{m:.{sig - 1}f} \\times 10^{{{e}}}"


def fmt_quantity(x: float, unit: str, sig: int = 3) -> str:
    """A value with its unit as PhyX writes options: ``7.50 N``; degrees as ``\\( 22.3^{\\circ} \\)``."""
    if unit == "deg":
        return f"\\( {fmt_num(x, sig)}^{{\\circ}} \\)"
    return f"{fmt_num(x, sig)} {unit}".strip()


def build_options(correct: float, wrong: list[tuple[str, float]], unit: str,
                  fallbacks: tuple[float, ...] = (10.0, 0.1, 2.0, 0.5, -1.0)) -> tuple[str, list[str], list[str]]:
    """The correct option text, three distinct distractor texts and the mistake behind each.

    ``wrong`` lists ``(mistake, value)`` pairs in order of preference; a value whose text repeats an
    earlier option is dropped, and missing distractors are filled from ``fallbacks`` (factors of the
    correct value: a unit-prefix slip of 10, a lost factor of 2, a sign).
    """
    answer = fmt_quantity(correct, unit)
    texts, names = [], []
    for name, value in wrong + [(f"factor {f:g}", correct * f) for f in fallbacks]:
        t = fmt_quantity(value, unit)
        if math.isfinite(value) and t != answer and t not in texts:
            texts.append(t)
            names.append(name)
        if len(texts) == 3:
            break
    return answer, texts, names


def pick(rng: random.Random, lo: float, hi: float, step: float) -> float:
    """A value from ``lo`` to ``hi`` on a grid of ``step`` (nice numbers, as textbook problems use)."""
    n = int(round((hi - lo) / step))
    return round(lo + step * rng.randint(0, n), 10)


def phyx_row(problem: Problem, index: int, options: list[str], answer: str, image) -> dict:
    """``problem`` as a row of PhyX's default layout (:mod:`lit_grpo.tasks.phyx.writer`): ``options`` already
    labelled (``"A: ..."``), ``answer`` the gold label, ``image`` as the row stores it."""
    return {
        "id": str(index),
        "question": problem.question,
        "question_description": problem.description,
        "question_description_simplified": problem.simplified,
        "options": options,
        "answer": answer,
        "image": image,
        "image_caption": problem.caption,
        "category": problem.domain,
        "subfield": problem.subfield,
        "reasoning_type": list(problem.reasoning),
    }
