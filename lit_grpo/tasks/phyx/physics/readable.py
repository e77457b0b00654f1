"""Readable physics problems: six types whose answer a small model can read off the diagram.

The PhyX-like types (:mod:`~lit_grpo.tasks.phyx.physics.classical`, :mod:`~lit_grpo.tasks.phyx.physics.modern`) need
arithmetic on values printed small in the figure, which a toy model cannot learn. Each type here hides
one quantity ``k`` in 1..4 that only the diagram shows, drawn large enough to survive a 48-pixel tile
(crates in a row, cells in the battery, the water level, loops of a standing wave, the object's
position, the electron's starting level); every other given is fixed and stated in the text, which
names the type. The four options are the answers for ``k`` = 1..4 in increasing order of value, so
the letter carries nothing without the figure, and each type has four open-ended answers. The
subfield (the principle) has at least two words, so the paper's two-shared-token principle rule can
score it, and ``solution`` is a short reasoning that reads ``k`` off the figure (the SFT reference).

``READABLE`` maps type name -> ``fn(rng, k) -> Problem``; :func:`readable_item` makes one item.
"""

from __future__ import annotations

import random
from typing import Callable

from lit_grpo.tasks.phyx.physics import draw as D
from lit_grpo.tasks.phyx.physics.base import Problem, fmt_quantity, phyx_row
from lit_grpo.registry import Registry

ReadableFn = Callable[[random.Random, int], Problem]
READABLE: Registry[ReadableFn] = Registry("readable physics problem type")
"""Type name -> ``fn(rng, k)``: the problem whose hidden quantity is ``k`` (1..4); ``rng`` only moves the drawing."""
LEVELS = (1, 2, 3, 4)


def _plural(k: int, noun: str) -> str:
    """``1 loop``, ``3 loops``."""
    return f"{k} {noun}{'s' if k != 1 else ''}"


def _problem(domain: str, subfield: str, reasoning: list[str], values: dict[int, float], unit: str, k: int,
             full: str, simplified: str, question: str, solution: str, image, caption: str) -> Problem:
    """A :class:`Problem` whose options are ``values`` (k -> answer) and whose correct one is ``values[k]``."""
    answer = fmt_quantity(values[k], unit)
    wrong = [fmt_quantity(values[j], unit) for j in LEVELS if j != k]
    return Problem(domain, subfield, reasoning, full, simplified, question, answer, wrong,
                   [f"read k = {j} off the figure" for j in LEVELS if j != k], image, caption, solution)


def options_by_value(problem: Problem) -> list[str]:
    """The correct option and the distractors in increasing order of value (the readable set's fixed order)."""
    from lit_grpo.tasks.phyx.units import split_quantity

    texts = [problem.answer, *problem.distractors]
    return sorted(texts, key=lambda t: split_quantity(t)[0])


@READABLE.register("crates")
def crates(rng: random.Random, k: int) -> Problem:
    values = {j: j * 2.0 * 1.5 for j in LEVELS}
    img, d = D.canvas()
    y, side = 200, 56
    x0 = rng.randint(70, 130)
    d.rectangle([0, y, 360, y + 14], fill=D.GREY)
    for j in range(k):
        x = x0 + j * side
        d.rectangle([x, y - side, x + side - 4, y - 1], fill=(150, 100, 50), outline=D.INK, width=3)
    D.arrow(d, (x0 - 60, y - side / 2), (x0 - 6, y - side / 2), fill=D.RED, width=8, head=18)
    D.text(d, (180, 40), "a = 1.5 m/s^2, 2.0 kg each", size=16)
    return _problem(
        "Mechanics", "Newton's Laws", ["Physical Model Grounding Reasoning", "Numerical Reasoning"], values, "N", k,
        f"A row of {_plural(k, 'identical crate')} of mass 2.0 kg each stands on a frictionless floor. A horizontal push "
        "gives the row an acceleration of 1.5 m/s^2.",
        "Identical 2.0 kg crates in a row on a frictionless floor (figure) are pushed to 1.5 m/s^2.",
        "What force pushes the row?",
        f"{_plural(k, 'crate')}, so F = {k} m a.", img, f"{k} crates in a row pushed from the left.")


@READABLE.register("cells")
def cells(rng: random.Random, k: int) -> Problem:
    values = {j: j * 1.5 / 3.0 for j in LEVELS}
    img, d = D.canvas()
    left, right, top, bottom = 40, 320, 60, 200
    d.rectangle([left, top, right, bottom], outline=D.INK, width=5)
    d.rectangle([140, top - 22, 220, top + 22], fill=(240, 200, 60), outline=D.INK, width=3)  # the resistor
    D.text(d, (180, top), "3.0 ohm", size=14)
    start = rng.randint(70, 300 - 40 * k)
    d.rectangle([start - 8, bottom - 40, start + 40 * k, bottom + 40], fill=(255, 255, 255))
    for j in range(k):  # one cell = a long thin plate and a short thick plate
        x = start + 40 * j
        d.rectangle([x, bottom - 36, x + 5, bottom + 36], fill=D.INK)
        d.rectangle([x + 14, bottom - 18, x + 26, bottom + 18], fill=D.INK)
        if j < k - 1:
            d.line([(x + 26, bottom), (x + 40, bottom)], fill=D.INK, width=5)
    D.text(d, (180, 258), "cells: 1.5 V each", size=16)
    return _problem(
        "Electromagnetism", "DC Circuits", ["Spatial Relation Reasoning", "Numerical Reasoning"], values, "A", k,
        f"A battery of {_plural(k, 'identical 1.5 V cell')} in series drives a 3.0 Ω resistor.",
        "The figure's battery of 1.5 V cells in series drives a 3.0 Ω resistor.",
        "What is the current?",
        f"{_plural(k, 'cell')}, so I = {k} x 1.5 V / R.", img, f"{k} cells in series with a resistor.")


@READABLE.register("beaker")
def beaker(rng: random.Random, k: int) -> Problem:
    values = {j: j * 0.5 * 4200 * 10 / 1000 for j in LEVELS}
    img, d = D.canvas()
    x0 = rng.randint(90, 150)
    x1, bottom, step = x0 + 150, 250, 50
    d.rectangle([x0 + 3, bottom - k * step, x1 - 3, bottom - 3], fill=(60, 120, 230))
    d.line([(x0, bottom - 4 * step - 20), (x0, bottom), (x1, bottom), (x1, bottom - 4 * step - 20)],
           fill=D.INK, width=6)
    for j in LEVELS:
        d.line([(x1 - 30, bottom - j * step), (x1, bottom - j * step)], fill=D.INK, width=3)
    D.text(d, (180, 14), "0.5 kg of water per mark", size=14)
    return _problem(
        "Thermodynamics", "Heat Transfer", ["Physical Model Grounding Reasoning", "Numerical Reasoning"], values,
        "kJ", k,
        f"A beaker holds {k * 0.5:g} kg of water (each mark is 0.5 kg). The water is heated by 10 °C; its specific "
        "heat is 4200 J/(kg·K).",
        "The water in the figure (0.5 kg per mark, 4200 J/(kg·K)) is heated by 10 °C.",
        "How much heat does it absorb?",
        f"Water at mark {k}, so m = {k} x 0.5 kg and Q = m c ΔT.", img,
        f"A beaker filled to mark {k} of 4.")


@READABLE.register("string")
def string(rng: random.Random, k: int) -> Problem:
    import math

    values = {j: j * 100.0 / (2 * 1.0) for j in LEVELS}
    img, d = D.canvas()
    x0, x1, y = 30, 330, 135
    amp = rng.randint(55, 80)
    for x in (x0, x1):
        d.rectangle([x - 10, y - 95, x, y + 95] if x == x0 else [x, y - 95, x + 10, y + 95], fill=D.INK)
    for sign in (1, -1):
        pts = [(x0 + (x1 - x0) * t, y - sign * amp * math.sin(math.pi * k * t)) for t in [i / 300 for i in range(301)]]
        d.line(pts, fill=D.BLUE, width=7)
    D.text(d, (180, 250), "L = 1.0 m, v = 100 m/s", size=16)
    return _problem(
        "Wave/Acoustics", "Standing Waves", ["Spatial Relation Reasoning", "Numerical Reasoning"], values, "Hz", k,
        f"A string 1.0 m long, fixed at both ends, vibrates with {_plural(k, 'loop')}. Waves travel "
        "along it at 100 m/s.",
        "A 1.0 m string fixed at both ends vibrates as shown; the wave speed is 100 m/s.",
        "What is the frequency?",
        f"{_plural(k, 'loop')}, so f = {k} v / 2L.", img, f"A standing wave with {k} loops.")


@READABLE.register("lens")
def lens(rng: random.Random, k: int) -> Problem:
    distance = {1: 15.0, 2: 20.0, 3: 30.0, 4: 40.0}
    values = {j: 1 / (1 / 10.0 - 1 / distance[j]) for j in LEVELS}
    img, d = D.canvas()
    lx, ax, scale = 300, 150, 6.5
    d.line([(0, ax), (360, ax)], fill=D.INK, width=3)
    d.ellipse([lx - 12, ax - 100, lx + 12, ax + 100], fill=(150, 190, 250), outline=D.BLUE, width=4)
    for cm in (10, 20, 30, 40):
        x = lx - cm * scale
        d.line([(x, ax - 8), (x, ax + 8)], fill=D.INK, width=3)
        D.text(d, (x, ax + 22), f"{cm}", size=13)
    ox = lx - distance[k] * scale + rng.randint(-2, 2)
    d.rectangle([ox - 7, ax - 70, ox + 7, ax], fill=D.RED)
    d.polygon([(ox - 20, ax - 66), (ox + 20, ax - 66), (ox, ax - 100)], fill=D.RED)
    D.text(d, (180, 250), "converging lens, f = 10 cm (axis in cm)", size=14)
    return _problem(
        "Optics", "Geometrical Optics", ["Spatial Relation Reasoning", "Numerical Reasoning"], values, "cm", k,
        f"An object stands {distance[k]:g} cm in front of a thin converging lens of focal length 10 cm.",
        "An object stands before a converging lens (f = 10 cm) as shown; the axis is in cm.",
        "How far behind the lens is the image?",
        f"d_o = {distance[k]:g} cm, so 1/d_i = 1/f - 1/d_o.", img,
        f"An object {distance[k]:g} cm in front of a lens.")


@READABLE.register("levels")
def levels(rng: random.Random, k: int) -> Problem:
    values = {j: 13.6 * (1 - 1 / (j + 1) ** 2) for j in LEVELS}
    img, d = D.canvas()
    left, right, base, gap = 60, 300, 240, 50
    for n in range(1, 6):
        y = base - (n - 1) * gap
        d.line([(left, y), (right, y)], fill=D.INK, width=4)
        D.text(d, (left - 25, y), f"n={n}", size=14)
    x = rng.randint(130, 230)
    D.arrow(d, (x, base - k * gap), (x, base - 4), fill=D.RED, width=12, head=24)
    D.wavy(d, (x + 20, base - k * gap / 2), (x + 90, base - k * gap / 2 - 30), amp=6)
    return _problem(
        "Modern Physics", "Atomic Physics", ["Physical Model Grounding Reasoning", "Numerical Reasoning"], values,
        "eV", k,
        f"The electron of a hydrogen atom falls from the level n = {k + 1} to the ground state n = 1 "
        "(E_n = -13.6 eV / n^2).",
        "A hydrogen electron makes the transition shown (E_n = -13.6 eV / n^2).",
        "What energy does the emitted photon carry?",
        f"From n = {k + 1} to n = 1, so E = 13.6 eV (1 - 1/{(k + 1) ** 2}).", img,
        f"A transition from n = {k + 1} to n = 1.")


def readable_item(index: int, seed: int = 0, types: list[str] | None = None) -> dict:
    """Item ``index`` of the readable set (default-layout schema plus ``solution``): types cycle in order,
    ``k`` and the drawing's jitter follow from ``(seed, index)``; options in increasing order of value."""
    names = types or READABLE.names()
    rng = random.Random(seed * 1_000_003 + index)
    k = rng.choice(LEVELS)
    problem = READABLE.get(names[index % len(names)])(rng, k)
    texts = options_by_value(problem)
    labels = "ABCD"
    row = phyx_row(problem, index, [f"{labels[i]}: {t}" for i, t in enumerate(texts)],
                   labels[texts.index(problem.answer)], problem.image)
    return {**row, "solution": problem.solution}
