"""Rule-based offline judge: grades open-ended physics answers without a server, on the judge's 0/1/2 scale.

Used whenever ``judge.base_url`` is unset (the demo configs). It reads the final answer from
``<answer>`` (else the last ``\\boxed{}``) and its unit from the answer text or ``<unit>``.

Correctness scale (:func:`grade_open_answer`):
- **2, fully correct**: the value, converted to the gold unit with pint, is within ``rel_tol``
  (default 1 %) of the gold value, and the unit has the gold's dimension (``0.0463 MN`` for ``46.3 kN``);
  a dimensionless gold needs a dimensionless answer (``25 %`` equals ``0.25``).
- **1, partially correct**: the number is right but the unit is missing or wrong (``7.55`` or
  ``7.55 kN`` for ``7.55 N``: same number as written, within ``rel_tol``), or the converted value is
  only within the looser ``partial_rel_tol`` (default 5 %).
- **0**: anything else, or no answer.

Values are read by :func:`lit_grpo.tasks.phyx.units.split_quantity` (decimals, ``3.2 \\times 10^{-19}``), else by
``math-verify`` for closed forms (``2\\sqrt{3}``, ``\\frac{3}{4}``) evaluated to a float and compared with
OUR relative tolerance (math-verify alone rounds to 6 decimals, so 1.6e-19 would equal 3.2e-19, and
drops units). A gold with free symbols (``mg\\sin\\theta``) is compared symbolically by math-verify
(2 or 0). The rubric dimensions of the offline judge are rule-based too: principle and unit by
:func:`~lit_grpo.rewards.principle_match` / :func:`~lit_grpo.rewards.unit_match` with ``strict=True``,
reasoning by a length proxy (:func:`reasoning_score`); as the LLM judge is told, full correctness
needs some reasoning (correctness is capped at 1 when reasoning is 0). Its equivalence verdicts: the answer is
equivalent when its correctness is 2 (the value in the gold's unit within ``rel_tol``), unit and principle by the
same strict matchers.
"""

from __future__ import annotations

import math
import re
import threading
from typing import Annotated
from annotated_types import Ge

from lit_grpo.tasks.phyx.judge.config import OfflineJudgeConfig
from lit_grpo.settings import Finite
from lit_grpo.tasks.phyx.judge.jury import Vote
from lit_grpo.tasks.phyx.judge.prompts import JudgeItem, JudgeTask
from lit_grpo.rewards.parsing import extract_answer, extract_boxed, extract_tag
from lit_grpo.tasks.phyx.rubric import principle_match, unit_match
from lit_grpo.tasks.phyx.units import convert, looks_symbolic, normalise_unit_text, split_quantity, unit_readings


def _math_verify_number(text: str) -> float | None:
    """A closed-form number read by math-verify (``2\\sqrt{3}`` -> 3.4641...), else ``None``."""
    from math_verify import parse

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        found = parse(f"${text}$", parsing_timeout=timeout)
    except Exception:  # math-verify raises many types on odd input
        return None
    expr = found[0] if found else None
    if expr is None or not getattr(expr, "is_number", False):
        return None
    try:
        value = complex(expr.evalf())
    except (TypeError, ValueError):
        return None
    return value.real if value.imag == 0 and math.isfinite(value.real) else None


def _strip_answer(text: str) -> str:
    boxed = extract_boxed(text, "last")
    s = boxed if boxed is not None else text
    return s.rsplit("=", 1)[-1].strip().rstrip(".")  # "F = ma = 7.55 N" -> "7.55 N"


def read_quantity(text: str | None) -> tuple[float | None, str]:
    """``(value, unit text)`` of an answer string; ``(None, "")`` when no number can be read.

    >>> read_quantity(r"v = 2\\sqrt{3} m/s")
    (3.4641016151377544, 'm/s')
    """
    if text is None or not text.strip():
        return None, ""
    s = _strip_answer(text)
    value, rest = split_quantity(s)
    rest = rest if normalise_unit_text(rest) else ""  # "4.0 \hat{k}": markup only, no unit
    if value is not None and (not rest or unit_readings(rest)):
        return value, rest
    tokens = s.split()
    for cut in range(max(1, len(tokens) - 3), len(tokens) + 1):  # a trailing unit of up to 3 words
        expr, unit = " ".join(tokens[:cut]), " ".join(tokens[cut:])
        if unit and not unit_readings(unit):
            continue
        number = _math_verify_number(expr)
        if number is not None:
            return number, unit
    if value is not None and not looks_symbolic(rest):  # a number with a unit word pint does not know
        return value, rest
    return None, ""  # symbolic (2 w \cos \alpha): no number, no unit


def _symbolic_equal(predicted: str, gold: str) -> bool:
    from math_verify import parse, verify

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold_expr = parse(f"${gold}$", parsing_timeout=timeout)
        return bool(verify(gold_expr, parse(f"${predicted}$", parsing_timeout=timeout), timeout_seconds=timeout))
    except Exception:
        return False


def _close(a: float, b: float, tol: float) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=1e-300)


def grade_open_answer(answer: str | None, gold: str, *, unit: str | None = None, gold_unit: str | None = None,
                      rel_tol: Annotated[float, Ge(0), Finite] = 0.01, partial_rel_tol: float = 0.05) -> int:
    """Correctness 0/1/2 of an open-ended answer against the gold answer text (scale in the module docstring).

    ``unit`` is the ``<unit>`` field, used when the answer itself has no unit; ``gold_unit`` is the
    sample's unit label, used when the gold text has none.

    >>> grade_open_answer("0.0463 MN", "46.3 kN"), grade_open_answer("7.55", "7.55N"), grade_open_answer("9 N", "7.55N")
    (2, 1, 0)
    """
    if answer is None or not answer.strip():
        return 0
    g_value, g_unit_text = read_quantity(gold)
    if g_value is None:  # a symbolic gold
        return 2 if _symbolic_equal(_strip_answer(answer), gold.strip()) else 0
    p_value, p_unit_text = read_quantity(answer)
    if p_value is None:
        return 0
    p_unit_text = p_unit_text or (unit or "").strip()
    g_unit_text = g_unit_text or (gold_unit or "").strip()
    same_number = _close(p_value, g_value, rel_tol)
    converted = _converted(p_value, p_unit_text, g_unit_text)
    if converted is None:  # unit missing, unreadable or of another dimension
        return 1 if same_number else 0
    if _close(converted, g_value, rel_tol):
        return 2
    return 1 if same_number or _close(converted, g_value, partial_rel_tol) else 0


def _converted(value: float, unit_text: str, gold_unit_text: str) -> float | None:
    """``value unit_text`` in the gold unit, or ``None`` when the unit is missing, unreadable or of another
    dimension; a gold unit pint cannot read is compared as text."""
    gold_units = unit_readings(gold_unit_text)
    if gold_unit_text and not gold_units:
        return value if unit_text.replace(" ", "") == gold_unit_text.replace(" ", "") else None
    if gold_unit_text and not unit_text:  # a bare number is an answer only for a dimensionless gold (25 % = 0.25)
        return convert(value, "", gold_unit_text) if all(u.dimensionless for u in gold_units) else None
    return convert(value, unit_text, gold_unit_text)


def reasoning_score(think: str | None, min_words: int = 20) -> int:
    """Offline proxy of reasoning quality 0/1/2: 0 = no ``<think>`` text; 2 = at least ``min_words`` words
    with a number or an equation sign in them; 1 = anything in between. A proxy, not a judgement."""
    words = (think or "").split()
    if not words:
        return 0
    return 2 if len(words) >= min_words and re.search(r"[0-9=]", think) else 1


class OfflineJudge:
    """Rule-based judge with the LLM judge's interface; deterministic, so its K = ``num_judges`` votes are
    identical."""

    endpoint = "offline"

    def __init__(self, config: OfflineJudgeConfig | None = None, num_judges: int = 3):
        self.cfg, self.num_judges = config or OfflineJudgeConfig(), num_judges
        self._graded = 0

    def vote(self, item: JudgeItem, task: JudgeTask) -> Vote:
        """One verdict on ``item`` for ``task`` (``correctness`` and, for the rubric, the other fields)."""
        text = item.completion
        answer = extract_answer(text)
        unit = extract_tag(text, "unit")
        correctness = grade_open_answer(answer, item.gold_answer, unit=unit, gold_unit=item.gold_unit,
                                        rel_tol=self.cfg.rel_tol, partial_rel_tol=self.cfg.partial_rel_tol)
        out = {"correctness": correctness, "answer": int(correctness == 2)}  # equivalent = fully correct
        if "reasoning" in task.fields:
            out["reasoning"] = reasoning_score(extract_tag(text, "think"), self.cfg.min_reasoning_words)
            if out["reasoning"] == 0:
                out["correctness"] = min(correctness, 1)
        if "unit" in task.fields:
            stated = unit if unit is not None else (read_quantity(answer)[1] if answer else None)
            out["unit"] = int(unit_match(stated, item.gold_unit, strict=True))
        if "principle" in task.fields:
            out["principle"] = int(principle_match(extract_tag(text, "principle"), item.gold_principle, strict=True))
        return {f: out[f] for f in task.fields}

    def grade(self, items: list[JudgeItem], task: JudgeTask) -> list[list[Vote | None]]:
        self._graded += len(items)
        return [[self.vote(item, task)] * self.num_judges for item in items]

    def pop_metrics(self) -> dict[str, float]:
        graded, self._graded = self._graded, 0
        return {"judge/offline_graded": float(graded)} if graded else {}
