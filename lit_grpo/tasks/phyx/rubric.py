"""Rubric reward of the physics reward-design paper: pure rule-based parts and the weighted combination.

Source: "Reward Design for Physical Reasoning in Vision-Language Models" (Granite Vision on PhyX),
sections R3.A (MCQ rubric), R3.B (OE rubric) and "Combined rubric reward". The rule-based matchers
:func:`principle_match` and :func:`unit_match` implement the paper's rules exactly with
``strict=False``, and a hack-resistant variant with ``strict=True``; :func:`combine_rubric` is the
shared weighted sum with the soft penalty for absent reasoning, the length penalty and the clip.

Everything here is a pure function of strings and floats; the registered reward that calls a judge
for open-ended rows lives in :mod:`lit_grpo.tasks.phyx.judged`.
"""

from __future__ import annotations

import math
import re

from lit_grpo.tasks.phyx.units import clean_unit_text, same_unit, unit_readings, unit_symbol

STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves s t
""".split())
"""Stopwords removed before principle tokens are compared: common English function words (articles,
prepositions, conjunctions, pronouns, auxiliary verbs, ``s``/``t`` left by apostrophes), in full above.
The paper names "a set of common stopwords" without listing it; this is our documented choice. Physics
words such as ``law``, ``motion`` or ``energy`` are never stopwords."""

NO_UNIT_WORDS = frozenset({"", "none", "no unit", "dimensionless", "unitless", "n/a", "na", "-", "1"})
"""What a prediction may say when the answer has no unit (gold unit ``None`` or empty)."""

_SEPARATORS = re.compile(r"[,;|]|\b(?:or|and)\b", re.IGNORECASE)


def principle_tokens(text: str | None, fold_plurals: bool = False) -> list[str]:
    """Lower-cased alphanumeric words of ``text`` without :data:`STOPWORDS`, in order (duplicates kept).

    ``fold_plurals`` strips one trailing ``s`` from words longer than three letters (``laws`` -> ``law``,
    ``waves`` -> ``wave``), applied alike to prediction and gold.

    >>> principle_tokens("Laws of Thermodynamics")
    ['laws', 'thermodynamics']
    """
    words = [w for w in re.findall(r"[a-z0-9]+", (text or "").lower()) if w not in STOPWORDS]
    if fold_plurals:
        words = [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words]
    return words


def principle_match(predicted: str | None, gold: str | None, strict: bool = False, *, max_chars: int = 100,
                    min_precision: float = 0.5) -> float:
    """Principle reward r_p: 1.0 when the predicted principle names the gold label, else 0.0.

    ``strict=False`` is the paper's rule exactly: at least two distinct non-stopword tokens shared
    between ``<principle>`` and the gold label. Taken literally it never rewards a one-word label
    (``Kinematics``, ``Magnetism``), and stuffing many labels into one tag scores.

    ``strict=True`` (hack-resistant) requires ``min(2, number of gold tokens)`` shared tokens, with
    plurals folded on both sides (``law`` matches ``Laws``), and caps stuffing: the field has at most
    ``max_chars`` characters and at least ``min_precision`` of its distinct tokens are gold tokens.

    A missing prediction, or a gold label with no tokens, gives 0.0 (the registered reward treats a
    missing gold label as "cannot score" before calling this).

    >>> principle_match("first law of thermodynamics", "Laws of Thermodynamics")
    0.0
    >>> principle_match("first law of thermodynamics", "Laws of Thermodynamics", strict=True)
    1.0
    """
    if predicted is None or gold is None:
        return 0.0
    pred = set(principle_tokens(predicted, fold_plurals=strict))
    ref = set(principle_tokens(gold, fold_plurals=strict))
    shared = len(pred & ref)
    if not strict:
        return 1.0 if shared >= 2 else 0.0
    if not ref or len(predicted.strip()) > max_chars:
        return 0.0
    return 1.0 if shared >= min(2, len(ref)) and shared / len(pred) >= min_precision else 0.0


def _no_unit(text: str) -> bool:
    return text.strip().lower() in NO_UNIT_WORDS


def _paper_rule(pred: str, ref: str) -> bool:
    """The paper's unit rule on two strings: exact when either has at most 2 characters, else either in the other."""
    if len(pred) <= 2 or len(ref) <= 2:
        return pred == ref
    return pred in ref or ref in pred


def unit_match(predicted: str | None, gold: str | None, strict: bool = False, *, max_chars: int = 32) -> float:
    """Unit reward r_u: 1.0 when the predicted unit agrees with the gold unit, else 0.0.

    ``strict=False`` is the paper's rule: bidirectional substring match between ``<unit>`` and the gold unit
    string (both stripped, case kept: ``mW`` is not ``MW``), with exact equality enforced when either string has at
    most 2 characters (``N`` does not match ``kN``), on the strings as written or, when both are units pint reads,
    on their symbols (:func:`lit_grpo.tasks.phyx.units.unit_symbol`), so that ``m/s`` matches ``meters per second`` as the paper
    says its rule does. Stuffing (``"m/s, N, kg, m/s^2"``) scores against a gold longer than 2 characters.

    ``strict=True`` compares units by dimension AND scale with pint (:func:`lit_grpo.tasks.phyx.units.same_unit`:
    ``meters per second`` equals ``m/s``, ``km/h`` does not), caps the field at ``max_chars``
    characters and rejects lists (``,``, ``;``, ``|``, ``or``, ``and``). A gold unit that pint cannot
    read is compared as cleaned text (:func:`lit_grpo.tasks.phyx.units.clean_unit_text`), exactly.

    Both modes: a gold of ``None`` or ``""`` means "no unit"; then the prediction scores when it is
    empty or one of :data:`NO_UNIT_WORDS` (the paper has gold units for every item; this is ours).
    A missing prediction (``None``) scores 0.0.

    >>> unit_match("m/s", "meters per second"), unit_match("km/h", "meters per second")
    (1.0, 0.0)
    """
    if predicted is None:
        return 0.0
    pred, ref = predicted.strip(), (gold or "").strip()
    if not ref:
        return 1.0 if _no_unit(pred) else 0.0
    if not strict:
        symbols = (unit_symbol(pred), unit_symbol(ref))
        pairs = [(pred, ref)] + ([symbols] if None not in symbols else [])
        return 1.0 if any(_paper_rule(p, r) for p, r in pairs) else 0.0
    if not pred or len(pred) > max_chars or _SEPARATORS.search(pred):
        return 0.0
    if not unit_readings(ref):
        return 1.0 if clean_unit_text(pred) == clean_unit_text(ref) else 0.0
    return 1.0 if same_unit(pred, ref) else 0.0


DEFAULT_WEIGHTS = {"format": 0.1, "accuracy": 0.5, "principle": 0.15, "unit": 0.15, "reasoning": 0.1}
"""Rubric weights (the paper gives the weighted sum but not its weights; this is our documented choice):
correctness dominates, principle and unit share 0.3, format and reasoning 0.1 each; they sum to 1, so an
open-ended answer perfect on every dimension scores 1 before penalties. MCQ has ``r_reason = 0``, so its
maximum is 0.9 before penalties."""


def length_penalty(length: float, scale: float = 4000.0, cap: float = 0.05) -> float:
    """The paper's length penalty ``min(|y| / scale, cap)``; ``|y|`` in characters or tokens (the caller's choice)."""
    return min(max(length, 0.0) / scale, cap)


def combine_rubric(components: dict[str, float], weights: dict[str, float] | None = None, *,
                   reasoning_absent: bool, length: float, absent_factor: float = 0.6,
                   length_scale: float = 4000.0, length_cap: float = 0.05) -> float:
    """Combined rubric reward ``clip(factor * sum_k w_k r_k - min(|y| / 4000, 0.05), 0, 1)``.

    ``components`` maps ``format``, ``accuracy``, ``principle``, ``unit``, ``reasoning`` to values in
    [0, 1] (``reasoning = 0`` for MCQ). ``factor`` is ``absent_factor`` (0.6) when ``reasoning_absent``,
    else 1. A component that is NaN because its gold label is missing (``principle``, ``unit``) is
    left out and the remaining weights are rescaled to the full weight sum, so a perfect answer keeps
    the same maximum; a NaN ``format`` or ``accuracy`` (nothing to score) makes the result NaN.

    >>> combine_rubric({"format": 1, "accuracy": 1, "principle": 1, "unit": 1, "reasoning": 1},
    ...                reasoning_absent=False, length=0)
    1.0
    """
    weights = DEFAULT_WEIGHTS if weights is None else weights
    unknown = set(weights) - set(DEFAULT_WEIGHTS)
    if unknown:
        raise ValueError(f"unknown rubric weights {sorted(unknown)}; known: {sorted(DEFAULT_WEIGHTS)}")
    values = {k: float(components.get(k, math.nan)) for k in weights}
    if math.isnan(values.get("format", 0.0)) or math.isnan(values.get("accuracy", 0.0)):
        return math.nan
    present = {k: v for k, v in values.items() if not math.isnan(v)}
    used = sum(weights[k] for k in present)
    if used <= 0:
        return math.nan
    total = sum(weights[k] * v for k, v in present.items()) * sum(weights.values()) / used
    if reasoning_absent:
        total *= absent_factor
    total -= length_penalty(length, length_scale, length_cap)
    return min(max(total, 0.0), 1.0)
