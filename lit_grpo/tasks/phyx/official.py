"""The official PhyX rule-mode scorer, reproduced exactly.

Source: PhyX's evaluation in VLMEvalKit (``vlmeval/dataset/utils/phyx.py``, ``PhyX_process_line`` for
open-ended answers and ``PhyX_process_line_MC`` for multiple choice, ``valid_type: STR``). Both rules
first strip surrounding whitespace from the prediction; each returns 1.0 or 0.0.

Open-ended: extract the text of the first ``\\boxed{`` (that spelling only), braces counted to its
closing ``}``; without a box, the text after ``final answer`` / ``correct answer`` (case-insensitive,
whole words, anything up to ``:`` or ``：``, then spaces) up to the first ``\\n\\n\\n`` or the end. In
the extraction ``\\dfrac`` -> ``\\frac`` and ``\\pi`` -> ``3.14``. Score 1 when the extraction equals the
gold (both stripped, case-insensitive), or the whole prediction equals the gold (same), or the gold
exactly as stored (not stripped, case-sensitive) is a substring of the prediction.

Multiple choice: the first capital A-D anywhere after the first of the whole words ``correct``,
``answer``, ``option`` (also capitalised, never all-caps); failing that, the last letter A-D directly
followed by ``:``. Score 1 when that letter equals the gold (case-insensitive); otherwise (another
letter, or none) 1 when the prediction contains ``gold:``, ``gold**`` or ``**gold``; else 0.

Not reproduced: the official code also unwraps predictions stored as a ``{"content": ...}`` dict by
reasoning APIs and scores its API-failure message 0; completions here are plain text.
"""

from __future__ import annotations

import re

from lit_grpo.data.sample import ANSWER_FORMATS
from lit_grpo.rewards.registry import register_reward

_BOX = "\\boxed{"
_FINAL = re.compile(r"\b(?:final\s+answer|correct\s+answer)\b[^:：]*[:：]\s*(.*?)(?=\n\n\n|\Z)",
                    re.IGNORECASE | re.DOTALL)
_MC_WORD = re.compile(r"\b(?:correct|answer|option|Answer|Option|Correct)\b[\s\S]*?([A-D])")
_MC_COLON = re.compile(r"([ABCD]):")


def _first_box(text: str) -> str | None:
    """Content of the first ``\\boxed{`` with every brace counted (no escapes); ``None`` if absent or unclosed."""
    start = text.find(_BOX)
    if start == -1:
        return None
    rest, depth = text[start + len(_BOX):], 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return rest[:i]
            depth -= 1
    return None


def phyx_extract_open(prediction: str) -> str | None:
    """The open-ended rule's extraction (box, else the text after ``final/correct answer:``), or ``None``."""
    pred = prediction.strip()
    found = _first_box(pred)
    if found is None:
        m = _FINAL.search(pred)
        found = None if m is None else m.group(1)
    return None if found is None else found.replace("\\dfrac", "\\frac").replace("\\pi", "3.14")


def phyx_extract_mcq(prediction: str) -> str | None:
    """The multiple-choice rule's letter: after an answer word, else the last ``X:``; ``None`` when neither."""
    pred = prediction.strip()
    m = _MC_WORD.search(pred)
    if m is not None:
        return m.group(1)
    letters = _MC_COLON.findall(pred)
    return letters[-1] if letters else None


def phyx_extract(prediction: str, answer_format: str) -> str | None:
    """The official extraction for ``answer_format`` (``mcq`` | ``open``)."""
    return phyx_extract_mcq(prediction) if answer_format == "mcq" else phyx_extract_open(prediction)


def phyx_official_score(prediction: str, gold: str, answer_format: str) -> float:
    """Official PhyX rule-mode score of one prediction: 1.0 or 0.0 (see the module docstring).

    ``gold`` is the letter (``mcq``) or the correct option's text exactly as stored (``open``).

    >>> phyx_official_score("The answer is B", "B", "mcq"), phyx_official_score("B", "B", "mcq")
    (1.0, 0.0)
    >>> phyx_official_score(r"so \\boxed{7.55N}", "7.55N", "open")
    1.0
    Raises:
        ValueError: ``answer_format`` not ``mcq`` or ``open``.
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be 'mcq' or 'open', got {answer_format!r}")
    pred = prediction.strip()
    if answer_format == "mcq":
        letter = phyx_extract_mcq(pred)
        if letter is not None and gold.strip().lower() == letter.lower():
            return 1.0
        return 1.0 if f"{gold}:" in pred or f"{gold}**" in pred or f"**{gold}" in pred else 0.0
    extracted = phyx_extract_open(pred)
    if extracted is not None and extracted.strip().lower() == gold.strip().lower():
        return 1.0
    return 1.0 if pred.lower() == gold.strip().lower() or gold in pred else 0.0


GAMEABLE = (
    "PhyX's official rule scores 1 whenever the gold text is a substring of the completion (open-ended) or "
    "'<gold>:' occurs in it (multiple choice), so reciting every option scores 1 for any gold; keep it as the "
    "evaluation scorer (evaluation.scorer: phyx_official) and train on accuracy / open_accuracy / rubric")
"""Why a policy trained on this reward learns to recite the options (a warning names it as a training reward)."""


@register_reward("phyx_official", columns=("answer", "answer_format", "meta"), extractor=phyx_extract,
                 gameable=GAMEABLE, protocol="PhyX's official rule-mode scorer")
def phyx_official_reward(completions: list[str], answer: list[str], answer_format: list[str] | None = None,
                         meta: list[dict] | None = None, **_) -> list[float]:
    """The official PhyX rule-mode scorer as a reward (1.0 / 0.0; a missing gold gives ``None``: does not apply).

    The gold is ``meta["answer_raw"]`` when the reader kept it (the answer exactly as stored, e.g. with
    the trailing space 175 PhyX OE answers have), else ``answer``.
    """
    formats = answer_format or ["mcq"] * len(completions)
    metas = meta or [{}] * len(completions)
    out = []
    for text, gold, fmt, m in zip(completions, answer, formats, metas):
        gold = (m or {}).get("answer_raw", gold)
        out.append(None if gold is None else phyx_official_score(text, str(gold), fmt))
    return out
